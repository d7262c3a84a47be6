//! What the connection asks of its driver and of the broker: bytes to write,
//! requests to answer, publishes to append, subscriptions to feed, and the end
//! of the connection.

use std::sync::Arc;

use bytes::Bytes;

use crate::stream::code::ResponseCode;
use crate::stream::error::StreamFrameError;
use crate::stream::types::{OffsetSpec, Properties, PublishedMessage};

/// One thing the connection wants done, in the order it must be done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write these bytes (one or more whole frames) to the socket.
    Write(Bytes),
    /// Write a deliver frame: `head` (from `encode_deliver_header`), then the
    /// chunk, with nothing in between (a driver may `sendfile` the chunk).
    WriteChunk {
        /// The deliver frame's size, key, version, subscription id and
        /// (version 2) committed chunk id.
        head: Bytes,
        /// The chunk as the broker handed it over.
        chunk: ChunkSource,
    },
    /// Check SASL credentials; answer with `Input::Authenticated`. The
    /// mechanism is one of the configured ones.
    Authenticate {
        /// The mechanism the client chose.
        mechanism: String,
        /// The client's SASL response (`None`: the client sent null).
        data: Option<Bytes>,
    },
    /// May `user` open `vhost`? Answer with `Input::VhostOpened`.
    OpenVhost {
        /// The authenticated user.
        user: String,
        /// The virtual host the client asks for.
        vhost: String,
    },
    /// A request the broker answers with `Input::Reply` under the same
    /// correlation id.
    Request {
        /// The client's correlation id, echoed in the reply.
        correlation_id: u32,
        /// What the client asks.
        request: Request,
    },
    /// Append these messages to the publisher's stream; confirm or fail each
    /// publishing id later with `Input::PublishConfirm` / `Input::PublishError`.
    Publish {
        /// The publisher's id on this connection.
        publisher_id: u8,
        /// The stream it was declared on (shared: no copy per publish).
        stream: Arc<str>,
        /// Its deduplication reference (`None`: declared with an empty one).
        reference: Option<Arc<str>>,
        /// The publish frame's version (2: messages carry filter values).
        version: u16,
        /// The messages as decoded, slices of the frame (no copies).
        messages: Vec<PublishedMessage>,
    },
    /// The client granted a subscription more chunks.
    Credit {
        /// The subscription.
        subscription_id: u8,
        /// How many more chunks it may be sent (chunks the connection had
        /// queued for want of credit are sent first and use some of it).
        credit: u16,
    },
    /// The client ended a subscription (already answered OK); deliver nothing
    /// more for it. Chunks the connection held for it are dropped.
    Unsubscribe {
        /// The subscription.
        subscription_id: u8,
        /// Its stream.
        stream: String,
    },
    /// The client deleted a publisher (already answered OK); confirms for it
    /// are dropped from now on.
    DeletePublisher {
        /// The publisher.
        publisher_id: u8,
        /// Its stream.
        stream: String,
        /// Its reference, if any.
        reference: Option<String>,
    },
    /// Store a consumer offset (the protocol has no answer for it).
    StoreOffset {
        /// The consumer's reference.
        reference: String,
        /// The stream.
        stream: String,
        /// The offset.
        offset: u64,
    },
    /// The client answered a consumer update (single active consumer).
    ConsumerUpdateAnswered {
        /// The subscription the update was about.
        subscription_id: u8,
        /// The client's code.
        code: ResponseCode,
        /// Where the consumer starts (`OffsetSpec::None`: where it was).
        offset: OffsetSpec,
    },
    /// The connection is over: write what was emitted before this action, then
    /// close the socket. Nothing follows it.
    Closed(CloseReason),
}

/// A chunk handed to the connection for a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkSource {
    /// The chunk's bytes (48-byte header and data entries).
    Bytes(Bytes),
    /// A chunk the driver sends itself (from a segment file, say): its length,
    /// and a token of the broker's choosing that tells the driver which.
    External {
        /// The chunk's length in bytes.
        len: u32,
        /// Opaque to the connection; handed back in `Action::WriteChunk`.
        token: u64,
    },
}

impl ChunkSource {
    /// The chunk's length in bytes.
    pub fn len(&self) -> usize {
        match self {
            ChunkSource::Bytes(b) => b.len(),
            ChunkSource::External { len, .. } => *len as usize,
        }
    }

    /// Whether the chunk has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// The client closed (its close was answered OK).
    ClientClosed {
        /// The client's closing code.
        code: u16,
        /// The client's reason.
        reason: String,
    },
    /// The server closed with this code and the client answered (or the
    /// answer did not come in time: `answered: false`).
    ServerClosed {
        /// The code of the server's close.
        code: ResponseCode,
        /// Whether the client's close response arrived.
        answered: bool,
    },
    /// A fault before open: RabbitMQ drops such a connection without a close
    /// (a frame before its phase, garbage, an oversized frame, a close).
    HandshakeFault(HandshakeFault),
    /// SASL failed (the failure was answered with this code).
    AuthenticationFailed(ResponseCode),
    /// The user may not open the virtual host (answered 0x0c).
    VhostAccessRefused,
    /// The handshake did not reach open in time.
    HandshakeTimeout,
    /// Nothing was received for two heartbeat intervals.
    HeartbeatTimeout,
    /// The broker dropped the connection without a close ([`Input::Abort`](super::Input::Abort)).
    Aborted,
}

/// What went wrong before open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeFault {
    /// A frame that could not be split off or decoded.
    Frame(StreamFrameError),
    /// A well-formed frame that does not belong in this phase.
    Unexpected(crate::stream::command::Command),
}

/// A request the broker answers, by the client's correlation id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // fields are named as the protocol's specification names them
pub enum Request {
    /// Declare a publisher (its id is free on this connection and its
    /// reference is not taken on the stream). Answer `Reply::Code`: OK, or
    /// stream does not exist (0x02), not available (0x06), access refused (0x10).
    DeclarePublisher {
        publisher_id: u8,
        reference: Option<String>,
        stream: String,
    },
    /// Subscribe (the id is free on this connection). Answer `Reply::Code`;
    /// after OK the broker delivers chunks with `Input::Deliver`, `credit` of
    /// them before it is told of more (`Action::Credit`).
    Subscribe {
        subscription_id: u8,
        stream: String,
        offset: OffsetSpec,
        credit: u16,
        properties: Properties,
    },
    /// Create a stream. Answer `Reply::Code`.
    CreateStream {
        stream: String,
        arguments: Properties,
    },
    /// Delete a stream. Answer `Reply::Code`; on OK the connection forgets its
    /// publishers and subscriptions on the stream and sends a metadata update.
    DeleteStream { stream: String },
    /// Create a super stream. Answer `Reply::Code`.
    CreateSuperStream {
        name: String,
        partitions: Vec<String>,
        binding_keys: Vec<String>,
        arguments: Properties,
    },
    /// Delete a super stream. Answer `Reply::Code`.
    DeleteSuperStream { name: String },
    /// Brokers, leaders and replicas. Answer `Reply::Metadata`.
    Metadata { streams: Vec<String> },
    /// A stored consumer offset. Answer `Reply::Offset`.
    QueryOffset { reference: String, stream: String },
    /// A publisher reference's last publishing id. Answer `Reply::Sequence`.
    QueryPublisherSequence { reference: String, stream: String },
    /// The partitions a routing key goes to. Answer `Reply::Streams`.
    Route {
        routing_key: String,
        super_stream: String,
    },
    /// The partitions of a super stream. Answer `Reply::Streams`.
    Partitions { super_stream: String },
    /// A stream's statistics. Answer `Reply::Stats`.
    StreamStats { stream: String },
    /// Resolve an offset specification. Answer `Reply::Offset`.
    ResolveOffsetSpec {
        stream: String,
        offset: OffsetSpec,
        properties: Option<Properties>,
    },
}
