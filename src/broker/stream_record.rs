//! Stream records across the two protocols.
//!
//! A message published over the stream protocol is stored as the client
//! sent it (an AMQP 1.0 message for RabbitMQ's clients, or any bytes): its
//! body is the record, and its properties carry [`RECORD_HEADER`]. A
//! stream-protocol reader gets the record back byte for byte; an AMQP 0-9-1
//! reader gets it as a 0-9-1 message ([`for_amqp091`]). A message published
//! over AMQP 0-9-1 goes to a stream-protocol reader as a record
//! ([`record_of`]).
//!
//! What it is not: the AMQP 1.0 codec (`stablemq_protocol`), or the
//! stream's storage (`broker::stream`).

use super::message::Message;
use bytes::{Bytes, BytesMut};
use stablemq_protocol::{AMQPValue, BasicProperties, amqp10};
use std::sync::Arc;

/// The header that marks a message as a stream-protocol record.
pub const RECORD_HEADER: &str = "x-stream-record";

/// The header a stream delivery carries its offset in.
pub const OFFSET_HEADER: &str = "x-stream-offset";

/// basic.consume argument of the stream-protocol driver's consumers: they
/// get records as stored, not converted for AMQP 0-9-1.
pub const RECORDS_ARG: &str = "x-stream-records";

/// basic.consume argument: start at the first entry at or after this time,
/// in ms since the epoch (the stream protocol's timestamp offset; AMQP's
/// timestamp type counts seconds).
pub const OFFSET_MS_ARG: &str = "x-stream-offset-ms";

/// Whether `msg` is a record published over the stream protocol.
pub fn is_record(msg: &Message) -> bool {
    msg.properties
        .headers()
        .as_ref()
        .is_some_and(|h| h.inner().contains_key(RECORD_HEADER))
}

/// On the record that starts a chunk of a publisher with a reference: the
/// reference, for the trailer length a delivered chunk's header states.
pub const WRITER_HEADER: &str = "x-stream-writer";

/// On the record that ends a message of a publisher with a reference: the
/// reference (a long string) and the message's publishing id (a long long
/// int), under these two headers. The record's own `Published` event thus
/// carries the publisher's new sequence, so the entry and the sequence that
/// deduplicates a resend of it are stable together or not at all: a
/// failover can neither keep the entry and lose the sequence (the resend
/// would be stored twice) nor the reverse (a confirmed id would be
/// refused). Read by [`publisher_sequence`]; never shown to a reader (a
/// stream-protocol reader gets the record, an AMQP 0-9-1 reader the
/// properties of the AMQP 1.0 message inside it).
pub const PUBLISHER_HEADER: &str = "x-stream-publisher";
/// See [`PUBLISHER_HEADER`].
pub const PUBLISHING_ID_HEADER: &str = "x-stream-publishing-id";

/// The publisher reference and publishing id a stream-protocol record
/// carries (see [`PUBLISHER_HEADER`]); None for any other message.
///
/// Only on records: an AMQP 0-9-1 publish with such headers tracks nothing.
pub fn publisher_sequence(msg: &Message) -> Option<(&str, u64)> {
    let headers = msg.properties.headers().as_ref()?.inner();
    if !headers.contains_key(RECORD_HEADER) {
        return None;
    }
    let reference = match headers.get(PUBLISHER_HEADER)? {
        AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok()?,
        _ => return None,
    };
    let id = match headers.get(PUBLISHING_ID_HEADER)? {
        // The id's 64 bits as AMQP's signed long long (ids above
        // i64::MAX are valid in the stream protocol).
        AMQPValue::LongLongInt(n) => n.cast_unsigned(),
        _ => return None,
    };
    Some((reference, id))
}

/// The length of the deduplication trailer Osiris stores with a chunk that
/// `msg` starts (0 if none): one tracking entry for its writer, a type byte,
/// the reference's length byte, the reference and its 64-bit sequence.
pub fn trailer_length(msg: &Message) -> u32 {
    let writer = msg.properties.headers().as_ref().and_then(|h| {
        h.inner().get(WRITER_HEADER).and_then(|v| match v {
            AMQPValue::LongString(s) => Some(s.as_bytes().len()),
            _ => None,
        })
    });
    writer.map_or(0, |len| 10 + u32::try_from(len).unwrap_or(0))
}

/// Whether `msg` starts a chunk, as Osiris would have written it: a record
/// whose `x-stream-record` header is `false` continues the chunk of the
/// records before it from the same publish frame (see [`chunk_mark`]); any
/// other record starts one, and an AMQP 0-9-1 message is a chunk of its own.
pub fn starts_chunk(msg: &Message) -> bool {
    !matches!(chunk_mark(msg), ChunkMark::Continues)
}

/// Where a stored entry stands in the chunk Osiris would have written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkMark {
    /// It starts a chunk of this many records (None: unknown, taken as one:
    /// an AMQP 0-9-1 message, or a record stored before the count was).
    Starts(Option<u32>),
    /// It continues the chunk of the entries before it.
    Continues,
}

/// The chunk mark of a stored entry: its `x-stream-record` header is
/// `false` on a record that continues a chunk, the chunk's record count on
/// one that starts it (`true` on records stored before counts were kept).
pub fn chunk_mark(msg: &Message) -> ChunkMark {
    let header = msg
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(RECORD_HEADER).cloned());
    match header {
        Some(AMQPValue::Boolean(false)) => ChunkMark::Continues,
        Some(AMQPValue::LongUInt(n)) if n > 0 => ChunkMark::Starts(Some(n)),
        _ => ChunkMark::Starts(None),
    }
}

/// The record a stream-protocol reader gets for `msg`: a stream record as
/// stored; a 0-9-1 message as the AMQP 1.0 record RabbitMQ 3.10 makes of it
/// (without the `x-stream-offset` header a delivery carries).
pub fn record_of(msg: &Message) -> Bytes {
    if is_record(msg) {
        return msg.body.clone();
    }
    let mut properties = (*msg.properties).clone();
    if let Some(h) = properties.headers().as_ref()
        && h.inner().contains_key(OFFSET_HEADER)
    {
        let mut rest = stablemq_protocol::FieldTable::default();
        for (k, v) in h
            .inner()
            .iter()
            .filter(|(k, _)| k.as_str() != OFFSET_HEADER)
        {
            rest.insert(k.clone(), v.clone());
        }
        properties = properties.with_headers(rest);
    }
    let mut out = BytesMut::with_capacity(msg.body.len() + 128);
    amqp10::from_amqp091(
        &properties,
        &msg.body,
        &msg.exchange,
        &msg.routing_key,
        &mut out,
    );
    out.freeze()
}

/// `msg` as an AMQP 0-9-1 reader gets it, if that differs from `msg`: a
/// stream record that is an AMQP 1.0 message mapped as RabbitMQ 3.10 maps
/// it; any other record as its bytes, with no properties. `None`: a message
/// published over 0-9-1, read as it is.
pub fn for_amqp091(msg: &Message) -> Option<Message> {
    if !is_record(msg) {
        return None;
    }
    Some(match amqp10::to_amqp091(&msg.body) {
        Ok(m) => Message {
            properties: Arc::new(m.properties),
            body: m.body,
            exchange: m.exchange.unwrap_or_default(),
            routing_key: m.routing_key.unwrap_or_else(|| msg.routing_key.clone()),
            ..msg.clone()
        },
        Err(_) => Message {
            properties: Arc::new(BasicProperties::default()),
            ..msg.clone()
        },
    })
}
