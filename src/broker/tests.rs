use super::event::*;
use super::*;
use bytes::Bytes;
use stablemq_protocol::BasicProperties;

fn vhost() -> Event {
    Event::VhostCreated { vhost: "/".into() }
}
fn declare_q(name: &str, durable: bool) -> Event {
    Event::QueueDeclared {
        vhost: "/".into(),
        name: name.into(),
        spec: QueueSpec {
            durable,
            auto_delete: false,
            exclusive_owner: None,
            arguments: FieldTable::default(),
        },
    }
}
fn declare_x(name: &str, kind: ExchangeKind, auto_delete: bool) -> Event {
    Event::ExchangeDeclared {
        vhost: "/".into(),
        name: name.into(),
        spec: ExchangeSpec {
            kind,
            durable: true,
            auto_delete,
            internal: false,
            arguments: FieldTable::default(),
        },
    }
}
fn bind(src: &str, dest: Destination, key: &str) -> Event {
    Event::Bound {
        vhost: "/".into(),
        binding: Binding {
            source: src.into(),
            destination: dest,
            routing_key: key.into(),
            arguments: FieldTable::default(),
        },
    }
}
fn publish(id: u64, queues: &[&str]) -> Event {
    Event::Published {
        vhost: "/".into(),
        exchange: "".into(),
        routing_key: "".into(),
        msg_id: id,
        timestamp_ms: 0,
        properties: Arc::new(BasicProperties::default()),
        body: Bytes::from(format!("m{id}")),
        queues: queues.iter().map(|s| (*s).into()).collect(),
    }
}

#[test]
fn predeclared_exchanges_exist_per_vhost() {
    let mut b = Broker::new();
    b.apply(&vhost(), 0);
    for n in [
        "",
        "amq.direct",
        "amq.fanout",
        "amq.topic",
        "amq.headers",
        "amq.match",
    ] {
        assert!(b.exchange("/", n).is_some(), "{n}");
    }
    assert!(b.exchange("other", "").is_none());
}

#[test]
fn routing_follows_exchange_to_exchange_bindings_without_duplicates_or_loops() {
    let mut b = Broker::new();
    for e in [
        vhost(),
        declare_q("q1", true),
        declare_q("q2", true),
        declare_x("t", ExchangeKind::Topic, false),
        declare_x("f", ExchangeKind::Fanout, false),
        bind("t", Destination::Queue("q1".into()), "a.*"),
        bind("t", Destination::Exchange("f".into()), "#"),
        bind("f", Destination::Queue("q1".into()), ""),
        bind("f", Destination::Queue("q2".into()), ""),
        bind("f", Destination::Exchange("t".into()), ""),
    ] {
        b.apply(&e, 0);
    }
    assert_eq!(
        b.route("/", "t", "a.b", None).to_vec(),
        vec![Arc::<str>::from("q1"), Arc::from("q2")]
    );
    assert_eq!(
        b.route("/", "", "q2", None).to_vec(),
        vec![Arc::<str>::from("q2")]
    );
    assert!(b.route("/", "", "nope", None).is_empty());
    assert!(b.route("/", "missing", "x", None).is_empty());
}

#[test]
fn deleting_a_queue_drops_bindings_and_auto_deletes_emptied_exchanges() {
    let mut b = Broker::new();
    for e in [
        vhost(),
        declare_q("q", true),
        declare_x("ad", ExchangeKind::Direct, true),
        bind("ad", Destination::Queue("q".into()), "k"),
        publish(1, &["q"]),
    ] {
        b.apply(&e, 0);
    }
    let applied = b.apply(
        &Event::QueueDeleted {
            vhost: "/".into(),
            name: "q".into(),
        },
        0,
    );
    assert_eq!(applied.deleted_queues.len(), 1);
    assert_eq!(applied.deleted_queues[0].1.ready.len(), 1);
    assert!(b.exchange("/", "ad").is_none());
}

#[test]
fn replay_of_the_same_log_gives_the_same_state_i4() {
    let log = vec![
        vhost(),
        declare_q("q", true),
        publish(1, &["q", "transient-missing"]),
        publish(2, &["q"]),
        publish(3, &["q"]),
        Event::Removed {
            vhost: "/".into(),
            queue: "q".into(),
            msg_ids: vec![2],
        },
    ];
    let run = || {
        let mut b = Broker::new();
        for e in &log {
            b.apply(e, 0);
        }
        let q = b.queue("/", "q").unwrap();
        q.ready_ids()
    };
    assert_eq!(run(), vec![1, 3]);
    assert_eq!(run(), run());
}

#[test]
fn requeue_restores_original_position() {
    let mut b = Broker::new();
    for e in [
        vhost(),
        declare_q("q", false),
        publish(1, &["q"]),
        publish(2, &["q"]),
    ] {
        b.apply(&e, 0);
    }
    let q = b.queue_mut("/", "q").unwrap();
    let m1 = q.pop().unwrap();
    q.unacked.insert(m1.msg.id, m1);
    assert_eq!(q.requeue(1, true), Some(1));
    let first = q.pop().unwrap();
    assert_eq!(first.msg.id, 1);
    assert!(first.redelivered);
}
