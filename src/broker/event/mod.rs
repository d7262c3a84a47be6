//! Events: the only way the broker state changes (I4).
//!
//! The master turns each accepted operation into one `Event`. Durable ones are
//! appended to the log; all are applied in log order by [`crate::broker::Broker::apply`].
//! Everything apply needs is inside the event (server-chosen names, message ids,
//! routing decisions), so apply reads no clock and no randomness.

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use stablemq_protocol::{BasicProperties, ByteString, FieldTable};
use std::sync::Arc;

/// The exchange types StableMQ implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExchangeKind {
    /// Routing key equals binding key.
    Direct,
    /// Every bound destination.
    Fanout,
    /// Dotted-word patterns with `*` and `#`.
    Topic,
    /// Header tables with `x-match`.
    Headers,
}

impl ExchangeKind {
    /// Parse the exchange type name a client sends.
    pub fn parse(s: &str) -> Option<ExchangeKind> {
        match s {
            "direct" => Some(ExchangeKind::Direct),
            "fanout" => Some(ExchangeKind::Fanout),
            "topic" => Some(ExchangeKind::Topic),
            "headers" => Some(ExchangeKind::Headers),
            _ => None,
        }
    }

    /// The type name as clients spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
        }
    }
}

/// What a binding points at.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Destination {
    /// A queue by name.
    Queue(String),
    /// An exchange by name (exchange-to-exchange binding).
    Exchange(String),
}

/// A binding from a source exchange to a destination.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Binding {
    /// Source exchange name.
    pub source: String,
    /// Where matching messages go.
    pub destination: Destination,
    /// Binding key (pattern for topic exchanges).
    pub routing_key: String,
    /// Binding arguments (x-match and header values for headers exchanges).
    pub arguments: FieldTable,
}

/// A queue's declared shape; compared on redeclare.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueSpec {
    /// Survives restart.
    pub durable: bool,
    /// Deleted when the last consumer goes.
    pub auto_delete: bool,
    /// The owning connection, for exclusive queues.
    pub exclusive_owner: Option<u64>,
    /// Declared arguments (x-queue-type, ...).
    pub arguments: FieldTable,
}

/// An exchange's declared shape; compared on redeclare.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExchangeSpec {
    /// Routing algorithm.
    pub kind: ExchangeKind,
    /// Survives restart.
    pub durable: bool,
    /// Deleted when its last binding (as source) goes.
    pub auto_delete: bool,
    /// Clients cannot publish to it directly.
    pub internal: bool,
    /// Declared arguments.
    pub arguments: FieldTable,
}

/// One state change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// Messages move once through a channel; boxing the big variants would add an
// allocation per message on the hot path.
#[allow(clippy::large_enum_variant)]
pub enum Event {
    /// A vhost exists (from config or, later, the management API).
    VhostCreated {
        /// Name.
        vhost: String,
    },
    /// A vhost's description, tags and default queue type (management API,
    /// definitions); the vhost is created if missing.
    VhostMetadata {
        /// Name.
        vhost: String,
        /// Free text.
        description: String,
        /// Tags.
        tags: Vec<String>,
        /// `default_queue_type`, if set.
        default_queue_type: Option<String>,
    },
    /// A vhost was deleted with everything in it and every permission on it.
    VhostDeleted {
        /// Name.
        vhost: String,
    },
    /// A user was created or replaced. The hash is computed before the event
    /// (its salt is random), so every replica stores the same bytes (I4).
    UserPut {
        /// Login name.
        name: String,
        /// base64(salt ‖ hash), RabbitMQ's format; empty = no password login.
        password_hash: String,
        /// Hash function of `password_hash`.
        hashing_algorithm: crate::users::HashAlgorithm,
        /// Tags.
        tags: Vec<String>,
    },
    /// A user was deleted with its permissions.
    UserDeleted {
        /// Login name.
        name: String,
    },
    /// A user's configure/write/read regexes on a vhost.
    PermissionSet {
        /// User.
        user: String,
        /// Vhost.
        vhost: String,
        /// Configure regex.
        configure: String,
        /// Write regex.
        write: String,
        /// Read regex.
        read: String,
    },
    /// A user lost its permissions on a vhost.
    PermissionCleared {
        /// User.
        user: String,
        /// Vhost.
        vhost: String,
    },
    /// A user's topic permissions on one exchange.
    TopicPermissionSet {
        /// User.
        user: String,
        /// Vhost.
        vhost: String,
        /// Exchange.
        exchange: String,
        /// Write regex (routing keys of publishes).
        write: String,
        /// Read regex (binding keys).
        read: String,
    },
    /// Topic permissions cleared on one exchange, or on all (None).
    TopicPermissionCleared {
        /// User.
        user: String,
        /// Vhost.
        vhost: String,
        /// Exchange, or None for every exchange of the vhost.
        exchange: Option<String>,
    },
    /// An exchange was declared.
    ExchangeDeclared {
        /// Vhost.
        vhost: String,
        /// Name.
        name: String,
        /// Shape.
        spec: ExchangeSpec,
    },
    /// An exchange was deleted (with its bindings both ways).
    ExchangeDeleted {
        /// Vhost.
        vhost: String,
        /// Name.
        name: String,
    },
    /// A queue was declared.
    QueueDeclared {
        /// Vhost.
        vhost: String,
        /// Name (server-named queues carry the name the master chose).
        name: String,
        /// Shape.
        spec: QueueSpec,
    },
    /// A queue was deleted with its messages and bindings.
    QueueDeleted {
        /// Vhost.
        vhost: String,
        /// Name.
        name: String,
    },
    /// A binding was added.
    Bound {
        /// Vhost.
        vhost: String,
        /// The binding.
        binding: Binding,
    },
    /// A binding was removed.
    Unbound {
        /// Vhost.
        vhost: String,
        /// The binding.
        binding: Binding,
    },
    /// A message was routed to `queues`.
    Published {
        /// Vhost (shared with the publishing session: no copy per message;
        /// serde writes an `Arc<str>` as the string, so the log format is
        /// that of a `String`). Decoded through `names`: no allocation
        /// for a name the decoding thread saw lately.
        #[serde(deserialize_with = "names::deserialize")]
        vhost: Arc<str>,
        /// Exchange it was published to (serde writes a `ByteString` as the
        /// string, so the log format is that of a `String`; a shared decode
        /// slices it out of the entry, like the body).
        #[serde(deserialize_with = "shared_body::deserialize_str")]
        exchange: ByteString,
        /// Routing key.
        #[serde(deserialize_with = "shared_body::deserialize_str")]
        routing_key: ByteString,
        /// Id chosen by the master; unique and increasing.
        msg_id: u64,
        /// The master's clock at publish (ms since the Unix epoch): TTLs count from
        /// here, so replicas agree on expiry without reading their own clocks (I4).
        timestamp_ms: u64,
        /// Content properties (shared as decoded; serde encodes an `Arc` as
        /// its content).
        #[serde(deserialize_with = "shared_body::deserialize_properties")]
        properties: Arc<BasicProperties>,
        /// Body, shared by every queue copy.
        #[serde(deserialize_with = "shared_body::deserialize")]
        body: Bytes,
        /// Queues it was routed to, in routing order (encoded as a sequence
        /// of strings, as the `Vec<String>` it replaced).
        #[serde(deserialize_with = "names::deserialize_list")]
        queues: super::QueueList,
    },
    /// Messages left a queue (acked, rejected, purged, or delivered without ack).
    Removed {
        /// Vhost.
        vhost: String,
        /// Queue.
        queue: String,
        /// Message ids.
        msg_ids: Vec<u64>,
    },
    /// A policy was created or replaced (validated by the management API).
    PolicySet {
        /// Vhost.
        vhost: String,
        /// Name.
        name: String,
        /// Regex on object names.
        pattern: String,
        /// `queues`, `exchanges` or `all`.
        apply_to: String,
        /// Higher wins.
        priority: i64,
        /// The definition as JSON text (postcard cannot carry a free-form
        /// JSON value; the text decodes the same on every replica).
        definition: String,
    },
    /// A policy was removed; its objects fall back to the next match.
    PolicyCleared {
        /// Vhost.
        vhost: String,
        /// Name.
        name: String,
    },
    // New variants go last: postcard numbers variants by position, so logs
    // written before them still decode.
    /// A runtime parameter was set (validated by the management API); the
    /// vhost limits are the `vhost-limits` component's `limits` parameter.
    ParameterSet {
        /// Vhost.
        vhost: String,
        /// Component (`vhost-limits`, `shovel`, ...).
        component: String,
        /// Name.
        name: String,
        /// The value as JSON text (see `PolicySet::definition`).
        value: String,
    },
    /// A runtime parameter was removed.
    ParameterCleared {
        /// Vhost.
        vhost: String,
        /// Component.
        component: String,
        /// Name.
        name: String,
    },
    /// A global parameter was set.
    GlobalParameterSet {
        /// Name.
        name: String,
        /// The value as JSON text.
        value: String,
    },
    /// A global parameter was removed.
    GlobalParameterCleared {
        /// Name.
        name: String,
    },
    /// Some of a user's limits (`max-connections`, `max-channels`) changed
    /// (`PUT`/`DELETE /api/user-limits/...`, a definitions import): each key
    /// of `value` is set to its number, or removed when it is `null`; the
    /// other limits stay. Validated by the management API.
    UserLimitsSet {
        /// Login name.
        name: String,
        /// A JSON object text: limit name → number, or null to remove.
        value: String,
    },
    /// Retention removed a stream's oldest segments: its entries below
    /// `first_offset` are gone (the master decides it, so every replica and
    /// store drops the same ones, and a restore numbers what is left from
    /// `first_offset`). Kept in the state as a definition, like a declare.
    StreamTruncated {
        /// Vhost.
        vhost: String,
        /// Stream (queue) name.
        queue: String,
        /// The new offset of the oldest entry.
        first_offset: u64,
        /// Message ids of the entries removed, for the stores' state.
        msg_ids: Vec<u64>,
    },
    /// The stream protocol's server-side tracking: a consumer's stored
    /// offset, or a publisher's last publishing id (deduplication), by
    /// reference. Kept in the state as a definition.
    StreamTracked {
        /// Vhost.
        vhost: String,
        /// Stream (queue) name.
        queue: String,
        /// Which kind of tracking.
        kind: Tracking,
        /// The consumer's or publisher's reference.
        reference: String,
        /// The offset or publishing id.
        value: u64,
    },
}

/// What a stream tracks by reference (the stream protocol's store offset
/// and publisher sequence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Tracking {
    /// A consumer's stored offset.
    Offset,
    /// A publisher's last publishing id.
    Sequence,
}

/// An event could not be read back from the log.
#[derive(Debug, thiserror::Error)]
pub enum EventCodecError {
    /// The version byte is one this build does not know.
    #[error("unknown event encoding version {0}")]
    Version(u8),
    /// The payload is empty.
    #[error("empty event payload")]
    Empty,
    /// The payload does not decode.
    #[error("corrupt event: {0}")]
    Corrupt(#[from] postcard::Error),
}

/// Bumped whenever `Event`'s encoding changes, so old logs are refused, not misread.
const EVENT_FORMAT_VERSION: u8 = 3;

impl Event {
    /// Encode for the log: one version byte, then postcard. The master
    /// encodes with [`Event::encode_into`]; this is for one event on its own.
    pub fn encode(&self) -> Bytes {
        self.encode_into(&mut BytesMut::with_capacity(self.size_hint()))
    }

    /// [`Event::encode`], cut from `arena`, one buffer that entry after
    /// entry shares: no allocation per entry, one per [`Event::ARENA_CHUNK`]
    /// of log (or per entry bigger than that). A buffer stays alive while
    /// any entry cut from it does; the master's entries live until they are
    /// written and reduced, so chunks are soon free, and one whose entries
    /// are all gone is written over again.
    pub fn encode_into(&self, arena: &mut BytesMut) -> Bytes {
        let hint = self.size_hint();
        if arena.capacity() < hint {
            arena.reserve(hint.max(Self::ARENA_CHUNK));
        }
        arena.put_u8(EVENT_FORMAT_VERSION);
        // Written through `io::Write` (slices copied whole): `to_extend`
        // pushed a body through an iterator byte by byte, ~3k instructions
        // per 1 KB publish. postcard cannot fail writing to memory for these
        // types; a failure here is a bug.
        if let Err(e) = postcard::to_io(self, arena.writer()) {
            panic!("event encoding failed: {e}");
        }
        arena.split().freeze()
    }

    /// The smallest chunk [`Event::encode_into`] allocates.
    pub const ARENA_CHUNK: usize = 64 * 1024;

    /// Room for the encoding: a body plus its names, or a definition.
    fn size_hint(&self) -> usize {
        match self {
            Event::Published { body, .. } => body.len() + 256,
            _ => 128,
        }
    }

    /// [`Event::decode`], with a published body as a slice of `b` rather
    /// than a copy: for an event that lives briefly (the state's reducer
    /// drops it by the end of its window), since the body keeps the whole
    /// buffer `b` is part of alive (a replication frame of many entries).
    pub fn decode_shared(b: &Bytes) -> Result<Event, EventCodecError> {
        shared_body::with_source(b, || Event::decode(b))
    }

    /// Decode an entry read from the log.
    pub fn decode(b: &[u8]) -> Result<Event, EventCodecError> {
        let (&v, rest) = b.split_first().ok_or(EventCodecError::Empty)?;
        if v != EVENT_FORMAT_VERSION {
            return Err(EventCodecError::Version(v));
        }
        Ok(postcard::from_bytes(rest)?)
    }
}

mod names;
mod published;
mod shared_body;

pub use published::Published;

#[cfg(test)]
mod tests;
