//! What of the log something waits for (`Master::stable_needed`): the single
//! node commits at once only that, and defers the rest (a consumer's ack) to
//! the next commit (`LocalLog::append_deferred`).

use super::*;

fn consume(m: &mut Master, conn: u64, queue: &str) {
    method(
        m,
        conn,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: queue.into(),
            consumer_tag: "c".into(),
            ..Default::default()
        })),
    );
}

#[test]
fn an_ack_is_needed_by_nobody_until_a_reply_waits_behind_it() {
    let mut m = master();
    open(&mut m, 1, 1);
    method(&mut m, 1, 1, declare("q", true));
    assert_eq!(m.stable_needed(), 1, "the declare-ok waits for its event");
    m.handle(Input::Stable { index: 1 });
    method(
        &mut m,
        1,
        1,
        AMQPClass::Confirm(confirm::AMQPMethod::Select(confirm::Select {
            nowait: false,
        })),
    );
    open(&mut m, 2, 1);
    consume(&mut m, 2, "q");
    open(&mut m, 3, 1);

    // A confirmed publish: its confirm and its delivery wait for index 2.
    publish(&mut m, 1, 1, "q", true, "p0");
    assert_eq!(m.stable_needed(), 2);
    m.handle(Input::Stable { index: 2 });
    assert_eq!(delivered(&m.take_outputs()), ["p0"]);

    // A publish without confirms (index 3): the consumer has room, so its
    // delivery waits for it.
    publish(&mut m, 3, 1, "q", true, "p1");
    assert_eq!((m.last_appended(), m.stable_needed()), (3, 3));

    // The consumer's ack of p0 (index 4): nothing waits for it, and the
    // queue's next delivery still waits for index 3, not for the ack.
    let out = method(
        &mut m,
        2,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag: 1,
            multiple: false,
        })),
    );
    assert_eq!(appends(&out), 1, "the ack is logged");
    assert_eq!((m.last_appended(), m.stable_needed()), (4, 3));
    m.handle(Input::Stable { index: 3 });
    assert_eq!(delivered(&m.take_outputs()), ["p1"]);
    assert_eq!(m.stable_needed(), 3, "still nobody waits for the ack");

    // A reply waits for everything appended before it: now the ack too.
    let out = method(&mut m, 3, 1, declare("q", true));
    assert_eq!(appends(&out), 0, "declaring an existing queue logs nothing");
    assert_eq!(m.stable_needed(), 4);
    m.handle(Input::Stable { index: 4 });
    assert!(m.take_outputs().iter().any(|o| matches!(
        o,
        Output::ToConn(
            3,
            ToConn::Method(1, AMQPClass::Queue(queue::AMQPMethod::DeclareOk(_)))
        )
    )));
}
