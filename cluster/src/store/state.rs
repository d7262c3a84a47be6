//! The materialized `state`: what stable entries add up to, so old log entries
//! can be deleted and a restart starts from the state plus a short log suffix.
//!
//! This crate knows nothing of what a payload means, so the meaning comes from a
//! [`Reducer`] supplied by the broker: it turns each stable entry into key/value
//! [`StateOp`]s. A [`Materializer`] drives it over a store: it reads the stable
//! entries the state does not cover yet, reduces them, merges the ops of one
//! batch ([`StateBatch`]: a put and a delete of the same key in one batch write
//! nothing), and hands the batch to [`EventStore::materialize`], which writes the
//! ops, the new `state_index` and the log compaction in one atomic write.
//!
//! Why the reducer runs on the store side, beside the log, rather than in the
//! broker: the store-only node has no broker state, yet must compact its log;
//! and a store that materializes what it has made stable needs nobody else to
//! be up for its disk use to stay bounded.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::{EventStore, StoreError};
use crate::position::Entry;

/// Keys whose first byte (the tag) is at least this are a *sequence's*:
/// everything but their last 8 bytes names the sequence, and those 8 bytes
/// (big-endian) are the key's position in it. A store may keep each
/// sequence apart ([`super::FjallStore`]: a keyspace of its own), so a
/// reducer puts under these tags data it appends at ascending positions
/// and removes from the front or whole (a stream's entries): appending
/// then never rewrites what is older, whatever else is written, and a
/// delete by a prefix that covers the whole sequence drops it at once.
/// Such a key must have at least 9 bytes (`Misuse` otherwise), and no
/// sequence's name may be the prefix of another's (as no name of
/// length-prefixed parts is). Reads see one ordered state either way.
pub const SEQUENCE_TAG_MIN: u8 = 0x80;

/// One change to the `state` keyspace. Keys are opaque bytes ordered
/// lexicographically (so a reducer chooses big-endian numbers for order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateOp {
    /// Set `key` to `value`.
    Put {
        /// Key.
        key: Bytes,
        /// Value.
        value: Bytes,
    },
    /// Remove `key` (a no-op when absent).
    Delete {
        /// Key.
        key: Bytes,
    },
    /// Remove every key that starts with `prefix`.
    DeletePrefix {
        /// Prefix.
        prefix: Bytes,
    },
}

/// A reducer could not make sense of an entry or of the state: the store stops
/// rather than write a state that differs from its log (I4).
#[derive(Debug, thiserror::Error)]
#[error("reducer: {0}")]
pub struct ReduceError(pub String);

impl From<ReduceError> for StoreError {
    fn from(e: ReduceError) -> StoreError {
        StoreError::Corrupt(e.to_string())
    }
}

/// Read access to the materialized state, for [`Reducer::restore`].
pub trait StateRead {
    /// The value of `key`, if any.
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError>;
    /// Every pair whose key starts with `prefix`, in key order.
    fn scan_prefix(&self, prefix: &[u8]) -> Result<Vec<(Bytes, Bytes)>, StoreError>;
    /// At most `limit` pairs whose key starts with `prefix` and sorts after
    /// `after` (from the first when None), in key order: a large state read a
    /// page at a time. The default reads the whole prefix first.
    fn scan_prefix_page(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        Ok(self
            .scan_prefix(prefix)?
            .into_iter()
            .filter(|(k, _)| after.is_none_or(|a| k.as_ref() > a))
            .take(limit)
            .collect())
    }
}

/// Turns stable entries into [`StateOp`]s. Deterministic (I4): the same entries
/// after the same state give the same ops, on every store.
pub trait Reducer: Send + 'static {
    /// Rebuild the reducer's own memory (e.g. which queues exist) from the state
    /// it wrote before a restart. Called once, before the first `reduce`.
    fn restore(&mut self, state: &dyn StateRead) -> Result<(), ReduceError>;
    /// Reduce one stable entry, appending its ops to `out`.
    fn reduce(&mut self, entry: &Entry, out: &mut Vec<StateOp>) -> Result<(), ReduceError>;
    /// The batch ends: append ops the reducer deferred so that a key changed
    /// by many entries of one batch is written once (e.g. the definitions).
    fn flush(&mut self, out: &mut Vec<StateOp>) -> Result<(), ReduceError>;
}

/// What one key ends up as after a batch of ops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergedOp {
    /// Written with this value.
    Put(Bytes),
    /// Removed; it may exist in the state from an earlier batch.
    Delete,
    /// Put and then removed within this batch: nothing to write, unless the key
    /// also held a value from before the batch (then it must go).
    PutThenDelete,
}

/// The merged ops of one batch, ready for [`EventStore::materialize`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateBatch {
    /// The state covers every entry up to here once the batch is written.
    pub state_index: u64,
    /// Prefixes removed from the state as it was *before* the batch; applied
    /// before `ops`, which already account for them.
    pub delete_prefixes: Vec<Bytes>,
    /// Final op per key, applied after the prefix deletions.
    pub ops: BTreeMap<Bytes, MergedOp>,
    /// Delete log entries up to and including this index (0: none). At most
    /// `state_index`: the log may only lose what the state holds. At or below
    /// the store's log base it changes nothing.
    pub compact_through: u64,
}

impl StateBatch {
    /// An empty batch ending at `state_index`.
    pub fn new(state_index: u64) -> StateBatch {
        StateBatch {
            state_index,
            ..StateBatch::default()
        }
    }

    /// Fold one op into the batch, so the batch's effect equals applying every
    /// op in order.
    pub fn push(&mut self, op: StateOp) {
        match op {
            StateOp::Put { key, value } => {
                self.ops.insert(key, MergedOp::Put(value));
            }
            StateOp::Delete { key } => {
                let merged = match self.ops.get(&key) {
                    Some(MergedOp::Put(_) | MergedOp::PutThenDelete) => MergedOp::PutThenDelete,
                    Some(MergedOp::Delete) | None => MergedOp::Delete,
                };
                self.ops.insert(key, merged);
            }
            StateOp::DeletePrefix { prefix } => {
                // Keys of this batch under the prefix are gone; whatever the
                // state held under it goes with the prefix deletion.
                self.ops.retain(|k, _| !k.starts_with(&prefix));
                if !self.delete_prefixes.iter().any(|p| prefix.starts_with(p)) {
                    self.delete_prefixes.retain(|p| !p.starts_with(&prefix));
                    self.delete_prefixes.push(prefix);
                }
            }
        }
    }

    /// Whether the batch changes nothing but the state index.
    pub fn is_noop(&self) -> bool {
        self.delete_prefixes.is_empty() && self.ops.is_empty() && self.compact_through == 0
    }
}

/// Applies a batch to an in-memory ordered map: the reference semantics of
/// [`EventStore::materialize`] (used by [`super::MemoryStore`]).
pub(crate) fn apply_to_map(map: &mut BTreeMap<Bytes, Bytes>, batch: &StateBatch) {
    for prefix in &batch.delete_prefixes {
        map.retain(|k, _| !k.starts_with(prefix));
    }
    for (key, op) in &batch.ops {
        match op {
            MergedOp::Put(v) => {
                map.insert(key.clone(), v.clone());
            }
            MergedOp::Delete | MergedOp::PutThenDelete => {
                map.remove(key);
            }
        }
    }
}

/// Shared checks of [`EventStore::materialize`], so both stores refuse alike.
pub(crate) fn check_materialize(
    state_index: u64,
    stable: u64,
    batch: &StateBatch,
) -> Result<(), StoreError> {
    if batch.state_index < state_index || batch.state_index > stable {
        return Err(StoreError::Misuse(format!(
            "state index {} outside [{state_index}, stable {stable}]",
            batch.state_index
        )));
    }
    if batch.compact_through > batch.state_index {
        return Err(StoreError::Misuse(format!(
            "compacting the log through {} beyond the state index {}",
            batch.compact_through, batch.state_index
        )));
    }
    Ok(())
}

/// Entries reduced per read while catching up, so a long backlog is never held
/// in memory at once.
const CATCH_UP_CHUNK: u64 = 1024;

/// Drives a [`Reducer`] over a store; see the module docs.
pub struct Materializer {
    reducer: Box<dyn Reducer>,
    /// Stable entries kept in the log behind the state, so a follower slightly
    /// behind can still catch up from the log alone.
    retention: u64,
    /// The index the next reduced entry must have: the state index of the
    /// store plus one, counting entries reduced but not written yet (in
    /// batches queued, or not finished).
    next: u64,
    /// Reused per batch.
    ops: Vec<StateOp>,
}

impl Materializer {
    /// Restore `reducer` from `store`'s state, ready to follow it.
    pub fn open(
        mut reducer: Box<dyn Reducer>,
        retention: u64,
        store: &dyn EventStore,
    ) -> Result<Materializer, StoreError> {
        reducer.restore(&StoreState(store))?;
        Ok(Materializer {
            reducer,
            retention,
            next: store.state_index() + 1,
            ops: Vec::new(),
        })
    }

    /// Bring the state up to the store's stable index. `fresh` may hold entries
    /// just appended (saving a read); any it does not cover are read back.
    /// The write is not durable until the store's next `sync`.
    pub fn advance(
        &mut self,
        store: &mut dyn EventStore,
        fresh: &[Entry],
    ) -> Result<(), StoreError> {
        let stable = store.stable_index();
        self.advance_inner(store, fresh, stable, None)
    }

    /// Bring the state up to `target` (at most the stable index) and compact
    /// the log through `compact_through` (at most `target`): a replicated
    /// store's node decides both (`DiskOp::Compact`), so it knows its log base
    /// without asking the disk.
    pub fn advance_to(
        &mut self,
        store: &mut dyn EventStore,
        target: u64,
        compact_through: u64,
    ) -> Result<(), StoreError> {
        self.advance_inner(store, &[], target, Some(compact_through))?;
        if compact_through > store.log_base().index {
            // The state was already there (e.g. a store a single node
            // materialized ahead of its base): compact only.
            let mut batch = StateBatch::new(store.state_index());
            batch.compact_through = compact_through;
            store.materialize(&batch)?;
        }
        Ok(())
    }

    /// Rebuild the reducer's memory from the store's state after the state
    /// was replaced (a snapshot installed from a peer).
    pub fn reopen(&mut self, store: &dyn EventStore) -> Result<(), StoreError> {
        self.reducer.restore(&StoreState(store))?;
        self.next = store.state_index() + 1;
        Ok(())
    }

    fn advance_inner(
        &mut self,
        store: &mut dyn EventStore,
        fresh: &[Entry],
        stable: u64,
        compact: Option<u64>,
    ) -> Result<(), StoreError> {
        while store.state_index() < stable {
            let from = store.state_index() + 1;
            let to = stable.min(from + CATCH_UP_CHUNK - 1);
            let first_fresh = fresh.first().map_or(u64::MAX, |e| e.pos.index);
            let skip = usize::try_from(from.wrapping_sub(first_fresh)).unwrap_or(usize::MAX);
            // Entries in memory go as one batch, however many the caller
            // gathered (that is its window for cancelling publishes against
            // acks); only reads from the store are chunked.
            let take = usize::try_from(stable - from + 1).unwrap_or(usize::MAX);
            let read;
            let entries: &[Entry] = match fresh.get(skip..) {
                Some(slice) if first_fresh <= from && !slice.is_empty() => {
                    &slice[..take.min(slice.len())]
                }
                _ => {
                    read = store.read_range(from, to)?;
                    &read
                }
            };
            if entries.is_empty() {
                return Err(StoreError::Corrupt(format!(
                    "stable entry {from} missing from the log"
                )));
            }
            self.next = from;
            let mut batch = self.reduce(entries)?;
            if let Some(c) = compact {
                // The node's choice, not the retention (a store ignores a
                // compaction at or below its base).
                batch.compact_through = c.min(batch.state_index);
            }
            store.materialize(&batch)?;
        }
        Ok(())
    }

    /// Reduce `entries`, the stable entries right after what was reduced so
    /// far, into one batch for [`EventStore::materialize`], without touching
    /// the store: this is what runs off the store's commit thread. Batches
    /// must be written in the order they were reduced. The batch compacts the
    /// log through `retention` entries behind its state index (a store
    /// ignores a compaction below its log base).
    pub fn reduce(&mut self, entries: &[Entry]) -> Result<StateBatch, StoreError> {
        self.reduce_bounded(entries, usize::MAX)
            .map(|(batch, _)| batch)
    }

    /// [`Materializer::reduce`], but the batch ends after the first entry
    /// that brings it to `max_ops` merged ops: returns the batch and how many
    /// of `entries` it covers (at least one); reduce the rest next. A short
    /// entry can stand for many ops (one ack removes a hundred messages), so
    /// bounding the entries alone does not bound the batch, nor fjall's copy
    /// of it, nor the memtable it lands in.
    pub fn reduce_bounded(
        &mut self,
        entries: &[Entry],
        max_ops: usize,
    ) -> Result<(StateBatch, usize), StoreError> {
        if entries.is_empty() {
            return Err(StoreError::Misuse("reducing an empty batch".into()));
        }
        let mut batch = self.begin();
        let taken = self.reduce_into(&mut batch, entries, max_ops)?;
        Ok((self.finish(batch)?, taken))
    }

    /// An empty batch to [`Materializer::reduce_into`]: a batch may be fed
    /// in several parts (the reducer thread reduces a window as it fills, so
    /// its work comes in small slices instead of one burst per window).
    pub fn begin(&self) -> StateBatch {
        StateBatch::new(self.next - 1)
    }

    /// Reduce entries into `batch` (from [`Materializer::begin`], not
    /// finished yet), stopping after the first entry that brings it to
    /// `max_ops` merged ops; how many of `entries` it took (all of them, or
    /// at least one).
    pub fn reduce_into(
        &mut self,
        batch: &mut StateBatch,
        entries: &[Entry],
        max_ops: usize,
    ) -> Result<usize, StoreError> {
        let mut taken = 0;
        for entry in entries {
            if entry.pos.index != self.next {
                return Err(StoreError::Corrupt(format!(
                    "entry {} where {} was expected",
                    entry.pos, self.next
                )));
            }
            self.reducer.reduce(entry, &mut self.ops)?;
            for op in self.ops.drain(..) {
                batch.push(op);
            }
            batch.state_index = entry.pos.index;
            self.next += 1;
            taken += 1;
            if batch.ops.len() >= max_ops {
                break;
            }
        }
        Ok(taken)
    }

    /// End `batch`: what the reducer held back until its end goes in, and
    /// it compacts the log through `retention` entries behind its state
    /// index.
    pub fn finish(&mut self, mut batch: StateBatch) -> Result<StateBatch, StoreError> {
        debug_assert_eq!(
            batch.state_index + 1,
            self.next,
            "batches end where reducing stopped"
        );
        self.reducer.flush(&mut self.ops)?;
        for op in self.ops.drain(..) {
            batch.push(op);
        }
        batch.compact_through = batch.state_index.saturating_sub(self.retention);
        Ok(batch)
    }
}

/// Adapts a store to [`StateRead`].
pub(crate) struct StoreState<'a>(pub(crate) &'a dyn EventStore);

impl StateRead for StoreState<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        self.0.state_get(key)
    }
    fn scan_prefix(&self, prefix: &[u8]) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        self.0.state_scan(prefix)
    }
    fn scan_prefix_page(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        self.0.state_scan_page(prefix, after, limit)
    }
}

/// A [`StateRead`] over pairs already read (e.g. a snapshot), for rebuilding
/// a reducer or a replica from them.
impl StateRead for BTreeMap<Bytes, Bytes> {
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        Ok(BTreeMap::get(self, key).cloned())
    }
    fn scan_prefix(&self, prefix: &[u8]) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        Ok(self
            .range(Bytes::copy_from_slice(prefix)..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
    fn scan_prefix_page(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        use std::ops::Bound;
        let start = match after {
            Some(a) => Bound::Excluded(Bytes::copy_from_slice(a)),
            None => Bound::Included(Bytes::copy_from_slice(prefix)),
        };
        Ok(self
            .range((start, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(k: &'static str, v: &'static str) -> StateOp {
        StateOp::Put {
            key: Bytes::from_static(k.as_bytes()),
            value: Bytes::from_static(v.as_bytes()),
        }
    }
    fn del(k: &'static str) -> StateOp {
        StateOp::Delete {
            key: Bytes::from_static(k.as_bytes()),
        }
    }
    fn del_prefix(p: &'static str) -> StateOp {
        StateOp::DeletePrefix {
            prefix: Bytes::from_static(p.as_bytes()),
        }
    }

    #[test]
    fn put_then_delete_in_one_batch_writes_no_value() {
        let mut b = StateBatch::new(1);
        b.push(put("a", "1"));
        b.push(del("a"));
        b.push(del("b"));
        assert_eq!(b.ops.get(&b"a"[..]), Some(&MergedOp::PutThenDelete));
        assert_eq!(b.ops.get(&b"b"[..]), Some(&MergedOp::Delete));
        b.push(put("a", "2"));
        assert_eq!(b.ops.get(&b"a"[..]), Some(&MergedOp::Put(Bytes::from("2"))));
    }

    #[test]
    fn prefix_deletion_drops_earlier_keys_and_keeps_later_ones() {
        let mut b = StateBatch::new(1);
        b.push(put("q1/1", "x"));
        b.push(put("q2/1", "y"));
        b.push(del_prefix("q1/"));
        b.push(put("q1/2", "z"));
        b.push(del_prefix("q"));
        b.push(del_prefix("q1/"));
        b.push(put("q2/3", "w"));
        assert_eq!(b.delete_prefixes, vec![Bytes::from("q")]);
        assert_eq!(b.ops.len(), 1);
        let mut before: BTreeMap<Bytes, Bytes> = [("q1/0", "old"), ("r", "keep")]
            .into_iter()
            .map(|(k, v)| (Bytes::from(k), Bytes::from(v)))
            .collect();
        apply_to_map(&mut before, &b);
        let after: Vec<_> = before.into_iter().collect();
        assert_eq!(
            after,
            vec![
                (Bytes::from("q2/3"), Bytes::from("w")),
                (Bytes::from("r"), Bytes::from("keep"))
            ]
        );
    }
}
