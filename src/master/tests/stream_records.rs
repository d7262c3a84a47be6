//! A stream-protocol subscription's consumer (`RECORDS_ARG`) gets a visit's
//! entries as records in one `ToConn::StreamRecords`, not one AMQP delivery
//! each, with consecutive delivery tags that its acks count as any
//! consumer's.

use super::stream_scan::{declare_stream, publish_headed, stable};
use super::*;
use crate::broker::stream_record::{ChunkMark, RECORD_HEADER, RECORDS_ARG};
use crate::master::inout::StreamRecord;
use stablemq_protocol::{AMQPValue, FieldTable};

/// A stream-protocol record `body` published to `s`: one chunk of its own.
fn publish_record(m: &mut Master, body: &str) {
    let mut headers = FieldTable::default();
    headers.insert(RECORD_HEADER.into(), AMQPValue::LongUInt(1));
    publish_headed(m, body, headers);
}

/// The records sent to conn 1, channel 2, one `Vec` per message; panics on
/// an AMQP delivery there.
fn records(out: &[Output]) -> Vec<Vec<StreamRecord>> {
    let mut all = Vec::new();
    for o in out {
        match o {
            Output::ToConn(1, ToConn::StreamRecords { ch: 2, records }) => {
                all.push(records.clone());
            }
            Output::ToConn(1, ToConn::Deliver { ch: 2, .. }) => {
                panic!("an AMQP delivery to a stream-protocol consumer: {o:?}")
            }
            _ => {}
        }
    }
    all
}

fn summary(batch: &[StreamRecord]) -> Vec<(u64, u64, &[u8])> {
    batch
        .iter()
        .map(|r| (r.delivery_tag, r.offset, &r.record[..]))
        .collect()
}

#[test]
fn a_visit_sends_its_records_in_one_message_and_acks_move_the_window() {
    let mut m = master();
    open(&mut m, 1, 1);
    declare_stream(&mut m);
    for i in 0..5 {
        publish_record(&mut m, &format!("r{i}"));
    }
    stable(&mut m);
    m.handle(Input::ChannelOpen { conn: 1, ch: 2 });
    m.take_outputs();
    method(
        &mut m,
        1,
        2,
        AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count: 3,
            ..Default::default()
        })),
    );
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-stream-offset".into(),
        AMQPValue::LongString("first".into()),
    );
    arguments.insert(RECORDS_ARG.into(), AMQPValue::Boolean(true));
    let out = method(
        &mut m,
        1,
        2,
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: "s".into(),
            consumer_tag: "sub".into(),
            arguments,
            ..Default::default()
        })),
    );
    let batches = records(&out);
    assert_eq!(batches.len(), 1, "one message for the visit: {batches:?}");
    assert_eq!(
        summary(&batches[0]),
        [(1, 0, &b"r0"[..]), (2, 1, b"r1"), (3, 2, b"r2")],
        "the prefetch's worth, records as stored"
    );
    assert!(
        batches[0]
            .iter()
            .all(|r| r.mark == ChunkMark::Starts(Some(1)) && r.trailer == 0)
    );
    // An ack of the first two makes room for two more, in one message.
    let out = method(
        &mut m,
        1,
        2,
        AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag: 2,
            multiple: true,
        })),
    );
    let batches = records(&out);
    assert_eq!(batches.len(), 1, "{batches:?}");
    assert_eq!(summary(&batches[0]), [(4, 3, &b"r3"[..]), (5, 4, b"r4")]);
    // Nothing is left, and an entry not yet stable is not sent (I1).
    publish_record(&mut m, "r5");
    let out = method(
        &mut m,
        1,
        2,
        AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag: 5,
            multiple: true,
        })),
    );
    assert!(records(&out).is_empty());
    let out = stable(&mut m);
    let batches = records(&out);
    assert_eq!(batches.len(), 1, "{out:?}");
    assert_eq!(summary(&batches[0]), [(6, 5, &b"r5"[..])]);
}
