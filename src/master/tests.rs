//! Drives the master directly, as the simulator will: inputs in, outputs checked.

use super::Master;
use super::io::{Input, Output, ToConn};
use crate::broker::Broker;
use crate::config::Config;
use bytes::Bytes;
use stablemq_protocol::methods::{basic, confirm, queue, tx};
use stablemq_protocol::{AMQPClass, BasicProperties};
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
        publish: basic::Publish {
            exchange: "".into(),
            routing_key: queue.into(),
            ..Default::default()
        },
        properties: Box::new(props),
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
