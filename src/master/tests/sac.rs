//! Single active consumer groups through the master: registration checks,
//! a partition's index from its super stream's bindings, and the updates
//! that follow joins, answers, disconnects and a deleted stream.

use super::*;
use crate::error::ReplyCode;
use crate::master::inout::{SacNote, SacOp};
use stablemq_protocol::methods::exchange;
use stablemq_protocol::{AMQPValue, FieldTable};

/// A method on connection 1's channel 1, made stable (a declare's reply,
/// and the channel's next input, wait for that).
fn run(m: &mut Master, method: AMQPClass) {
    m.handle(Input::Method {
        conn: 1,
        ch: 1,
        method,
    });
    let index = m.last_appended();
    m.handle(Input::Stable { index });
    m.take_outputs();
}

fn stream_declare(name: &str) -> AMQPClass {
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("stream".into()),
    );
    AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: name.into(),
        durable: true,
        arguments,
        ..Default::default()
    }))
}

/// A super stream `ss` of `n` partitions `ss-0` ... bound in order.
fn super_stream(m: &mut Master, n: usize) {
    run(
        m,
        AMQPClass::Exchange(exchange::AMQPMethod::Declare(exchange::Declare {
            exchange: "ss".into(),
            kind: "direct".into(),
            durable: true,
            ..Default::default()
        })),
    );
    // Bound in reverse, so the order comes from the argument.
    for i in (0..n).rev() {
        let p = format!("ss-{i}");
        run(m, stream_declare(&p));
        let mut arguments = FieldTable::default();
        arguments.insert(
            "x-stream-partition-order".into(),
            AMQPValue::LongInt(i as i32),
        );
        run(
            m,
            AMQPClass::Queue(queue::AMQPMethod::Bind(queue::Bind {
                queue: p.as_str().into(),
                exchange: "ss".into(),
                routing_key: p.as_str().into(),
                arguments,
                ..Default::default()
            })),
        );
    }
}

fn sac(m: &mut Master, conn: u64, op: SacOp) -> Vec<(u64, String)> {
    m.handle(Input::SingleActive { conn, op });
    m.take_outputs()
        .into_iter()
        .filter_map(|o| match o {
            Output::ToConn(c, ToConn::SingleActive(n)) => Some((c, describe(&n))),
            _ => None,
        })
        .collect()
}

fn describe(n: &SacNote) -> String {
    match n {
        SacNote::Registered {
            subscription,
            result: Ok(()),
        } => format!("{subscription} registered"),
        SacNote::Registered {
            subscription,
            result: Err(e),
        } => format!("{subscription} refused {:?}", e.code),
        SacNote::Update {
            subscription,
            active,
            stepping_down,
        } => format!("{subscription} active={active} stepping_down={stepping_down}"),
    }
}

fn register(stream: &str, subscription: u8, super_stream: Option<&str>) -> SacOp {
    SacOp::Register {
        subscription,
        stream: stream.into(),
        name: "app".into(),
        super_stream: super_stream.map(str::to_owned),
    }
}

fn told(conn: u64, what: &str) -> (u64, String) {
    (conn, what.to_owned())
}

#[test]
fn a_missing_stream_or_a_classic_queue_is_refused() {
    let mut m = master();
    open(&mut m, 1, 1);
    assert_eq!(
        sac(&mut m, 1, register("nope", 0, None)),
        [told(1, &format!("0 refused {:?}", ReplyCode::NotFound))]
    );
    run(&mut m, declare("classic", true));
    assert_eq!(
        sac(&mut m, 1, register("classic", 1, None)),
        [told(1, &format!("1 refused {:?}", ReplyCode::NotFound))]
    );
}

#[test]
fn a_plain_stream_hands_over_when_the_active_connection_goes() {
    let mut m = master();
    open(&mut m, 1, 1);
    open(&mut m, 2, 1);
    run(&mut m, stream_declare("s"));
    assert_eq!(
        sac(&mut m, 1, register("s", 0, None)),
        [
            told(1, "0 registered"),
            told(1, "0 active=true stepping_down=false")
        ]
    );
    assert_eq!(
        sac(&mut m, 2, register("s", 3, None)),
        [told(2, "3 registered")]
    );
    m.handle(Input::Disconnected { conn: 1 });
    let out = m.take_outputs();
    assert!(out.iter().any(|o| matches!(
        o,
        Output::ToConn(
            2,
            ToConn::SingleActive(SacNote::Update {
                subscription: 3,
                active: true,
                ..
            })
        )
    )));
}

#[test]
fn a_partition_is_placed_by_its_index_in_the_super_stream() {
    let mut m = master();
    open(&mut m, 1, 1);
    open(&mut m, 2, 1);
    super_stream(&mut m, 3);
    let ss = Some("ss");
    for (sub, p) in [(0, "ss-0"), (1, "ss-1"), (2, "ss-2")] {
        let out = sac(&mut m, 1, register(p, sub, ss));
        assert_eq!(
            out[1],
            told(1, &format!("{sub} active=true stepping_down=false"))
        );
    }
    // A second member: partition 1 (1 % 2) moves to it, through a step
    // down; partitions 0 and 2 (0 % 2) stay.
    assert_eq!(
        sac(&mut m, 2, register("ss-0", 0, ss)),
        [told(2, "0 registered")]
    );
    assert_eq!(
        sac(&mut m, 2, register("ss-1", 1, ss)),
        [
            told(2, "1 registered"),
            told(1, "1 active=false stepping_down=true")
        ]
    );
    assert_eq!(
        sac(&mut m, 2, register("ss-2", 2, ss)),
        [told(2, "2 registered")]
    );
    let answered = SacOp::SteppedDown {
        subscription: 1,
        stream: "ss-1".into(),
        name: "app".into(),
    };
    assert_eq!(
        sac(&mut m, 1, answered),
        [told(2, "1 active=true stepping_down=false")]
    );
    // The second member leaves partition 1: the first, alone, is due and
    // nobody is active, so it is told at once.
    let out = sac(
        &mut m,
        2,
        SacOp::Unregister {
            subscription: 1,
            stream: "ss-1".into(),
            name: "app".into(),
        },
    );
    assert_eq!(out, [told(1, "1 active=true stepping_down=false")]);
}

#[test]
fn a_deleted_stream_forgets_its_groups() {
    let mut m = master();
    open(&mut m, 1, 1);
    run(&mut m, stream_declare("s"));
    sac(&mut m, 1, register("s", 0, None));
    sac(&mut m, 1, register("s", 1, None));
    run(
        &mut m,
        AMQPClass::Queue(queue::AMQPMethod::Delete(queue::Delete {
            queue: "s".into(),
            ..Default::default()
        })),
    );
    run(&mut m, stream_declare("s"));
    // A new group: the first to join is active.
    assert_eq!(
        sac(&mut m, 1, register("s", 2, None)),
        [
            told(1, "2 registered"),
            told(1, "2 active=true stepping_down=false")
        ]
    );
}
