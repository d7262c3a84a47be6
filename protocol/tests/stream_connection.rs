//! The stream connection state machine against the recorded sessions
//! (RabbitMQ 3.10.8 and rstream 1.1.1, tests/fixtures/stream/): the recorded
//! client bytes are fed, frame by frame, to a `StreamConnection` whose broker
//! answers each request with what RabbitMQ answered; the frames the machine
//! writes must be the frames RabbitMQ wrote.
//!
//! What the broker supplies is taken from the recording too (server
//! properties, mechanisms, advertised host and port), so the handshake comes
//! out byte for byte. The comparison merges consecutive publish confirms of a
//! publisher (RabbitMQ confirmed two publishes at once) and reads 3.10's route
//! and partitions answers as sent under the response key (StableMQ's form).

#![allow(
    clippy::unwrap_used,
    reason = "a test: an unwrap that fails is a failure at its line"
)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use stablemq_protocol::stream::conn::{
    Action, AuthOutcome, ChunkSource, CloseReason, HandshakeFault, Input, Reply, Request,
    StreamConnection, StreamConnectionConfig,
};
use stablemq_protocol::stream::{
    ClientMessage, DEFAULT_FRAME_MAX, ResponseCode, ServerMessage, StreamFrameError, split_frame,
};

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/stream")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A byte stream cut into its frames (size field included); a last partial
/// frame is kept as it is.
fn raw_frames(raw: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = raw;
    while rest.len() >= 4 {
        let size = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let n = (4 + size).min(rest.len());
        out.push(rest[..n].to_vec());
        rest = &rest[n..];
    }
    if !rest.is_empty() {
        out.push(rest.to_vec());
    }
    out
}

fn server_messages(raw: &[u8]) -> Vec<ServerMessage> {
    let mut buf = BytesMut::from(raw);
    let mut out = Vec::new();
    while let Some(frame) = split_frame(&mut buf, 0).unwrap() {
        out.push(ServerMessage::decode(&frame).unwrap());
    }
    out
}

/// The broker config that reproduces the recorded server's handshake.
fn recorded_config(server: &[ServerMessage]) -> StreamConnectionConfig {
    let ServerMessage::PeerPropertiesResponse { properties, .. } = &server[0] else {
        panic!("{:?}", server[0]);
    };
    let ServerMessage::SaslHandshakeResponse { mechanisms, .. } = &server[1] else {
        panic!("{:?}", server[1]);
    };
    let ServerMessage::OpenResponse {
        properties: open, ..
    } = &server[4]
    else {
        panic!("{:?}", server[4]);
    };
    let get = |k: &str| {
        open.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    StreamConnectionConfig {
        server_properties: properties.clone(),
        mechanisms: mechanisms.clone(),
        advertised_host: get("advertised_host"),
        advertised_port: get("advertised_port").map(|p| p.parse().unwrap()),
        ..StreamConnectionConfig::default()
    }
}

/// The broker's answer to a request, from the recorded response under its
/// correlation id.
fn recorded_reply(server: &[ServerMessage], id: u32) -> Reply {
    use ServerMessage as M;
    for m in server {
        let reply = match m {
            M::Response {
                correlation_id,
                code,
                ..
            } if *correlation_id == id => Reply::Code(*code),
            M::MetadataResponse {
                correlation_id,
                brokers,
                streams,
            } if *correlation_id == id => Reply::Metadata {
                brokers: brokers.clone(),
                streams: streams.clone(),
            },
            M::QueryOffsetResponse {
                correlation_id,
                code,
                offset,
            } if *correlation_id == id => Reply::Offset {
                code: *code,
                offset: *offset,
            },
            M::QueryPublisherSequenceResponse {
                correlation_id,
                code,
                sequence,
            } if *correlation_id == id => Reply::Sequence {
                code: *code,
                sequence: *sequence,
            },
            M::RouteResponse {
                correlation_id,
                code,
                streams,
                ..
            }
            | M::PartitionsResponse {
                correlation_id,
                code,
                streams,
                ..
            } if *correlation_id == id => Reply::Streams {
                code: *code,
                streams: streams.clone(),
            },
            _ => continue,
        };
        return reply;
    }
    panic!("no recorded answer to correlation id {id}");
}

/// Plays the broker as RabbitMQ did in the recording, answering at once.
struct ReplayBroker<'a> {
    server: &'a [ServerMessage],
    /// What the connection wrote, decoded.
    written: Vec<ServerMessage>,
    /// Every write's bytes, in order.
    bytes: Vec<u8>,
    closed: Option<CloseReason>,
}

impl ReplayBroker<'_> {
    fn run(&mut self, conn: &mut StreamConnection, now: Instant) {
        loop {
            let actions = conn.take_actions();
            if actions.is_empty() {
                return;
            }
            for action in actions {
                self.perform(conn, action, now);
            }
        }
    }

    fn perform(&mut self, conn: &mut StreamConnection, action: Action, now: Instant) {
        match action {
            Action::Write(bytes) => self.write(&bytes),
            Action::WriteChunk {
                head,
                chunk: ChunkSource::Bytes(chunk),
            } => {
                let mut frame = head.to_vec();
                frame.extend_from_slice(&chunk);
                self.write(&frame);
            }
            Action::Authenticate { mechanism, data } => {
                assert_eq!(mechanism, "PLAIN");
                assert_eq!(data.as_deref(), Some(&b"\0guest\0guest"[..]));
                let ok = AuthOutcome::Ok {
                    user: "guest".into(),
                };
                conn.handle(Input::Authenticated(ok), now);
            }
            Action::OpenVhost { user, vhost } => {
                assert_eq!((user.as_str(), vhost.as_str()), ("guest", "/"));
                conn.handle(Input::VhostOpened(true), now);
            }
            Action::Request {
                correlation_id,
                request,
            } => {
                let reply = recorded_reply(self.server, correlation_id);
                let subscribed = match (&request, &reply) {
                    (
                        Request::Subscribe {
                            subscription_id, ..
                        },
                        Reply::Code(ResponseCode::Ok),
                    ) => Some(*subscription_id),
                    _ => None,
                };
                conn.handle(
                    Input::Reply {
                        correlation_id,
                        reply,
                    },
                    now,
                );
                if let Some(id) = subscribed {
                    self.deliver_recorded(conn, id, now);
                }
            }
            Action::Publish {
                publisher_id,
                messages,
                ..
            } => {
                let publishing_ids = messages.iter().map(|m| m.publishing_id).collect();
                conn.handle(
                    Input::PublishConfirm {
                        publisher_id,
                        publishing_ids,
                    },
                    now,
                );
            }
            Action::Closed(reason) => self.closed = Some(reason),
            Action::WriteChunk { .. }
            | Action::Credit { .. }
            | Action::Unsubscribe { .. }
            | Action::DeletePublisher { .. }
            | Action::StoreOffset { .. }
            | Action::ConsumerUpdateAnswered { .. } => {}
        }
    }

    /// The chunks RabbitMQ delivered to this subscription.
    fn deliver_recorded(&self, conn: &mut StreamConnection, id: u8, now: Instant) {
        for m in self.server {
            if let ServerMessage::Deliver {
                subscription_id,
                chunk,
                ..
            } = m
                && *subscription_id == id
            {
                let chunk = ChunkSource::Bytes(chunk.clone());
                let deliver = Input::Deliver {
                    subscription_id: id,
                    committed_chunk_id: 0,
                    chunk,
                };
                conn.handle(deliver, now);
            }
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
        self.written.extend(server_messages(bytes));
    }
}

/// Merges consecutive confirms of one publisher; route and partitions as
/// answered under the response key.
fn normalise(msgs: Vec<ServerMessage>) -> Vec<ServerMessage> {
    let mut out: Vec<ServerMessage> = Vec::new();
    for m in msgs {
        let m = match m {
            ServerMessage::RouteResponse {
                correlation_id,
                code,
                streams,
                ..
            } => ServerMessage::RouteResponse {
                correlation_id,
                code,
                streams,
                request_key: false,
            },
            ServerMessage::PartitionsResponse {
                correlation_id,
                code,
                streams,
                ..
            } => ServerMessage::PartitionsResponse {
                correlation_id,
                code,
                streams,
                request_key: false,
            },
            other => other,
        };
        if let (
            Some(ServerMessage::PublishConfirm {
                publisher_id: a,
                publishing_ids,
            }),
            ServerMessage::PublishConfirm {
                publisher_id: b,
                publishing_ids: more,
            },
        ) = (out.last_mut(), &m)
            && *a == *b
        {
            publishing_ids.extend(more);
            continue;
        }
        out.push(m);
    }
    out
}

/// Replays a recorded session; returns the broker (what was written) and
/// the recorded server messages.
fn replay(
    name: &str,
) -> (
    Vec<ServerMessage>,
    Vec<u8>,
    Vec<ServerMessage>,
    Option<CloseReason>,
) {
    let client = fixture(&format!("{name}.client.bin"));
    let server_raw = fixture(&format!("{name}.server.bin"));
    let server = server_messages(&server_raw);
    let now = Instant::now();
    let mut conn = StreamConnection::new(recorded_config(&server), now);
    let mut broker = ReplayBroker {
        server: &server,
        written: vec![],
        bytes: vec![],
        closed: None,
    };
    for frame in raw_frames(&client) {
        let mut buf = BytesMut::from(&frame[..]);
        conn.handle_bytes(&mut buf, now);
        broker.run(&mut conn, now);
    }
    // Streams deleted under the connection by another one.
    for m in &server {
        if let ServerMessage::MetadataUpdate { code, stream } = m
            && !broker.written.contains(m)
        {
            conn.handle(
                Input::StreamGone {
                    stream: stream.clone(),
                    code: *code,
                },
                now,
            );
            broker.run(&mut conn, now);
        }
    }
    let ReplayBroker {
        written,
        bytes,
        closed,
        ..
    } = broker;
    (written, bytes, server, closed)
}

const SESSIONS: [&str; 6] = [
    "raw-1",
    "producer-consumer-1",
    "producer-consumer-2",
    "producer-consumer-3",
    "producer-consumer-4",
    "super-stream-1",
];

#[test]
fn the_handshake_comes_out_byte_for_byte() {
    for name in SESSIONS
        .iter()
        .chain(&["unknown-command-1", "frame-too-large-1"])
    {
        let (_, bytes, _, _) = replay(name);
        let recorded = fixture(&format!("{name}.server.bin"));
        let handshake: usize = raw_frames(&recorded)[..5].iter().map(Vec::len).sum();
        assert_eq!(&bytes[..handshake], &recorded[..handshake], "{name}");
    }
}

#[test]
fn the_recorded_sessions_are_answered_as_rabbitmq_answered() {
    for name in SESSIONS {
        let (written, _, server, _) = replay(name);
        assert_eq!(normalise(written), normalise(server), "{name}");
    }
    let (_, _, _, closed) = replay("raw-1");
    assert_eq!(
        closed,
        Some(CloseReason::ClientClosed {
            code: 1,
            reason: "OK".into()
        })
    );
}

#[test]
fn an_unknown_command_after_open_is_closed_as_rabbitmq_does() {
    let (written, bytes, server, closed) = replay("unknown-command-1");
    assert_eq!(written, server);
    assert_eq!(bytes, fixture("unknown-command-1.server.bin"));
    assert!(matches!(
        server.last(),
        Some(ServerMessage::Close {
            code: ResponseCode::UnknownFrame,
            ..
        })
    ));
    // The client never answers the close.
    assert_eq!(closed, None);
}

#[test]
fn a_frame_over_frame_max_is_closed_as_rabbitmq_4_does() {
    let (written, _, server, _) = replay("frame-too-large-1");
    // 3.10 said nothing and waited for the rest; 4.x closes with 0x0e.
    let mut expected = server;
    expected.push(ServerMessage::Close {
        correlation_id: 1,
        code: ResponseCode::FrameTooLarge,
        reason: "frame too large".into(),
    });
    assert_eq!(written, expected);
}

#[test]
fn the_whole_recorded_client_stream_at_once_waits_for_each_answer() {
    // All the connect session's bytes in one read: the frames after SASL
    // wait for the broker's verdict, then run in order.
    let client = fixture("producer-consumer-1.client.bin");
    let now = Instant::now();
    let mut conn = StreamConnection::new(StreamConnectionConfig::default(), now);
    let mut buf = BytesMut::from(&client[..]);
    conn.handle_bytes(&mut buf, now);
    assert!(buf.is_empty());
    let actions = conn.take_actions();
    assert!(
        matches!(actions.last(), Some(Action::Authenticate { .. })),
        "{actions:?}"
    );
    conn.handle(
        Input::Authenticated(AuthOutcome::Ok {
            user: "guest".into(),
        }),
        now,
    );
    assert!(matches!(
        conn.take_actions().last(),
        Some(Action::OpenVhost { .. })
    ));
    conn.handle(Input::VhostOpened(true), now);
    let actions = conn.take_actions();
    assert!(
        matches!(
            actions.last(),
            Some(Action::Request {
                correlation_id: 5,
                request: Request::CreateStream { .. }
            })
        ),
        "{actions:?}"
    );
    assert_eq!(
        (conn.frame_max(), conn.heartbeat()),
        (DEFAULT_FRAME_MAX, 60)
    );
}

#[test]
fn a_recorded_session_cut_anywhere_gives_the_same_answers() {
    // The connect session fed in two reads split at every byte.
    let client = fixture("unknown-command-1.client.bin");
    let expected = replay("unknown-command-1").0;
    let server = server_messages(&fixture("unknown-command-1.server.bin"));
    for cut in (1..client.len()).step_by(7) {
        let now = Instant::now();
        let mut conn = StreamConnection::new(recorded_config(&server), now);
        let mut broker = ReplayBroker {
            server: &server,
            written: vec![],
            bytes: vec![],
            closed: None,
        };
        let mut buf = BytesMut::from(&client[..cut]);
        conn.handle_bytes(&mut buf, now);
        broker.run(&mut conn, now);
        buf.extend_from_slice(&client[cut..]);
        conn.handle_bytes(&mut buf, now);
        broker.run(&mut conn, now);
        assert_eq!(broker.written, expected, "cut at {cut}");
    }
}

#[test]
fn a_silent_client_is_dropped_before_open_and_after() {
    let now = Instant::now();
    let mut conn = StreamConnection::new(StreamConnectionConfig::default(), now);
    conn.tick(now + Duration::from_secs(10));
    assert_eq!(
        conn.take_actions(),
        vec![Action::Closed(CloseReason::HandshakeTimeout)]
    );

    let (_, _, server, _) = replay("producer-consumer-1");
    let client = fixture("producer-consumer-1.client.bin");
    let mut conn = StreamConnection::new(recorded_config(&server), now);
    let mut broker = ReplayBroker {
        server: &server,
        written: vec![],
        bytes: vec![],
        closed: None,
    };
    for frame in raw_frames(&client) {
        conn.handle_bytes(&mut BytesMut::from(&frame[..]), now);
        broker.run(&mut conn, now);
    }
    conn.tick(now + Duration::from_secs(60));
    broker.run(&mut conn, now);
    assert_eq!(broker.written.last(), Some(&ServerMessage::Heartbeat));
    conn.tick(now + Duration::from_secs(120));
    assert_eq!(
        conn.take_actions(),
        vec![Action::Closed(CloseReason::HeartbeatTimeout)]
    );
}

#[test]
fn garbage_before_the_handshake_drops_the_connection() {
    let now = Instant::now();
    let mut conn = StreamConnection::new(StreamConnectionConfig::default(), now);
    // A TLS ClientHello sent to the plain listener: announces a huge frame.
    let mut buf = BytesMut::from(&[0x16u8, 0x03, 0x01, 0x02, 0x00, 0x01][..]);
    conn.handle_bytes(&mut buf, now);
    assert!(matches!(
        conn.take_actions()[..],
        [Action::Closed(CloseReason::HandshakeFault(
            HandshakeFault::Frame(StreamFrameError::FrameTooLarge { .. })
        ))]
    ));
}

/// A connection through the recorded handshake.
fn opened_connection(now: Instant) -> StreamConnection {
    let server = server_messages(&fixture("producer-consumer-1.server.bin"));
    let client = fixture("producer-consumer-1.client.bin");
    let mut conn = StreamConnection::new(recorded_config(&server), now);
    let mut broker = ReplayBroker {
        server: &server,
        written: vec![],
        bytes: vec![],
        closed: None,
    };
    for frame in raw_frames(&client).into_iter().take(6) {
        conn.handle_bytes(&mut BytesMut::from(&frame[..]), now);
        broker.run(&mut conn, now);
    }
    assert!(conn.is_open());
    conn
}

/// Drives a connection with broker inputs chosen from `picks`, whatever it asks.
fn answer_anything(conn: &mut StreamConnection, picks: &[u8], now: Instant) {
    for (i, action) in conn.take_actions().into_iter().enumerate() {
        let pick = picks.get(i % picks.len().max(1)).copied().unwrap_or(0);
        let code = ResponseCode::ALL[usize::from(pick) % ResponseCode::ALL.len()];
        match action {
            Action::Authenticate { .. } => {
                conn.handle(
                    Input::Authenticated(AuthOutcome::Ok { user: "u".into() }),
                    now,
                );
            }
            Action::OpenVhost { .. } => conn.handle(Input::VhostOpened(pick % 2 == 0), now),
            Action::Request { correlation_id, .. } => {
                let reply = match pick % 3 {
                    0 => Reply::Code(code),
                    1 => Reply::Offset { code, offset: 1 },
                    _ => Reply::Streams {
                        code,
                        streams: vec![],
                    },
                };
                conn.handle(
                    Input::Reply {
                        correlation_id,
                        reply,
                    },
                    now,
                );
                let chunk = ChunkSource::Bytes(Bytes::from_static(&[0x50; 60]));
                let deliver = Input::Deliver {
                    subscription_id: pick,
                    committed_chunk_id: 1,
                    chunk,
                };
                conn.handle(deliver, now);
            }
            Action::Publish { publisher_id, .. } => {
                conn.handle(
                    Input::PublishConfirm {
                        publisher_id,
                        publishing_ids: vec![1],
                    },
                    now,
                );
            }
            _ => {}
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic_the_machine(
        chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..8),
        picks in prop::collection::vec(any::<u8>(), 1..8),
        open in any::<bool>(),
    ) {
        let now = Instant::now();
        let mut conn = if open {
            opened_connection(now)
        } else {
            StreamConnection::new(StreamConnectionConfig::default(), now)
        };
        let mut buf = BytesMut::new();
        for (i, c) in chunks.iter().enumerate() {
            buf.extend_from_slice(c);
            let t = now + Duration::from_secs(i as u64 * 7);
            conn.handle_bytes(&mut buf, t);
            answer_anything(&mut conn, &picks, t);
            conn.tick(t);
            let _ = conn.take_actions();
        }
    }

    #[test]
    fn random_frames_under_real_keys_never_panic_the_machine(
        frames in prop::collection::vec(
            (1u16..0x21, any::<bool>(), 1u16..3, prop::collection::vec(any::<u8>(), 0..40)),
            0..12,
        ),
        picks in prop::collection::vec(any::<u8>(), 1..8),
    ) {
        let now = Instant::now();
        let mut conn = opened_connection(now);
        for (key, response, version, body) in frames {
            let key = if response { key | 0x8000 } else { key };
            let mut buf = BytesMut::new();
            buf.extend_from_slice(&((4 + body.len()) as u32).to_be_bytes());
            buf.extend_from_slice(&key.to_be_bytes());
            buf.extend_from_slice(&version.to_be_bytes());
            buf.extend_from_slice(&body);
            conn.handle_bytes(&mut buf, now);
            answer_anything(&mut conn, &picks, now);
        }
        let _ = ClientMessage::Heartbeat;
    }
}
