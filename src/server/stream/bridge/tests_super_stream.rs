//! Create and delete super stream: the steps the bridge asks of the master,
//! in order, and the code each outcome is answered with.

use super::tests::{bridge, code, from_master, request};
use super::*;

/// What the bridge asked of the master, in short.
fn asked(m: &[Input]) -> Vec<String> {
    m.iter()
        .map(|i| match i {
            Input::ChannelOpen { ch, .. } => format!("open {ch}"),
            Input::StreamTrack { op, .. } => match op {
                TrackOp::SuperStreamPermitted {
                    exchange,
                    partitions,
                } => format!("permitted {exchange} {partitions:?}"),
                TrackOp::AnyExists { exchange, queues } => format!("exists {exchange} {queues:?}"),
                TrackOp::Partitions { exchange } => format!("partitions {exchange}"),
                other => format!("{other:?}"),
            },
            Input::Method { method, .. } => method_line(method),
            other => format!("{other:?}"),
        })
        .collect()
}

fn method_line(method: &AMQPClass) -> String {
    match method {
        AMQPClass::Exchange(exchange::AMQPMethod::Declare(d)) => format!(
            "x.declare {} {} durable={} {:?}",
            d.exchange,
            d.kind,
            d.durable,
            d.arguments.inner()
        ),
        AMQPClass::Exchange(exchange::AMQPMethod::Delete(d)) => format!("x.delete {}", d.exchange),
        AMQPClass::Queue(queue::AMQPMethod::Declare(d)) => {
            let args: Vec<String> = d
                .arguments
                .inner()
                .iter()
                .map(|(k, v)| match v {
                    AMQPValue::LongString(t) => format!("{k}={t}"),
                    other => format!("{k}={other:?}"),
                })
                .collect();
            format!(
                "q.declare {} passive={} {}",
                d.queue,
                d.passive,
                args.join(",")
            )
        }
        AMQPClass::Queue(queue::AMQPMethod::Bind(b)) => format!(
            "bind {}->{} key={} {:?}",
            b.exchange,
            b.queue,
            b.routing_key,
            b.arguments.inner()
        ),
        AMQPClass::Queue(queue::AMQPMethod::Delete(d)) => format!("q.delete {}", d.queue),
        other => format!("{other:?}"),
    }
}

fn tracked(value: TrackAnswer) -> ToConn {
    ToConn::Tracked { ch: CONTROL, value }
}

fn ok_for(m: &[Input]) -> ToConn {
    let method = match m.last() {
        Some(Input::Method {
            method: AMQPClass::Exchange(exchange::AMQPMethod::Declare(_)),
            ..
        }) => AMQPClass::Exchange(exchange::AMQPMethod::DeclareOk(exchange::DeclareOk {})),
        Some(Input::Method {
            method: AMQPClass::Exchange(exchange::AMQPMethod::Delete(_)),
            ..
        }) => AMQPClass::Exchange(exchange::AMQPMethod::DeleteOk(exchange::DeleteOk {})),
        Some(Input::Method {
            method: AMQPClass::Queue(queue::AMQPMethod::Bind(_)),
            ..
        }) => AMQPClass::Queue(queue::AMQPMethod::BindOk(queue::BindOk {})),
        Some(Input::Method {
            method: AMQPClass::Queue(queue::AMQPMethod::Delete(_)),
            ..
        }) => AMQPClass::Queue(queue::AMQPMethod::DeleteOk(queue::DeleteOk {
            message_count: 0,
        })),
        _ => AMQPClass::Queue(queue::AMQPMethod::DeclareOk(queue::DeclareOk {
            queue: "p".into(),
            message_count: 0,
            consumer_count: 0,
        })),
    };
    ToConn::Method(CONTROL, method)
}

fn create(partitions: &[&str], keys: &[&str], args: &[(&str, &str)]) -> Request {
    Request::CreateSuperStream {
        name: "ss".into(),
        partitions: partitions.iter().map(|s| s.to_string()).collect(),
        binding_keys: keys.iter().map(|s| s.to_string()).collect(),
        arguments: args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// Answer every step with success, collecting what was asked; returns the
/// steps and the replies.
fn run_ok(b: &mut Bridge, first: Vec<Input>) -> (Vec<String>, Vec<(u32, ResponseCode)>) {
    let mut steps = asked(&first);
    let mut last = first;
    let mut replies = Vec::new();
    for _ in 0..50 {
        let answer = match steps.last().map(String::as_str) {
            Some(s) if s.starts_with("permitted") => tracked(TrackAnswer::Permitted(true)),
            Some(s) if s.starts_with("exists") => tracked(TrackAnswer::Exists(false)),
            Some(s) if s.starts_with("partitions") => {
                tracked(TrackAnswer::Streams(Ok(vec!["ss-0".into(), "ss-1".into()])))
            }
            _ => ok_for(&last),
        };
        let (m, c) = from_master(b, answer);
        replies.extend(code(&c));
        if !replies.is_empty() {
            assert!(m.is_empty(), "asked after the answer: {m:?}");
            return (steps, replies);
        }
        steps.extend(asked(&m));
        last = m;
    }
    panic!("no answer after {steps:?}");
}

#[test]
fn create_checks_then_declares_the_exchange_the_streams_and_the_bindings() {
    let mut b = bridge();
    let (m, c) = request(
        &mut b,
        4,
        create(
            &["ss-0", "ss-1"],
            &["a", "b"],
            &[("max-length-bytes", "1000")],
        ),
    );
    assert!(c.is_empty());
    let (steps, replies) = run_ok(&mut b, m);
    assert_eq!(replies, [(4, ResponseCode::Ok)]);
    let q = |p: &str| {
        format!(
            "q.declare {p} passive=false x-max-length-bytes=LongLongInt(1000),\
             x-queue-leader-locator=balanced,x-queue-type=stream"
        )
    };
    let bind = |p: &str, k: &str, i: i64| {
        format!(
            "bind ss->{p} key={k} {{ShortString(\"x-stream-partition-order\"): LongLongInt({i})}}"
        )
    };
    assert_eq!(
        steps,
        [
            "open 1".to_string(),
            "permitted ss Some([\"ss-0\", \"ss-1\"])".into(),
            "exists ss [\"ss-0\", \"ss-1\"]".into(),
            "x.declare ss direct durable=true {ShortString(\"x-super-stream\"): Boolean(true)}"
                .into(),
            q("ss-0"),
            q("ss-1"),
            bind("ss-0", "a", 0),
            bind("ss-1", "b", 1),
        ]
    );
}

#[test]
fn create_answers_0x10_0x11_and_0x05_before_it_makes_anything() {
    let mut b = bridge();
    // A bad name is answered at once, as RabbitMQ's reader checks it first.
    let mut bad = create(&["a"], &["k"], &[]);
    if let Request::CreateSuperStream { name, .. } = &mut bad {
        *name = "amq.ss".into();
    }
    let (m, c) = request(&mut b, 7, bad);
    assert!(m.is_empty());
    assert_eq!(code(&c), [(7, ResponseCode::PreconditionFailed)]);
    // Then permissions, even for an invalid request.
    let (m, _) = request(&mut b, 1, create(&["a", "b"], &["k"], &[]));
    assert_eq!(asked(&m)[1], "permitted ss Some([\"a\", \"b\"])");
    let (m, c) = from_master(&mut b, tracked(TrackAnswer::Permitted(false)));
    assert_eq!(code(&c), [(1, ResponseCode::AccessRefused)]);
    assert!(m.is_empty());
    // Allowed, but fewer keys than partitions.
    let invalid = [
        create(&["a", "b"], &["k"], &[]),
        create(&["a", "a"], &["k", "l"], &[]),
        create(&["a", "amq.b"], &["k", "l"], &[]),
        create(&["a"], &["k"], &[("no-such-argument", "1")]),
        create(&["a"], &["k"], &[("max-length-bytes", "many")]),
    ];
    for (i, r) in (2..).zip(invalid) {
        let (m, _) = request(&mut b, i, r);
        assert!(asked(&m).iter().any(|s| s.starts_with("permitted")));
        let (m, c) = from_master(&mut b, tracked(TrackAnswer::Permitted(true)));
        assert_eq!(code(&c), [(i, ResponseCode::PreconditionFailed)]);
        assert!(m.is_empty(), "{m:?}");
    }
    // Taken names.
    request(&mut b, 9, create(&["a"], &["k"], &[]));
    let (m, _) = from_master(&mut b, tracked(TrackAnswer::Permitted(true)));
    assert_eq!(asked(&m), ["exists ss [\"a\"]"]);
    let (m, c) = from_master(&mut b, tracked(TrackAnswer::Exists(true)));
    assert_eq!(code(&c), [(9, ResponseCode::StreamAlreadyExists)]);
    assert!(m.is_empty());
}

#[test]
fn a_create_refused_half_way_undoes_what_it_made_and_answers_0x0f() {
    let mut b = bridge();
    request(
        &mut b,
        3,
        create(&["p0", "p1", "p2"], &["0", "1", "2"], &[]),
    );
    from_master(&mut b, tracked(TrackAnswer::Permitted(true)));
    let (m, _) = from_master(&mut b, tracked(TrackAnswer::Exists(false)));
    let (m, _) = from_master(&mut b, ok_for(&m)); // the exchange
    let (m, _) = from_master(&mut b, ok_for(&m)); // p0
    assert_eq!(
        asked(&m)[0].split(' ').take(2).collect::<Vec<_>>(),
        ["q.declare", "p1"]
    );
    // p1 is refused: the channel is closed, p0 and the exchange go.
    let refused = AmqpError::precondition("inequivalent arg");
    let (m, c) = from_master(&mut b, ToConn::CloseChannel(CONTROL, refused));
    assert!(c.is_empty());
    assert_eq!(asked(&m), ["open 1", "q.delete p0"]);
    let (m, _) = from_master(&mut b, ok_for(&m));
    assert_eq!(asked(&m), ["x.delete ss"]);
    let (m, c) = from_master(&mut b, ok_for(&m));
    assert!(m.is_empty());
    assert_eq!(code(&c), [(3, ResponseCode::InternalError)]);
}

#[test]
fn delete_checks_finds_the_partitions_and_deletes_them_and_the_exchange() {
    let mut b = bridge();
    let (m, _) = request(&mut b, 5, Request::DeleteSuperStream { name: "ss".into() });
    let (steps, replies) = run_ok(&mut b, m);
    assert_eq!(replies, [(5, ResponseCode::Ok)]);
    assert_eq!(
        steps,
        [
            "open 1",
            "permitted ss None",
            "partitions ss",
            "permitted ss Some([\"ss-0\", \"ss-1\"])",
            "x.delete ss",
            "q.delete ss-0",
            "q.delete ss-1",
        ]
    );
}

#[test]
fn delete_answers_0x10_and_0x02_and_goes_on_past_a_failed_delete() {
    let mut b = bridge();
    request(&mut b, 1, Request::DeleteSuperStream { name: "ss".into() });
    let (_, c) = from_master(&mut b, tracked(TrackAnswer::Permitted(false)));
    assert_eq!(code(&c), [(1, ResponseCode::AccessRefused)]);
    request(&mut b, 2, Request::DeleteSuperStream { name: "ss".into() });
    from_master(&mut b, tracked(TrackAnswer::Permitted(true)));
    let (_, c) = from_master(&mut b, tracked(TrackAnswer::Streams(Err(()))));
    assert_eq!(code(&c), [(2, ResponseCode::StreamDoesNotExist)]);
    // Not allowed on a partition.
    request(&mut b, 3, Request::DeleteSuperStream { name: "ss".into() });
    from_master(&mut b, tracked(TrackAnswer::Permitted(true)));
    from_master(&mut b, tracked(TrackAnswer::Streams(Ok(vec!["p".into()]))));
    let (m, c) = from_master(&mut b, tracked(TrackAnswer::Permitted(false)));
    assert_eq!(code(&c), [(3, ResponseCode::AccessRefused)]);
    assert!(m.is_empty());
    // The exchange's delete refused: the partition still goes, and OK.
    request(&mut b, 4, Request::DeleteSuperStream { name: "ss".into() });
    from_master(&mut b, tracked(TrackAnswer::Permitted(true)));
    from_master(&mut b, tracked(TrackAnswer::Streams(Ok(vec!["p".into()]))));
    from_master(&mut b, tracked(TrackAnswer::Permitted(true)));
    let refused = AmqpError::access_refused("no");
    let (m, _) = from_master(&mut b, ToConn::CloseChannel(CONTROL, refused));
    assert_eq!(asked(&m), ["open 1", "q.delete p"]);
    let (_, c) = from_master(&mut b, ok_for(&m));
    assert_eq!(code(&c), [(4, ResponseCode::Ok)]);
}
