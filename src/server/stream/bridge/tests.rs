//! The bridge's mapping, without a master or a socket: requests become the
//! AMQP inputs the master answers, and its answers become the stream
//! connection's inputs.

use super::*;
use crate::broker::message::Message;
use bytes::BytesMut;
use stablemq_protocol::stream::PublishedMessage;

pub(super) fn bridge() -> Bridge {
    Bridge::new(
        7,
        Advertised {
            brokers: vec![Broker {
                reference: 0,
                host: "127.0.0.1".into(),
                port: 5552,
            }],
            leader: 0,
        },
    )
}

pub(super) fn request(
    b: &mut Bridge,
    correlation_id: u32,
    request: Request,
) -> (Vec<Input>, Vec<sc::Input>) {
    let (mut m, mut c) = (Vec::new(), Vec::new());
    b.on_action(
        sc::Action::Request {
            correlation_id,
            request,
        },
        &mut m,
        &mut c,
    );
    (m, c)
}

pub(super) fn from_master(b: &mut Bridge, msg: ToConn) -> (Vec<Input>, Vec<sc::Input>) {
    let (mut m, mut c) = (Vec::new(), Vec::new());
    b.on_master(msg, &mut m, &mut c);
    b.flush(0, &mut c);
    (m, c)
}

pub(super) fn declare_ok(ch: u16) -> ToConn {
    ToConn::Method(
        ch,
        AMQPClass::Queue(queue::AMQPMethod::DeclareOk(queue::DeclareOk {
            queue: "s".into(),
            message_count: 0,
            consumer_count: 0,
        })),
    )
}

fn not_found(ch: u16) -> ToConn {
    ToConn::CloseChannel(ch, AmqpError::no_queue("/", "s"))
}

fn passive(i: &Input) -> Option<bool> {
    match i {
        Input::Method {
            method: AMQPClass::Queue(queue::AMQPMethod::Declare(d)),
            ..
        } => Some(d.passive),
        _ => None,
    }
}

pub(super) fn code(c: &[sc::Input]) -> Vec<(u32, ResponseCode)> {
    c.iter()
        .filter_map(|i| match i {
            sc::Input::Reply {
                correlation_id,
                reply,
            } => Some((*correlation_id, reply.code())),
            _ => None,
        })
        .collect()
}

#[test]
fn create_probes_first_then_declares_and_an_existing_stream_is_0x05() {
    let mut b = bridge();
    let create = |stream: &str| Request::CreateStream {
        stream: stream.into(),
        arguments: vec![("max-age".into(), "1h".into())],
    };
    let (m, c) = request(&mut b, 1, create("s"));
    assert!(matches!(m[0], Input::ChannelOpen { ch: CONTROL, .. }));
    assert_eq!(passive(&m[1]), Some(true));
    assert!(c.is_empty());
    // Not there: the channel is opened again and the stream declared.
    let (m, c) = from_master(&mut b, not_found(CONTROL));
    assert!(c.is_empty());
    assert!(matches!(m[0], Input::ChannelOpen { ch: CONTROL, .. }));
    assert_eq!(passive(&m[1]), Some(false));
    let (_, c) = from_master(&mut b, declare_ok(CONTROL));
    assert_eq!(code(&c), [(1, ResponseCode::Ok)]);
    // Again: the probe finds it.
    let (m, _) = request(&mut b, 2, create("s"));
    assert_eq!(passive(&m[0]), Some(true));
    let (m, c) = from_master(&mut b, declare_ok(CONTROL));
    assert!(m.is_empty());
    assert_eq!(code(&c), [(2, ResponseCode::StreamAlreadyExists)]);
}

#[test]
fn requests_wait_their_turn_on_the_control_channel() {
    let mut b = bridge();
    let (m, _) = request(&mut b, 1, Request::DeleteStream { stream: "a".into() });
    assert_eq!(m.len(), 2);
    let (m, _) = request(&mut b, 2, Request::DeleteStream { stream: "b".into() });
    assert!(m.is_empty(), "sent before the first was answered: {m:?}");
    // The first is missing: 0x02, and the second starts.
    let (m, c) = from_master(&mut b, not_found(CONTROL));
    assert_eq!(code(&c), [(1, ResponseCode::StreamDoesNotExist)]);
    assert_eq!(passive(&m[1]), Some(true));
}

#[test]
fn unknown_create_arguments_are_a_precondition_failure() {
    let mut b = bridge();
    let (m, c) = request(
        &mut b,
        3,
        Request::CreateStream {
            stream: "s".into(),
            arguments: vec![("no-such-thing".into(), "1".into())],
        },
    );
    assert!(m.is_empty());
    assert_eq!(code(&c), [(3, ResponseCode::PreconditionFailed)]);
}

pub(super) fn publish(b: &mut Bridge, ids: &[u64]) -> Vec<Input> {
    let (mut m, mut c) = (Vec::new(), Vec::new());
    b.on_action(
        sc::Action::Publish {
            publisher_id: 4,
            stream: "s".into(),
            reference: None,
            version: 1,
            messages: ids
                .iter()
                .map(|&publishing_id| PublishedMessage {
                    publishing_id,
                    filter_value: None,
                    entry: Entry::Simple(Bytes::from(format!("m{publishing_id}"))),
                })
                .collect(),
        },
        &mut m,
        &mut c,
    );
    m
}

#[test]
fn confirms_come_back_as_publishing_ids_and_a_returned_one_as_0x02() {
    let mut b = bridge();
    let m = publish(&mut b, &[10, 11, 12]);
    let publishes: Vec<_> = m
        .iter()
        .filter_map(|i| match i {
            Input::Publish { body, publish, .. } => Some((body.clone(), publish.mandatory)),
            _ => None,
        })
        .collect();
    assert_eq!(publishes.len(), 3);
    assert!(publishes.iter().all(|(_, mandatory)| *mandatory));
    assert!(matches!(m[0], Input::ChannelOpen { ch: PUBLISH, .. }));
    let (mut mm, mut c) = (Vec::new(), Vec::new());
    b.on_master(
        ToConn::Return {
            ch: PUBLISH,
            reply_code: 312,
            reply_text: "NO_ROUTE".into(),
            exchange: "".into(),
            routing_key: "s".into(),
            properties: Arc::new(BasicProperties::default()),
            body: Bytes::new(),
        },
        &mut mm,
        &mut c,
    );
    for tag in 1..=3 {
        b.on_master(
            ToConn::Confirm {
                ch: PUBLISH,
                tag,
                ack: true,
            },
            &mut mm,
            &mut c,
        );
    }
    b.flush(0, &mut c);
    assert_eq!(
        c,
        [
            sc::Input::PublishConfirm {
                publisher_id: 4,
                publishing_ids: vec![11, 12],
            },
            sc::Input::PublishError {
                publisher_id: 4,
                errors: vec![PublishingError {
                    publishing_id: 10,
                    code: ResponseCode::StreamDoesNotExist,
                }],
            },
        ]
    );
}

#[test]
fn a_publisher_with_a_reference_skips_what_it_published_before_and_logs_its_sequence_with_each_entry()
 {
    let mut b = bridge();
    let (m, _) = request(
        &mut b,
        1,
        Request::DeclarePublisher {
            publisher_id: 4,
            reference: Some("p".into()),
            stream: "s".into(),
        },
    );
    assert_eq!(passive(&m[1]), Some(true));
    let (m, c) = from_master(&mut b, declare_ok(CONTROL));
    assert!(c.is_empty());
    assert!(matches!(
        &m[0],
        Input::StreamTrack { op: TrackOp::Query { kind: Tracking::Sequence, reference, .. }, .. } if reference == "p"
    ));
    let (_, c) = from_master(
        &mut b,
        ToConn::Tracked {
            ch: CONTROL,
            value: TrackAnswer::Value(Ok(Some(5))),
        },
    );
    assert_eq!(code(&c), [(1, ResponseCode::Ok)]);
    let m = publish(&mut b, &[4, 5, 6, 7]);
    // Each stored message carries its publishing id in its own properties
    // (logged with it); no sequence event of its own.
    let stored: Vec<_> = m
        .iter()
        .filter_map(|i| match i {
            Input::Publish {
                body, properties, ..
            } => {
                let msg = Message {
                    id: 1,
                    exchange: "".into(),
                    routing_key: "s".into(),
                    properties: properties.clone(),
                    body: body.clone(),
                    timestamp_ms: 0,
                };
                let seq = crate::broker::stream_record::publisher_sequence(&msg)
                    .map(|(r, id)| (r.to_owned(), id));
                Some((body.clone(), seq))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        stored,
        [
            (Bytes::from("m6"), Some(("p".to_owned(), 6))),
            (Bytes::from("m7"), Some(("p".to_owned(), 7))),
        ]
    );
    assert!(
        !m.iter().any(|i| matches!(i, Input::StreamTrack { .. })),
        "{m:?}"
    );
    // The duplicates are confirmed without being stored.
    let mut c = Vec::new();
    b.flush(0, &mut c);
    assert_eq!(
        c,
        [sc::Input::PublishConfirm {
            publisher_id: 4,
            publishing_ids: vec![4, 5],
        }]
    );
}

/// A deduplicating publisher's message that is refused (a sub-batch that
/// does not uncompress) leaves the sequence where it was: the same id sent
/// again is stored, not confirmed as a duplicate of nothing.
#[test]
fn a_refused_message_does_not_move_a_deduplicating_publishers_sequence() {
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
    let send = |b: &mut Bridge, entry: Entry| {
        let (mut m, mut c) = (Vec::new(), Vec::new());
        b.on_action(
            sc::Action::Publish {
                publisher_id: 4,
                stream: "s".into(),
                reference: Some("p".into()),
                version: 1,
                messages: vec![PublishedMessage {
                    publishing_id: 1,
                    filter_value: None,
                    entry,
                }],
            },
            &mut m,
            &mut c,
        );
        let mut out = Vec::new();
        b.flush(0, &mut out);
        let stored = m
            .iter()
            .filter(|i| matches!(i, Input::Publish { .. }))
            .count();
        (stored, out)
    };
    let corrupt = Entry::SubBatch {
        compression: 4,
        num_records: 1,
        uncompressed_length: 5,
        body: Bytes::from_static(b"not zstd"),
    };
    let (stored, out) = send(&mut b, corrupt);
    assert_eq!(stored, 0);
    assert!(
        matches!(&out[..], [sc::Input::PublishError { errors, .. }] if errors.len() == 1),
        "{out:?}"
    );
    let (stored, out) = send(&mut b, Entry::Simple(Bytes::from("m1")));
    assert_eq!(stored, 1, "the resend is stored: {out:?}");
    assert!(
        !out.iter()
            .any(|i| matches!(i, sc::Input::PublishConfirm { .. })),
        "no confirm before the master's: {out:?}"
    );
}

fn delivery(tag: u64, offset: u64) -> ToConn {
    ToConn::StreamRecords {
        ch: FIRST_SUBSCRIPTION,
        records: vec![crate::master::inout::StreamRecord {
            delivery_tag: tag,
            offset,
            timestamp_ms: 1000,
            record: Bytes::from(format!("e{offset}")),
            mark: crate::broker::stream_record::ChunkMark::Starts(None),
            trailer: 0,
            filter_value: None,
        }],
    }
}

#[test]
fn deliveries_become_chunks_of_consecutive_offsets_acked_once_written() {
    let mut b = bridge();
    let (m, c) = request(
        &mut b,
        9,
        Request::Subscribe {
            subscription_id: 0,
            stream: "s".into(),
            offset: OffsetSpec::Offset(40),
            credit: 1,
            properties: Vec::new(),
        },
    );
    assert!(c.is_empty());
    match &m[2] {
        Input::Method {
            ch: FIRST_SUBSCRIPTION,
            method: AMQPClass::Basic(basic::AMQPMethod::Consume(consume)),
            ..
        } => {
            let args = consume.arguments.inner();
            assert_eq!(
                args.get("x-stream-offset"),
                Some(&AMQPValue::LongLongInt(40))
            );
            assert!(args.contains_key(crate::broker::stream_record::RECORDS_ARG));
        }
        other => panic!("not a consume: {other:?}"),
    }
    let (mut mm, mut c) = (Vec::new(), Vec::new());
    b.on_master(
        ToConn::Method(
            FIRST_SUBSCRIPTION,
            AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(basic::ConsumeOk {
                consumer_tag: "stream-subscription-0".into(),
            })),
        ),
        &mut mm,
        &mut c,
    );
    assert_eq!(code(&c), [(9, ResponseCode::Ok)]);
    c.clear();
    // 40, 41, 42 then a gap: two chunks.
    for (tag, offset) in [(1, 40), (2, 41), (3, 42), (4, 50)] {
        b.on_master(delivery(tag, offset), &mut mm, &mut c);
    }
    b.flush(0, &mut c);
    let chunks: Vec<_> = c
        .iter()
        .map(|i| match i {
            sc::Input::Deliver {
                subscription_id: 0,
                chunk: sc::ChunkSource::Bytes(bytes),
                ..
            } => {
                let chunk = stablemq_protocol::stream::Chunk::parse(bytes).unwrap();
                (chunk.header.chunk_id, chunk.header.num_records)
            }
            other => panic!("not a delivery: {other:?}"),
        })
        .collect();
    assert_eq!(chunks, [(40, 3), (50, 1)]);
    // Written: the first chunk's deliveries are acked, up to its last tag.
    let mut head = BytesMut::new();
    stablemq_protocol::stream::encode_deliver_header(&mut head, 0, None, 10);
    let (mut m, mut c) = (Vec::new(), Vec::new());
    b.on_action(
        sc::Action::WriteChunk {
            head: head.freeze(),
            chunk: sc::ChunkSource::Bytes(Bytes::new()),
        },
        &mut m,
        &mut c,
    );
    assert!(matches!(
        m[..],
        [Input::Method {
            ch: FIRST_SUBSCRIPTION,
            method: AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
                delivery_tag: 3,
                multiple: true
            })),
            ..
        }]
    ));
}

#[test]
fn a_refused_subscribe_is_answered_with_the_streams_code() {
    let mut b = bridge();
    request(
        &mut b,
        5,
        Request::Subscribe {
            subscription_id: 1,
            stream: "gone".into(),
            offset: OffsetSpec::First,
            credit: 1,
            properties: Vec::new(),
        },
    );
    let (_, c) = from_master(&mut b, not_found(FIRST_SUBSCRIPTION));
    assert_eq!(code(&c), [(5, ResponseCode::StreamDoesNotExist)]);
}

#[test]
fn without_credit_deliveries_wait_and_go_out_as_one_chunk_once_granted() {
    let mut b = bridge();
    request(
        &mut b,
        2,
        Request::Subscribe {
            subscription_id: 0,
            stream: "s".into(),
            offset: OffsetSpec::First,
            credit: 0,
            properties: Vec::new(),
        },
    );
    let (mut m, mut c) = (Vec::new(), Vec::new());
    for (tag, offset) in [(1, 0), (2, 1)] {
        b.on_master(delivery(tag, offset), &mut m, &mut c);
        b.flush(0, &mut c);
    }
    b.on_master(delivery(3, 2), &mut m, &mut c);
    b.flush(0, &mut c);
    assert!(c.is_empty(), "delivered without credit: {c:?}");
    b.on_action(
        sc::Action::Credit {
            subscription_id: 0,
            credit: 1,
        },
        &mut m,
        &mut c,
    );
    b.flush(0, &mut c);
    let records: Vec<_> = c
        .iter()
        .map(|i| match i {
            sc::Input::Deliver {
                chunk: sc::ChunkSource::Bytes(bytes),
                ..
            } => {
                stablemq_protocol::stream::Chunk::parse(bytes)
                    .unwrap()
                    .header
                    .num_records
            }
            other => panic!("not a delivery: {other:?}"),
        })
        .collect();
    assert_eq!(records, [3]);
}

#[test]
fn a_resource_alarm_refuses_new_publishers_until_it_clears() {
    let mut b = bridge();
    let declare = |id| Request::DeclarePublisher {
        publisher_id: id,
        reference: None,
        stream: "s".into(),
    };
    from_master(&mut b, ToConn::Alarm(Some("low on disk".into())));
    assert!(b.alarmed());
    // Refused at once, as RabbitMQ answers: precondition failed, nothing asked.
    let (m, c) = request(&mut b, 1, declare(1));
    assert!(m.is_empty(), "{m:?}");
    assert_eq!(code(&c), [(1, ResponseCode::PreconditionFailed)]);
    from_master(&mut b, ToConn::Alarm(None));
    assert!(!b.alarmed());
    let (m, c) = request(&mut b, 2, declare(2));
    assert!(c.is_empty());
    assert_eq!(passive(&m[1]), Some(true), "declared again once cleared");
}
