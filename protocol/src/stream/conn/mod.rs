//! The server side of one stream protocol connection (port 5552) as a sans-IO
//! state machine: bytes and broker answers in, [`Action`]s out.
//!
//! It is a pure function of (state, input, now): [`StreamConnection::handle_bytes`]
//! decodes every whole frame a read left in the buffer,
//! [`StreamConnection::handle`] takes the broker's answers and events
//! ([`Input`]), [`StreamConnection::tick`] runs the clocks; each appends the
//! [`Action`]s they lead to, which the caller drains in order
//! ([`StreamConnection::take_actions`]). Consecutive frames are coalesced
//! into one [`Action::Write`]; a chunk is an [`Action::WriteChunk`] (its
//! deliver head, then the chunk, which a driver may `sendfile`).
//!
//! What it owns, validated here as RabbitMQ's `rabbit_stream_reader` does:
//! - the handshake, in order: peer properties (answered from the config),
//!   SASL handshake (the configured mechanisms), SASL authenticate (the broker
//!   checks the credentials: [`Action::Authenticate`]; a challenge loops),
//!   the server's tune and the client's (frame_max: the smaller, 0 meaning no
//!   limit; heartbeat: the client's), open (the broker checks the virtual host:
//!   [`Action::OpenVhost`]). A frame out of its phase, a frame that does not
//!   decode, an oversized frame, a failed authentication or open: RabbitMQ
//!   drops the connection before open without a close frame (after answering
//!   the failed step), and so does this machine ([`Action::Closed`]);
//! - frame_max: [`StreamConnectionConfig::initial_frame_max`] until the client's
//!   tune, then the negotiated one; after open a frame over it is answered with
//!   a close 0x0e "frame too large" (RabbitMQ 4.x; 3.10 did not check), and its
//!   bytes are skipped so the client's close response can still be read;
//! - after open, a frame that does not decode (unknown key, bad version,
//!   truncated...) or a handshake command is answered with a close 0x0d
//!   "unknown frame" (correlation id 1, as RabbitMQ); the client's close
//!   response ends the connection, or the close timeout does;
//! - heartbeats: on [`StreamConnection::tick`], a heartbeat is sent when nothing
//!   was sent for an interval, and the connection is dropped when nothing was
//!   received for two (rabbit_heartbeat's rule); the handshake must reach open
//!   within [`StreamConnectionConfig::handshake_timeout`];
//! - publishers (ids unique per connection, references unique per stream),
//!   subscriptions (ids unique per connection) and their credit: one chunk,
//!   one credit; a chunk the broker hands over without credit is queued on the
//!   connection and sent when the client grants more;
//! - the answers: every request the broker answers ([`Action::Request`],
//!   [`Input::Reply`]) is encoded here, in its response's shape, under the
//!   client's correlation id; exchange command versions is answered locally
//!   from [`supported_versions`](crate::stream::supported_versions).
//!
//! What it is not: I/O (no sockets, no clock: `now` is an argument, no
//! runtime), the broker's state (streams, users, permissions, offsets), SASL
//! mechanisms themselves, flow control of publishers (RabbitMQ's credit-based
//! blocking of a connection's reads), or the single-active-consumer
//! coordinator (it only carries consumer updates). No input panics it.

mod action;
mod config;
mod dispatch;
mod handshake;
mod input;
mod streams;
#[cfg(test)]
mod testing;
mod timers;
mod view;

pub use action::{Action, ChunkSource, CloseReason, HandshakeFault, Request};
pub use config::{
    DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_HEARTBEAT, StreamConnectionConfig, server_properties,
};
pub use handshake::negotiate_frame_max;
pub use input::{AuthOutcome, Input, Reply};
pub use view::{PublisherView, SubscriptionView};

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use bytes::{Buf, BytesMut};

use super::client::ClientMessage;
use super::code::ResponseCode;
use super::error::StreamFrameError;
use super::frame::split_frame;
use super::server::ServerMessage;
use super::types::Properties;

/// How many frames a client may send ahead while the broker answers a
/// handshake step (authentication, open) before the connection is dropped.
const MAX_DEFERRED: usize = 64;

/// One stream protocol connection, server side.
#[derive(Debug)]
pub struct StreamConnection {
    config: StreamConnectionConfig,
    phase: Phase,
    /// The frame_max enforced on incoming frames (0: no limit).
    frame_max: u32,
    /// The heartbeat interval settled by tune, in seconds (0: none).
    heartbeat: u32,
    started: Instant,
    last_received: Instant,
    last_sent: Instant,
    /// The broker is not reading the socket ([`Input::ReadingPaused`]).
    reading_paused: bool,
    /// Bytes left in the read buffer by the last call (to tell new bytes).
    leftover: usize,
    /// Bytes of an oversized frame still to skip.
    skip: usize,
    user: Option<String>,
    vhost: Option<String>,
    client_properties: Properties,
    /// The client speaks deliver version 2 (exchange command versions).
    deliver_v2: bool,
    /// Frames (or their faults) that arrived while the broker answers a
    /// handshake step.
    deferred: VecDeque<Result<ClientMessage, StreamFrameError>>,
    publishers: HashMap<u8, streams::Publisher>,
    subscriptions: HashMap<u8, streams::Subscription>,
    /// Requests the broker has not answered yet, by correlation id.
    pending: HashMap<u32, dispatch::Pending>,
    /// The server's consumer update requests not answered yet: correlation
    /// id to subscription id.
    consumer_updates: HashMap<u32, u8>,
    next_correlation_id: u32,
    out: BytesMut,
    actions: Vec<Action>,
    /// The error codes of the frames sent while open since the driver last
    /// took them (for its counters: rabbitmq_stream's `stream_error_*`).
    errors_sent: Vec<ResponseCode>,
}

/// Where the connection is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    AwaitPeerProperties,
    AwaitSaslHandshake,
    AwaitSaslAuthenticate,
    /// The broker checks credentials (`Action::Authenticate`).
    Authenticating {
        correlation_id: u32,
    },
    /// The server's tune is sent; the client's is awaited.
    AwaitTune,
    AwaitOpen,
    /// The broker checks the virtual host (`Action::OpenVhost`).
    OpeningVhost {
        correlation_id: u32,
        vhost: String,
    },
    Open,
    /// The server sent a close; the client's answer is awaited until `deadline`.
    CloseSent {
        code: ResponseCode,
        deadline: Instant,
    },
    Closed,
}

impl StreamConnection {
    /// A connection that has just been accepted at `now`.
    pub fn new(config: StreamConnectionConfig, now: Instant) -> Self {
        StreamConnection {
            frame_max: config.initial_frame_max,
            config,
            phase: Phase::AwaitPeerProperties,
            heartbeat: 0,
            started: now,
            last_received: now,
            last_sent: now,
            reading_paused: false,
            leftover: 0,
            skip: 0,
            user: None,
            vhost: None,
            client_properties: Vec::new(),
            deliver_v2: false,
            deferred: VecDeque::new(),
            publishers: HashMap::new(),
            subscriptions: HashMap::new(),
            pending: HashMap::new(),
            consumer_updates: HashMap::new(),
            next_correlation_id: 0,
            out: BytesMut::new(),
            actions: Vec::new(),
            errors_sent: Vec::new(),
        }
    }

    /// Decodes and handles every whole frame in `buf` (what the socket has
    /// delivered, maybe with a partial frame left from before), leaving a
    /// partial frame in it. Call it after each read.
    pub fn handle_bytes(&mut self, buf: &mut BytesMut, now: Instant) {
        if self.phase == Phase::Closed {
            buf.clear();
            return;
        }
        if buf.len() > self.leftover {
            self.last_received = now;
        }
        while self.phase != Phase::Closed {
            if self.skip > 0 {
                let n = self.skip.min(buf.len());
                buf.advance(n);
                self.skip -= n;
                if self.skip > 0 {
                    break;
                }
            }
            match split_frame(buf, self.frame_max) {
                Ok(Some(frame)) => self.on_frame(ClientMessage::decode(&frame), now),
                Ok(None) => break,
                Err(e) => {
                    if let StreamFrameError::FrameTooLarge { size, .. }
                    | StreamFrameError::TooShort { size } = e
                    {
                        self.skip = 4 + size as usize;
                    }
                    self.on_frame(Err(e), now);
                }
            }
        }
        if self.phase == Phase::Closed {
            buf.clear();
        }
        self.leftover = buf.len();
        self.flush();
    }

    /// Handles an answer or event from the broker.
    pub fn handle(&mut self, input: Input, now: Instant) {
        match input {
            Input::Authenticated(outcome) => self.on_authenticated(outcome, now),
            Input::VhostOpened(allowed) => self.on_vhost_opened(allowed, now),
            Input::Close { code, reason } => self.on_close_input(code, reason, now),
            // Once closed, an abort falls through to the ignored events.
            Input::Abort if self.phase != Phase::Closed => self.close_now(CloseReason::Aborted),
            Input::ReadingPaused(paused) => {
                // Either way the client's silence so far is not its own.
                self.reading_paused = paused;
                self.last_received = now;
            }
            other if self.phase == Phase::Open => match other {
                Input::Reply {
                    correlation_id,
                    reply,
                } => self.on_reply(correlation_id, reply, now),
                Input::PublishConfirm {
                    publisher_id,
                    publishing_ids,
                } => self.on_publish_confirm(publisher_id, publishing_ids, now),
                Input::PublishError {
                    publisher_id,
                    errors,
                } => self.on_publish_error(publisher_id, errors, now),
                Input::Deliver {
                    subscription_id,
                    committed_chunk_id,
                    chunk,
                } => self.on_deliver(subscription_id, committed_chunk_id, chunk, now),
                Input::StreamGone { stream, code } => self.on_stream_gone(&stream, code, now),
                Input::ConsumerUpdate {
                    subscription_id,
                    active,
                } => self.on_consumer_update(subscription_id, active, now),
                _ => {}
            },
            // Closing or closed, or not open yet: RabbitMQ ignores the
            // broker's events then.
            _ => {}
        }
        self.flush();
    }

    /// Runs the clocks: the handshake and close timeouts, heartbeats.
    pub fn tick(&mut self, now: Instant) {
        self.on_tick(now);
        self.flush();
    }

    /// When [`tick`](Self::tick) next has something to do (`None`: closed).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadline()
    }

    /// The actions emitted so far, in order; the caller performs them all.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    /// The error codes of the frames sent since the last call, one per
    /// error (a publish error frame gives one per failed publishing id).
    pub fn take_errors_sent(&mut self) -> Vec<ResponseCode> {
        std::mem::take(&mut self.errors_sent)
    }

    /// Whether the client has declared a publisher (that it has not deleted).
    pub fn has_publishers(&self) -> bool {
        !self.publishers.is_empty()
    }

    /// Whether the connection is over ([`Action::Closed`] was emitted).
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Whether the handshake is done and the connection not closing.
    pub fn is_open(&self) -> bool {
        self.phase == Phase::Open
    }

    /// The authenticated user, once SASL succeeded.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The virtual host, once open.
    pub fn vhost(&self) -> Option<&str> {
        self.vhost.as_deref()
    }

    /// The client's peer properties.
    pub fn client_properties(&self) -> &Properties {
        &self.client_properties
    }

    /// The frame_max in force for incoming frames (0: no limit).
    pub fn frame_max(&self) -> u32 {
        self.frame_max
    }

    /// The heartbeat interval in seconds settled by tune (0: none).
    pub fn heartbeat(&self) -> u32 {
        self.heartbeat
    }

    /// One frame (or the fault in it), in whatever phase the connection is;
    /// while the broker answers a handshake step, it waits its turn.
    fn on_frame(&mut self, frame: Result<ClientMessage, StreamFrameError>, now: Instant) {
        match (&self.phase, frame) {
            (Phase::Authenticating { .. } | Phase::OpeningVhost { .. }, frame) => {
                if self.deferred.len() >= MAX_DEFERRED {
                    let fault = match frame {
                        Ok(msg) => HandshakeFault::Unexpected(msg.command()),
                        Err(e) => HandshakeFault::Frame(e),
                    };
                    self.close_now(CloseReason::HandshakeFault(fault));
                } else {
                    self.deferred.push_back(frame);
                }
            }
            (_, Ok(msg)) => self.on_message(msg, now),
            (_, Err(e)) => self.on_fault(e, now),
        }
    }

    /// One decoded frame, in whatever phase the connection is (not waiting
    /// for the broker).
    fn on_message(&mut self, msg: ClientMessage, now: Instant) {
        match &self.phase {
            Phase::Authenticating { .. } | Phase::OpeningVhost { .. } => {
                self.on_frame(Ok(msg), now);
            }
            Phase::Open => self.on_open_message(msg, now),
            Phase::CloseSent { code, .. } => {
                let code = *code;
                self.on_close_sent_message(msg, code, now);
            }
            Phase::Closed => {}
            _ => self.on_handshake_message(msg, now),
        }
    }

    /// A frame that could not be split off or decoded.
    fn on_fault(&mut self, error: StreamFrameError, now: Instant) {
        match self.phase {
            Phase::Open => {
                let code = error.response_code();
                self.send_close(code, code.description(), now);
            }
            // RabbitMQ ignores what it cannot read while it waits for the
            // close response.
            Phase::CloseSent { .. } | Phase::Closed => {}
            _ => self.close_now(CloseReason::HandshakeFault(HandshakeFault::Frame(error))),
        }
    }

    /// Encodes a frame into the pending write.
    fn send(&mut self, msg: &ServerMessage, now: Instant) {
        msg.encode(&mut self.out);
        // RabbitMQ 3.10 counts the errors of an open connection only (a
        // failed login or vhost open moves no counter).
        if matches!(self.phase, Phase::Open | Phase::CloseSent { .. }) {
            msg.for_each_error(|code| self.errors_sent.push(code));
        }
        self.last_sent = now;
    }

    /// Emits an action after the frames encoded so far.
    fn push(&mut self, action: Action) {
        self.flush();
        self.actions.push(action);
    }

    /// Turns the frames encoded so far into one write.
    fn flush(&mut self) {
        if !self.out.is_empty() {
            let bytes = self.out.split().freeze();
            self.actions.push(Action::Write(bytes));
        }
    }

    /// Ends the connection now (after what was emitted so far).
    fn close_now(&mut self, reason: CloseReason) {
        self.phase = Phase::Closed;
        self.deferred.clear();
        self.pending.clear();
        self.consumer_updates.clear();
        self.publishers.clear();
        self.subscriptions.clear();
        self.push(Action::Closed(reason));
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn consecutive_frames_are_coalesced_into_one_write() {
        let (mut conn, t0) = opened();
        let credit = |subscription_id| ClientMessage::Credit {
            subscription_id,
            credit: 1,
        };
        let mut buf = wire(&[credit(1), credit(2), credit(3)]);
        conn.handle_bytes(&mut buf, t0);
        let actions = conn.take_actions();
        assert_eq!(actions.len(), 1, "{actions:?}");
        assert_eq!(seen(actions).len(), 3);
    }

    #[test]
    fn partial_frames_wait_for_the_rest() {
        let (mut conn, t0) = opened();
        let whole = wire(&[ClientMessage::Credit {
            subscription_id: 1,
            credit: 1,
        }]);
        let mut buf = BytesMut::new();
        for byte in &whole[..whole.len() - 1] {
            buf.extend_from_slice(&[*byte]);
            conn.handle_bytes(&mut buf, t0);
            assert!(conn.take_actions().is_empty());
        }
        buf.extend_from_slice(&whole[whole.len() - 1..]);
        conn.handle_bytes(&mut buf, t0);
        assert_eq!(seen(conn.take_actions()).len(), 1);
        assert!(buf.is_empty());
    }

    #[test]
    fn an_oversized_frame_after_open_is_closed_with_frame_too_large() {
        let (mut conn, t0) = opened();
        // 2 MiB announced (frame_max 1 MiB), as in frame-too-large-1.
        let size: u32 = 2 * 1_048_576;
        let mut buf = BytesMut::from(&size.to_be_bytes()[..]);
        buf.extend_from_slice(&[0, 2, 0, 1, 0, 0, 0, 0]);
        conn.handle_bytes(&mut buf, t0);
        assert_eq!(
            seen(conn.take_actions()),
            vec![Seen::Sent(ServerMessage::Close {
                correlation_id: 1,
                code: ResponseCode::FrameTooLarge,
                reason: "frame too large".into(),
            })]
        );
        assert!(buf.is_empty());
        // Its body is skipped, and the close response after it is read.
        let mut rest = BytesMut::from(&vec![0u8; size as usize - 4][..]);
        ClientMessage::CloseResponse {
            correlation_id: 1,
            code: ResponseCode::Ok,
        }
        .encode(&mut rest);
        let mut tail = rest.split_off(1000);
        conn.handle_bytes(&mut rest, t0);
        assert!(conn.take_actions().is_empty());
        conn.handle_bytes(&mut tail, t0);
        assert_eq!(
            conn.take_actions(),
            vec![Action::Closed(CloseReason::ServerClosed {
                code: ResponseCode::FrameTooLarge,
                answered: true
            })]
        );
    }

    #[test]
    fn an_unknown_key_after_open_is_closed_with_unknown_frame() {
        let (mut conn, t0) = opened();
        let mut buf = BytesMut::from(&[0u8, 0, 0, 4, 0, 0x63, 0, 1][..]);
        conn.handle_bytes(&mut buf, t0);
        assert_eq!(
            seen(conn.take_actions()),
            vec![Seen::Sent(ServerMessage::Close {
                correlation_id: 1,
                code: ResponseCode::UnknownFrame,
                reason: "unknown frame".into(),
            })]
        );
        // Told once, for the broker's error counters.
        assert_eq!(conn.take_errors_sent(), vec![ResponseCode::UnknownFrame]);
        assert!(conn.take_errors_sent().is_empty());
        // A too-short frame while closing is skipped, then the answer read.
        let mut buf = BytesMut::from(&[0u8, 0, 0, 1, 0xff][..]);
        ClientMessage::CloseResponse {
            correlation_id: 1,
            code: ResponseCode::Ok,
        }
        .encode(&mut buf);
        conn.handle_bytes(&mut buf, t0);
        assert!(conn.is_closed());
    }

    #[test]
    fn a_client_running_far_ahead_of_the_broker_is_dropped() {
        let t0 = Instant::now();
        let mut conn = StreamConnection::new(StreamConnectionConfig::default(), t0);
        let mut msgs = vec![
            peer_properties(),
            ClientMessage::SaslHandshake { correlation_id: 2 },
            sasl_plain(3),
        ];
        msgs.extend(std::iter::repeat_n(ClientMessage::Heartbeat, MAX_DEFERRED));
        assert!(
            !feed(&mut conn, &msgs, t0).contains(&Seen::Do(Action::Closed(
                CloseReason::HandshakeFault(HandshakeFault::Unexpected(
                    crate::stream::Command::Heartbeat
                ))
            )))
        );
        let out = feed(&mut conn, &[ClientMessage::Heartbeat], t0);
        assert_eq!(
            out,
            vec![Seen::Do(Action::Closed(CloseReason::HandshakeFault(
                HandshakeFault::Unexpected(crate::stream::Command::Heartbeat)
            )))]
        );
    }

    #[test]
    fn broker_events_for_unknown_ids_are_dropped() {
        let (mut conn, t0) = opened();
        for event in [
            Input::PublishConfirm {
                publisher_id: 1,
                publishing_ids: vec![1],
            },
            Input::PublishError {
                publisher_id: 1,
                errors: vec![],
            },
            Input::ConsumerUpdate {
                subscription_id: 1,
                active: true,
            },
            Input::StreamGone {
                stream: "s".into(),
                code: ResponseCode::StreamNotAvailable,
            },
        ] {
            conn.handle(event, t0);
        }
        assert!(conn.take_actions().is_empty());
    }

    #[test]
    fn only_new_bytes_count_as_received() {
        let (mut conn, t0) = opened();
        let mut buf = BytesMut::from(&[0u8, 0][..]);
        conn.handle_bytes(&mut buf, t0 + std::time::Duration::from_secs(50));
        // The same partial bytes again, later: nothing new arrived.
        conn.handle_bytes(&mut buf, t0 + std::time::Duration::from_secs(90));
        conn.tick(t0 + std::time::Duration::from_secs(170));
        assert_eq!(
            conn.take_actions().last(),
            Some(&Action::Closed(CloseReason::HeartbeatTimeout))
        );
    }
}
