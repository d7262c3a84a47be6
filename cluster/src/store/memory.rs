//! In-memory event store.
//!
//! It exists so the deterministic simulator can run many stores in one thread
//! and crash them at will, and so the conformance suite can pin down the trait's
//! semantics against a second implementation. It mirrors fjall's durability
//! model (what a `sync` covers, what a crash loses) rather than being "a Vec".

use super::{
    EventStore, StoreError, check_append, check_append_as, check_promise, check_stable,
    check_truncate,
};
use crate::position::{Entry, LogPosition};

/// An [`EventStore`] held in memory, with crash simulation.
#[derive(Debug, Default, Clone)]
pub struct MemoryStore {
    /// `entries[i]` has index `i + 1`: the log always starts at 1 and has no holes.
    entries: Vec<Entry>,
    /// How many of `entries` a crash keeps: the prefix covered by the last fsync.
    synced_len: usize,
    /// Promises are durable before they return, so there is no unsynced copy.
    promised_epoch: u64,
    /// What `stable_index()` reports now.
    stable_index: u64,
    /// What a crash falls back to: `set_stable_index` is lazy.
    synced_stable_index: u64,
}

impl MemoryStore {
    /// An empty store, as if on a fresh disk.
    pub fn new() -> Self {
        Self::default()
    }

    /// Simulate a crash (power loss): forget everything not covered by the last
    /// durable operation, exactly as the durability contract allows. Keeps the
    /// worst case (all unsynced writes lost) so the simulator exercises it.
    pub fn crash(&mut self) {
        self.entries.truncate(self.synced_len);
        self.stable_index = self.synced_stable_index;
    }

    /// Everything written so far becomes durable. Like fjall, every durable
    /// operation persists the whole journal, not only its own write.
    fn mark_synced(&mut self) {
        self.synced_len = self.entries.len();
        self.synced_stable_index = self.stable_index;
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
        self.entries.last().map_or(LogPosition::ZERO, |e| e.pos)
    }

    fn read_from(&self, from: u64) -> Result<Vec<Entry>, StoreError> {
        let skip = usize::try_from(from.saturating_sub(1)).unwrap_or(usize::MAX);
        Ok(self.entries.iter().skip(skip).cloned().collect())
    }

    fn truncate_after(&mut self, index: u64) -> Result<(), StoreError> {
        if check_truncate(self.stable_index, self.last_position(), index)? {
            let keep = usize::try_from(index)
                .map_err(|_| StoreError::Misuse(format!("index {index} does not fit in memory")))?;
            self.entries.truncate(keep);
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
        let lo = usize::try_from(from.max(1) - 1).unwrap_or(usize::MAX);
        let hi = usize::try_from(to)
            .unwrap_or(usize::MAX)
            .min(self.entries.len());
        Ok(self
            .entries
            .get(lo..hi)
            .map_or_else(Vec::new, <[Entry]>::to_vec))
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
