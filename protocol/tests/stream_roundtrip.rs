//! The stream codec's own round trips: every client and server message
//! encodes to a frame that decodes back to it; faults are typed errors; and no
//! input, however random, makes a decoder panic.

#![allow(
    clippy::unwrap_used,
    reason = "a test: an unwrap that fails is a failure at its line"
)]

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use stablemq_protocol::stream::{
    Broker, ChunkBuilder, ClientMessage, Command, CommandVersion, DEFAULT_FRAME_MAX, Entry,
    OffsetSpec, PublishedMessage, PublishingError, ResponseCode, ServerMessage, StreamFrameError,
    StreamMetadata, decode_client_frame, decode_server_frame, encode_deliver_header,
    supported_versions,
};

fn props() -> Vec<(String, String)> {
    vec![
        ("product".into(), "RabbitMQ Stream".into()),
        ("é".into(), String::new()),
    ]
}

fn client_samples() -> Vec<ClientMessage> {
    use ClientMessage as M;
    let entry = |n: u64| PublishedMessage {
        publishing_id: n,
        filter_value: None,
        entry: Entry::Simple(Bytes::from(format!("m{n}"))),
    };
    vec![
        M::PeerProperties {
            correlation_id: 1,
            properties: props(),
        },
        M::SaslHandshake { correlation_id: 2 },
        M::SaslAuthenticate {
            correlation_id: 3,
            mechanism: "PLAIN".into(),
            data: Some(Bytes::from_static(b"\0guest\0guest")),
        },
        M::SaslAuthenticate {
            correlation_id: 3,
            mechanism: "EXTERNAL".into(),
            data: None,
        },
        M::Tune {
            frame_max: 1_048_576,
            heartbeat: 60,
            as_response: false,
        },
        M::Tune {
            frame_max: 0,
            heartbeat: 0,
            as_response: true,
        },
        M::Open {
            correlation_id: 4,
            virtual_host: "/".into(),
        },
        M::Close {
            correlation_id: 5,
            code: 1,
            reason: "OK".into(),
        },
        M::CloseResponse {
            correlation_id: 1,
            code: ResponseCode::Ok,
        },
        M::Heartbeat,
        M::CreateStream {
            correlation_id: 6,
            stream: "s".into(),
            arguments: props(),
        },
        M::DeleteStream {
            correlation_id: 7,
            stream: "s".into(),
        },
        M::DeclarePublisher {
            correlation_id: 8,
            publisher_id: 255,
            reference: String::new(),
            stream: "s".into(),
        },
        M::DeletePublisher {
            correlation_id: 9,
            publisher_id: 0,
        },
        M::Publish {
            version: 1,
            publisher_id: 1,
            messages: vec![entry(1), entry(u64::MAX)],
        },
        M::Publish {
            version: 1,
            publisher_id: 1,
            messages: vec![PublishedMessage {
                publishing_id: 7,
                filter_value: None,
                entry: Entry::SubBatch {
                    compression: 1,
                    num_records: 3,
                    uncompressed_length: 99,
                    body: Bytes::from_static(b"gzipped"),
                },
            }],
        },
        M::Publish {
            version: 2,
            publisher_id: 2,
            messages: vec![PublishedMessage {
                filter_value: Some("eu".into()),
                ..entry(3)
            }],
        },
        M::QueryPublisherSequence {
            correlation_id: 10,
            reference: "p".into(),
            stream: "s".into(),
        },
        M::Subscribe {
            correlation_id: 11,
            subscription_id: 0,
            stream: "s".into(),
            offset: OffsetSpec::First,
            credit: 10,
            properties: None,
        },
        M::Subscribe {
            correlation_id: 11,
            subscription_id: 1,
            stream: "s".into(),
            offset: OffsetSpec::Timestamp(-5),
            credit: 0,
            properties: Some(vec![("single-active-consumer".into(), "true".into())]),
        },
        M::Subscribe {
            correlation_id: 11,
            subscription_id: 2,
            stream: "s".into(),
            offset: OffsetSpec::Offset(1 << 40),
            credit: u16::MAX,
            properties: Some(vec![]),
        },
        M::Credit {
            subscription_id: 3,
            credit: 1,
        },
        M::StoreOffset {
            reference: "c".into(),
            stream: "s".into(),
            offset: 42,
        },
        M::QueryOffset {
            correlation_id: 12,
            reference: "c".into(),
            stream: "s".into(),
        },
        M::Unsubscribe {
            correlation_id: 13,
            subscription_id: 3,
        },
        M::Metadata {
            correlation_id: 14,
            streams: vec!["a".into(), "b".into()],
        },
        M::Route {
            correlation_id: 15,
            routing_key: "rk".into(),
            super_stream: "ss".into(),
        },
        M::Partitions {
            correlation_id: 16,
            super_stream: "ss".into(),
        },
        M::ConsumerUpdateResponse {
            correlation_id: 17,
            code: ResponseCode::Ok,
            offset: OffsetSpec::Next,
        },
        M::ConsumerUpdateResponse {
            correlation_id: 17,
            code: ResponseCode::Ok,
            offset: OffsetSpec::None,
        },
        M::ExchangeCommandVersions {
            correlation_id: 18,
            commands: vec![CommandVersion {
                key: 2,
                min_version: 1,
                max_version: 2,
            }],
        },
        M::StreamStats {
            correlation_id: 19,
            stream: "s".into(),
        },
        M::CreateSuperStream {
            correlation_id: 20,
            name: "ss".into(),
            partitions: vec!["ss-0".into(), "ss-1".into()],
            binding_keys: vec!["0".into(), "1".into()],
            arguments: props(),
        },
        M::DeleteSuperStream {
            correlation_id: 21,
            name: "ss".into(),
        },
        M::ResolveOffsetSpec {
            correlation_id: 22,
            stream: "s".into(),
            offset: OffsetSpec::Last,
            properties: Some(vec![("filter.0".into(), "eu".into())]),
        },
    ]
}

fn server_samples() -> Vec<ServerMessage> {
    use ServerMessage as M;
    let chunk = ChunkBuilder::new()
        .simple(b"a")
        .sub_batch(&[b"b", b"c"])
        .build(1, 2, 3);
    let mut out = vec![
        M::PeerPropertiesResponse {
            correlation_id: 1,
            code: ResponseCode::Ok,
            properties: props(),
        },
        M::SaslHandshakeResponse {
            correlation_id: 2,
            code: ResponseCode::Ok,
            mechanisms: vec!["PLAIN".into(), "AMQPLAIN".into()],
        },
        M::SaslAuthenticateResponse {
            correlation_id: 3,
            code: ResponseCode::Ok,
            challenge: None,
        },
        M::SaslAuthenticateResponse {
            correlation_id: 3,
            code: ResponseCode::SaslChallenge,
            challenge: Some(Bytes::from_static(b"nonce")),
        },
        M::Tune {
            frame_max: 1_048_576,
            heartbeat: 60,
        },
        M::OpenResponse {
            correlation_id: 4,
            code: ResponseCode::Ok,
            properties: props(),
        },
        M::OpenResponse {
            correlation_id: 4,
            code: ResponseCode::VirtualHostAccessFailure,
            properties: vec![],
        },
        M::Close {
            correlation_id: 1,
            code: ResponseCode::UnknownFrame,
            reason: "unknown frame".into(),
        },
        M::CloseResponse {
            correlation_id: 5,
            code: ResponseCode::Ok,
        },
        M::Heartbeat,
        M::QueryPublisherSequenceResponse {
            correlation_id: 6,
            code: ResponseCode::Ok,
            sequence: 9,
        },
        M::QueryOffsetResponse {
            correlation_id: 7,
            code: ResponseCode::NoOffset,
            offset: 0,
        },
        M::MetadataResponse {
            correlation_id: 8,
            brokers: vec![
                Broker {
                    reference: 0,
                    host: "127.0.0.1".into(),
                    port: 5552,
                },
                Broker {
                    reference: 1,
                    host: "node-b".into(),
                    port: 5553,
                },
            ],
            streams: vec![
                StreamMetadata {
                    name: "s".into(),
                    code: ResponseCode::Ok,
                    leader: 0,
                    replicas: vec![1],
                },
                StreamMetadata {
                    name: "gone".into(),
                    code: ResponseCode::StreamDoesNotExist,
                    leader: 0xffff,
                    replicas: vec![],
                },
            ],
        },
        M::MetadataUpdate {
            code: ResponseCode::StreamNotAvailable,
            stream: "s".into(),
        },
        M::PublishConfirm {
            publisher_id: 1,
            publishing_ids: vec![1, 2, 3],
        },
        M::PublishError {
            publisher_id: 1,
            errors: vec![PublishingError {
                publishing_id: 4,
                code: ResponseCode::StreamDoesNotExist,
            }],
        },
        M::Deliver {
            subscription_id: 0,
            committed_chunk_id: None,
            chunk: chunk.clone(),
        },
        M::Deliver {
            subscription_id: 7,
            committed_chunk_id: Some(3),
            chunk,
        },
        M::CreditResponse {
            code: ResponseCode::SubscriptionIdDoesNotExist,
            subscription_id: 9,
        },
        M::RouteResponse {
            correlation_id: 9,
            code: ResponseCode::Ok,
            streams: vec!["ss-1".into()],
            request_key: false,
        },
        M::RouteResponse {
            correlation_id: 9,
            code: ResponseCode::StreamDoesNotExist,
            streams: vec![],
            request_key: true,
        },
        M::PartitionsResponse {
            correlation_id: 10,
            code: ResponseCode::Ok,
            streams: vec!["ss-0".into(), "ss-1".into()],
            request_key: false,
        },
        M::ConsumerUpdate {
            correlation_id: 11,
            subscription_id: 1,
            active: true,
        },
        M::ExchangeCommandVersionsResponse {
            correlation_id: 12,
            code: ResponseCode::Ok,
            commands: supported_versions(),
        },
        M::StreamStatsResponse {
            correlation_id: 13,
            code: ResponseCode::Ok,
            stats: vec![
                ("first_chunk_id".into(), 0),
                ("committed_chunk_id".into(), -1),
            ],
        },
        M::ResolveOffsetSpecResponse {
            correlation_id: 14,
            code: ResponseCode::Ok,
            offset: OffsetSpec::Offset(77),
        },
    ];
    for command in [
        Command::DeclarePublisher,
        Command::DeletePublisher,
        Command::Subscribe,
        Command::Unsubscribe,
        Command::CreateStream,
        Command::DeleteStream,
        Command::CreateSuperStream,
        Command::DeleteSuperStream,
    ] {
        out.push(M::Response {
            command,
            correlation_id: 99,
            code: ResponseCode::AccessRefused,
        });
    }
    out
}

#[test]
fn every_client_message_round_trips() {
    let samples = client_samples();
    let mut wire = BytesMut::new();
    for m in &samples {
        m.encode(&mut wire);
    }
    for m in &samples {
        let got = decode_client_frame(&mut wire, DEFAULT_FRAME_MAX)
            .unwrap()
            .unwrap();
        assert_eq!(&got, m);
    }
    assert!(wire.is_empty());
}

#[test]
fn every_server_message_round_trips() {
    let samples = server_samples();
    let mut wire = BytesMut::new();
    for m in &samples {
        m.encode(&mut wire);
    }
    for m in &samples {
        let got = decode_server_frame(&mut wire, DEFAULT_FRAME_MAX)
            .unwrap()
            .unwrap();
        assert_eq!(&got, m);
    }
    assert!(wire.is_empty());
}

#[test]
fn a_deliver_header_and_the_chunk_sent_apart_make_one_deliver_frame() {
    let chunk = ChunkBuilder::new().simple(b"from a file").build(5, 1, 100);
    for committed in [None, Some(100)] {
        let mut wire = BytesMut::new();
        encode_deliver_header(&mut wire, 4, committed, chunk.len());
        wire.put_slice(&chunk);
        let got = decode_server_frame(&mut wire, DEFAULT_FRAME_MAX)
            .unwrap()
            .unwrap();
        let expected = ServerMessage::Deliver {
            subscription_id: 4,
            committed_chunk_id: committed,
            chunk: chunk.clone(),
        };
        assert_eq!(got, expected);
    }
}

fn frame(key: u16, version: u16, body: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_u32(4 + body.len() as u32);
    b.put_u16(key);
    b.put_u16(version);
    b.put_slice(body);
    b
}

#[test]
fn faults_are_typed_errors() {
    let decl = |body: &[u8]| decode_client_frame(&mut frame(0x0001, 1, body), DEFAULT_FRAME_MAX);
    // Declare publisher: correlation id, publisher id, reference, stream.
    let good = [0, 0, 0, 1, 7, 0, 1, b'r', 0, 1, b's'];
    assert!(decl(&good).is_ok());
    assert_eq!(
        decl(&good[..10]),
        Err(StreamFrameError::Truncated {
            command: Command::DeclarePublisher
        })
    );
    let mut long = good.to_vec();
    long.push(0);
    assert_eq!(
        decl(&long),
        Err(StreamFrameError::TrailingBytes {
            command: Command::DeclarePublisher,
            extra: 1
        })
    );
    let mut bad_utf8 = good;
    bad_utf8[10] = 0xff;
    assert_eq!(
        decl(&bad_utf8),
        Err(StreamFrameError::Malformed {
            command: Command::DeclarePublisher,
            reason: "string is not UTF-8"
        })
    );
    // A client does not send deliver, nor a server publish.
    let deliver = decode_client_frame(&mut frame(0x0008, 1, &[0]), DEFAULT_FRAME_MAX);
    assert!(matches!(
        deliver,
        Err(StreamFrameError::WrongDirection {
            command: Command::Deliver,
            ..
        })
    ));
    let publish = decode_server_frame(&mut frame(0x0002, 1, &[0, 0, 0, 0, 0]), DEFAULT_FRAME_MAX);
    assert!(matches!(
        publish,
        Err(StreamFrameError::WrongDirection {
            command: Command::Publish,
            ..
        })
    ));
    // Unknown keys and versions.
    assert_eq!(
        decode_client_frame(&mut frame(0x0063, 1, &[]), DEFAULT_FRAME_MAX),
        Err(StreamFrameError::UnknownKey { key: 0x0063 })
    );
    assert_eq!(
        decode_client_frame(&mut frame(0x000d, 2, &[]), DEFAULT_FRAME_MAX),
        Err(StreamFrameError::UnsupportedVersion {
            command: Command::CreateStream,
            version: 2
        })
    );
    // An unknown offset type, a negative array count.
    let sub = [0, 0, 0, 1, 0, 0, 1, b's', 0, 9, 0, 1];
    assert!(matches!(
        decode_client_frame(&mut frame(0x0007, 1, &sub), DEFAULT_FRAME_MAX),
        Err(StreamFrameError::Malformed {
            command: Command::Subscribe,
            ..
        })
    ));
    let meta = [0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff];
    assert!(matches!(
        decode_client_frame(&mut frame(0x000f, 1, &meta), DEFAULT_FRAME_MAX),
        Err(StreamFrameError::Malformed {
            command: Command::Metadata,
            ..
        })
    ));
    // A huge array count in a small frame is truncated, not a huge allocation.
    let many = [0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff];
    assert_eq!(
        decode_client_frame(&mut frame(0x000f, 1, &many), DEFAULT_FRAME_MAX),
        Err(StreamFrameError::Truncated {
            command: Command::Metadata
        })
    );
    // A deliver whose chunk is not a chunk.
    assert!(matches!(
        decode_server_frame(&mut frame(0x0008, 1, &[0; 60]), DEFAULT_FRAME_MAX),
        Err(StreamFrameError::Malformed {
            command: Command::Deliver,
            ..
        })
    ));
    // Oversized frames are refused from the size field alone.
    let mut big = BytesMut::from(&[0u8, 0x10, 0, 1][..]);
    assert_eq!(
        decode_client_frame(&mut big, DEFAULT_FRAME_MAX),
        Err(StreamFrameError::FrameTooLarge {
            size: 0x10_0001,
            max: DEFAULT_FRAME_MAX
        })
    );
}

/// Frames with a real key and version and a random body: deeper than pure noise.
fn keyed_frame() -> impl Strategy<Value = Vec<u8>> {
    (
        1u16..=32,
        any::<bool>(),
        0u16..=3,
        proptest::collection::vec(any::<u8>(), 0..80),
    )
        .prop_map(|(key, response, version, body)| {
            let key = if response { key | 0x8000 } else { key };
            frame(key, version, &body).to_vec()
        })
}

fn decode_all(bytes: &[u8]) {
    for max in [0, 64, DEFAULT_FRAME_MAX] {
        let mut a = BytesMut::from(bytes);
        for _ in 0..bytes.len() + 1 {
            match decode_client_frame(&mut a, max) {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        let mut b = BytesMut::from(bytes);
        for _ in 0..bytes.len() + 1 {
            match decode_server_frame(&mut b, max) {
                Ok(Some(ServerMessage::Deliver { chunk, .. })) => {
                    if let Ok(c) = stablemq_protocol::stream::Chunk::parse(&chunk) {
                        let _ = c.verify();
                        let _ = c.entries().count();
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic_a_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        decode_all(&bytes);
    }

    #[test]
    fn random_bodies_under_real_keys_never_panic_a_decoder(
        frames in proptest::collection::vec(keyed_frame(), 1..5)
    ) {
        decode_all(&frames.concat());
    }

    #[test]
    fn random_chunks_never_panic_the_chunk_reader(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut b = bytes.clone();
        if b.len() > 1 {
            b[0] = 0x50; // past the magic, into the fields
        }
        for candidate in [Bytes::from(bytes), Bytes::from(b)] {
            if let Ok(c) = stablemq_protocol::stream::Chunk::parse(&candidate) {
                let _ = c.verify();
                let _ = c.entries().count();
            }
            let _ = stablemq_protocol::stream::sub_batch_records(&candidate);
        }
    }

    #[test]
    fn every_cut_of_a_valid_stream_is_need_more_or_the_same_frames(cut in 0usize..2000) {
        let mut whole = BytesMut::new();
        for m in client_samples() {
            m.encode(&mut whole);
        }
        let cut = cut.min(whole.len());
        let mut first = BytesMut::from(&whole[..cut]);
        let mut got = Vec::new();
        while let Some(m) = decode_client_frame(&mut first, DEFAULT_FRAME_MAX).unwrap() {
            got.push(m);
        }
        first.extend_from_slice(&whole[cut..]);
        while let Some(m) = decode_client_frame(&mut first, DEFAULT_FRAME_MAX).unwrap() {
            got.push(m);
        }
        prop_assert_eq!(got, client_samples());
    }

    #[test]
    fn publishes_round_trip(
        publisher_id in any::<u8>(),
        v2 in any::<bool>(),
        msgs in proptest::collection::vec((any::<u64>(), proptest::option::of("[a-z]{0,8}"), proptest::collection::vec(any::<u8>(), 0..40)), 0..10),
    ) {
        let messages: Vec<PublishedMessage> = msgs
            .into_iter()
            .map(|(id, filter, data)| PublishedMessage {
                publishing_id: id,
                // A v2 message without a filter value goes as a null string.
                filter_value: filter.filter(|_| v2),
                entry: Entry::Simple(Bytes::from(data)),
            })
            .collect();
        let m = ClientMessage::Publish { version: if v2 { 2 } else { 1 }, publisher_id, messages };
        let mut wire = BytesMut::new();
        m.encode(&mut wire);
        prop_assert_eq!(decode_client_frame(&mut wire, 0).unwrap(), Some(m));
    }
}
