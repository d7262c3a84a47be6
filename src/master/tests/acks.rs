//! basic.* and tx.*: acks, rejects, transactions, and what a closed channel gives back.

use super::*;

#[test]
fn tx_publishes_are_held_until_commit() {
    let mut m = master();
    open(&mut m, 1, 1);
    method(&mut m, 1, 1, declare("t", false));
    method(
        &mut m,
        1,
        1,
        AMQPClass::Tx(tx::AMQPMethod::Select(tx::Select {})),
    );
    publish(&mut m, 1, 1, "t", false, "a");
    assert_eq!(m.broker.queue("/", "t").unwrap().ready.len(), 0);
    let out = method(
        &mut m,
        1,
        1,
        AMQPClass::Tx(tx::AMQPMethod::Commit(tx::Commit {})),
    );
    assert!(out.iter().any(|o| matches!(
        o,
        Output::ToConn(
            1,
            ToConn::Method(1, AMQPClass::Tx(tx::AMQPMethod::CommitOk(_)))
        )
    )));
    assert_eq!(m.broker.queue("/", "t").unwrap().ready.len(), 1);
}

#[test]
fn unknown_delivery_tag_closes_the_channel_with_406() {
    let mut m = master();
    open(&mut m, 1, 1);
    let out = method(
        &mut m,
        1,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag: 7,
            multiple: false,
        })),
    );
    assert!(out.iter().any(
        |o| matches!(o, Output::ToConn(1, ToConn::CloseChannel(1, e)) if e.code as u16 == 406)
    ));
}

fn ack(tag: u64, multiple: bool) -> AMQPClass {
    AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
        delivery_tag: tag,
        multiple,
    }))
}

/// Acks of one tag take their own path (`apply_ack_one`): acking the oldest
/// tag with `multiple` set acks it alone, a single-tag nack with requeue
/// goes back to the consumer at once, and `multiple` up to a later tag and
/// tag 0 still take every tag up to there.
#[test]
fn one_tag_and_many_tag_acks_settle_what_they_name() {
    let mut m = master();
    open(&mut m, 1, 1);
    method(&mut m, 1, 1, declare("t", false));
    method(
        &mut m,
        1,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count: 3,
            ..Default::default()
        })),
    );
    let mut out = method(
        &mut m,
        1,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: "t".into(),
            consumer_tag: "c".into(),
            ..Default::default()
        })),
    );
    for body in ["a", "b", "c", "d", "e", "f"] {
        out.extend(publish(&mut m, 1, 1, "t", false, body));
    }
    assert_eq!(delivered(&out), vec!["a", "b", "c"]);
    let q = |m: &Master| {
        let q = m.broker.queue("/", "t").unwrap();
        (q.ready.len(), q.unacked.len())
    };
    assert_eq!(q(&m), (3, 3));

    // Multiple, but the oldest tag: only "a" goes, and "d" takes its place.
    let out = method(&mut m, 1, 1, ack(1, true));
    assert_eq!(delivered(&out), vec!["d"]);
    assert_eq!(q(&m), (2, 3));
    // A single-tag nack with requeue: "b" comes straight back (tags 2, 3, 4
    // are out; prefetch 3 is full again after the redelivery).
    let out = method(
        &mut m,
        1,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Nack(basic::Nack {
            delivery_tag: 2,
            multiple: false,
            requeue: true,
        })),
    );
    assert_eq!(delivered(&out), vec!["b"]);
    assert_eq!(q(&m), (2, 3));
    // Multiple up to a later tag: tags 3 and 4 ("c", "d"), not 5 ("b").
    let out = method(&mut m, 1, 1, ack(4, true));
    assert_eq!(delivered(&out), vec!["e", "f"]);
    assert_eq!(q(&m), (0, 3));
    // Tag 0 with multiple: everything outstanding.
    method(&mut m, 1, 1, ack(0, true));
    assert_eq!(q(&m), (0, 0));
    // An unknown single tag is still a channel error.
    let out = method(&mut m, 1, 1, ack(99, false));
    assert!(out.iter().any(
        |o| matches!(o, Output::ToConn(1, ToConn::CloseChannel(1, e)) if e.code as u16 == 406)
    ));
}

#[test]
fn closing_a_channel_requeues_unacked_as_redelivered() {
    let mut m = master();
    open(&mut m, 1, 1);
    method(&mut m, 1, 1, declare("t", false));
    publish(&mut m, 1, 1, "t", false, "a");
    method(
        &mut m,
        1,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Get(basic::Get {
            queue: "t".into(),
            no_ack: false,
        })),
    );
    assert_eq!(m.broker.queue("/", "t").unwrap().unacked.len(), 1);
    m.handle(Input::ChannelClose { conn: 1, ch: 1 });
    let q = m.broker.queue("/", "t").unwrap();
    assert_eq!(q.ready.len(), 1);
    assert!(q.head().unwrap().redelivered);
}

/// A multiple ack over the interleaved deliveries of two consumers of one
/// channel frees each consumer's prefetch by what was its own (the ack
/// counts runs of tags per consumer: here every tag switches consumer).
#[test]
fn a_multiple_ack_over_two_consumers_frees_each_ones_prefetch() {
    let mut m = master();
    open(&mut m, 1, 1);
    method(
        &mut m,
        1,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count: 2,
            ..Default::default()
        })),
    );
    for (queue, tag) in [("x", "cx"), ("y", "cy")] {
        method(&mut m, 1, 1, declare(queue, false));
        method(
            &mut m,
            1,
            1,
            AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
                queue: queue.into(),
                consumer_tag: tag.into(),
                ..Default::default()
            })),
        );
    }
    let mut out = Vec::new();
    for i in 0..4 {
        out.extend(publish(&mut m, 1, 1, "x", false, &format!("x{i}")));
        out.extend(publish(&mut m, 1, 1, "y", false, &format!("y{i}")));
    }
    assert_eq!(delivered(&out), vec!["x0", "y0", "x1", "y1"], "2 each");
    // Tags 1-3 are x0, y0, x1: cx has room for two more, cy for one.
    let out = method(&mut m, 1, 1, ack(3, true));
    assert_eq!(delivered(&out), vec!["x2", "x3", "y2"]);
    // Tags 4-6 are y1, x2, x3: cy has room for one more, and x is empty.
    let out = method(&mut m, 1, 1, ack(6, true));
    assert_eq!(delivered(&out), vec!["y3"]);
}
