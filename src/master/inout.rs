//! What goes into and out of the master core.
//!
//! The master is sans-IO: the server feeds it [`Input`]s and carries out its
//! [`Output`]s (frames to connections, appends to the log). Keeping tokio types out
//! of these enums is what lets tests drive the master directly.

use crate::broker::message::Message;
use crate::broker::stream_record::ChunkMark;
use crate::error::AmqpError;
use bytes::Bytes;
use stablemq_protocol::{AMQPClass, BasicProperties, ByteString, FieldTable, Publish};
use std::net::SocketAddr;
use std::sync::Arc;

/// A connection's id, unique for the life of the process.
pub type ConnId = u64;

/// Something that happened, for the master to act on.
#[derive(Debug)]
// Messages move once through a channel; boxing the big variants would add an
// allocation per message on the hot path.
#[allow(clippy::large_enum_variant)]
pub enum Input {
    /// A client finished SASL and asked for a vhost (connection.open).
    Open {
        /// Connection.
        conn: ConnId,
        /// Authenticated user name.
        user: String,
        /// Requested vhost.
        vhost: String,
        /// What the handshake learnt, kept for the management API (boxed: it
        /// travels once per connection, and keeps `Input` small).
        info: Box<ConnInfo>,
    },
    /// channel.open from the client.
    ChannelOpen {
        /// Connection.
        conn: ConnId,
        /// Channel number.
        ch: u16,
    },
    /// channel.close from the client; the master answers close-ok.
    ChannelClose {
        /// Connection.
        conn: ConnId,
        /// Channel number.
        ch: u16,
    },
    /// Any other channel-level method without content.
    Method {
        /// Connection.
        conn: ConnId,
        /// Channel number.
        ch: u16,
        /// The method.
        method: AMQPClass,
    },
    /// basic.publish with its assembled content.
    Publish {
        /// Connection.
        conn: ConnId,
        /// Channel number.
        ch: u16,
        /// The publish method.
        publish: Publish,
        /// Content header properties (boxed as they were decoded, into the message).
        properties: Arc<BasicProperties>,
        /// Assembled body.
        body: Bytes,
    },
    /// The stream protocol's server-side tracking, on a channel of a stream
    /// connection: store an offset or a publisher sequence (no answer), or
    /// query one (answered with `ToConn::Tracked` once stable, I1).
    StreamTrack {
        /// Connection.
        conn: ConnId,
        /// Channel number.
        ch: u16,
        /// What to do.
        op: TrackOp,
    },
    /// Single active consumer (stream protocol): a subscription joins or
    /// leaves its group, or answered that it gave way (`master::sac`).
    /// Not bound to a channel; answered with `ToConn::SingleActive`.
    SingleActive {
        /// Connection.
        conn: ConnId,
        /// What happened.
        op: SacOp,
    },
    /// The connection layer refused something on a channel (e.g. an oversized
    /// message); the master closes that channel.
    ChannelError {
        /// Connection.
        conn: ConnId,
        /// Channel number.
        ch: u16,
        /// Why.
        error: crate::error::AmqpError,
    },
    /// The connection is gone (socket closed, or closed by either side).
    Disconnected {
        /// Connection.
        conn: ConnId,
    },
    /// Time passed: expire messages and queues, check consumer timeouts.
    Tick,
    /// The log is durable on a quorum up to this index.
    Stable {
        /// Highest stable index.
        index: u64,
    },
    /// An operator closes a connection (`DELETE /api/connections/{name}`):
    /// it gets 320 CONNECTION_FORCED with `reason`.
    ForceClose {
        /// Connection.
        conn: ConnId,
        /// Text after "CONNECTION_FORCED - ".
        reason: String,
    },
    /// A management write (users, vhosts, permissions, definitions); the
    /// answer is handed to `reply` once its events are stable.
    Admin {
        /// What to do.
        op: super::admin::AdminOp,
        /// Where the answer goes.
        reply: super::admin::AdminReply,
    },
}

/// A stream tracking request ([`Input::StreamTrack`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrackOp {
    /// Store `value` for `reference` on `stream`.
    Store {
        /// The stream.
        stream: String,
        /// Offset or sequence.
        kind: crate::broker::event::Tracking,
        /// The consumer's or publisher's reference.
        reference: String,
        /// The value.
        value: u64,
    },
    /// What is stored for `reference` on `stream`.
    Query {
        /// The stream.
        stream: String,
        /// Offset or sequence.
        kind: crate::broker::event::Tracking,
        /// The reference.
        reference: String,
    },
    /// The streams a super stream (an exchange) routes `routing_key` to.
    Route {
        /// The super stream's exchange.
        exchange: String,
        /// The routing key.
        routing_key: String,
    },
    /// A super stream's partitions: the streams bound to its exchange, in
    /// `x-stream-partition-order`.
    Partitions {
        /// The super stream's exchange.
        exchange: String,
    },
    /// A stream's statistics (the stream protocol's stream stats).
    Stats {
        /// The stream.
        stream: String,
    },
    /// The offset a subscription to `stream` starting `at` would start
    /// from (resolve offset spec, RabbitMQ 4.3+), answered
    /// [`TrackAnswer::Resolved`]; read on the stream is checked first, as
    /// RabbitMQ does.
    Resolve {
        /// The stream.
        stream: String,
        /// The offset specification.
        at: crate::broker::stream::StartAt,
    },
    /// Whether the connection's user may create or delete the super stream
    /// `exchange` (answered [`TrackAnswer::Permitted`]): configure on the
    /// exchange; with `partitions`, also read on the exchange and configure
    /// and write on each partition (RabbitMQ's
    /// `check_super_stream_management_permitted`).
    SuperStreamPermitted {
        /// The super stream's exchange.
        exchange: String,
        /// Its partitions, for the whole check.
        partitions: Option<Vec<String>>,
    },
    /// Whether the exchange or any of the queues exists, of any type
    /// (answered [`TrackAnswer::Exists`]): a new super stream takes none.
    AnyExists {
        /// The exchange.
        exchange: String,
        /// The queues.
        queues: Vec<String>,
    },
}

/// A single active consumer request ([`Input::SingleActive`]); a group is
/// the connection's virtual host, `stream` and `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SacOp {
    /// A subscription joins its group: answered with
    /// [`SacNote::Registered`], then updates as it becomes active.
    Register {
        /// The subscription id on the connection.
        subscription: u8,
        /// The stream.
        stream: String,
        /// The consumer name (the group).
        name: String,
        /// The super stream the stream is a partition of, if the
        /// subscription said so.
        super_stream: Option<String>,
    },
    /// A subscription leaves its group.
    Unregister {
        /// The subscription id on the connection.
        subscription: u8,
        /// The stream.
        stream: String,
        /// The consumer name.
        name: String,
    },
    /// A subscription told to step down answered its consumer update.
    SteppedDown {
        /// The subscription id on the connection.
        subscription: u8,
        /// The stream.
        stream: String,
        /// The consumer name.
        name: String,
    },
}

/// What the master tells a connection of its single active consumers.
#[derive(Debug)]
pub enum SacNote {
    /// The answer to [`SacOp::Register`].
    Registered {
        /// The subscription.
        subscription: u8,
        /// Joined, or why not (no such stream, access refused).
        result: Result<(), AmqpError>,
    },
    /// The subscription becomes the active consumer of its group, or
    /// gives way (`stepping_down`: its answer goes back as
    /// [`SacOp::SteppedDown`]).
    Update {
        /// The subscription.
        subscription: u8,
        /// Whether it is active from now on.
        active: bool,
        /// It gives way to another member.
        stepping_down: bool,
    },
}

/// The master's answer to a [`TrackOp`] query, sent as [`ToConn::Tracked`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrackAnswer {
    /// A stored offset or sequence, if one is (`Err(())`: no such stream).
    Value(Result<Option<u64>, ()>),
    /// Route's or partitions' streams (`Err(())`: no such exchange).
    Streams(Result<Vec<String>, ()>),
    /// A stream's statistics by name (`Err(())`: no such stream).
    Stats(Result<Vec<(String, i64)>, ()>),
    /// Where a subscription would start ([`TrackOp::Resolve`]).
    Resolved(Result<u64, NotResolved>),
    /// The user may do it.
    Permitted(bool),
    /// Something of that name exists.
    Exists(bool),
}

/// Why [`TrackOp::Resolve`] has no offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotResolved {
    /// The user may not read the stream.
    AccessRefused,
    /// There is no stream of that name.
    NoStream,
}

/// What a connection's handshake negotiated, as the management API lists it
/// (`/api/connections`). The master only stores it: nothing here changes how
/// the connection is served.
#[derive(Debug, Clone, Default)]
pub struct ConnInfo {
    /// The client's address (None in tests that drive the master directly).
    pub peer: Option<SocketAddr>,
    /// The broker's address the client connected to.
    pub local: Option<SocketAddr>,
    /// Client properties from connection.start-ok (product, capabilities,
    /// `connection_name`).
    pub client_properties: FieldTable,
    /// SASL mechanism the client logged in with.
    pub auth_mechanism: String,
    /// Negotiated frame_max.
    pub frame_max: u32,
    /// Negotiated channel_max.
    pub channel_max: u16,
    /// Negotiated heartbeat in seconds.
    pub heartbeat_secs: u16,
    /// The TLS session of an AMQPS connection.
    pub tls: Option<crate::tls::TlsInfo>,
    /// The protocol the client speaks.
    pub protocol: ClientProtocol,
}

/// The protocol a client connection speaks: to the master both are sessions
/// of channels, but the management API and Prometheus tell them apart, as
/// RabbitMQ does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClientProtocol {
    /// AMQP 0-9-1 (and AMQPS).
    #[default]
    Amqp091,
    /// The RabbitMQ stream protocol, through the stream bridge.
    Stream,
}

impl ClientProtocol {
    /// Both, in the order RabbitMQ lists their series.
    pub const ALL: [ClientProtocol; 2] = [ClientProtocol::Amqp091, ClientProtocol::Stream];

    /// The index of the protocol in per-protocol arrays (AMQP 0-9-1 first).
    pub fn index(self) -> usize {
        match self {
            ClientProtocol::Amqp091 => 0,
            ClientProtocol::Stream => 1,
        }
    }

    /// The management API's `protocol` of a connection (RabbitMQ 3.10's).
    pub fn display_name(self) -> &'static str {
        match self {
            ClientProtocol::Amqp091 => "AMQP 0-9-1",
            ClientProtocol::Stream => "stream",
        }
    }

    /// rabbitmq_prometheus's `protocol` label.
    pub fn label(self) -> &'static str {
        match self {
            ClientProtocol::Amqp091 => "amqp091",
            ClientProtocol::Stream => "stream",
        }
    }
}

/// Something the server must do.
#[derive(Debug)]
// Messages move once through a channel; boxing the big variants would add an
// allocation per message on the hot path.
#[allow(clippy::large_enum_variant)]
pub enum Output {
    /// Send to one connection's task.
    ToConn(ConnId, ToConn),
    /// Append an encoded event to the log at `index` (the master numbers its
    /// appends consecutively; the log checks the numbering, I3).
    Append {
        /// The entry's log index.
        index: u64,
        /// The encoded event.
        entry: Bytes,
    },
}

/// The master's output buffer: what its steps produced, in order, and the
/// consumer cancel notifications that go after a step's replies.
#[derive(Debug, Default)]
pub(super) struct Outputs {
    /// Outputs in the order they were produced.
    buf: Vec<Output>,
    /// basic.cancel notifications (conn, ch, consumer tag) of this step.
    cancels: Vec<(ConnId, u16, Arc<str>)>,
}

impl Outputs {
    /// Queue a message for a connection task.
    pub(super) fn send(&mut self, conn: ConnId, m: ToConn) {
        self.buf.push(Output::ToConn(conn, m));
    }

    /// Queue a log append.
    pub(super) fn append(&mut self, index: u64, entry: Bytes) {
        self.buf.push(Output::Append { index, entry });
    }

    /// Everything queued so far.
    pub(super) fn take(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.buf)
    }

    /// Everything queued so far; `empty` collects the next outputs.
    pub(super) fn swap(&mut self, empty: Vec<Output>) -> Vec<Output> {
        debug_assert!(empty.is_empty());
        std::mem::replace(&mut self.buf, empty)
    }

    /// Note a consumer to tell it is cancelled, once this step's replies are out.
    pub(super) fn cancel(&mut self, conn: ConnId, ch: u16, tag: Arc<str>) {
        self.cancels.push((conn, ch, tag));
    }

    /// The cancellations noted in this step.
    pub(super) fn take_cancels(&mut self) -> Vec<(ConnId, u16, Arc<str>)> {
        std::mem::take(&mut self.cancels)
    }
}

/// One stream entry for a stream-protocol subscription, as the master sends
/// it ([`ToConn::StreamRecords`]) and a slave reads it from its replica
/// (`server::stream::replica`); the bridge packs these into chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRecord {
    /// Delivery tag on the subscription's channel.
    pub delivery_tag: u64,
    /// The entry's offset.
    pub offset: u64,
    /// When it was stored (ms since the epoch).
    pub timestamp_ms: u64,
    /// The record a stream reader gets (`broker::stream_record::record_of`).
    pub record: Bytes,
    /// Where it stands in the chunk it was stored in.
    pub mark: ChunkMark,
    /// The trailer length of the chunk it starts (0 for the others).
    pub trailer: u32,
    /// Its filter value (publish v2, `x-stream-filter-value`), if any.
    pub filter_value: Option<Box<str>>,
}

/// A message for a connection task.
#[derive(Debug)]
// Deliveries (the hot variant) carry a `Message`, whose parts are shared
// (a copy of the queue's, no allocation); the rare `Return` has its
// properties behind an `Arc` like every message.
pub enum ToConn {
    /// connection.open accepted: send open-ok.
    Opened,
    /// Send a method frame without content.
    Method(u16, AMQPClass),
    /// Publisher confirm (ack or nack) of one tag; the connection may merge runs of
    /// acks into one `multiple` ack.
    Confirm {
        /// Channel.
        ch: u16,
        /// Publish sequence number.
        tag: u64,
        /// true = basic.ack, false = basic.nack.
        ack: bool,
    },
    /// basic.deliver with content.
    Deliver {
        /// Channel.
        ch: u16,
        /// Consumer tag.
        consumer_tag: Arc<str>,
        /// Delivery tag on this channel.
        delivery_tag: u64,
        /// Redelivered flag.
        redelivered: bool,
        /// The message.
        msg: Message,
    },
    /// Deliveries to a stream-protocol subscription's consumer (one that
    /// asked for records as stored, `RECORDS_ARG`), consecutive on `ch`:
    /// one message per visit of the stream, not one per entry, and each
    /// entry as the record a stream reader gets, not an AMQP message.
    StreamRecords {
        /// Channel.
        ch: u16,
        /// The entries, in offset order.
        records: Vec<StreamRecord>,
    },
    /// basic.get-ok with content.
    GetOk {
        /// Channel.
        ch: u16,
        /// Delivery tag.
        delivery_tag: u64,
        /// Redelivered flag.
        redelivered: bool,
        /// Messages left in the queue.
        message_count: u32,
        /// The message.
        msg: Message,
    },
    /// basic.return with content.
    Return {
        /// Channel.
        ch: u16,
        /// Reply code (312 NO_ROUTE).
        reply_code: u16,
        /// Reply text.
        reply_text: String,
        /// Exchange.
        exchange: ByteString,
        /// Routing key.
        routing_key: ByteString,
        /// Properties (shared, not inline: returns are rare, and inline they
        /// made every `ToConn`, deliveries included, 408 bytes to move
        /// instead of ~130).
        properties: Arc<BasicProperties>,
        /// Body.
        body: Bytes,
    },
    /// The answer to a `TrackOp` query (a stored value, or a super
    /// stream's streams).
    Tracked {
        /// Channel.
        ch: u16,
        /// The answer.
        value: TrackAnswer,
    },
    /// A stream was deleted in this connection's virtual host (stream
    /// protocol connections only: their publishers have no consumer whose
    /// cancel would tell them).
    StreamDeleted(String),
    /// Single active consumer news for a stream connection's subscription.
    SingleActive(SacNote),
    /// The master closed this channel (its state is already gone): send channel.close.
    CloseChannel(u16, AmqpError),
    /// The master closed the connection: send connection.close.
    CloseConnection(AmqpError),
    /// A resource alarm started (Some(reason)) or cleared (None): publishers are
    /// blocked while it lasts.
    Alarm(Option<String>),
}

impl ToConn {
    /// The channel this message is for; None for connection-level messages.
    pub fn channel(&self) -> Option<u16> {
        match self {
            ToConn::Method(ch, _)
            | ToConn::Confirm { ch, .. }
            | ToConn::Deliver { ch, .. }
            | ToConn::StreamRecords { ch, .. }
            | ToConn::GetOk { ch, .. }
            | ToConn::Return { ch, .. }
            | ToConn::Tracked { ch, .. }
            | ToConn::CloseChannel(ch, _) => Some(*ch),
            ToConn::Opened
            | ToConn::CloseConnection(_)
            | ToConn::Alarm(_)
            | ToConn::SingleActive(_)
            | ToConn::StreamDeleted(_) => None,
        }
    }
}
