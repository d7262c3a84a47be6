//! The state's keys: how a queue's messages, a stream's entries, its first
//! offset and its tracked references are named in the `state` keyspace (layout in
//! the parent module's docs). Names are length-prefixed, not separated,
//! because AMQP names may contain any byte: the prefix of one queue can then
//! never be the prefix of another.

use super::{MESSAGE_TAG, RestoreError, STREAM_ENTRY_TAG, STREAM_FIRST_TAG, TRACKING_TAG};
use crate::broker::event::Tracking;
use bytes::{BufMut, Bytes, BytesMut};
use stablemq_cluster::store::ReduceError;

/// Message keys cut from one shared buffer: each is a `Bytes` slice of it,
/// so a key costs no allocation of its own, one per [`KeyArena::CHUNK`] of
/// keys. A publish's key lives until the batch's flush, a removal's until it
/// is looked up or written, so a chunk is soon free again.
#[derive(Default)]
pub(super) struct KeyArena(BytesMut);

impl KeyArena {
    const CHUNK: usize = 16 * 1024;

    /// The key of `queue`'s copy of message `id` ([`put_message_key`]).
    pub(super) fn message_key(
        &mut self,
        vhost: &str,
        queue: &str,
        id: u64,
    ) -> Result<Bytes, ReduceError> {
        self.tagged_key(MESSAGE_TAG, vhost, queue, id)
    }

    /// The key of stream `queue`'s entry that is message `id`: as a
    /// message's, under the tag of stream entries.
    pub(super) fn stream_entry_key(
        &mut self,
        vhost: &str,
        queue: &str,
        id: u64,
    ) -> Result<Bytes, ReduceError> {
        self.tagged_key(STREAM_ENTRY_TAG, vhost, queue, id)
    }

    fn tagged_key(
        &mut self,
        tag: u8,
        vhost: &str,
        queue: &str,
        id: u64,
    ) -> Result<Bytes, ReduceError> {
        let len = 13 + vhost.len() + queue.len();
        if self.0.capacity() < len {
            self.0.reserve(len.max(Self::CHUNK));
        }
        if let Err(e) = put_tagged_key(&mut self.0, tag, vhost, queue, id) {
            // No half key in front of the next one.
            self.0.clear();
            return Err(e);
        }
        Ok(self.0.split().freeze())
    }
}

pub(super) fn put_name(out: &mut impl BufMut, name: &str) -> Result<(), ReduceError> {
    let len = u16::try_from(name.len())
        .map_err(|_| ReduceError(format!("name of {} bytes", name.len())))?;
    out.put_u16(len);
    out.put_slice(name.as_bytes());
    Ok(())
}

pub(super) fn queue_prefix(vhost: &str, queue: &str) -> Result<BytesMut, ReduceError> {
    let mut key = BytesMut::with_capacity(5 + vhost.len() + queue.len() + 8);
    put_queue_prefix(&mut key, vhost, queue)?;
    Ok(key)
}

/// The prefix every message key of one queue starts with.
pub(super) fn put_queue_prefix(
    out: &mut impl BufMut,
    vhost: &str,
    queue: &str,
) -> Result<(), ReduceError> {
    out.put_u8(MESSAGE_TAG);
    put_name(out, vhost)?;
    put_name(out, queue)
}

/// The state key of a queue's copy of a message, appended to `out`: the
/// queue's prefix, then the id (big-endian, so a queue's keys sort in
/// publish order).
#[cfg(test)]
pub(super) fn put_message_key(
    out: &mut impl BufMut,
    vhost: &str,
    queue: &str,
    id: u64,
) -> Result<(), ReduceError> {
    put_tagged_key(out, MESSAGE_TAG, vhost, queue, id)
}

/// [`put_message_key`] under `tag` (a message's or a stream entry's).
fn put_tagged_key(
    out: &mut impl BufMut,
    tag: u8,
    vhost: &str,
    queue: &str,
    id: u64,
) -> Result<(), ReduceError> {
    out.put_u8(tag);
    put_name(out, vhost)?;
    put_name(out, queue)?;
    out.put_u64(id);
    Ok(())
}

/// The queue and message id of a message's or a stream entry's key.
pub(super) fn parse_message_key(key: &[u8]) -> Result<(String, String, u64), RestoreError> {
    let corrupt = || RestoreError::Corrupt(format!("message key {key:?}"));
    let rest = match key.split_first() {
        Some((&(MESSAGE_TAG | STREAM_ENTRY_TAG), rest)) => rest,
        _ => return Err(corrupt()),
    };
    let take_name = |rest: &[u8]| -> Result<(String, usize), RestoreError> {
        let (len, tail) = rest.split_first_chunk::<2>().ok_or_else(corrupt)?;
        let len = usize::from(u16::from_be_bytes(*len));
        let name = tail.get(..len).ok_or_else(corrupt)?;
        let name = String::from_utf8(name.to_vec()).map_err(|_| corrupt())?;
        Ok((name, 2 + len))
    };
    let (vhost, used) = take_name(rest)?;
    let rest = &rest[used..];
    let (queue, used) = take_name(rest)?;
    let id: [u8; 8] = rest[used..].try_into().map_err(|_| corrupt())?;
    Ok((vhost, queue, u64::from_be_bytes(id)))
}

/// The prefix of `tag`'s keys for one queue: the tag, then the vhost and
/// queue names.
pub(super) fn tagged_prefix(tag: u8, vhost: &str, queue: &str) -> Result<Bytes, ReduceError> {
    let mut key = BytesMut::with_capacity(5 + vhost.len() + queue.len());
    key.put_u8(tag);
    put_name(&mut key, vhost)?;
    put_name(&mut key, queue)?;
    Ok(key.freeze())
}

/// The key of a stream's retention cut: one per stream, the newest cut
/// overwrites the last (only its first offset matters).
pub(super) fn stream_first_key(vhost: &str, queue: &str) -> Result<Bytes, ReduceError> {
    tagged_prefix(STREAM_FIRST_TAG, vhost, queue)
}

/// The key of one tracked reference of a stream (a consumer's stored
/// offset, a publisher's sequence): the newest value overwrites the last.
pub(super) fn tracking_key(
    vhost: &str,
    queue: &str,
    kind: Tracking,
    reference: &str,
) -> Result<Bytes, ReduceError> {
    let mut key = BytesMut::with_capacity(6 + vhost.len() + queue.len() + reference.len());
    key.put_u8(TRACKING_TAG);
    put_name(&mut key, vhost)?;
    put_name(&mut key, queue)?;
    key.put_u8(match kind {
        Tracking::Offset => b'o',
        Tracking::Sequence => b's',
    });
    key.put_slice(reference.as_bytes());
    Ok(key.freeze())
}
