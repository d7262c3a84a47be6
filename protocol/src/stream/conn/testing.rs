//! Helpers for the unit tests: a client that encodes frames, and the actions
//! seen as decoded server frames.

use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::{Action, AuthOutcome, Input, StreamConnection, StreamConnectionConfig};
use crate::stream::client::ClientMessage;
use crate::stream::code::ResponseCode;
use crate::stream::server::ServerMessage;
use crate::stream::split_frame;

/// An action, with each write decoded into the frames it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Seen {
    /// A frame the server wrote.
    Sent(ServerMessage),
    /// Any other action (WriteChunk included).
    Do(Action),
}

/// Decodes the writes among `actions`.
pub(super) fn seen(actions: Vec<Action>) -> Vec<Seen> {
    let mut out = Vec::new();
    for action in actions {
        match action {
            Action::Write(bytes) => {
                let mut buf = BytesMut::from(&bytes[..]);
                while let Some(frame) = split_frame(&mut buf, 0).unwrap() {
                    out.push(Seen::Sent(ServerMessage::decode(&frame).unwrap()));
                }
                assert!(buf.is_empty(), "a write ends in a partial frame");
            }
            other => out.push(Seen::Do(other)),
        }
    }
    out
}

/// Encodes client frames into one buffer.
pub(super) fn wire(msgs: &[ClientMessage]) -> BytesMut {
    let mut buf = BytesMut::new();
    for m in msgs {
        m.encode(&mut buf);
    }
    buf
}

/// Feeds client frames, returns what the server did.
pub(super) fn feed(conn: &mut StreamConnection, msgs: &[ClientMessage], now: Instant) -> Vec<Seen> {
    let mut buf = wire(msgs);
    conn.handle_bytes(&mut buf, now);
    assert!(buf.is_empty());
    seen(conn.take_actions())
}

/// Hands the connection a broker input, returns what it did.
pub(super) fn input(conn: &mut StreamConnection, input: Input, now: Instant) -> Vec<Seen> {
    conn.handle(input, now);
    seen(conn.take_actions())
}

pub(super) fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

pub(super) fn peer_properties() -> ClientMessage {
    ClientMessage::PeerProperties {
        correlation_id: 1,
        properties: vec![("product".into(), "test".into())],
    }
}

pub(super) fn sasl_plain(correlation_id: u32) -> ClientMessage {
    ClientMessage::SaslAuthenticate {
        correlation_id,
        mechanism: "PLAIN".into(),
        data: Some(bytes::Bytes::from_static(b"\0guest\0guest")),
    }
}

pub(super) fn tune(frame_max: u32, heartbeat: u32) -> ClientMessage {
    ClientMessage::Tune {
        frame_max,
        heartbeat,
        as_response: true,
    }
}

pub(super) fn open(correlation_id: u32) -> ClientMessage {
    ClientMessage::Open {
        correlation_id,
        virtual_host: "/".into(),
    }
}

/// A connection through the whole handshake (tune 1 MiB, heartbeat 60 s),
/// and the instant it opened at.
pub(super) fn opened() -> (StreamConnection, Instant) {
    opened_with(StreamConnectionConfig::default())
}

pub(super) fn opened_with(config: StreamConnectionConfig) -> (StreamConnection, Instant) {
    let t0 = Instant::now();
    let mut conn = StreamConnection::new(config, t0);
    let msgs = [
        peer_properties(),
        ClientMessage::SaslHandshake { correlation_id: 2 },
        sasl_plain(3),
    ];
    feed(&mut conn, &msgs, t0);
    let user = "guest".to_owned();
    input(
        &mut conn,
        Input::Authenticated(AuthOutcome::Ok { user }),
        t0,
    );
    feed(&mut conn, &[tune(1_048_576, 60), open(4)], t0);
    input(&mut conn, Input::VhostOpened(true), t0);
    assert!(conn.is_open());
    (conn, t0)
}

/// The code-only response the server sends.
pub(super) fn code_response(
    command: crate::stream::command::Command,
    correlation_id: u32,
    code: ResponseCode,
) -> Seen {
    Seen::Sent(ServerMessage::Response {
        command,
        correlation_id,
        code,
    })
}
