//! Drives the master directly, as the simulator will: inputs in, outputs checked.

use super::Master;
use super::io::{Input, Output, ToConn};
use crate::broker::Broker;
use crate::config::Config;
use bytes::Bytes;
use stablemq_protocol::methods::{basic, confirm, queue, tx};
use stablemq_protocol::{AMQPClass, BasicProperties, Publish};
use std::sync::Arc;

/// A master over a state seeded from the default config (unlogged here, so
/// the tests' log indexes start at their own first event).
fn master() -> Master {
    let config = Config::default();
    let mut b = Broker::new();
    for e in crate::users::seed_events(&config) {
        b.apply(&e, 0);
    }
    Master::new(Arc::new(config), b, 0)
}

fn open(m: &mut Master, conn: u64, ch: u16) {
    m.handle(Input::Open {
        conn,
        user: "guest".into(),
        vhost: "/".into(),
        info: Box::default(),
    });
    m.handle(Input::ChannelOpen { conn, ch });
    m.take_outputs();
}

fn method(m: &mut Master, conn: u64, ch: u16, method: AMQPClass) -> Vec<Output> {
    m.handle(Input::Method { conn, ch, method });
    m.take_outputs()
}

fn declare(name: &str, durable: bool) -> AMQPClass {
    AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: name.into(),
        durable,
        ..Default::default()
    }))
}

fn publish(
    m: &mut Master,
    conn: u64,
    ch: u16,
    queue: &str,
    persistent: bool,
    body: &str,
) -> Vec<Output> {
    let props = if persistent {
        BasicProperties::default().with_delivery_mode(2)
    } else {
        BasicProperties::default()
    };
    m.handle(Input::Publish {
        conn,
        ch,
        publish: Publish {
            exchange: "".into(),
            routing_key: queue.into(),
            ..Default::default()
        },
        properties: Arc::new(props),
        body: Bytes::from(body.to_string()),
    });
    m.take_outputs()
}

fn appends(out: &[Output]) -> usize {
    out.iter()
        .filter(|o| matches!(o, Output::Append(_)))
        .count()
}

fn confirms(out: &[Output]) -> Vec<u64> {
    out.iter()
        .filter_map(|o| match o {
            Output::ToConn(_, ToConn::Confirm { tag, ack: true, .. }) => Some(*tag),
            _ => None,
        })
        .collect()
}

fn delivered(out: &[Output]) -> Vec<String> {
    out.iter()
        .filter_map(|o| match o {
            Output::ToConn(_, ToConn::Deliver { msg, .. }) => {
                Some(String::from_utf8_lossy(&msg.body).into_owned())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn durable_declare_ok_waits_for_stable_i1() {
    let mut m = master();
    open(&mut m, 1, 1);
    let out = method(&mut m, 1, 1, declare("q", true));
    assert_eq!(appends(&out), 1, "a durable declare is logged");
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::ToConn(_, ToConn::Method(..)))),
        "no reply before stable"
    );
    m.handle(Input::Stable { index: 1 });
    let out = m.take_outputs();
    assert!(out.iter().any(|o| matches!(
        o,
        Output::ToConn(
            1,
            ToConn::Method(1, AMQPClass::Queue(queue::AMQPMethod::DeclareOk(_)))
        )
    )));
}

#[test]
fn transient_queue_is_not_logged_and_answers_at_once() {
    let mut m = master();
    open(&mut m, 1, 1);
    let out = method(&mut m, 1, 1, declare("t", false));
    assert_eq!(appends(&out), 0);
    assert_eq!(out.len(), 1);
    let out = publish(&mut m, 1, 1, "t", true, "x");
    assert_eq!(
        appends(&out),
        0,
        "persistent message in a transient queue is not logged"
    );
}

#[test]
fn confirms_and_deliveries_wait_for_stable_and_keep_tag_order_i1_i5() {
    let mut m = master();
    open(&mut m, 1, 1);
    method(&mut m, 1, 1, declare("q", true));
    m.handle(Input::Stable { index: 1 });
    m.take_outputs();
    method(
        &mut m,
        1,
        1,
        AMQPClass::Confirm(confirm::AMQPMethod::Select(confirm::Select {
            nowait: false,
        })),
    );
    // A consumer on another connection.
    open(&mut m, 2, 1);
    method(
        &mut m,
        2,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: "q".into(),
            consumer_tag: "c".into(),
            no_ack: true,
            ..Default::default()
        })),
    );
    let mut out = Vec::new();
    for i in 0..3 {
        out.extend(publish(&mut m, 1, 1, "q", true, &format!("p{i}")));
    }
    // A transient publish after durable ones must not overtake them.
    out.extend(publish(&mut m, 1, 1, "q", false, "t3"));
    assert_eq!(appends(&out), 3);
    assert!(confirms(&out).is_empty(), "no confirm before stable");
    assert!(delivered(&out).is_empty(), "no delivery before stable");
    // The declare was index 1, so the publishes are 2, 3 and 4.
    m.handle(Input::Stable { index: 3 });
    let out = m.take_outputs();
    assert_eq!(confirms(&out), vec![1, 2]);
    assert_eq!(delivered(&out), vec!["p0", "p1"]);
    m.handle(Input::Stable { index: 4 });
    let out = m.take_outputs();
    assert_eq!(confirms(&out), vec![3, 4]);
    assert_eq!(delivered(&out), vec!["p2", "t3"]);
}

#[test]
fn partial_stability_confirms_a_prefix_only() {
    let mut m = master();
    open(&mut m, 1, 1);
    method(&mut m, 1, 1, declare("q", true));
    m.handle(Input::Stable { index: 1 });
    method(
        &mut m,
        1,
        1,
        AMQPClass::Confirm(confirm::AMQPMethod::Select(confirm::Select {
            nowait: false,
        })),
    );
    m.take_outputs();
    for i in 0..5 {
        publish(&mut m, 1, 1, "q", true, &format!("{i}"));
    }
    m.handle(Input::Stable { index: 3 });
    assert_eq!(confirms(&m.take_outputs()), vec![1, 2]);
    m.handle(Input::Stable { index: 6 });
    assert_eq!(confirms(&m.take_outputs()), vec![3, 4, 5]);
}

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

#[test]
fn recovery_replays_the_log_into_the_configured_vhosts() {
    let mut m = master();
    let mut log = Vec::new();
    open(&mut m, 1, 1);
    log.extend(method(&mut m, 1, 1, declare("q", true)));
    m.handle(Input::Stable { index: 1 });
    log.extend(m.take_outputs());
    log.extend(publish(&mut m, 1, 1, "q", true, "kept"));
    log.extend(publish(&mut m, 1, 1, "q", false, "transient"));
    // The seed is part of a real log; here it was applied unlogged.
    let mut events = crate::users::seed_events(&Config::default());
    events.extend(log.into_iter().filter_map(|o| match o {
        Output::Append(b) => Some(crate::broker::event::Event::decode(&b).unwrap()),
        _ => None,
    }));
    let b = Master::recover(&Config::default(), events);
    let q = b.queue("/", "q").expect("durable queue recovered");
    let bodies: Vec<_> = q
        .ready
        .to_vec()
        .into_iter()
        .map(|(_, m)| m.msg.body.clone())
        .collect();
    assert_eq!(bodies, vec![Bytes::from_static(b"kept")]);
}

/// A declare of a non-durable queue with `args`.
fn declare_with(name: &str, args: &[(&str, i32)]) -> AMQPClass {
    let mut arguments = stablemq_protocol::FieldTable::default();
    for (k, v) in args {
        arguments.insert((*k).into(), stablemq_protocol::AMQPValue::LongInt(*v));
    }
    AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: name.into(),
        arguments,
        ..Default::default()
    }))
}

/// Publish a transient message to `queue` with an `expiration` property.
fn publish_expiring(m: &mut Master, queue: &str, expiration: &str) {
    m.handle(Input::Publish {
        conn: 1,
        ch: 1,
        publish: Publish {
            exchange: "".into(),
            routing_key: queue.into(),
            ..Default::default()
        },
        properties: Arc::new(BasicProperties::default().with_expiration(expiration.into())),
        body: Bytes::from_static(b"x"),
    });
    m.take_outputs();
}

fn ready(m: &Master, queue: &str) -> usize {
    m.broker.queue("/", queue).map_or(0, |q| q.ready.len())
}

/// The tick's pass over all queues is off while nothing can expire, and a
/// publish with an `expiration` turns it on: the message then expires at a
/// tick with nobody consuming, as before.
#[test]
fn the_expiry_scan_starts_with_the_first_expiring_publish() {
    let mut m = master();
    m.set_now(1_000);
    open(&mut m, 1, 1);
    method(&mut m, 1, 1, declare("plain", false));
    publish(&mut m, 1, 1, "plain", false, "kept");
    method(&mut m, 1, 1, declare("other", false));
    assert!(!m.may_expire(), "no TTL anywhere: no scan");
    publish_expiring(&mut m, "other", "10");
    assert!(m.may_expire());
    assert_eq!(ready(&m, "other"), 1);
    m.set_now(1_020);
    m.handle(Input::Tick);
    m.take_outputs();
    assert_eq!(
        ready(&m, "other"),
        0,
        "the expired message left at the tick"
    );
    assert_eq!(ready(&m, "plain"), 1);
}

/// A queue declared with a message TTL, or with `x-expires`, turns the scan
/// on; an unused `x-expires` queue is then deleted by the tick.
#[test]
fn a_queue_with_a_ttl_or_x_expires_starts_the_expiry_scan() {
    let mut m = master();
    m.set_now(1_000);
    open(&mut m, 1, 1);
    method(&mut m, 1, 1, declare_with("ttl", &[("x-message-ttl", 10)]));
    assert!(m.may_expire());
    publish(&mut m, 1, 1, "ttl", false, "old");
    m.set_now(1_020);
    m.handle(Input::Tick);
    m.take_outputs();
    assert_eq!(ready(&m, "ttl"), 0, "queue TTL expired the message");

    let mut m = master();
    m.set_now(1_000);
    open(&mut m, 1, 1);
    method(&mut m, 1, 1, declare("other", false));
    assert!(!m.may_expire());
    method(&mut m, 1, 1, declare_with("unused", &[("x-expires", 100)]));
    assert!(m.may_expire());
    m.handle(Input::Tick);
    m.set_now(1_200);
    m.handle(Input::Tick);
    m.take_outputs();
    assert!(
        m.broker.queue("/", "unused").is_none(),
        "x-expires deleted it"
    );
    assert!(m.broker.queue("/", "other").is_some());
}

/// A master built over a recovered state that holds messages scans from
/// the start (a recovered message may carry its own `expiration`); one over
/// queues without messages or TTLs does not.
#[test]
fn a_recovered_state_with_messages_starts_with_the_expiry_scan() {
    let mut m = master();
    m.set_now(1_000);
    let mut log = crate::users::seed_events(&Config::default());
    open(&mut m, 1, 1);
    log.extend(logged(method(&mut m, 1, 1, declare("q", true))));
    m.handle(Input::Stable { index: 1 });
    m.take_outputs();
    let empty = Master::new(
        Arc::new(Config::default()),
        Master::recover(&Config::default(), log.clone()),
        1,
    );
    assert!(!empty.may_expire(), "an empty queue without TTL: no scan");
    m.handle(Input::Publish {
        conn: 1,
        ch: 1,
        publish: Publish {
            exchange: "".into(),
            routing_key: "q".into(),
            ..Default::default()
        },
        properties: Arc::new(
            BasicProperties::default()
                .with_delivery_mode(2)
                .with_expiration("10".into()),
        ),
        body: Bytes::from_static(b"x"),
    });
    log.extend(logged(m.take_outputs()));
    let mut held = Master::new(
        Arc::new(Config::default()),
        Master::recover(&Config::default(), log),
        2,
    );
    assert_eq!(ready(&held, "q"), 1);
    assert!(held.may_expire());
    held.set_now(1_020);
    held.handle(Input::Tick);
    assert_eq!(ready(&held, "q"), 0, "the recovered message expired");
}

/// The events among `out`.
fn logged(out: Vec<Output>) -> Vec<crate::broker::event::Event> {
    out.into_iter()
        .filter_map(|o| match o {
            Output::Append(b) => Some(crate::broker::event::Event::decode(&b).unwrap()),
            _ => None,
        })
        .collect()
}
