//! AMQP 1.0 messages as the RabbitMQ stream protocol carries them, mapped to and
//! from AMQP 0-9-1, sans-IO.
//!
//! A stream record written by a stream-protocol client (rstream, the Java and
//! .NET stream clients) is one AMQP 1.0 message: a sequence of message sections
//! (header, delivery-annotations, message-annotations, properties,
//! application-properties, data / amqp-sequence / amqp-value, footer). The
//! broker keeps messages in 0-9-1 form, so it needs:
//!
//! - [`to_amqp091`]: a record → the [`BasicProperties`], body, exchange and
//!   routing key a 0-9-1 consumer of the stream gets;
//! - [`from_amqp091`]: a 0-9-1 message → the record a stream-protocol consumer
//!   reads.
//!
//! Both follow RabbitMQ 3.10.8 (`rabbit_msg_record`, called from
//! `rabbit_stream_queue`), checked against a running 3.10.8
//! (`tests/rabbitmq-3.10.txt` holds the records and frames recorded,
//! `tests/record-fixtures.py` how). Where 3.10 cannot deliver a message to a 0-9-1
//! consumer at all (it closes the consumer's connection with 541
//! INTERNAL_ERROR, and does so again at every attempt to read past that
//! offset), the mapping here delivers it, as a later RabbitMQ does (rabbit_msg_record
//! after 3.10, or mc_amqpl, which replaced it):
//!
//! | record has                              | RabbitMQ 3.10.8 | here                                   |
//! |-----------------------------------------|-----------------|----------------------------------------|
//! | a header section                        | 541             | durable → delivery-mode 2 (false → 1), priority → priority, ttl → expiration; over the x-basic-* annotations (mc_amqpl) |
//! | an amqp-value / amqp-sequence body      | 541             | body = those sections, encoded; type "amqp-1.0" unless x-basic-type says otherwise (rabbit_msg_record after 3.10) |
//! | no body section, or no section at all   | 541             | empty body                             |
//! | delivery-annotations, footer            | 541             | ignored                                |
//! | symbol, ulong, list, map property       | 541             | longstr, long, array, table (mc_amqpl)  |
//! | uuid, char, decimal, array, described property | 541      | header left out (no version maps them) |
//! | a symbol x-exchange / x-routing-key     | 541             | taken like a string                    |
//! | a string of 256 octets for a short string | 541           | left out, or (ids) moved to the x-…-id header |
//!
//! 0-9-1 short strings are amq-protocol's: UTF-8 of at most 255 octets. A 1.0
//! value that is not (RabbitMQ passes the octets on) is left out, except
//! message-id and correlation-id, which then go to a header as RabbitMQ moves
//! long ones. In the other direction 3.10 closes the publisher's connection (541)
//! on a decimal header; [`from_amqp091`] leaves the header out, since the broker
//! has accepted the message by then. Header tables come out in key order
//! (amq-protocol's [`FieldTable`](crate::FieldTable) is sorted), where 3.10 keeps
//! the publisher's order: the same record byte for byte only when those agree.
//!
//! It is not: AMQP 1.0 the protocol (frames, sessions, links: only its message
//! format is here); the stream protocol's framing of records (the [`stream`](crate::stream)
//! module); the `x-stream-offset` header RabbitMQ adds to each delivery from a
//! stream (the broker's to add, as it knows the offset).
//!
//! The codec is a small one written for this, in `codec.rs` (decode any AMQP
//! 1.0 value, encode with RabbitMQ's choice of encodings), not
//! fe2o3-amqp-types + serde_amqp 0.18, which were evaluated first: they decode
//! every section kind and no random or mutated input made them panic, but they
//! recurse with no depth limit, so a record of nested lists (5 000 levels, 45
//! KB) overflows a 2 MiB tokio worker stack and aborts the broker, which no
//! `Result` can catch; guarding against that means walking the AMQP 1.0
//! encoding ourselves first, most of a decoder already. They also decode into
//! owned values through serde (derive macros, indexmap, ordered-float), where the
//! mapping wants borrowed slices of the record (a data section's payload
//! becomes the 0-9-1 body without a copy) and RabbitMQ's exact choice of
//! encodings to reproduce its records. Decoding here never panics, is bounded
//! in depth (32 levels, as 0-9-1 tables: [`MAX_TABLE_DEPTH`](crate::MAX_TABLE_DEPTH))
//! and in allocation (linear in the input), and fails with an [`Amqp10Error`]
//! on anything that is not a well-formed sequence of sections; a well-formed
//! field of an unexpected type is ignored, as the mapping has no use for it.

mod codec;
mod from091;
mod sections;
mod to091;

#[cfg(test)]
mod tests;

use bytes::{Bytes, BytesMut};
use bytestring::ByteString;

use crate::BasicProperties;

/// The 0-9-1 type RabbitMQ gives a message whose body is AMQP 1.0 encoded
/// sections rather than the payload of data sections.
pub const AMQP10_TYPE: &str = "amqp-1.0";

/// A stream record as an AMQP 0-9-1 consumer gets it.
#[derive(Debug, Clone, PartialEq)]
pub struct Amqp091Message {
    /// The content header's properties.
    pub properties: BasicProperties,
    /// The body: a slice of the record.
    pub body: Bytes,
    /// The x-exchange annotation: the deliver's exchange (RabbitMQ: "" when
    /// absent).
    pub exchange: Option<ByteString>,
    /// The x-routing-key annotation: the deliver's routing key (RabbitMQ: the
    /// stream's name when absent).
    pub routing_key: Option<ByteString>,
}

/// Why a record is not an AMQP 1.0 message. Offsets are from the record's start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Amqp10Error {
    /// The record ends inside a value.
    #[error("truncated AMQP 1.0 value at offset {offset}")]
    Truncated {
        /// Where the missing octets start.
        offset: usize,
    },
    /// A constructor no AMQP 1.0 type has.
    #[error("unknown AMQP 1.0 format code 0x{code:02x} at offset {offset}")]
    UnknownFormatCode {
        /// The code.
        code: u8,
        /// Where it is.
        offset: usize,
    },
    /// A boolean (0x56) octet other than 0 or 1.
    #[error("boolean at offset {offset} is neither 0 nor 1")]
    BadBoolean {
        /// Where the boolean starts.
        offset: usize,
    },
    /// A list, map or array whose size, count or elements disagree.
    #[error("malformed compound value at offset {offset}: {reason}")]
    BadCompound {
        /// Where the compound starts.
        offset: usize,
        /// What disagrees.
        reason: &'static str,
    },
    /// Compound or described values nested deeper than the codec accepts.
    #[error(
        "value at offset {offset} nests deeper than {} levels",
        codec::MAX_DEPTH
    )]
    TooDeep {
        /// Where the level too many starts.
        offset: usize,
    },
    /// Something other than a described value where a section should start.
    #[error("no section starts at offset {offset}")]
    NotASection {
        /// Where the section should start.
        offset: usize,
    },
    /// A described value whose descriptor names no message section.
    #[error("unknown section descriptor at offset {offset}")]
    UnknownSection {
        /// Where the section starts.
        offset: usize,
    },
    /// A section whose value has the wrong type (e.g. properties not a list).
    #[error("section 0x{code:02x} at offset {offset} holds the wrong type")]
    BadSection {
        /// The section's descriptor code.
        code: u8,
        /// Where the section starts.
        offset: usize,
    },
    /// Body sections of different kinds, a second amqp-value, or body sections
    /// split by another section.
    #[error("body section at offset {offset} does not continue the body before it")]
    MixedBody {
        /// Where the offending section starts.
        offset: usize,
    },
}

/// Decodes a stream record as an AMQP 1.0 message and maps it to 0-9-1 as
/// RabbitMQ 3.10 does for a 0-9-1 consumer of a stream (see the module doc for
/// where it goes further).
pub fn to_amqp091(record: &Bytes) -> Result<Amqp091Message, Amqp10Error> {
    to091::to_amqp091(record)
}

/// Appends to `out` the AMQP 1.0 record RabbitMQ 3.10 stores for a message
/// published over 0-9-1 to `exchange` with `routing_key`: message-annotations
/// (x-routing-key, x-exchange, x-basic-priority, x-basic-delivery-mode,
/// x-basic-expiration), properties, application-properties (x-basic-type,
/// x-basic-app-id, the headers), one data section with `body`.
pub fn from_amqp091(
    properties: &BasicProperties,
    body: &[u8],
    exchange: &str,
    routing_key: &str,
    out: &mut BytesMut,
) {
    from091::from_amqp091(properties, body, exchange, routing_key, out);
}
