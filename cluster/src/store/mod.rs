//! Synchronous storage of the log.
//!
//! The trait is deliberately synchronous and single-owner (`&mut self`): the
//! disk store blocks on fsync, so a store is always driven from one dedicated thread that
//! owns it, and results go back over channels (see [`crate::LocalLog`]). The same
//! trait will back the remote event-store nodes in the cluster issue.
//!
//! Both implementations share [`check_append`] so that the in-memory store used by
//! the simulator rejects exactly what the disk store rejects.

mod fjall;
mod fjall_log;
mod fjall_meta;
mod fjall_spaces;
mod fjall_state;
mod follow;
/// The segment log's fuzz target; see [`crate::fuzz`].
pub(crate) mod fuzz;
mod memory;
pub(crate) mod reducer_thread;
mod runner;
mod segment_log;
mod segment_record;
mod state;

pub use self::fjall::FjallStore;
pub use self::memory::MemoryStore;
pub use self::runner::{DiskRunner, RecoveredStore};
pub(crate) use self::state::StoreState;
pub use self::state::{
    Materializer, MergedOp, ReduceError, Reducer, SEQUENCE_TAG_MIN, StateBatch, StateOp, StateRead,
};

use crate::position::{Entry, LogPosition};

/// Why a store operation failed.
///
/// After `Io`, `Fjall` or `Corrupt` the store must be considered dead: fjall
/// poisons itself after a failed fsync, and retrying an fsync after a failure can
/// report success for data that never reached the disk. `Fenced`, `OutOfOrder` and
/// `Misuse` are rejections that leave the store unchanged.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The operating system refused something outside fjall (the log's
    /// segment files, spawning the store thread).
    #[error("store I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// fjall failed; usually hardware or a full disk.
    #[error("fjall error: {0}")]
    Fjall(#[from] ::fjall::Error),
    /// Bytes on disk do not decode; we never guess, we refuse to start.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// I2 (one writer): the store has promised an epoch higher than the writer's.
    #[error("fenced: store promised epoch {promised}, got epoch {got}")]
    Fenced {
        /// The epoch this store has promised.
        promised: u64,
        /// The epoch of the rejected request.
        got: u64,
    },
    /// An append did not continue the log: index not `last + 1`, or epoch going
    /// backwards. Structured because a replica answers it with its last position.
    #[error("append out of order: log ends at {last}, got {got}")]
    OutOfOrder {
        /// The position the log ends at (or the previous entry of the same batch).
        last: LogPosition,
        /// The offending entry's position.
        got: LogPosition,
    },
    /// The caller broke the trait's contract (e.g. truncating below the stable
    /// index). A bug in the caller, not a disk problem.
    #[error("store misuse: {0}")]
    Misuse(String),
    /// The entries asked for were deleted once the materialized state covered
    /// them: catch up from the state instead.
    #[error("log compacted through {base}: read the state instead")]
    Compacted {
        /// The last deleted entry; the log holds what follows it.
        base: LogPosition,
    },
    /// The store thread of a [`crate::LocalLog`] has stopped after an earlier
    /// error (already reported through `on_error`); carries its description.
    #[error("store thread stopped: {0}")]
    Stopped(String),
}

/// Synchronous storage of the log. Implemented by [`FjallStore`] (real disk) and
/// [`MemoryStore`] (for the simulator and the conformance suite, not to dodge the
/// disk).
///
/// Durability contract: after `sync`, `set_promised_epoch` or `truncate_after`
/// returns `Ok`, everything written before it survives a crash (SIGKILL or power
/// loss). Anything else may or may not survive a crash, but a crash never leaves
/// a hole: what survives is always a prefix of what was appended.
pub trait EventStore: Send + 'static {
    /// Append entries (indexes contiguous and following `last_position().index`,
    /// epochs non-decreasing and not below the promised epoch). Not yet durable.
    /// The whole slice is checked before anything is written, so a rejected
    /// append changes nothing.
    fn append(&mut self, entries: &[Entry]) -> Result<(), StoreError>;
    /// Make everything appended so far durable (one fsync: group commit).
    fn sync(&mut self) -> Result<(), StoreError>;
    /// Position of the last entry held; `(0,0)` when empty.
    fn last_position(&self) -> LogPosition;
    /// Entries with index >= from, in order (used for recovery / catch-up).
    fn read_from(&self, from: u64) -> Result<Vec<Entry>, StoreError>;
    /// Drop entries with index > `index` (conflict truncation). Durable before
    /// return, so a crash cannot resurrect a truncated conflicting suffix.
    /// Truncating below the stable index is refused: stable entries are final (I1).
    fn truncate_after(&mut self, index: u64) -> Result<(), StoreError>;
    /// Whether this store has joined its cluster: a new disk (or one whose
    /// predecessor was lost) has not, and must not promise or ack until it
    /// caught up with its peers (`replication/store_node/join.rs`). A disk
    /// that predates the flag and holds anything counts as joined; one that
    /// holds nothing (promise 0, empty log) counts as new.
    fn joined(&self) -> bool;
    /// The disk's incarnation, fixed when the disk is created; a newer disk
    /// has a higher one. 0 for a disk that predates incarnations.
    fn incarnation(&self) -> u64;
    /// Record that the store joined. Durable before it returns.
    fn set_joined(&mut self) -> Result<(), StoreError>;
    /// The highest epoch this store has promised (I2); 0 for a new store.
    fn promised_epoch(&self) -> u64;
    /// Promise `epoch`: durable before return. A lower epoch is refused with
    /// `Fenced`; the same epoch again is a no-op.
    fn set_promised_epoch(&mut self, epoch: u64) -> Result<(), StoreError>;
    /// Highest index known to be stable (on a quorum); 0 for a new store.
    fn stable_index(&self) -> u64;
    /// Record a stable index. May be lazy: it becomes durable with the next
    /// `sync`. A lower value than the current one is ignored (stability never goes
    /// back); a value beyond `last_position().index` is `Misuse`.
    fn set_stable_index(&mut self, index: u64) -> Result<(), StoreError>;

    /// Append entries on behalf of the master of `writer_epoch` (the replicated
    /// store's write). Not yet durable, like [`EventStore::append`].
    ///
    /// Unlike `append`, the *writer's* epoch is checked against the promise, not
    /// each entry's: a new master re-replicates the entries it adopted, whose
    /// epochs are older than the promise it holds. The entries themselves must
    /// still continue the log (contiguous indexes, epochs non-decreasing) and may
    /// not claim an epoch above their writer's. See [`check_append_as`].
    ///
    /// The default serves stores that only have `append`: it accepts what both
    /// checks accept and refuses adopted older-epoch entries with `Misuse`, so it
    /// is never more permissive than the contract. Both stores of this crate
    /// implement it fully.
    fn append_as(&mut self, writer_epoch: u64, entries: &[Entry]) -> Result<(), StoreError> {
        check_append_as(
            self.last_position(),
            self.promised_epoch(),
            writer_epoch,
            entries,
        )?;
        let promised = self.promised_epoch();
        if entries.iter().any(|e| e.pos.epoch < promised) {
            return Err(StoreError::Misuse(
                "this store cannot append entries older than its promise".into(),
            ));
        }
        self.append(entries)
    }

    /// Entries with `from <= index <= to`, in order; fewer (or none) where the
    /// log is shorter. Serves a candidate's Fetch without reading the whole tail.
    /// The default reads from `from` and cuts; stores override it to stop early.
    fn read_range(&self, from: u64, to: u64) -> Result<Vec<Entry>, StoreError> {
        if to < from.max(1) {
            return Ok(Vec::new());
        }
        let mut entries = self.read_from(from)?;
        entries.retain(|e| e.pos.index <= to);
        Ok(entries)
    }

    /// The index up to which the materialized state covers the log; 0 for a
    /// store without state. Never above `stable_index()`.
    fn state_index(&self) -> u64 {
        0
    }

    /// The position of the last entry deleted by compaction (`(0,0)` when none
    /// was): the log holds the entries after it, and log matching at the
    /// boundary compares against it. `last_position()` is at least this.
    fn log_base(&self) -> LogPosition {
        LogPosition::ZERO
    }

    /// Write one merged batch of state ops, the new state index and the log
    /// compaction in a single atomic write (not yet durable, like `append`;
    /// the next durable operation covers it). Refused with `Misuse` when the
    /// batch would move the state index back or past the stable index, or
    /// compact past the state: the log only loses what the state holds (I1).
    fn materialize(&mut self, batch: &StateBatch) -> Result<(), StoreError> {
        let _ = batch;
        Err(StoreError::Misuse("this store keeps no state".into()))
    }

    /// The state's value for `key`.
    fn state_get(&self, key: &[u8]) -> Result<Option<bytes::Bytes>, StoreError> {
        let _ = key;
        Ok(None)
    }

    /// Every state pair whose key starts with `prefix`, in key order.
    fn state_scan(&self, prefix: &[u8]) -> Result<Vec<(bytes::Bytes, bytes::Bytes)>, StoreError> {
        let _ = prefix;
        Ok(Vec::new())
    }

    /// A consistent view of the state as it is now, to serve to a peer in
    /// chunks (snapshot catch-up) while the store goes on writing.
    fn state_snapshot(&self) -> Result<Box<dyn StateSnapshot>, StoreError> {
        Err(StoreError::Misuse("this store keeps no state".into()))
    }

    /// Write `pairs`, one chunk of a peer's state of the stable log up to
    /// `base`, into a staging area beside the live state, which stays as it
    /// is (reads, `materialize` and snapshots go on using it). `first`
    /// starts a new staged state and drops whatever was staged before;
    /// otherwise the chunk continues the state staged for `base` (anything
    /// else is `Misuse`). Not yet durable, like `append`. A crash (or
    /// reopening the store) drops the staged state: it is never seen as the
    /// store's state until [`EventStore::install_staged`] switches it in,
    /// so a crash mid-transfer leaves the old state and log, whole.
    fn stage_state(
        &mut self,
        base: LogPosition,
        first: bool,
        pairs: &[(bytes::Bytes, bytes::Bytes)],
    ) -> Result<(), StoreError> {
        let _ = (base, first, pairs);
        Err(StoreError::Misuse("this store keeps no state".into()))
    }

    /// Replace the state with the one staged for `base`, in one atomic
    /// write, durable before it returns (the old state is dropped after
    /// it). `base` becomes the log base and the state index. Entries after
    /// `base` stay if the log holds `base` itself; otherwise the whole log
    /// goes (an entry that disagrees with a stable one is never stable, nor
    /// is anything after it). The stable index becomes at least
    /// `base.index`. `Misuse` when nothing is staged for `base`.
    fn install_staged(&mut self, base: LogPosition) -> Result<(), StoreError> {
        let _ = base;
        Err(StoreError::Misuse("this store keeps no state".into()))
    }

    /// [`EventStore::stage_state`] of the whole state in one chunk, then
    /// [`EventStore::install_staged`].
    fn install_state(
        &mut self,
        base: LogPosition,
        pairs: &[(bytes::Bytes, bytes::Bytes)],
    ) -> Result<(), StoreError> {
        self.stage_state(base, true, pairs)?;
        self.install_staged(base)
    }

    /// At most `limit` state pairs whose key starts with `prefix` and sorts
    /// after `after` (from the first one when None), in key order. Reading a
    /// large state a page at a time keeps memory bounded (a broker restoring a
    /// backlog longer than RAM); this default reads everything and is for
    /// stores whose state is small or in memory anyway.
    fn state_scan_page(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(bytes::Bytes, bytes::Bytes)>, StoreError> {
        Ok(self
            .state_scan(prefix)?
            .into_iter()
            .filter(|(k, _)| after.is_none_or(|a| k.as_ref() > a))
            .take(limit)
            .collect())
    }
}

/// A consistent, frozen view of a store's state: see
/// [`EventStore::state_snapshot`].
pub trait StateSnapshot: Send {
    /// The last log entry the state covers (the entry at the state index).
    fn base(&self) -> LogPosition;
    /// Pairs with keys above `after` (all, when `None`), in key order, up to
    /// about `max_bytes` (at least one pair); and whether they are the last.
    fn chunk(
        &self,
        after: Option<&[u8]>,
        max_bytes: usize,
    ) -> Result<(Vec<(bytes::Bytes, bytes::Bytes)>, bool), StoreError>;
}

/// Whether a log holding `base` keeps its entries after an installed state:
/// shared by the stores, so they keep and drop alike.
pub(crate) fn keeps_suffix(log_pos_at_base: Option<LogPosition>, base: LogPosition) -> bool {
    log_pos_at_base == Some(base)
}

/// Refuses a read that starts inside the compacted part of the log.
pub(crate) fn check_read(base: LogPosition, from: u64) -> Result<(), StoreError> {
    if base.index > 0 && from.max(1) <= base.index {
        return Err(StoreError::Compacted { base });
    }
    Ok(())
}

/// Checks that `entries`, sent by the master of `writer_epoch`, may follow a log
/// ending at `last` on a store that has promised `promised` (I2: the writer must
/// not be deposed). Each entry must continue the log and may not be newer than
/// its writer. Shared by every store so they reject identically.
pub fn check_append_as(
    last: LogPosition,
    promised: u64,
    writer_epoch: u64,
    entries: &[Entry],
) -> Result<(), StoreError> {
    if writer_epoch < promised {
        return Err(StoreError::Fenced {
            promised,
            got: writer_epoch,
        });
    }
    let mut prev = last;
    for entry in entries {
        if entry.pos.index != prev.index.saturating_add(1)
            || entry.pos.epoch < prev.epoch
            || entry.pos.epoch > writer_epoch
        {
            return Err(StoreError::OutOfOrder {
                last: prev,
                got: entry.pos,
            });
        }
        prev = entry.pos;
    }
    Ok(())
}

/// Checks that `entries` may follow a log ending at `last` on a store that has
/// promised `promised`. Shared by every store so they reject identically.
pub fn check_append(last: LogPosition, promised: u64, entries: &[Entry]) -> Result<(), StoreError> {
    let mut prev = last;
    for entry in entries {
        if entry.pos.epoch < promised {
            return Err(StoreError::Fenced {
                promised,
                got: entry.pos.epoch,
            });
        }
        if entry.pos.index != prev.index.saturating_add(1) || entry.pos.epoch < prev.epoch {
            return Err(StoreError::OutOfOrder {
                last: prev,
                got: entry.pos,
            });
        }
        prev = entry.pos;
    }
    Ok(())
}

/// Shared check for `set_stable_index`; returns whether the value must be stored.
pub(crate) fn check_stable(
    current: u64,
    last: LogPosition,
    index: u64,
) -> Result<bool, StoreError> {
    if index > last.index {
        return Err(StoreError::Misuse(format!(
            "stable index {index} beyond the last entry {last}"
        )));
    }
    Ok(index > current)
}

/// Shared check for `truncate_after`; returns whether anything must be removed.
pub(crate) fn check_truncate(
    stable: u64,
    last: LogPosition,
    index: u64,
) -> Result<bool, StoreError> {
    if index >= last.index {
        return Ok(false);
    }
    if index < stable {
        return Err(StoreError::Misuse(format!(
            "truncate after {index} would drop stable entries (stable index {stable})"
        )));
    }
    Ok(true)
}

/// The incarnation of a disk created now: microseconds since the Unix epoch,
/// so a disk created later (after the last one was lost) has a higher one,
/// and never 0 (the value of a disk that predates incarnations). Kept above
/// `after`, for stores created twice within one clock tick.
pub fn new_incarnation(after: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    now.max(after.saturating_add(1)).max(1)
}

/// Shared check for `set_promised_epoch`; returns whether the value must be stored.
pub(crate) fn check_promise(promised: u64, epoch: u64) -> Result<bool, StoreError> {
    if epoch < promised {
        return Err(StoreError::Fenced {
            promised,
            got: epoch,
        });
    }
    Ok(epoch > promised)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_append_rejects_gaps_regressions_and_stale_epochs() {
        let last = LogPosition::new(2, 5);
        assert!(check_append(last, 2, &[Entry::new(2, 6, "a"), Entry::new(3, 7, "b")]).is_ok());
        assert!(check_append(last, 2, &[]).is_ok());
        assert!(matches!(
            check_append(last, 2, &[Entry::new(2, 7, "a")]),
            Err(StoreError::OutOfOrder { got, .. }) if got == LogPosition::new(2, 7)
        ));
        assert!(matches!(
            check_append(last, 1, &[Entry::new(1, 6, "a")]),
            Err(StoreError::OutOfOrder { .. })
        ));
        assert!(matches!(
            check_append(last, 3, &[Entry::new(2, 6, "a")]),
            Err(StoreError::Fenced {
                promised: 3,
                got: 2
            })
        ));
        // A bad entry late in the batch rejects the whole batch.
        assert!(check_append(last, 2, &[Entry::new(2, 6, "a"), Entry::new(2, 8, "b")]).is_err());
    }

    #[test]
    fn check_append_as_checks_the_writer_not_the_entries() {
        let last = LogPosition::new(1, 2);
        // Adopted epoch-1 entries re-sent by the epoch-3 master: accepted.
        assert!(
            check_append_as(last, 3, 3, &[Entry::new(1, 3, "a"), Entry::new(3, 4, "m")]).is_ok()
        );
        // A deposed writer is fenced even with no entries (a heartbeat).
        assert!(matches!(
            check_append_as(last, 3, 2, &[]),
            Err(StoreError::Fenced {
                promised: 3,
                got: 2
            })
        ));
        // An entry newer than its writer is malformed.
        assert!(matches!(
            check_append_as(last, 3, 3, &[Entry::new(4, 3, "x")]),
            Err(StoreError::OutOfOrder { .. })
        ));
        assert!(check_append_as(last, 0, 3, &[Entry::new(1, 4, "gap")]).is_err());
        assert!(check_append_as(last, 0, 3, &[Entry::new(0, 3, "back")]).is_err());
    }

    #[test]
    fn index_zero_is_never_a_valid_entry() {
        assert!(check_append(LogPosition::ZERO, 0, &[Entry::new(0, 0, "x")]).is_err());
        assert!(check_append(LogPosition::ZERO, 0, &[Entry::new(0, 1, "x")]).is_ok());
    }
}
