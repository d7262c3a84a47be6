//! The tick: when the expiry scan starts, and what it expires.

use super::*;

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
    let empty = Master::new(Arc::new(Config::default()), Broker::replay(log.clone()), 1);
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
    let mut held = Master::new(Arc::new(Config::default()), Broker::replay(log), 2);
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
            Output::Append { entry: b, .. } => {
                Some(crate::broker::event::Event::decode(&b).unwrap())
            }
            _ => None,
        })
        .collect()
}

fn exists(m: &Master, queue: &str) -> bool {
    m.broker.queue("/", queue).is_some()
}

fn tick_at(m: &mut Master, now: u64) {
    m.set_now(now);
    m.handle(Input::Tick);
    m.take_outputs();
}

/// A declare of an `x-expires` queue that exists, passive or not, renews its
/// lease, as RabbitMQ 3.10 does (checked with pika: declared with 3 s,
/// redeclared at 2 s, there at 4.5 s).
#[test]
fn a_redeclare_or_a_passive_declare_renews_an_expiring_queues_lease() {
    for passive in [false, true] {
        let mut m = master();
        m.set_now(1_000);
        open(&mut m, 1, 1);
        method(&mut m, 1, 1, declare_with("q", &[("x-expires", 1_000)]));
        tick_at(&mut m, 1_100);
        m.set_now(1_800);
        let again = match declare_with("q", &[("x-expires", 1_000)]) {
            AMQPClass::Queue(queue::AMQPMethod::Declare(d)) => {
                AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare { passive, ..d }))
            }
            other => other,
        };
        method(&mut m, 1, 1, again);
        tick_at(&mut m, 2_500);
        assert!(
            exists(&m, "q"),
            "passive {passive}: 700 ms after the renewal"
        );
        tick_at(&mut m, 2_900);
        assert!(!exists(&m, "q"), "passive {passive}: 1100 ms after it");
    }
}

/// A deleted queue's last use is forgotten: a new queue of the same name
/// gets a lease of its own (it inherited the old one and expired at its
/// first tick, under the client that had just declared it).
#[test]
fn a_queue_declared_again_after_a_delete_gets_a_fresh_lease() {
    let mut m = master();
    m.set_now(1_000);
    open(&mut m, 1, 1);
    method(&mut m, 1, 1, declare_with("q", &[("x-expires", 1_000)]));
    tick_at(&mut m, 1_100);
    method(
        &mut m,
        1,
        1,
        AMQPClass::Queue(queue::AMQPMethod::Delete(queue::Delete {
            queue: "q".into(),
            ..Default::default()
        })),
    );
    m.set_now(10_000);
    method(&mut m, 1, 1, declare_with("q", &[("x-expires", 1_000)]));
    tick_at(&mut m, 10_100);
    assert!(exists(&m, "q"), "declared 100 ms ago");
    tick_at(&mut m, 11_100);
    assert!(!exists(&m, "q"), "unused for its whole x-expires");
}
