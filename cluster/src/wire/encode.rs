//! Writing frames: the envelope's header, then the message field by field;
//! a frame that would pass the size cap is taken back out of the buffer.

use bytes::{BufMut, Bytes, BytesMut};

use super::*;
use crate::position::{Entry, LogPosition};
use crate::replication::{Append, RejectReason, SnapshotChunk};

/// Append one frame for `env` to `out`. On error `out` is left as it was.
pub fn encode(env: &Envelope, out: &mut BytesMut, max_frame: usize) -> Result<(), WireError> {
    encode_to(env, service_tag(env.to.service), out, max_frame)
}

/// Append one frame carrying `env.msg` to both services of node `env.to.node`
/// (its store and its broker): [`decode_copies`] gives it back as two
/// envelopes, one per service. On error `out` is left as it was.
pub fn encode_for_both(
    env: &Envelope,
    out: &mut BytesMut,
    max_frame: usize,
) -> Result<(), WireError> {
    encode_to(env, SERVICE_BOTH, out, max_frame)
}

fn encode_to(
    env: &Envelope,
    to_service: u8,
    out: &mut BytesMut,
    max_frame: usize,
) -> Result<(), WireError> {
    let start = out.len();
    out.put_u32(0); // patched below, once the length is known
    out.put_u8(WIRE_VERSION);
    put_endpoint(out, env.from);
    out.put_u64(env.to.node);
    out.put_u8(to_service);
    if let Err(err) = put_message(out, &env.msg) {
        out.truncate(start);
        return Err(err);
    }
    let len = out.len() - start - LEN_BYTES;
    let len32 = match u32::try_from(len) {
        Ok(len32) if len <= max_frame => len32,
        _ => {
            out.truncate(start);
            return Err(WireError::FrameTooLarge {
                len,
                max: max_frame,
            });
        }
    };
    out[start..start + LEN_BYTES].copy_from_slice(&len32.to_be_bytes());
    Ok(())
}

pub(super) fn put_endpoint(out: &mut BytesMut, ep: Endpoint) {
    out.put_u64(ep.node);
    out.put_u8(service_tag(ep.service));
}

fn put_pos(out: &mut BytesMut, pos: LogPosition) {
    out.put_u64(pos.epoch);
    out.put_u64(pos.index);
}

fn put_entries(out: &mut BytesMut, entries: &[Entry]) -> Result<(), WireError> {
    let count = u32::try_from(entries.len()).map_err(|_| WireError::FrameTooLarge {
        len: entries.len(),
        max: u32::MAX as usize,
    })?;
    out.put_u32(count);
    for entry in entries {
        let len = u32::try_from(entry.payload.len())
            .map_err(|_| WireError::PayloadTooLarge(entry.payload.len()))?;
        put_pos(out, entry.pos);
        out.put_u32(len);
        out.put_slice(&entry.payload);
    }
    Ok(())
}

/// An AppendReject's reason: its tag, then a mismatch's fields.
fn put_reject_reason(out: &mut BytesMut, reason: &RejectReason) {
    match reason {
        RejectReason::Fenced => out.put_u8(REASON_FENCED),
        RejectReason::Mismatch {
            prev,
            hint,
            incarnation,
        } => {
            out.put_u8(REASON_MISMATCH);
            put_pos(out, *prev);
            out.put_u64(*hint);
            out.put_u64(*incarnation);
        }
    }
}

/// A snapshot chunk's pairs: u32 count, then each key and value.
fn put_pairs(out: &mut BytesMut, pairs: &[(Bytes, Bytes)]) -> Result<(), WireError> {
    let count = u32::try_from(pairs.len()).map_err(|_| WireError::PayloadTooLarge(pairs.len()))?;
    out.put_u32(count);
    for (key, value) in pairs {
        put_bytes(out, key)?;
        put_bytes(out, value)?;
    }
    Ok(())
}

/// One message: its tag, then its fields in wire order.
///
/// One piece on purpose: each arm writes one message's fields in the order
/// `Reader::message` (decode.rs) reads them, so the two read side by
/// side; splitting the arms apart would only scatter the wire format.
fn put_message(out: &mut BytesMut, msg: &Message) -> Result<(), WireError> {
    match msg {
        Message::Append(Append {
            epoch,
            prev,
            entries,
            stable,
            floor,
        }) => {
            out.put_u8(TAG_APPEND);
            out.put_u64(*epoch);
            put_pos(out, *prev);
            out.put_u64(*stable);
            out.put_u64(*floor);
            put_entries(out, entries)?;
        }
        Message::AppendAck {
            epoch,
            last,
            incarnation,
        } => {
            out.put_u8(TAG_APPEND_ACK);
            out.put_u64(*epoch);
            out.put_u64(*incarnation);
            put_pos(out, *last);
        }
        Message::AppendReject { epoch, reason } => {
            out.put_u8(TAG_APPEND_REJECT);
            out.put_u64(*epoch);
            put_reject_reason(out, reason);
        }
        Message::Fence { epoch, nonce } => {
            out.put_u8(TAG_FENCE);
            out.put_u64(*epoch);
            out.put_u64(*nonce);
        }
        Message::Promise {
            epoch,
            last,
            stable,
        } => {
            out.put_u8(TAG_PROMISE);
            out.put_u64(*epoch);
            put_pos(out, *last);
            out.put_u64(*stable);
        }
        Message::FenceRefused { promised } => {
            out.put_u8(TAG_FENCE_REFUSED);
            out.put_u64(*promised);
        }
        Message::Fetch { epoch, from, to } => {
            out.put_u8(TAG_FETCH);
            out.put_u64(*epoch);
            out.put_u64(*from);
            out.put_u64(*to);
        }
        Message::Entries { epoch, entries } => {
            out.put_u8(TAG_ENTRIES);
            out.put_u64(*epoch);
            put_entries(out, entries)?;
        }
        Message::CatchUp { epoch, from, to } => {
            out.put_u8(TAG_CATCH_UP);
            out.put_u64(*epoch);
            out.put_u64(*from);
            out.put_u64(*to);
        }
        Message::StableEntries { epoch, entries } => {
            out.put_u8(TAG_STABLE_ENTRIES);
            out.put_u64(*epoch);
            put_entries(out, entries)?;
        }
        Message::SnapshotChunk(SnapshotChunk {
            base,
            after,
            pairs,
            done,
        }) => {
            out.put_u8(TAG_SNAPSHOT_CHUNK);
            put_pos(out, *base);
            put_opt_bytes(out, after.as_ref())?;
            out.put_u8(u8::from(*done));
            put_pairs(out, pairs)?;
        }
        Message::SnapshotRequest { base, after } => {
            out.put_u8(TAG_SNAPSHOT_REQUEST);
            put_pos(out, *base);
            put_opt_bytes(out, after.as_ref())?;
        }
        Message::PreVote { epoch } => {
            out.put_u8(TAG_PRE_VOTE);
            out.put_u64(*epoch);
        }
        Message::PreVoteReply {
            epoch,
            granted,
            promised,
        } => {
            out.put_u8(TAG_PRE_VOTE_REPLY);
            out.put_u64(*epoch);
            out.put_u8(u8::from(*granted));
            out.put_u64(*promised);
        }
        Message::JoinProbe { incarnation } => {
            out.put_u8(TAG_JOIN_PROBE);
            out.put_u64(*incarnation);
        }
        Message::JoinInfo {
            promised,
            last,
            stable,
        } => {
            out.put_u8(TAG_JOIN_INFO);
            out.put_u64(*promised);
            put_pos(out, *last);
            out.put_u64(*stable);
        }
    }
    Ok(())
}

/// A byte string: u32 length, then the bytes.
fn put_bytes(out: &mut BytesMut, bytes: &[u8]) -> Result<(), WireError> {
    let len = u32::try_from(bytes.len()).map_err(|_| WireError::PayloadTooLarge(bytes.len()))?;
    out.put_u32(len);
    out.put_slice(bytes);
    Ok(())
}

/// An optional byte string: u8 0 (none) or 1 and the string.
fn put_opt_bytes(out: &mut BytesMut, bytes: Option<&Bytes>) -> Result<(), WireError> {
    match bytes {
        None => out.put_u8(0),
        Some(b) => {
            out.put_u8(1);
            put_bytes(out, b)?;
        }
    }
    Ok(())
}
