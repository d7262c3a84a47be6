//! The stream codec against real bytes: sessions between RabbitMQ 3.10.8 (its
//! rabbitmq_stream plugin) and the rstream 1.1.1 client, recorded through a
//! proxy by scripts/record-stream-fixtures.sh into tests/fixtures/stream/.
//!
//! Every frame in both directions must decode, and encode back to the very
//! bytes RabbitMQ or rstream sent; the assertions below also check what the
//! decoded frames say against what the recorded session did.

#![allow(
    clippy::unwrap_used,
    reason = "a test: an unwrap that fails is a failure at its line"
)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use bytes::{Bytes, BytesMut};
use stablemq_protocol::stream::{
    Chunk, ClientMessage, Command, DEFAULT_FRAME_MAX, Entry, OffsetSpec, PublishingError,
    ResponseCode, ServerMessage, StreamFrameError, split_frame, sub_batch_records,
};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stream")
}

/// The frames of one recorded byte stream, and the fault that ended it, if any.
fn frames(name: &str) -> (Vec<Bytes>, Option<StreamFrameError>) {
    let path = fixture_dir().join(name);
    let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(!raw.is_empty(), "{name} is empty");
    let mut buf = BytesMut::from(&raw[..]);
    let mut out = Vec::new();
    loop {
        match split_frame(&mut buf, DEFAULT_FRAME_MAX) {
            Ok(Some(frame)) => out.push(frame),
            Ok(None) => {
                assert!(
                    buf.is_empty(),
                    "{name}: {} bytes of a partial frame left",
                    buf.len()
                );
                return (out, None);
            }
            Err(e) => return (out, Some(e)),
        }
    }
}

/// Decodes a client stream; every frame re-encodes to its recorded bytes.
fn client_session(name: &str) -> (Vec<ClientMessage>, Option<StreamFrameError>) {
    let (frames, end) = frames(&format!("{name}.client.bin"));
    let mut out = Vec::new();
    for (n, frame) in frames.iter().enumerate() {
        match ClientMessage::decode(frame) {
            Ok(msg) => {
                let mut again = BytesMut::new();
                msg.encode(&mut again);
                assert_eq!(&again[4..], &frame[..], "{name} client frame {n}: {msg:?}");
                out.push(msg);
            }
            // Only the last frame may be refused (the bad-input sessions end so).
            Err(e) if n + 1 == frames.len() && end.is_none() => return (out, Some(e)),
            Err(e) => panic!("{name} client frame {n}: {e}"),
        }
    }
    (out, end)
}

/// Decodes a server stream; every frame re-encodes to its recorded bytes.
fn server_session(name: &str) -> Vec<ServerMessage> {
    let (frames, end) = frames(&format!("{name}.server.bin"));
    assert_eq!(end, None, "{name}: the server stream ends in a fault");
    frames
        .iter()
        .enumerate()
        .map(|(n, frame)| {
            let msg = ServerMessage::decode(frame)
                .unwrap_or_else(|e| panic!("{name} server frame {n}: {e}"));
            let mut again = BytesMut::new();
            msg.encode(&mut again);
            assert_eq!(&again[4..], &frame[..], "{name} server frame {n}: {msg:?}");
            assert_eq!(&again[..4], &(frame.len() as u32).to_be_bytes());
            msg
        })
        .collect()
}

const SESSIONS: [&str; 8] = [
    "raw-1",
    "producer-consumer-1",
    "producer-consumer-2",
    "producer-consumer-3",
    "producer-consumer-4",
    "unknown-command-1",
    "frame-too-large-1",
    "super-stream-1",
];

/// The records of every delivered chunk, in order, each chunk checked (CRC, counts).
fn delivered_records(msgs: &[ServerMessage]) -> Vec<Bytes> {
    let mut records = Vec::new();
    for m in msgs {
        if let ServerMessage::Deliver {
            chunk,
            committed_chunk_id: None,
            ..
        } = m
        {
            let chunk = Chunk::parse(chunk).unwrap();
            chunk.verify().unwrap();
            for entry in chunk.entries() {
                match entry.unwrap() {
                    Entry::Simple(r) => records.push(r),
                    Entry::SubBatch {
                        compression: 0,
                        body,
                        ..
                    } => records.extend(sub_batch_records(&body).unwrap()),
                    other => panic!("unexpected entry {other:?}"),
                }
            }
        }
    }
    records
}

#[test]
fn every_recorded_frame_decodes_and_re_encodes_byte_identically() {
    let mut seen = BTreeSet::new();
    let mut total = 0;
    for name in SESSIONS {
        let (client, _) = client_session(name);
        let server = server_session(name);
        total += client.len() + server.len();
        seen.extend(client.iter().map(|m| format!("client {:?}", m.command())));
        seen.extend(server.iter().map(|m| format!("server {:?}", m.command())));
        // Every session opens with the same handshake.
        assert!(
            matches!(client[0], ClientMessage::PeerProperties { .. }),
            "{name}"
        );
        assert!(
            matches!(client[1], ClientMessage::SaslHandshake { .. }),
            "{name}"
        );
        let ClientMessage::SaslAuthenticate {
            mechanism,
            data: Some(data),
            ..
        } = &client[2]
        else {
            panic!("{name}: {:?}", client[2]);
        };
        assert_eq!(
            (mechanism.as_str(), &data[..]),
            ("PLAIN", &b"\0guest\0guest"[..])
        );
        let ServerMessage::SaslHandshakeResponse { mechanisms, .. } = &server[1] else {
            panic!("{name}: {:?}", server[1]);
        };
        assert!(
            mechanisms.contains(&"PLAIN".to_owned()),
            "{name}: {mechanisms:?}"
        );
        assert_eq!(
            server[3],
            ServerMessage::Tune {
                frame_max: 1_048_576,
                heartbeat: 60
            }
        );
        // rstream answers tune under the request key.
        assert_eq!(
            client[3],
            ClientMessage::Tune {
                frame_max: 1_048_576,
                heartbeat: 60,
                as_response: false
            }
        );
        let ServerMessage::OpenResponse {
            code: ResponseCode::Ok,
            properties,
            ..
        } = &server[4]
        else {
            panic!("{name}: {:?}", server[4]);
        };
        assert!(
            properties
                .iter()
                .any(|(k, v)| k == "advertised_host" && v == "127.0.0.1")
        );
    }
    assert!(total > 150, "only {total} frames");
    for command in [
        "PeerProperties",
        "SaslHandshake",
        "SaslAuthenticate",
        "Tune",
        "Open",
        "Close",
        "Heartbeat",
        "CreateStream",
        "DeleteStream",
        "DeclarePublisher",
        "DeletePublisher",
        "Publish",
        "QueryPublisherSequence",
        "Subscribe",
        "Credit",
        "StoreOffset",
        "QueryOffset",
        "Unsubscribe",
        "Metadata",
        "Route",
        "Partitions",
    ] {
        assert!(
            seen.contains(&format!("client {command}")),
            "no client {command}: {seen:?}"
        );
    }
    for command in [
        "PeerProperties",
        "SaslHandshake",
        "SaslAuthenticate",
        "Tune",
        "Open",
        "Close",
        "CreateStream",
        "DeleteStream",
        "DeclarePublisher",
        "DeletePublisher",
        "QueryPublisherSequence",
        "Subscribe",
        "Credit",
        "QueryOffset",
        "Unsubscribe",
        "Metadata",
        "MetadataUpdate",
        "PublishConfirm",
        "PublishError",
        "Deliver",
        "Route",
        "Partitions",
    ] {
        assert!(
            seen.contains(&format!("server {command}")),
            "no server {command}: {seen:?}"
        );
    }
}

#[test]
fn the_raw_session_says_what_the_client_did() {
    let (client, end) = client_session("raw-1");
    assert_eq!(end, None);
    let server = server_session("raw-1");

    let publishes: Vec<_> = client
        .iter()
        .filter_map(|m| match m {
            ClientMessage::Publish {
                version: 1,
                publisher_id,
                messages,
            } => Some((*publisher_id, messages.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(publishes.len(), 3);
    assert_eq!(publishes[0].0, 1);
    assert_eq!(
        publishes[0].1[2].entry,
        Entry::Simple(Bytes::from_static(b"hello 3"))
    );
    assert_eq!(publishes[2].0, 42);

    let confirmed: Vec<u64> = server
        .iter()
        .filter_map(|m| match m {
            ServerMessage::PublishConfirm {
                publisher_id: 1,
                publishing_ids,
            } => Some(publishing_ids.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(confirmed, vec![1, 2, 3, 4, 5]);
    assert!(server.contains(&ServerMessage::PublishError {
        publisher_id: 42,
        errors: vec![PublishingError {
            publishing_id: 99,
            code: ResponseCode::PublisherDoesNotExist
        }],
    }));
    // Each subscription (first, last, offset 2, timestamp) got the stream's one chunk.
    let records = delivered_records(&server);
    assert_eq!(records.len(), 20, "4 deliveries of the 5-message chunk");
    assert_eq!(&records[0][..], b"hello 1");
    assert_eq!(&records[4][..], &[b'x'; 50][..]);

    let specs: Vec<OffsetSpec> = client
        .iter()
        .filter_map(|m| match m {
            ClientMessage::Subscribe { offset, .. } => Some(*offset),
            _ => None,
        })
        .collect();
    assert_eq!(
        specs,
        vec![
            OffsetSpec::First,
            OffsetSpec::Last,
            OffsetSpec::Next,
            OffsetSpec::Offset(2),
            OffsetSpec::Timestamp(1_600_000_000_000),
            OffsetSpec::Next,
        ]
    );
    let offsets: Vec<(ResponseCode, u64)> = server
        .iter()
        .filter_map(|m| match m {
            ServerMessage::QueryOffsetResponse { code, offset, .. } => Some((*code, *offset)),
            _ => None,
        })
        .collect();
    assert_eq!(
        offsets,
        vec![(ResponseCode::NoOffset, 0), (ResponseCode::Ok, 3)]
    );
    assert!(server.iter().any(|m| matches!(
        m,
        ServerMessage::QueryPublisherSequenceResponse {
            code: ResponseCode::Ok,
            sequence: 5,
            ..
        }
    )));
    assert!(server.contains(&ServerMessage::CreditResponse {
        code: ResponseCode::SubscriptionIdDoesNotExist,
        subscription_id: 9,
    }));
    assert!(server.contains(&ServerMessage::MetadataUpdate {
        code: ResponseCode::StreamNotAvailable,
        stream: "fixture-stream".into(),
    }));
    let codes: Vec<(Command, ResponseCode)> = server
        .iter()
        .filter_map(|m| match m {
            ServerMessage::Response { command, code, .. } => Some((*command, *code)),
            _ => None,
        })
        .collect();
    for expected in [
        (Command::CreateStream, ResponseCode::Ok),
        // RabbitMQ 3.10 answers a second create without the first's arguments so.
        (Command::CreateStream, ResponseCode::PreconditionFailed),
        (Command::DeclarePublisher, ResponseCode::StreamDoesNotExist),
        (Command::DeleteStream, ResponseCode::Ok),
        (Command::DeleteStream, ResponseCode::StreamDoesNotExist),
    ] {
        assert!(codes.contains(&expected), "{expected:?} not in {codes:?}");
    }
    let metadata = server.iter().find_map(|m| match m {
        ServerMessage::MetadataResponse {
            brokers, streams, ..
        } if streams.len() == 2 => Some((brokers.clone(), streams.clone())),
        _ => None,
    });
    let (brokers, streams) = metadata.expect("the two-stream metadata answer");
    assert_eq!(brokers.len(), 1);
    assert_eq!(brokers[0].host, "127.0.0.1");
    assert!(streams.iter().any(|s| s.name == "no-such-stream"
        && s.code == ResponseCode::StreamDoesNotExist
        && s.leader == 0xffff));
    assert!(
        streams
            .iter()
            .any(|s| s.name == "fixture-stream" && s.code == ResponseCode::Ok)
    );
    assert!(
        matches!(client.last(), Some(ClientMessage::Close { code: 1, reason, .. }) if reason == "OK")
    );
    assert!(matches!(
        server.last(),
        Some(ServerMessage::CloseResponse {
            code: ResponseCode::Ok,
            ..
        })
    ));
}

#[test]
fn the_producer_consumer_session_delivers_simple_and_sub_batch_entries() {
    let server = server_session("producer-consumer-4");
    let records = delivered_records(&server);
    assert_eq!(records.len(), 7, "3 sends and a 4-message sub-entry batch");
    // rstream sends AMQP 1.0 encoded messages; the bodies are inside.
    let text: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect();
    assert!(text[0].contains("amqp 0"), "{text:?}");
    assert!(text[6].contains("sub 3"), "{text:?}");
    let chunks: Vec<Chunk> = server
        .iter()
        .filter_map(|m| match m {
            ServerMessage::Deliver { chunk, .. } => Some(Chunk::parse(chunk).unwrap()),
            _ => None,
        })
        .collect();
    // Chunk ids are the offsets of their first records: consecutive, from 0.
    let mut next = 0;
    for c in &chunks {
        assert_eq!(c.header.chunk_id, next);
        next += u64::from(c.header.num_records);
    }
    assert_eq!(next, 7);
    assert!(
        chunks
            .iter()
            .any(|c| c.entries().any(|e| matches!(e, Ok(Entry::SubBatch { .. }))))
    );
}

#[test]
fn refused_frames_end_the_bad_input_sessions() {
    let (client, end) = client_session("unknown-command-1");
    assert_eq!(end, Some(StreamFrameError::UnknownKey { key: 0x63 }));
    assert_eq!(end.unwrap().response_code(), ResponseCode::UnknownFrame);
    assert!(matches!(client.last(), Some(ClientMessage::Heartbeat)));
    let server = server_session("unknown-command-1");
    assert_eq!(
        server.last(),
        Some(&ServerMessage::Close {
            correlation_id: 1,
            code: ResponseCode::UnknownFrame,
            reason: "unknown frame".into(),
        })
    );

    let (_, end) = client_session("frame-too-large-1");
    let end = end.expect("the oversized frame is refused");
    assert_eq!(
        end,
        StreamFrameError::FrameTooLarge {
            size: 2 * 1_048_576,
            max: DEFAULT_FRAME_MAX
        }
    );
    assert_eq!(end.response_code(), ResponseCode::FrameTooLarge);
    // RabbitMQ 3.10 does not check frame_max: it says nothing and waits for the rest.
    let server = server_session("frame-too-large-1");
    assert!(matches!(
        server.last(),
        Some(ServerMessage::OpenResponse { .. })
    ));
}

#[test]
fn rabbitmq_3_10_answers_route_and_partitions_under_the_request_key() {
    let server = server_session("super-stream-1");
    assert!(server.contains(&ServerMessage::RouteResponse {
        correlation_id: 5,
        code: ResponseCode::StreamDoesNotExist,
        streams: vec![],
        request_key: true,
    }));
    assert!(server.iter().any(|m| matches!(
        m,
        ServerMessage::PartitionsResponse {
            code: ResponseCode::StreamDoesNotExist,
            request_key: true,
            ..
        }
    )));
}
