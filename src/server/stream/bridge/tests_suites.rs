//! The bridge's answers that the clients' own test suites asked for
//! (scripts/stream-suites.sh): super streams, stream stats, deduplication
//! within a frame, gzip sub-entries, chunks, an operator's close, names.

use super::tests::{bridge, code, declare_ok, from_master, publish, request};
use super::*;

#[test]
fn route_and_partitions_are_asked_of_the_master_and_answered_with_its_streams() {
    let mut b = bridge();
    let (m, c) = request(
        &mut b,
        1,
        Request::Route {
            routing_key: "k".into(),
            super_stream: "ss".into(),
        },
    );
    assert!(c.is_empty());
    assert!(m.iter().any(|i| matches!(
        i,
        Input::StreamTrack { ch: CONTROL, op: TrackOp::Route { exchange, routing_key }, .. }
            if exchange == "ss" && routing_key == "k"
    )));
    // The next request waits for the answer to this one.
    let (m, _) = request(
        &mut b,
        2,
        Request::Partitions {
            super_stream: "none".into(),
        },
    );
    assert!(m.is_empty());
    let (m, c) = from_master(
        &mut b,
        ToConn::Tracked {
            ch: CONTROL,
            value: TrackAnswer::Streams(Ok(vec!["ss-0".into()])),
        },
    );
    let replies: Vec<_> = c
        .iter()
        .filter_map(|i| match i {
            sc::Input::Reply {
                correlation_id,
                reply: Reply::Streams { code, streams },
            } => Some((*correlation_id, *code, streams.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(replies, [(1, ResponseCode::Ok, vec!["ss-0".to_string()])]);
    assert!(m.iter().any(|i| matches!(
        i,
        Input::StreamTrack { op: TrackOp::Partitions { exchange }, .. } if exchange == "none"
    )));
    let (_, c) = from_master(
        &mut b,
        ToConn::Tracked {
            ch: CONTROL,
            value: TrackAnswer::Streams(Err(())),
        },
    );
    assert_eq!(code(&c), [(2, ResponseCode::StreamDoesNotExist)]);
}

#[test]
fn ids_repeated_within_one_publish_frame_are_stored_once() {
    let mut b = bridge();
    request(
        &mut b,
        1,
        Request::DeclarePublisher {
            publisher_id: 4,
            reference: Some("p".into()),
            stream: "s".into(),
        },
    );
    from_master(&mut b, declare_ok(CONTROL));
    from_master(
        &mut b,
        ToConn::Tracked {
            ch: CONTROL,
            value: TrackAnswer::Value(Ok(None)),
        },
    );
    // Two sends of 0, 1, 2, 3 that a client batched into one frame, then
    // 4: nothing was stored before, so 0 is new.
    let m = publish(&mut b, &[0, 1, 2, 3, 0, 1, 2, 3, 4]);
    let bodies: Vec<_> = m
        .iter()
        .filter_map(|i| match i {
            Input::Publish { body, .. } => Some(body.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(bodies, ["m0", "m1", "m2", "m3", "m4"].map(Bytes::from));
}

#[test]
fn a_gzip_sub_batch_is_stored_as_its_records_and_a_mislabelled_one_is_refused() {
    use std::io::Write;
    let mut plain = Vec::new();
    for r in ["a", "bc"] {
        plain.extend_from_slice(&(r.len() as u32).to_be_bytes());
        plain.extend_from_slice(r.as_bytes());
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).expect("gzip into memory");
    let body = Bytes::from(gz.finish().expect("gzip into memory"));
    let batch = |compression, uncompressed_length| Entry::SubBatch {
        compression,
        num_records: 2,
        uncompressed_length,
        body: body.clone(),
    };
    let len = plain.len() as u32;
    assert_eq!(
        publish::entry_records(batch(1, len)),
        [Bytes::from("a"), Bytes::from("bc")]
    );
    // A wrong declared length, gzip data labelled zstd, an unknown code
    // (every codec's own cases: server/stream/codecs.rs).
    assert!(publish::entry_records(batch(1, len + 1)).is_empty());
    assert!(publish::entry_records(batch(1, len - 1)).is_empty());
    assert!(publish::entry_records(batch(4, len)).is_empty());
    assert!(publish::entry_records(batch(5, len)).is_empty());
}

#[test]
fn a_forced_close_drops_the_connection_and_another_close_sends_one() {
    let mut b = bridge();
    from_master(&mut b, ToConn::Opened);
    let forced = AmqpError::new(ReplyCode::ConnectionForced, "Closed via management plugin");
    let (_, c) = from_master(&mut b, ToConn::CloseConnection(forced));
    assert_eq!(c, [sc::Input::Abort]);
    let other = AmqpError::new(ReplyCode::InternalError, "boom");
    let (_, c) = from_master(&mut b, ToConn::CloseConnection(other));
    assert!(matches!(&c[..], [sc::Input::Close { .. }]));
}

#[test]
fn stream_stats_are_asked_of_the_master_and_a_missing_stream_is_0x02() {
    let mut b = bridge();
    let (m, _) = request(&mut b, 1, Request::StreamStats { stream: "s".into() });
    assert!(m.iter().any(|i| matches!(
        i,
        Input::StreamTrack { op: TrackOp::Stats { stream }, .. } if stream == "s"
    )));
    let stats = vec![("first_chunk_id".to_string(), 0)];
    let (_, c) = from_master(
        &mut b,
        ToConn::Tracked {
            ch: CONTROL,
            value: TrackAnswer::Stats(Ok(stats.clone())),
        },
    );
    assert!(matches!(
        &c[..],
        [sc::Input::Reply { correlation_id: 1, reply: Reply::Stats { code: ResponseCode::Ok, stats: s } }] if *s == stats
    ));
    request(&mut b, 2, Request::StreamStats { stream: "x".into() });
    let (_, c) = from_master(
        &mut b,
        ToConn::Tracked {
            ch: CONTROL,
            value: TrackAnswer::Stats(Err(())),
        },
    );
    assert_eq!(code(&c), [(2, ResponseCode::StreamDoesNotExist)]);
}

#[test]
fn resolve_offset_spec_is_asked_of_the_master_with_its_codes() {
    use crate::broker::stream::StartAt;
    use crate::master::inout::NotResolved;
    let mut b = bridge();
    let resolve = |offset| Request::ResolveOffsetSpec {
        stream: "s".into(),
        offset,
        properties: None,
    };
    let cases = [
        (OffsetSpec::First, StartAt::First),
        (OffsetSpec::Last, StartAt::Last),
        (OffsetSpec::Next, StartAt::Next),
        (OffsetSpec::Offset(7), StartAt::Offset(7)),
        (OffsetSpec::Timestamp(-5), StartAt::TimestampMs(0)),
        (OffsetSpec::Timestamp(1_000), StartAt::TimestampMs(1_000)),
    ];
    for (i, (spec, want)) in cases.into_iter().enumerate() {
        let id = i as u32 + 1;
        let (m, _) = request(&mut b, id, resolve(spec));
        assert!(
            m.iter().any(|i| matches!(
                i,
                Input::StreamTrack { op: TrackOp::Resolve { stream, at }, .. }
                    if stream == "s" && *at == want
            )),
            "{spec:?}: {m:?}"
        );
        let (_, c) = from_master(
            &mut b,
            ToConn::Tracked {
                ch: CONTROL,
                value: TrackAnswer::Resolved(Ok(40 + u64::from(id))),
            },
        );
        assert!(
            matches!(
                &c[..],
                [sc::Input::Reply { correlation_id, reply: Reply::Offset { code: ResponseCode::Ok, offset } }]
                    if *correlation_id == id && *offset == 40 + u64::from(id)
            ),
            "{c:?}"
        );
    }
    for (id, why, want) in [
        (20, NotResolved::NoStream, ResponseCode::StreamDoesNotExist),
        (21, NotResolved::AccessRefused, ResponseCode::AccessRefused),
    ] {
        request(&mut b, id, resolve(OffsetSpec::First));
        let (_, c) = from_master(
            &mut b,
            ToConn::Tracked {
                ch: CONTROL,
                value: TrackAnswer::Resolved(Err(why)),
            },
        );
        assert!(
            matches!(
                &c[..],
                [sc::Input::Reply { correlation_id, reply: Reply::Offset { code, offset: 0 } }]
                    if *correlation_id == id && *code == want
            ),
            "{c:?}"
        );
    }
}

#[test]
fn a_stored_chunk_is_held_until_its_last_record_is_delivered() {
    let d = |offset, mark| crate::master::inout::StreamRecord {
        offset,
        delivery_tag: offset + 1,
        timestamp_ms: 0,
        record: Bytes::from("r"),
        mark,
        trailer: 0,
        filter_value: None,
    };
    use crate::broker::stream_record::ChunkMark::{Continues, Starts};
    // A chunk of 3 at offset 5: two of its records are in.
    let mut pending = vec![d(4, Starts(None)), d(5, Starts(Some(3))), d(6, Continues)];
    assert_eq!(subscribe::ready_len(&pending), 1);
    pending.push(d(7, Continues));
    assert_eq!(subscribe::ready_len(&pending), 4);
    // What came together is packed together.
    let chunks = subscribe::pack(pending, 1 << 20);
    assert_eq!(chunks.iter().map(|c| c.id).collect::<Vec<_>>(), [4]);
    // A deduplicating publisher's chunk states Osiris's trailer (type,
    // length, "test-reference", sequence: 24 bytes), as rstream compares.
    let mut start = d(20, Starts(Some(1)));
    start.trailer = 24;
    let chunk = &subscribe::pack(vec![start], 1 << 20)[0];
    let header =
        stablemq_protocol::stream::ChunkHeader::read(&chunk.bytes).expect("a chunk header");
    assert_eq!((header.trailer_length, header.epoch), (24, 1));
    // A subscription that starts inside a chunk has no start to wait for.
    assert_eq!(subscribe::ready_len(&[d(9, Continues)]), 1);
}

#[test]
fn an_empty_or_amq_stream_name_is_a_precondition_failure() {
    let mut b = bridge();
    for (id, name) in [(1, ""), (2, "amq.s")] {
        let (m, c) = request(
            &mut b,
            id,
            Request::CreateStream {
                stream: name.into(),
                arguments: Vec::new(),
            },
        );
        assert!(m.is_empty());
        assert_eq!(code(&c), [(id, ResponseCode::PreconditionFailed)]);
    }
}
