//! Node-to-node wire encoding: length-prefixed binary frames of
//! [`replication::Message`](crate::replication::Message)s.
//!
//! A frame is
//!
//! ```text
//! u32 len (big-endian, bytes after itself) | u8 WIRE_VERSION | from | to | u8 tag | fields
//! ```
//!
//! `from` and `to` are endpoints (`u64` node, `u8` service). Both travel in every
//! frame so a co-located node can route a frame to its store or its broker. A
//! `to` service of "both" ([`encode_for_both`]) carries one message for the
//! node's store and its broker at once: the master sends each Append to every
//! store and every slave, and in the co-located layout a node is both, so
//! without it every entry crossed each connection twice (see
//! [`decode_copies`]). Integers are big-endian and fixed width:
//! the bulk of a frame is payload bytes, so varints would save little and cost a
//! branch per field. An entry is `u64 epoch | u64 index | u32 len | payload`.
//!
//! Hand-written rather than derived (postcard/serde) for two reasons: decoding
//! slices every payload out of the frame's [`Bytes`](bytes::Bytes) without
//! copying it (the socket read is the only copy), and the format is pinned
//! here, byte for byte, instead of following a serializer's defaults across
//! upgrades.
//!
//! Decoding never panics and never trusts a length: every count is checked
//! against the bytes actually present before anything is allocated, the frame
//! size is capped ([`MAX_FRAME_DEFAULT`]), and trailing bytes are an error, so a
//! frame decodes exactly one way.
//!
//! This module holds the format (tags, limits, errors); `encode` writes
//! frames and `decode` reads them.

use crate::replication::{Endpoint, Message, Service, WIRE_VERSION};

mod decode;
mod encode;

pub use decode::{decode, decode_copies, decode_frame};
pub use encode::{encode, encode_for_both};

/// Default cap on one frame (after the length prefix). An Append carries at most
/// `batch_entries_max` entries, so this bounds the payload size the cluster can
/// replicate per batch; a reader refuses anything larger rather than allocate it.
pub const MAX_FRAME_DEFAULT: usize = 64 * 1024 * 1024;

/// Bytes of the length prefix.
const LEN_BYTES: usize = 4;
/// Smallest encoded entry: epoch, index and payload length.
const ENTRY_MIN_BYTES: usize = 8 + 8 + 4;

const TAG_APPEND: u8 = 1;
const TAG_APPEND_ACK: u8 = 2;
const TAG_APPEND_REJECT: u8 = 3;
const TAG_FENCE: u8 = 4;
const TAG_PROMISE: u8 = 5;
const TAG_FENCE_REFUSED: u8 = 6;
const TAG_FETCH: u8 = 7;
const TAG_ENTRIES: u8 = 8;
const TAG_CATCH_UP: u8 = 9;
const TAG_STABLE_ENTRIES: u8 = 10;
const TAG_SNAPSHOT_CHUNK: u8 = 11;
const TAG_SNAPSHOT_REQUEST: u8 = 12;
const TAG_PRE_VOTE: u8 = 13;
const TAG_PRE_VOTE_REPLY: u8 = 14;
const TAG_JOIN_PROBE: u8 = 15;
const TAG_JOIN_INFO: u8 = 16;
/// Smallest encoding of one state pair: two empty byte strings.
const PAIR_MIN_BYTES: usize = 4 + 4;

const REASON_FENCED: u8 = 0;
const REASON_MISMATCH: u8 = 1;

const SERVICE_STORE: u8 = 0;
const SERVICE_BROKER: u8 = 1;
/// A `to` service only: the same message for the node's store and broker.
const SERVICE_BOTH: u8 = 2;

/// One message with its addresses: the unit the transport moves.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// The sender.
    pub from: Endpoint,
    /// The receiver (a node checks that `to.node` is itself).
    pub to: Endpoint,
    /// The message.
    pub msg: Message,
}

/// Why a frame could not be encoded or decoded. Every variant means "drop the
/// connection": after a bad frame the byte stream cannot be trusted to be in
/// sync any more.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The frame is larger than the cap (on decode: as announced by its prefix).
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    FrameTooLarge {
        /// The frame's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The peer speaks another version of this encoding.
    #[error("wire version {got}, expected {WIRE_VERSION}")]
    Version {
        /// The version byte received.
        got: u8,
    },
    /// The frame ended inside a field (its length prefix lied, or a count did).
    #[error("frame truncated while reading {0}")]
    Truncated(&'static str),
    /// A tag byte names nothing.
    #[error("unknown {what} tag {tag}")]
    UnknownTag {
        /// Which tag (message, reason, service).
        what: &'static str,
        /// Its value.
        tag: u8,
    },
    /// Bytes remained after the message: the frame does not decode one way.
    #[error("{0} bytes after the end of the message")]
    TrailingBytes(usize),
    /// A payload longer than a `u32` can say (only on encode).
    #[error("payload of {0} bytes cannot be encoded")]
    PayloadTooLarge(usize),
}

fn service_tag(service: Service) -> u8 {
    match service {
        Service::Store => SERVICE_STORE,
        Service::Broker => SERVICE_BROKER,
    }
}

fn service_of(tag: u8) -> Result<Service, WireError> {
    match tag {
        SERVICE_STORE => Ok(Service::Store),
        SERVICE_BROKER => Ok(Service::Broker),
        tag => Err(WireError::UnknownTag {
            what: "service",
            tag,
        }),
    }
}

#[cfg(test)]
mod tests;
