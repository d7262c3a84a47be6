//! A stream's retention without a publish: the tick applies `max-age` to a
//! stream nobody publishes to, at start and then every
//! `stream_retention_interval_ms`, and a policy applies its limits at once
//! (as Osiris evaluates retention when it opens a stream, when its retention
//! is updated and, since osiris 1.4, every hour).

use super::stream_scan::stable;
use super::*;
use crate::broker::event::Event;
use crate::master::admin::{AdminOp, AdminReply};
use stablemq_protocol::{AMQPValue, FieldTable};

/// Declare stream `s` with 100-byte segments and `args`.
fn declare_stream_with(m: &mut Master, args: &[(&str, AMQPValue)]) {
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("stream".into()),
    );
    arguments.insert(
        "x-stream-max-segment-size-bytes".into(),
        AMQPValue::LongInt(100),
    );
    for (k, v) in args {
        arguments.insert((*k).into(), v.clone());
    }
    method(
        m,
        1,
        1,
        AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: "s".into(),
            durable: true,
            arguments,
            ..Default::default()
        })),
    );
    stable(m);
}

/// Publish 25 entries of 10 bytes: segments [0,10) [10,20) and the open
/// [20,25).
fn fill(m: &mut Master) {
    for i in 0..25 {
        publish(m, 1, 1, "s", true, &format!("entry-{i:04}"));
    }
    stable(m);
}

fn first_offset(m: &Master) -> u64 {
    let q = m.broker.queue("/", "s").expect("stream s");
    q.stream.as_ref().expect("a stream").first_offset()
}

fn tick_at(m: &mut Master, now: u64) {
    m.set_now(now);
    m.handle(Input::Tick);
    stable(m);
}

#[test]
fn the_tick_cuts_segments_past_max_age_of_a_stream_nobody_publishes_to() {
    let mut m = master();
    m.set_now(1_000_000);
    open(&mut m, 1, 1);
    tick_at(&mut m, 1_000_000); // the start's look: nothing yet
    declare_stream_with(
        &mut m,
        &[("x-max-age", AMQPValue::LongString("10s".into()))],
    );
    fill(&mut m);
    assert_eq!(first_offset(&m), 0);
    // Past max-age, but before the next look (a minute after the last).
    tick_at(&mut m, 1_030_000);
    assert_eq!(first_offset(&m), 0, "not looked at yet");
    tick_at(&mut m, 1_060_000);
    assert_eq!(
        first_offset(&m),
        20,
        "the two closed segments went; the open one stays"
    );
}

#[test]
fn a_master_that_starts_applies_retention_at_its_first_tick() {
    let mut m = master();
    m.set_now(1_000_000);
    open(&mut m, 1, 1);
    declare_stream_with(
        &mut m,
        &[("x-max-age", AMQPValue::LongString("10s".into()))],
    );
    fill(&mut m);
    // The first tick of this master, 20 s after the entries.
    tick_at(&mut m, 1_020_000);
    assert_eq!(first_offset(&m), 20);
}

#[test]
fn a_policy_applies_its_limits_to_a_stream_at_once() {
    let mut m = master();
    m.set_now(1_000_000);
    open(&mut m, 1, 1);
    tick_at(&mut m, 1_000_000);
    declare_stream_with(&mut m, &[]);
    fill(&mut m);
    m.handle(Input::Admin {
        op: AdminOp::Import {
            events: vec![Event::PolicySet {
                vhost: "/".into(),
                name: "small".into(),
                pattern: "^s$".into(),
                apply_to: "queues".into(),
                priority: 0,
                definition: r#"{"max-length-bytes":100}"#.into(),
            }],
        },
        reply: AdminReply::new(|_, _| {}),
    });
    stable(&mut m);
    assert_eq!(
        first_offset(&m),
        20,
        "250 bytes over 100: both closed segments went, no publish needed"
    );
}
