//! In-memory event store.
//!
//! It exists so the deterministic simulator can run many stores in one thread
//! and crash them at will, and so the conformance suite can pin down the trait's
//! semantics against a second implementation. It mirrors fjall's durability
//! model (what a `sync` covers, what a crash loses) rather than being "a Vec".

use std::collections::BTreeMap;

use bytes::Bytes;

use super::state::{apply_to_map, check_materialize};
use super::{
    EventStore, StateBatch, StoreError, check_append, check_append_as, check_promise, check_read,
    check_stable, check_truncate,
};
use crate::position::{Entry, LogPosition};

/// An [`EventStore`] held in memory, with crash simulation.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    /// Whether the store joined (durable when set, like a promise).
    joined: bool,
    /// Fixed at creation; see [`EventStore::incarnation`].
    incarnation: u64,
    /// `entries[i]` has index `synced_base.index + i + 1`: no holes. Entries
    /// compacted since the last sync stay here until it (a crash brings them
    /// back, as it would on fjall), hidden behind `base`.
    entries: Vec<Entry>,
    /// How many of `entries` a crash keeps: the prefix covered by the last fsync.
    synced_len: usize,
    /// Promises are durable before they return, so there is no unsynced copy.
    promised_epoch: u64,
    /// What `stable_index()` reports now.
    stable_index: u64,
    /// What a crash falls back to: `set_stable_index` is lazy.
    synced_stable_index: u64,
    /// The last compacted entry, as reads see it now.
    base: LogPosition,
    /// The last compacted entry as of the last fsync: where `entries` starts.
    synced_base: LogPosition,
    /// The materialized state as reads see it now.
    state: BTreeMap<Bytes, Bytes>,
    /// The state as of the last fsync; `unsynced` is replayed onto it by the
    /// next one, so a crash loses whole batches, never part of one.
    synced_state: BTreeMap<Bytes, Bytes>,
    /// What `state_index()` reports now.
    state_index: u64,
    /// The state index as of the last fsync.
    synced_state_index: u64,
    /// Batches materialized since the last fsync.
    unsynced: Vec<StateBatch>,
    /// A peer's state being staged (see [`EventStore::stage_state`]) and
    /// the base it is of. A crash drops it, as reopening a fjall store
    /// drops its staging keyspace.
    staging: Option<(LogPosition, BTreeMap<Bytes, Bytes>)>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

/// The last incarnation handed out, so stores created in one process are
/// ordered even within one clock tick.
static LAST_INCARNATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl MemoryStore {
    /// An empty store, as if on a fresh disk: not joined, with a new
    /// incarnation.
    pub fn new() -> Self {
        use std::sync::atomic::Ordering;
        let incarnation = super::new_incarnation(LAST_INCARNATION.load(Ordering::Relaxed));
        LAST_INCARNATION.fetch_max(incarnation, Ordering::Relaxed);
        MemoryStore {
            joined: false,
            incarnation,
            entries: Vec::new(),
            synced_len: 0,
            promised_epoch: 0,
            stable_index: 0,
            synced_stable_index: 0,
            base: LogPosition::ZERO,
            synced_base: LogPosition::ZERO,
            state: BTreeMap::new(),
            synced_state: BTreeMap::new(),
            state_index: 0,
            synced_state_index: 0,
            unsynced: Vec::new(),
            staging: None,
        }
    }

    /// Simulate a crash (power loss): forget everything not covered by the last
    /// durable operation, exactly as the durability contract allows. Keeps the
    /// worst case (all unsynced writes lost) so the simulator exercises it.
    pub fn crash(&mut self) {
        self.entries.truncate(self.synced_len);
        self.stable_index = self.synced_stable_index;
        self.base = self.synced_base;
        self.state = self.synced_state.clone();
        self.state_index = self.synced_state_index;
        self.unsynced.clear();
        self.staging = None;
    }

    /// Whether a state is being staged (for tests of a crash mid-install).
    pub fn staging(&self) -> bool {
        self.staging.is_some()
    }

    /// Everything written so far becomes durable. Like fjall, every durable
    /// operation persists the whole journal, not only its own write.
    fn mark_synced(&mut self) {
        for batch in self.unsynced.drain(..) {
            apply_to_map(&mut self.synced_state, &batch);
        }
        self.synced_state_index = self.state_index;
        let dropped = self.offset(self.base.index).min(self.entries.len());
        self.entries.drain(..dropped);
        self.synced_base = self.base;
        self.synced_len = self.entries.len();
        self.synced_stable_index = self.stable_index;
    }

    /// Position in `entries` of the entry after `index`.
    fn offset(&self, index: u64) -> usize {
        usize::try_from(index.saturating_sub(self.synced_base.index)).unwrap_or(usize::MAX)
    }
}

impl EventStore for MemoryStore {
    fn append(&mut self, entries: &[Entry]) -> Result<(), StoreError> {
        check_append(self.last_position(), self.promised_epoch, entries)?;
        self.entries.extend_from_slice(entries);
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        self.mark_synced();
        Ok(())
    }

    fn last_position(&self) -> LogPosition {
        self.entries.last().map_or(self.synced_base, |e| e.pos)
    }

    fn read_from(&self, from: u64) -> Result<Vec<Entry>, StoreError> {
        check_read(self.base, from)?;
        let skip = self.offset(from.max(1) - 1);
        Ok(self.entries.iter().skip(skip).cloned().collect())
    }

    fn truncate_after(&mut self, index: u64) -> Result<(), StoreError> {
        if check_truncate(self.stable_index, self.last_position(), index)? {
            let keep = self.offset(index);
            self.entries.truncate(keep);
            self.mark_synced();
        }
        Ok(())
    }

    fn joined(&self) -> bool {
        self.joined
    }

    fn incarnation(&self) -> u64 {
        self.incarnation
    }

    fn set_joined(&mut self) -> Result<(), StoreError> {
        if !self.joined {
            self.joined = true;
            self.mark_synced();
        }
        Ok(())
    }

    fn promised_epoch(&self) -> u64 {
        self.promised_epoch
    }

    fn set_promised_epoch(&mut self, epoch: u64) -> Result<(), StoreError> {
        if check_promise(self.promised_epoch, epoch)? {
            self.promised_epoch = epoch;
            self.mark_synced();
        }
        Ok(())
    }

    fn stable_index(&self) -> u64 {
        self.stable_index
    }

    fn set_stable_index(&mut self, index: u64) -> Result<(), StoreError> {
        if check_stable(self.stable_index, self.last_position(), index)? {
            self.stable_index = index;
        }
        Ok(())
    }

    fn append_as(&mut self, writer_epoch: u64, entries: &[Entry]) -> Result<(), StoreError> {
        check_append_as(
            self.last_position(),
            self.promised_epoch,
            writer_epoch,
            entries,
        )?;
        self.entries.extend_from_slice(entries);
        Ok(())
    }

    fn read_range(&self, from: u64, to: u64) -> Result<Vec<Entry>, StoreError> {
        if to < from.max(1) {
            return Ok(Vec::new());
        }
        check_read(self.base, from)?;
        let lo = self.offset(from.max(1) - 1);
        let hi = self.offset(to).min(self.entries.len());
        Ok(self
            .entries
            .get(lo..hi)
            .map_or_else(Vec::new, <[Entry]>::to_vec))
    }

    fn state_index(&self) -> u64 {
        self.state_index
    }

    fn log_base(&self) -> LogPosition {
        self.base
    }

    fn materialize(&mut self, batch: &StateBatch) -> Result<(), StoreError> {
        check_materialize(self.state_index, self.stable_index, batch)?;
        apply_to_map(&mut self.state, batch);
        self.state_index = batch.state_index;
        if batch.compact_through > self.base.index {
            let at = self.offset(batch.compact_through - 1);
            let entry = self.entries.get(at).ok_or_else(|| {
                StoreError::Corrupt(format!("entry {} missing", batch.compact_through))
            })?;
            self.base = entry.pos;
        }
        self.unsynced.push(batch.clone());
        Ok(())
    }

    fn state_get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        Ok(self.state.get(key).cloned())
    }

    fn state_scan(&self, prefix: &[u8]) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        super::StateRead::scan_prefix(&self.state, prefix)
    }

    fn state_snapshot(&self) -> Result<Box<dyn super::StateSnapshot>, StoreError> {
        let base = if self.state_index == self.base.index {
            self.base
        } else {
            let at = self.offset(self.state_index.saturating_sub(1));
            self.entries.get(at).map(|e| e.pos).ok_or_else(|| {
                StoreError::Corrupt(format!("state index {} not in the log", self.state_index))
            })?
        };
        Ok(Box::new(MapSnapshot {
            base,
            state: self.state.clone(),
        }))
    }

    fn stage_state(
        &mut self,
        base: LogPosition,
        first: bool,
        pairs: &[(Bytes, Bytes)],
    ) -> Result<(), StoreError> {
        if first {
            self.staging = Some((base, BTreeMap::new()));
        }
        match &mut self.staging {
            Some((staged, map)) if *staged == base => {
                map.extend(pairs.iter().cloned());
                Ok(())
            }
            _ => Err(StoreError::Misuse(format!(
                "a chunk of the state at {base}, which is not being staged"
            ))),
        }
    }

    fn install_staged(&mut self, base: LogPosition) -> Result<(), StoreError> {
        if base.index <= self.base.index {
            return Err(StoreError::Misuse(format!(
                "installing a state at {base}, not above the log base {}",
                self.base
            )));
        }
        let state = match self.staging.take() {
            Some((staged, map)) if staged == base => map,
            other => {
                self.staging = other;
                return Err(StoreError::Misuse(format!(
                    "installing a state at {base}, which was not staged"
                )));
            }
        };
        // Durable at once (the contract says so): the crash model then
        // needs no unsynced copy of a whole state.
        self.mark_synced();
        let at = self.offset(base.index);
        let held = at
            .checked_sub(1)
            .and_then(|i| self.entries.get(i))
            .map(|e| e.pos);
        if super::keeps_suffix(held, base) {
            self.entries.drain(..at);
        } else {
            self.entries.clear();
        }
        self.synced_state = state.clone();
        self.state = state;
        self.state_index = base.index;
        self.base = base;
        self.stable_index = self.stable_index.max(base.index);
        self.synced_base = base;
        self.mark_synced();
        Ok(())
    }
}

/// A frozen copy of a [`MemoryStore`]'s state.
struct MapSnapshot {
    base: LogPosition,
    state: BTreeMap<Bytes, Bytes>,
}

impl super::StateSnapshot for MapSnapshot {
    fn base(&self) -> LogPosition {
        self.base
    }

    fn chunk(
        &self,
        after: Option<&[u8]>,
        max_bytes: usize,
    ) -> Result<(Vec<(Bytes, Bytes)>, bool), StoreError> {
        use std::ops::Bound;
        let lower = after.map_or(Bound::Unbounded, |k| {
            Bound::Excluded(Bytes::copy_from_slice(k))
        });
        let mut out = Vec::new();
        let mut size = 0;
        for (k, v) in self.state.range((lower, Bound::Unbounded)) {
            if !out.is_empty() && size >= max_bytes {
                return Ok((out, false));
            }
            size += k.len() + v.len();
            out.push((k.clone(), v.clone()));
        }
        Ok((out, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_loses_only_unsynced_writes() {
        let mut store = MemoryStore::new();
        store
            .append(&[Entry::new(1, 1, "a"), Entry::new(1, 2, "b")])
            .unwrap();
        store.set_stable_index(1).unwrap();
        store.sync().unwrap();
        store.append(&[Entry::new(1, 3, "c")]).unwrap();
        store.set_stable_index(2).unwrap();

        store.crash();

        assert_eq!(store.last_position(), LogPosition::new(1, 2));
        assert_eq!(store.stable_index(), 1);
    }

    #[test]
    fn promise_makes_earlier_appends_durable_like_fjall() {
        let mut store = MemoryStore::new();
        store.append(&[Entry::new(1, 1, "a")]).unwrap();
        store.set_promised_epoch(2).unwrap();
        store.crash();
        assert_eq!(store.last_position(), LogPosition::new(1, 1));
        assert_eq!(store.promised_epoch(), 2);
    }
}
