//! What the broker tells a stream connection: the answers to what it asked,
//! and what happened on its side (chunks to deliver, confirms, a stream gone,
//! a close).

use bytes::Bytes;

use crate::stream::code::ResponseCode;
use crate::stream::types::{Broker, PublishingError, StreamMetadata};

/// An event from the broker, handed to `StreamConnection::handle`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The outcome of `Action::Authenticate`.
    Authenticated(AuthOutcome),
    /// The outcome of `Action::OpenVhost`: `true` if the user may open it.
    VhostOpened(bool),
    /// The answer to `Action::Request` with this correlation id.
    Reply {
        /// The request's correlation id.
        correlation_id: u32,
        /// The answer.
        reply: Reply,
    },
    /// Publishing ids of a publisher now stored (sent as a publish confirm if
    /// the publisher still exists).
    PublishConfirm {
        /// The publisher.
        publisher_id: u8,
        /// The confirmed publishing ids.
        publishing_ids: Vec<u64>,
    },
    /// Publishing ids of a publisher that failed.
    PublishError {
        /// The publisher.
        publisher_id: u8,
        /// The failed ids and why.
        errors: Vec<PublishingError>,
    },
    /// A chunk for a subscription: sent now if the subscription has credit
    /// (one chunk, one credit), else queued until the client grants more.
    Deliver {
        /// The subscription.
        subscription_id: u8,
        /// The stream's committed chunk id (sent only to a client that spoke
        /// deliver version 2 in exchange command versions).
        committed_chunk_id: u64,
        /// The chunk.
        chunk: super::action::ChunkSource,
    },
    /// A stream's topology changed or it is gone: the connection forgets its
    /// publishers and subscriptions on it and, if it had any, sends a
    /// metadata update with `code` (RabbitMQ: stream not available, 0x06).
    StreamGone {
        /// The stream.
        stream: String,
        /// The metadata update's code.
        code: ResponseCode,
    },
    /// Single active consumer: tell the client this subscription is now
    /// active or not (a consumer update request; its answer comes back as
    /// `Action::ConsumerUpdateAnswered`).
    ConsumerUpdate {
        /// The subscription.
        subscription_id: u8,
        /// Whether it becomes the active consumer.
        active: bool,
    },
    /// The broker stopped (`true`) or resumed (`false`) reading this
    /// connection's socket, as RabbitMQ's stream reader does during a
    /// resource alarm: while stopped, nothing the client sends arrives, so
    /// its silence does not count against the heartbeat (RabbitMQ pauses the
    /// heartbeat monitor).
    ReadingPaused(bool),
    /// Close the connection with this code and reason (after open: a close is
    /// sent and its answer awaited; before: the connection is dropped).
    Close {
        /// The closing code.
        code: ResponseCode,
        /// The reason.
        reason: String,
    },
    /// Drop the connection at once, with no close frame: what RabbitMQ's
    /// stream reader does when an operator closes the connection
    /// (`DELETE /api/connections/{name}`; the js client cannot read a close
    /// the server starts, and relies on that).
    Abort,
}

/// The outcome of a SASL step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthOutcome {
    /// Authenticated as this user.
    Ok {
        /// The user name.
        user: String,
    },
    /// Another step is needed: send this challenge (code 0x0a).
    Challenge(Bytes),
    /// Wrong credentials (0x08): answered, then the connection is dropped.
    Refused,
    /// The SASL exchange itself went wrong (0x09): answered, then dropped.
    SaslError,
    /// The user may only connect from localhost (0x0b): answered, then dropped.
    LoopbackOnly,
}

/// The broker's answer to a `Request`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A code only: declare publisher, subscribe, create/delete stream,
    /// create/delete super stream.
    Code(ResponseCode),
    /// Metadata.
    Metadata {
        /// The brokers the streams refer to.
        brokers: Vec<Broker>,
        /// One entry per stream asked about.
        streams: Vec<StreamMetadata>,
    },
    /// Query offset (0x13 no offset with 0) or resolve offset spec.
    Offset {
        /// The outcome.
        code: ResponseCode,
        /// The offset.
        offset: u64,
    },
    /// Query publisher sequence (0 if none is stored).
    Sequence {
        /// The outcome.
        code: ResponseCode,
        /// The last publishing id stored.
        sequence: u64,
    },
    /// Route or partitions.
    Streams {
        /// The outcome.
        code: ResponseCode,
        /// The partitions.
        streams: Vec<String>,
    },
    /// Stream statistics.
    Stats {
        /// The outcome.
        code: ResponseCode,
        /// The statistics (`first_chunk_id`, `committed_chunk_id`, ...).
        stats: Vec<(String, i64)>,
    },
}

impl Reply {
    /// The reply's response code.
    pub fn code(&self) -> ResponseCode {
        match self {
            Reply::Code(code)
            | Reply::Offset { code, .. }
            | Reply::Sequence { code, .. }
            | Reply::Streams { code, .. }
            | Reply::Stats { code, .. } => *code,
            Reply::Metadata { .. } => ResponseCode::Ok,
        }
    }
}
