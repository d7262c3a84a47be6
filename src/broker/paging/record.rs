//! One paged-out message as the body store keeps it on disk.
//!
//! The body store is wiped at boot (the event store holds the truth), so this
//! format never has to be read by another version: no version byte.

use crate::broker::message::{Message, QueuedMessage};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use stablemq_protocol::{BasicProperties, ByteString};
use std::sync::Arc;

/// Everything a [`QueuedMessage`] holds, so that reading it back gives the very
/// message that was paged out (I4: RAM or disk never changes what is delivered).
/// Borrowed from the message: serde writes a reference as the value, and a
/// copy of the properties (their headers a map) cost a tenth of a restore.
#[derive(Serialize)]
struct Record<'a> {
    id: u64,
    exchange: &'a ByteString,
    routing_key: &'a ByteString,
    properties: &'a BasicProperties,
    body: &'a Bytes,
    timestamp_ms: u64,
    redelivered: bool,
    wait_index: u64,
    expires_at_ms: Option<u64>,
    delivery_count: u32,
}

/// [`Record`] as read from a buffer, its body borrowed: the same encoding
/// (postcard writes `Bytes` and a byte slice alike, a length and the bytes).
#[derive(Deserialize)]
struct RecordRef<'a> {
    id: u64,
    exchange: ByteString,
    routing_key: ByteString,
    properties: BasicProperties,
    #[serde(borrow)]
    body: &'a [u8],
    timestamp_ms: u64,
    redelivered: bool,
    wait_index: u64,
    expires_at_ms: Option<u64>,
    delivery_count: u32,
}

/// A record that does not decode: the file was damaged under us.
#[derive(Debug, thiserror::Error)]
#[error("paged message record does not decode: {0}")]
pub struct RecordError(String);

/// Append the encoding of `m` to `out`; returns the bytes written.
pub fn encode(m: &QueuedMessage, out: &mut Vec<u8>) -> usize {
    let before = out.len();
    let r = Record {
        id: m.msg.id,
        exchange: &m.msg.exchange,
        routing_key: &m.msg.routing_key,
        properties: &m.msg.properties,
        body: &m.msg.body,
        timestamp_ms: m.msg.timestamp_ms,
        redelivered: m.redelivered,
        wait_index: m.wait_index,
        expires_at_ms: m.expires_at_ms,
        delivery_count: m.delivery_count,
    };
    let buf = std::mem::take(out);
    // Writing to a Vec cannot fail for these types; a failure is a bug.
    *out = match postcard::to_extend(&r, buf) {
        Ok(v) => v,
        Err(e) => panic!("paged record encoding failed: {e}"),
    };
    out.len() - before
}

/// Decode one record. The body comes out in its own allocation (a copy),
/// so a message read back never pins the read buffer of its neighbours.
pub fn decode(b: &[u8]) -> Result<QueuedMessage, RecordError> {
    let r: RecordRef<'_> = postcard::from_bytes(b).map_err(|e| RecordError(e.to_string()))?;
    let body = Bytes::copy_from_slice(r.body);
    Ok(r.with_body(body))
}

/// Decode the record at `range` of `buf`, its body a slice of `buf` (no
/// copy): for reads whose messages live only until they are sent, as a
/// stream's, where the copy of each body was a tenth of a read's CPU. The
/// body pins `buf` while it lives.
pub fn decode_shared(
    buf: &Bytes,
    range: std::ops::Range<usize>,
) -> Result<QueuedMessage, RecordError> {
    let b = buf
        .get(range)
        .ok_or_else(|| RecordError("record past the end of its read".into()))?;
    let r: RecordRef<'_> = postcard::from_bytes(b).map_err(|e| RecordError(e.to_string()))?;
    let body = buf.slice_ref(r.body);
    Ok(r.with_body(body))
}

impl RecordRef<'_> {
    /// The message this record holds, with `body` (its body, copied or
    /// shared).
    fn with_body(self, body: Bytes) -> QueuedMessage {
        QueuedMessage {
            msg: Message {
                id: self.id,
                exchange: self.exchange,
                routing_key: self.routing_key,
                properties: Arc::new(self.properties),
                body,
                timestamp_ms: self.timestamp_ms,
            },
            redelivered: self.redelivered,
            wait_index: self.wait_index,
            expires_at_ms: self.expires_at_ms,
            delivery_count: self.delivery_count,
        }
    }
}
