//! A filtered stream consumer passes over entries that do not match, but
//! never more than `stream::SCAN_MAX` in one visit: the master goes on with
//! it later (`resume_stream_scans`), so a filter that matches nothing of a
//! long stream does not hold every other client for the whole scan.

use super::*;
use crate::master::stream::SCAN_MAX;
use stablemq_protocol::{AMQPValue, FieldTable};

pub(super) fn declare_stream(m: &mut Master) {
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("stream".into()),
    );
    m.handle(Input::Method {
        conn: 1,
        ch: 1,
        method: AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: "s".into(),
            durable: true,
            arguments,
            ..Default::default()
        })),
    });
    let index = m.last_appended();
    m.handle(Input::Stable { index });
    m.take_outputs();
}

/// A persistent publish to `s`, with `x-stream-filter-value` when given.
fn publish_valued(m: &mut Master, body: &str, value: Option<&str>) {
    let mut headers = FieldTable::default();
    if let Some(v) = value {
        headers.insert(
            "x-stream-filter-value".into(),
            AMQPValue::LongString(v.into()),
        );
    }
    publish_headed(m, body, headers);
}

/// A persistent publish of `body` to `s` with `headers` (none when empty).
pub(super) fn publish_headed(m: &mut Master, body: &str, headers: FieldTable) {
    let mut props = BasicProperties::default().with_delivery_mode(2);
    if !headers.inner().is_empty() {
        props = props.with_headers(headers);
    }
    m.handle(Input::Publish {
        conn: 1,
        ch: 1,
        publish: Publish {
            exchange: "".into(),
            routing_key: "s".into(),
            ..Default::default()
        },
        properties: Arc::new(props),
        body: Bytes::from(body.to_string()),
    });
    m.take_outputs();
}

pub(super) fn stable(m: &mut Master) -> Vec<Output> {
    let index = m.last_appended();
    m.handle(Input::Stable { index });
    m.take_outputs()
}

#[test]
fn a_filter_that_matches_nothing_scans_a_bounded_stretch_per_visit() {
    let mut m = master();
    open(&mut m, 1, 1);
    declare_stream(&mut m);
    let n = 3 * SCAN_MAX;
    for i in 0..n {
        publish_valued(&mut m, &format!("b{i}"), Some("b"));
    }
    stable(&mut m);
    method(
        &mut m,
        1,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count: 10,
            ..Default::default()
        })),
    );
    let mut arguments = FieldTable::default();
    arguments.insert("x-stream-filter".into(), AMQPValue::LongString("a".into()));
    arguments.insert(
        "x-stream-offset".into(),
        AMQPValue::LongString("first".into()),
    );
    let out = method(
        &mut m,
        1,
        1,
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: "s".into(),
            consumer_tag: "c".into(),
            arguments,
            ..Default::default()
        })),
    );
    assert!(delivered(&out).is_empty());
    // The consume's visit stopped after about SCAN_MAX entries (a batch
    // over at most); two more visits reach the end of the stream, and then
    // nothing is left to resume.
    let mut visits = 0;
    while m.has_stream_rescans() {
        visits += 1;
        assert!(visits <= 3, "still scanning after {visits} visits");
        m.resume_stream_scans();
        assert!(delivered(&m.take_outputs()).is_empty());
    }
    assert_eq!(visits, 2);
    // At the end, an entry that matches goes out at once.
    publish_valued(&mut m, "a1", Some("a"));
    assert_eq!(delivered(&stable(&mut m)), ["a1"]);
    assert!(!m.has_stream_rescans());
}
