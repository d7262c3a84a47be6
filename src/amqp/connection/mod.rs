//! One client connection as a pure state machine.
//!
//! Inputs are decoded frames, messages from the master, and clock ticks; outputs are
//! [`Action`]s. The machine owns the handshake (header, start, SASL, tune, open),
//! heartbeats, the channel table and content assembly (publish + header + body).
//! Channel semantics live in the master: this side only checks that frames arrive
//! on open channels in a valid order, as RabbitMQ's reader does.

use crate::config::Config;
use crate::error::{AmqpError, ReplyCode};
use crate::fastmap::FastMap;
use crate::master::io::{ConnId, Input, ToConn};
use bytes::Bytes;
use stablemq_protocol::methods::{basic, channel as mch, connection as mconn};
use stablemq_protocol::{
    AMQPClass, AMQPValue, BasicProperties, FieldTable, Frame, FrameError, HeaderCheck,
    PROTOCOL_HEADER, ShortString,
};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a client has to finish the handshake (RabbitMQ's handshake_timeout).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long we wait for close-ok after sending connection.close.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(3);
/// frame_max before tune-ok. Newest RabbitMQ uses 8192 so that large start-ok
/// responses (JWT tokens) fit.
pub const PRE_TUNE_FRAME_MAX: u32 = 8192;
/// Largest message body accepted (RabbitMQ's default max_message_size, 128 MiB).
pub const MAX_MESSAGE_SIZE: u64 = 128 * 1024 * 1024;

/// What the I/O layer must do.
#[derive(Debug)]
pub enum Action {
    /// Write one frame.
    Write(Frame),
    /// Write raw bytes (the protocol header on a bad handshake).
    WriteRaw(Bytes),
    /// Pass something on to the master.
    ToMaster(Input),
    /// Write what the master sent.
    Out(ToConn),
    /// Flush and close the socket.
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitHeader,
    AwaitStartOk,
    AwaitTuneOk,
    AwaitOpen,
    AwaitOpenOk,
    Open,
    /// We sent connection.close and wait for close-ok.
    Closing,
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Open,
    /// We sent channel.close; everything but close/close-ok is dropped.
    ClosingByServer,
    /// The client sent channel.close; the master's close-ok frees the number.
    ClosingByClient,
}

#[derive(Debug)]
struct PendingContent {
    publish: basic::Publish,
    /// (properties, body size) once the header frame arrived.
    header: Option<(Box<BasicProperties>, u64)>,
    // Inline for the usual one body frame: no Vec grown per message.
    parts: smallvec::SmallVec<[Bytes; 1]>,
    received: u64,
}

#[derive(Debug)]
struct Slot {
    state: SlotState,
    content: Option<PendingContent>,
}

/// The connection state machine.
pub struct Connection {
    id: ConnId,
    peer: IpAddr,
    config: Arc<Config>,
    phase: Phase,
    /// Negotiated frame_max (before tune, the AMQP minimum applies).
    frame_max: u32,
    channel_max: u16,
    /// Negotiated heartbeat in seconds (0 = off).
    heartbeat: u16,
    user: Option<String>,
    /// foldhash, not SipHash: every frame looks its channel up (about 6 lookups
    /// per published message).
    channels: FastMap<u16, Slot>,
    started: Instant,
    last_recv: Instant,
    last_send: Instant,
    closing_since: Option<Instant>,
    /// The client closed and we sent close-ok: we only wait for its EOF. A repeated
    /// connection.close (a client closing from two threads at once) then gets another
    /// close-ok but must not cut the socket, or the client reads EOF instead of the
    /// close-ok it waits for (amqp091-go's TestConcurrentClose), as RabbitMQ does.
    lingering: bool,
    /// Whether the master knows this connection (so it must hear Disconnected).
    told_master: bool,
    /// Client properties from start-ok, kept for the management API.
    pub client_properties: FieldTable,
    /// SASL mechanism of start-ok, for the management API.
    auth_mechanism: String,
    /// The socket's two ends (client, broker), for the management API; the
    /// server task knows them, the machine only passes them on.
    addresses: (Option<SocketAddr>, Option<SocketAddr>),
    /// The active resource alarm, if any.
    alarm: Option<String>,
    /// The client has published on this connection (only publishers are blocked).
    has_published: bool,
    /// We told the client it is blocked (connection.blocked sent).
    blocked_sent: bool,
    /// Where logins are checked: the master task's latest access table,
    /// read at start-ok so a user created a moment ago can log in. Without
    /// one (the machine's own tests), the config's seed.
    users: Option<crate::users::Snapshot>,
    /// The master task's cluster name (stored, else the default), for
    /// connection.start; none: the config's default (the machine's tests).
    cluster_name: Option<tokio::sync::watch::Receiver<String>>,
}

impl Connection {
    /// A connection accepted at `now` from `peer`.
    pub fn new(id: ConnId, peer: IpAddr, config: Arc<Config>, now: Instant) -> Connection {
        Connection {
            id,
            peer,
            config,
            phase: Phase::AwaitHeader,
            frame_max: PRE_TUNE_FRAME_MAX,
            channel_max: 0,
            heartbeat: 0,
            user: None,
            channels: FastMap::default(),
            started: now,
            last_recv: now,
            last_send: now,
            closing_since: None,
            lingering: false,
            told_master: false,
            client_properties: FieldTable::default(),
            auth_mechanism: String::new(),
            addresses: (None, None),
            alarm: None,
            has_published: false,
            blocked_sent: false,
            users: None,
            cluster_name: None,
        }
    }

    /// Check logins against the master task's replicated users.
    pub fn set_users(&mut self, users: crate::users::Snapshot) {
        self.users = Some(users);
    }

    /// Report the master task's cluster name in connection.start.
    pub fn set_cluster_name(&mut self, name: tokio::sync::watch::Receiver<String>) {
        self.cluster_name = Some(name);
    }

    /// The cluster name connection.start reports, as of now.
    pub(super) fn cluster_name_now(&self) -> String {
        match &self.cluster_name {
            Some(rx) => rx.borrow().clone(),
            None => self.config.default_cluster_name(),
        }
    }

    /// The access table to check a login against, as of now.
    pub(super) fn users_now(&self) -> Arc<crate::users::AccessTable> {
        match &self.users {
            Some(rx) => rx.borrow().clone(),
            None => Arc::new(crate::users::table_from_config(&self.config)),
        }
    }

    /// Record the socket's addresses, reported with the connection to the
    /// master (and so listed by the management API).
    pub fn set_addresses(&mut self, peer: SocketAddr, local: Option<SocketAddr>) {
        self.addresses = (Some(peer), local);
    }

    /// Negotiated frame_max: the limit for frames we send.
    pub fn frame_max(&self) -> u32 {
        self.frame_max
    }

    /// The limit for frames we accept: frame_max plus the 8 bytes of frame overhead,
    /// the slack RabbitMQ allows (FRAME_SIZE_FUDGE) because some clients fill the
    /// payload up to frame_max.
    pub fn decode_limit(&self) -> u32 {
        if self.frame_max == 0 {
            0
        } else {
            self.frame_max.saturating_add(8)
        }
    }

    /// Whether the protocol header is still expected.
    pub fn awaiting_header(&self) -> bool {
        self.phase == Phase::AwaitHeader
    }

    /// Whether the socket should be closed (nothing more will be read).
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Whether the connection must stop reading: a resource alarm is on and this
    /// connection publishes. Its socket then fills and TCP pushes back on the client,
    /// as RabbitMQ's flow control does.
    pub fn is_blocked(&self) -> bool {
        self.alarm.is_some() && self.has_published && self.phase == Phase::Open
    }

    fn client_wants_blocked(&self) -> bool {
        matches!(
            self.client_properties.inner().get("capabilities"),
            Some(AMQPValue::FieldTable(c)) if c.inner().get("connection.blocked") == Some(&AMQPValue::Boolean(true))
        )
    }

    /// Send connection.blocked / unblocked as the alarm and this connection's role change.
    fn update_blocked(&mut self, out: &mut Vec<Action>) {
        let should = self.is_blocked();
        if should && !self.blocked_sent {
            self.blocked_sent = true;
            if self.client_wants_blocked() {
                let reason = self.alarm.clone().unwrap_or_default();
                out.push(self.method(
                    0,
                    AMQPClass::Connection(mconn::AMQPMethod::Blocked(mconn::Blocked {
                        reason: ShortString::from(reason),
                    })),
                ));
            }
        } else if !should && self.blocked_sent {
            self.blocked_sent = false;
            if self.client_wants_blocked() {
                out.push(self.method(
                    0,
                    AMQPClass::Connection(mconn::AMQPMethod::Unblocked(mconn::Unblocked {})),
                ));
            }
        }
    }

    /// Record that bytes were written (heartbeats are only needed on a quiet link).
    pub fn note_sent(&mut self, now: Instant) {
        self.last_send = now;
    }

    /// The 8-byte protocol header check.
    pub fn on_header(&mut self, check: HeaderCheck, now: Instant, out: &mut Vec<Action>) {
        self.last_recv = now;
        match check {
            HeaderCheck::Incomplete => {}
            HeaderCheck::Bad => {
                // AMQP 0-9-1 §4.2.2: answer with the header we support, then close.
                out.push(Action::WriteRaw(Bytes::from_static(&PROTOCOL_HEADER)));
                self.closed(out);
            }
            HeaderCheck::Ok => {
                self.phase = Phase::AwaitStartOk;
                out.push(self.method(
                    0,
                    AMQPClass::Connection(mconn::AMQPMethod::Start(self.start_method())),
                ));
            }
        }
    }

    fn method(&self, channel: u16, method: AMQPClass) -> Action {
        Action::Write(Frame::Method { channel, method })
    }

    /// A frame that could not be decoded: close with the code RabbitMQ sends.
    pub fn on_decode_error(&mut self, e: &FrameError, out: &mut Vec<Action>) {
        let (class_id, method_id) = e.class_method();
        let code = e.reply_code();
        self.close_connection_raw(code, e.reply_text(), class_id, method_id, out);
    }

    /// A tick of the clock: heartbeats and timeouts.
    pub fn on_tick(&mut self, now: Instant, out: &mut Vec<Action>) {
        match self.phase {
            Phase::Closed => {}
            Phase::Closing => {
                if self
                    .closing_since
                    .is_some_and(|t| now.duration_since(t) >= CLOSE_TIMEOUT)
                {
                    self.closed(out);
                }
            }
            Phase::Open | Phase::AwaitOpenOk => {
                if self.heartbeat == 0 {
                    return;
                }
                let hb = Duration::from_secs(u64::from(self.heartbeat));
                // A blocked connection is not read, so its heartbeats are not seen either.
                if now.duration_since(self.last_recv) >= hb * 2 && !self.is_blocked() {
                    // Two missed intervals: the peer is gone. RabbitMQ closes the socket.
                    tracing::info!(
                        conn = self.id,
                        "missed heartbeats from client, timeout: {}s",
                        self.heartbeat
                    );
                    self.closed(out);
                    return;
                }
                if now.duration_since(self.last_send) >= hb / 2 {
                    out.push(Action::Write(Frame::Heartbeat { channel: 0 }));
                    self.last_send = now;
                }
            }
            _ => {
                if now.duration_since(self.started) >= HANDSHAKE_TIMEOUT {
                    tracing::info!(conn = self.id, "handshake timeout");
                    self.closed(out);
                }
            }
        }
    }

    fn closed(&mut self, out: &mut Vec<Action>) {
        if self.told_master {
            self.told_master = false;
            out.push(Action::ToMaster(Input::Disconnected { conn: self.id }));
        }
        self.phase = Phase::Closed;
        out.push(Action::Close);
    }

    /// After our close-ok, wait for the client to close the socket, as RabbitMQ does,
    /// so the client reads close-ok before it sees EOF. `on_tick` ends the wait.
    fn linger(&mut self, out: &mut Vec<Action>) {
        if self.told_master {
            self.told_master = false;
            out.push(Action::ToMaster(Input::Disconnected { conn: self.id }));
        }
        self.phase = Phase::Closing;
        self.lingering = true;
        self.closing_since = Some(self.last_recv);
    }

    /// The socket reached EOF or failed.
    pub fn on_eof(&mut self, out: &mut Vec<Action>) {
        if self.phase != Phase::Closed {
            self.closed(out);
        }
    }

    /// Close the connection with an error (connection.close, then wait for close-ok).
    pub fn close_connection(&mut self, e: &AmqpError, out: &mut Vec<Action>) {
        self.close_connection_raw(e.code as u16, e.reply_text(), e.class_id, e.method_id, out);
    }

    fn close_connection_raw(
        &mut self,
        code: u16,
        text: String,
        class_id: u16,
        method_id: u16,
        out: &mut Vec<Action>,
    ) {
        if matches!(self.phase, Phase::Closing | Phase::Closed) {
            return;
        }
        tracing::debug!(conn = self.id, code, %text, "closing connection");
        out.push(self.method(
            0,
            AMQPClass::Connection(mconn::AMQPMethod::Close(mconn::Close {
                reply_code: code,
                reply_text: ShortString::from(text),
                class_id,
                method_id,
            })),
        ));
        if self.told_master {
            self.told_master = false;
            out.push(Action::ToMaster(Input::Disconnected { conn: self.id }));
        }
        self.phase = Phase::Closing;
        self.closing_since = Some(self.last_recv.max(self.last_send));
    }

    /// Server shutdown: close with 320 CONNECTION_FORCED.
    pub fn shutdown(&mut self, now: Instant, out: &mut Vec<Action>) {
        let e = AmqpError::new(
            ReplyCode::ConnectionForced,
            "broker forced connection closure with reason 'shutdown'",
        );
        self.close_connection(&e, out);
        self.closing_since = Some(now);
    }

    /// A message from the master.
    pub fn on_master(&mut self, msg: ToConn, out: &mut Vec<Action>) {
        if matches!(self.phase, Phase::Closing | Phase::Closed) {
            return;
        }
        match msg {
            ToConn::Opened => {
                self.phase = Phase::Open;
                out.push(self.method(
                    0,
                    AMQPClass::Connection(mconn::AMQPMethod::OpenOk(mconn::OpenOk {})),
                ));
            }
            ToConn::Alarm(reason) => {
                self.alarm = reason;
                self.update_blocked(out);
            }
            ToConn::CloseConnection(e) => {
                // The master already forgot this connection.
                self.told_master = false;
                self.close_connection(&e, out);
            }
            ToConn::CloseChannel(ch, e) => {
                if let Some(slot) = self.channels.get_mut(&ch) {
                    slot.state = SlotState::ClosingByServer;
                    slot.content = None;
                }
                out.push(self.method(
                    ch,
                    AMQPClass::Channel(mch::AMQPMethod::Close(mch::Close {
                        reply_code: e.code as u16,
                        reply_text: ShortString::from(e.reply_text()),
                        class_id: e.class_id,
                        method_id: e.method_id,
                    })),
                ));
            }
            ToConn::Method(ch, AMQPClass::Channel(mch::AMQPMethod::CloseOk(ok))) => {
                self.channels.remove(&ch);
                out.push(self.method(ch, AMQPClass::Channel(mch::AMQPMethod::CloseOk(ok))));
            }
            other => out.push(Action::Out(other)),
        }
    }

    /// One decoded frame from the client.
    pub fn on_frame(&mut self, frame: Frame, now: Instant, out: &mut Vec<Action>) {
        self.last_recv = now;
        match self.phase {
            Phase::Closed | Phase::AwaitHeader => {}
            Phase::Closing => {
                // Only close-ok (or a crossing close) matters now.
                if let Frame::Method {
                    channel: 0,
                    method: AMQPClass::Connection(m),
                } = frame
                {
                    match m {
                        mconn::AMQPMethod::CloseOk(_) => self.closed(out),
                        mconn::AMQPMethod::Close(_) => {
                            out.push(self.method(
                                0,
                                AMQPClass::Connection(mconn::AMQPMethod::CloseOk(
                                    mconn::CloseOk {},
                                )),
                            ));
                            if !self.lingering {
                                self.closed(out);
                            }
                        }
                        _ => {}
                    }
                }
            }
            Phase::AwaitStartOk | Phase::AwaitTuneOk | Phase::AwaitOpen | Phase::AwaitOpenOk => {
                self.handshake_frame(frame, out)
            }
            Phase::Open => self.open_frame(frame, out),
        }
    }

    fn open_frame(&mut self, frame: Frame, out: &mut Vec<Action>) {
        let ch = frame.channel();
        if ch == 0 {
            return self.channel_zero(frame, out);
        }
        if let Frame::Heartbeat { .. } = frame {
            let e = AmqpError::new(
                ReplyCode::FrameError,
                format!("heartbeat frame on channel {ch}"),
            );
            return self.close_connection(&e, out);
        }
        let Some(slot) = self.channels.get_mut(&ch) else {
            return match frame {
                Frame::Method {
                    method: AMQPClass::Channel(mch::AMQPMethod::Open(_)),
                    ..
                } => {
                    // RabbitMQ limits how many channels are open, not their numbers.
                    if self.channel_max != 0 && self.channels.len() >= usize::from(self.channel_max)
                    {
                        let e = AmqpError::new(
                            ReplyCode::NotAllowed,
                            format!(
                                "number of channels opened ({}) has reached the negotiated channel_max ({})",
                                self.channels.len(),
                                self.channel_max
                            ),
                        )
                        .on(20, 10);
                        return self.close_connection(&e, out);
                    }
                    self.channels.insert(
                        ch,
                        Slot {
                            state: SlotState::Open,
                            content: None,
                        },
                    );
                    out.push(Action::ToMaster(Input::ChannelOpen { conn: self.id, ch }));
                }
                other => {
                    let (cid, mid) = method_ids(&other);
                    let e = AmqpError::new(ReplyCode::ChannelError, "expected 'channel.open'")
                        .on(cid, mid);
                    self.close_connection(&e, out)
                }
            };
        };
        match slot.state {
            SlotState::ClosingByClient => {}
            SlotState::ClosingByServer => {
                if let Frame::Method {
                    method: AMQPClass::Channel(m),
                    ..
                } = frame
                {
                    match m {
                        mch::AMQPMethod::CloseOk(_) => {
                            self.channels.remove(&ch);
                        }
                        // A crossing close: answer it, and keep waiting for the
                        // close-ok to ours, which the client still sends (RabbitMQ
                        // waits for it too). Dropping the slot here would make that
                        // close-ok a frame on an unopened channel: 504 for the whole
                        // connection (amqp091-go's TestChannelExceptionWithCloseIssue43).
                        mch::AMQPMethod::Close(_) => {
                            out.push(self.method(
                                ch,
                                AMQPClass::Channel(mch::AMQPMethod::CloseOk(mch::CloseOk {})),
                            ));
                        }
                        // A client that never sent that close-ok reuses the number.
                        mch::AMQPMethod::Open(open) => {
                            self.channels.remove(&ch);
                            let frame = Frame::Method {
                                channel: ch,
                                method: AMQPClass::Channel(mch::AMQPMethod::Open(open)),
                            };
                            self.open_frame(frame, out);
                        }
                        _ => {}
                    }
                }
            }
            SlotState::Open => {
                if slot.content.is_some() {
                    return self.content_frame(ch, frame, out);
                }
                match frame {
                    Frame::Method { method, .. } => self.channel_method(ch, method, out),
                    _ => {
                        let e = AmqpError::new(
                            ReplyCode::UnexpectedFrame,
                            format!(
                                "expected method frame, got non method frame instead on channel {ch}"
                            ),
                        );
                        self.close_connection(&e, out)
                    }
                }
            }
        }
    }

    fn channel_zero(&mut self, frame: Frame, out: &mut Vec<Action>) {
        match frame {
            Frame::Heartbeat { .. } => {}
            Frame::Method {
                method: AMQPClass::Connection(mconn::AMQPMethod::Close(_)),
                ..
            } => {
                if self.told_master {
                    self.told_master = false;
                    out.push(Action::ToMaster(Input::Disconnected { conn: self.id }));
                }
                out.push(self.method(
                    0,
                    AMQPClass::Connection(mconn::AMQPMethod::CloseOk(mconn::CloseOk {})),
                ));
                self.linger(out);
            }
            // A new secret (token refresh): with password logins there is nothing to
            // re-check, so accept it as RabbitMQ's internal backend does.
            Frame::Method {
                method: AMQPClass::Connection(mconn::AMQPMethod::UpdateSecret(_)),
                ..
            } => out.push(self.method(
                0,
                AMQPClass::Connection(mconn::AMQPMethod::UpdateSecretOk(mconn::UpdateSecretOk {})),
            )),
            // Clients may tell us they are blocked/unblocked; ignore.
            Frame::Method {
                method:
                    AMQPClass::Connection(
                        mconn::AMQPMethod::Blocked(_)
                        | mconn::AMQPMethod::Unblocked(_)
                        | mconn::AMQPMethod::CloseOk(_),
                    ),
                ..
            } => {}
            Frame::Method { method, .. } => {
                let e = AmqpError::command_invalid("unexpected method on channel 0")
                    .on(method.get_amqp_class_id(), method.get_amqp_method_id());
                self.close_connection(&e, out)
            }
            _ => {
                let e = AmqpError::new(ReplyCode::UnexpectedFrame, "content frame on channel 0");
                self.close_connection(&e, out)
            }
        }
    }

    fn channel_method(&mut self, ch: u16, method: AMQPClass, out: &mut Vec<Action>) {
        match method {
            AMQPClass::Channel(mch::AMQPMethod::Open(_)) => {
                let e = AmqpError::new(ReplyCode::ChannelError, "second 'channel.open' seen")
                    .on(20, 10);
                self.close_connection(&e, out)
            }
            AMQPClass::Channel(mch::AMQPMethod::Close(_)) => {
                if let Some(slot) = self.channels.get_mut(&ch) {
                    slot.state = SlotState::ClosingByClient;
                }
                out.push(Action::ToMaster(Input::ChannelClose { conn: self.id, ch }));
            }
            AMQPClass::Channel(mch::AMQPMethod::CloseOk(_)) => {}
            AMQPClass::Basic(basic::AMQPMethod::Publish(p)) => {
                if !self.has_published {
                    self.has_published = true;
                    self.update_blocked(out);
                }
                if let Some(slot) = self.channels.get_mut(&ch) {
                    slot.content = Some(PendingContent {
                        publish: p,
                        header: None,
                        parts: smallvec::SmallVec::new(),
                        received: 0,
                    });
                }
            }
            AMQPClass::Connection(_) => {
                let e = AmqpError::command_invalid(format!("connection method on channel {ch}"))
                    .on(method.get_amqp_class_id(), method.get_amqp_method_id());
                self.close_connection(&e, out)
            }
            method => out.push(Action::ToMaster(Input::Method {
                conn: self.id,
                ch,
                method,
            })),
        }
    }
}

fn method_ids(f: &Frame) -> (u16, u16) {
    match f {
        Frame::Method { method, .. } => (method.get_amqp_class_id(), method.get_amqp_method_id()),
        _ => (0, 0),
    }
}

mod content;
mod handshake;

#[cfg(test)]
mod tests;
