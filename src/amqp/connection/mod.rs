//! One client connection as a pure state machine.
//!
//! Inputs are decoded frames, messages from the master, and clock ticks; outputs are
//! [`Action`]s. The machine owns the handshake (header, start, SASL, tune, open),
//! heartbeats, the channel table and content assembly (publish + header + body).
//! Channel semantics live in the master: this side only checks that frames arrive
//! on open channels in a valid order, as RabbitMQ's reader does.
//!
//! This module holds the connection and its inputs; `handshake` the phases
//! up to open, `channels` the frames of an open connection, `content`
//! content assembly, and `close` closing (by either side, or at shutdown).

use crate::config::Config;
use crate::fastmap::FastMap;
use crate::master::inout::{ConnId, Input, ToConn};
use bytes::Bytes;
use stablemq_protocol::methods::{channel as mch, connection as mconn};
use stablemq_protocol::{
    AMQPClass, AMQPValue, BasicProperties, FieldTable, Frame, FrameError, HeaderCheck,
    PROTOCOL_HEADER, Publish, ShortString,
};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    publish: Publish,
    /// (properties, body size) once the header frame arrived.
    header: Option<(Arc<BasicProperties>, u64)>,
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
    /// The TLS session, on an AMQPS connection: its verified client
    /// certificate is what SASL EXTERNAL logs in as.
    tls: Option<crate::tls::TlsInfo>,
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
            tls: None,
        }
    }

    /// This connection came over TLS with this session.
    pub fn set_tls(&mut self, tls: crate::tls::TlsInfo) {
        self.tls = Some(tls);
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

    /// Whether what the master sends on `ch` may reach the client: channel 0,
    /// or a channel that is open and not closing.
    fn channel_is_open(&self, ch: Option<u16>) -> bool {
        match ch {
            None | Some(0) => true,
            Some(ch) => self
                .channels
                .get(&ch)
                .is_some_and(|s| s.state == SlotState::Open),
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

    /// How often [`Connection::on_tick`] must run for this connection's
    /// clocks to be on time: often during the handshake and the close (their
    /// timeouts are seconds), a quarter of the heartbeat interval while open
    /// (a heartbeat then goes out between half and three quarters of the
    /// interval after the last frame sent, and a silent peer is noticed
    /// within a quarter interval of its two missed ones), rarely without
    /// heartbeats. An idle connection then costs its task a wake-up every
    /// 15 s at the usual 60 s heartbeat, not two a second.
    pub fn tick_every(&self) -> Duration {
        const FINE: Duration = Duration::from_millis(500);
        const IDLE: Duration = Duration::from_secs(60);
        match self.phase {
            Phase::Open | Phase::AwaitOpenOk if self.heartbeat == 0 => IDLE,
            Phase::Open | Phase::AwaitOpenOk => {
                (Duration::from_secs(u64::from(self.heartbeat)) / 4).clamp(FINE, IDLE)
            }
            _ => FINE,
        }
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
                // RabbitMQ's handshake_timeout: from the TCP connect, and the
                // socket is closed without a connection.close.
                let limit = Duration::from_millis(self.config.handshake_timeout_ms);
                if now.duration_since(self.started) >= limit {
                    tracing::info!(conn = self.id, "handshake timeout");
                    self.closed(out);
                }
            }
        }
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
            // A channel being closed, by either side, or closed already, gets
            // nothing but close and close-ok: a confirm, delivery or reply the
            // master made before it saw the close is dropped, as the channel
            // is gone (AMQP 0-9-1 §1.5.2.5: after channel.close, any other
            // method is discarded).
            other if !self.channel_is_open(other.channel()) => {}
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
}

mod channels;
mod close;
mod content;
mod handshake;

#[cfg(test)]
mod tests;
