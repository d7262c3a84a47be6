//! The simulated disk of a store node.
//!
//! It follows the [`crate::EventStore`] durability contract the way
//! [`crate::MemoryStore`] does (a crash keeps what the last fsync covered and
//! never leaves a hole), but applies the replication engine's [`DiskOp`]s,
//! which differ from the trait in one respect: an append is checked against the
//! *writer's* epoch, because a new master re-replicates adopted entries whose own
//! epochs are older than the store's promise. (`EventStore::append` checks the
//! entries' epochs, right for the single-node `LocalLog`; the TCP store driver
//! will need the writer-epoch variant.)
//!
//! A crash keeps a random prefix of the ops since the last fsync: anything from
//! none of them (the worst case the contract allows) to all of them.

use bytes::Bytes;

use crate::position::{Entry, LogPosition};
use crate::replication::{DiskOp, EpochRuns, SplitMix64};

use super::reducer::{State, reduce};

/// What is on a disk at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiskState {
    /// `entries[i]` has index `base.index + i + 1`.
    pub entries: Vec<Entry>,
    /// The last compacted entry: the state covers the log up to it.
    pub base: LogPosition,
    /// The materialized state of the log up to `base`.
    pub state: State,
    /// The promised epoch.
    pub promised: u64,
    /// The stable index recorded.
    pub stable: u64,
    /// Whether the store joined (see `store_node/join.rs`).
    pub joined: bool,
    /// The disk's incarnation: when it was created (sim time + 1).
    pub incarnation: u64,
    /// A peer's state being staged (`DiskOp::StageSnapshot`) and its base.
    /// Reopening a store after a crash drops it (a fjall store deletes the
    /// staging keyspace), so a crash keeps none of it.
    pub staging: Option<(LogPosition, State)>,
}

impl DiskState {
    /// Apply one op. Returns a description of a contract breach (which the I2
    /// and I1 checkers report) instead of applying it.
    pub fn apply(&mut self, op: &DiskOp) -> Result<(), String> {
        match op {
            DiskOp::Promise(epoch) => self.promise(*epoch)?,
            DiskOp::TruncateAfter(index) => self.truncate_after(*index)?,
            DiskOp::Append {
                writer_epoch,
                entries,
            } => self.append(*writer_epoch, entries)?,
            DiskOp::Stable(index) => self.record_stable(*index)?,
            DiskOp::Compact(pos) => self.compact(*pos)?,
            DiskOp::StageSnapshot { base, first, pairs } => {
                self.stage_snapshot(*base, *first, pairs)?;
            }
            DiskOp::InstallSnapshot { base } => self.install_snapshot(*base)?,
            DiskOp::Joined => self.joined = true,
        }
        Ok(())
    }

    /// [`DiskOp::Promise`]: never below the promise held.
    fn promise(&mut self, epoch: u64) -> Result<(), String> {
        if epoch < self.promised {
            return Err(format!("promise {epoch} below {}", self.promised));
        }
        self.promised = epoch;
        Ok(())
    }

    /// [`DiskOp::TruncateAfter`]: never below the stable index or the base.
    fn truncate_after(&mut self, index: u64) -> Result<(), String> {
        if index < self.stable || index < self.base.index {
            return Err(format!(
                "truncate after {index} below stable {} or base {}",
                self.stable, self.base
            ));
        }
        self.entries
            .truncate(usize::try_from(index - self.base.index).unwrap_or(usize::MAX));
        Ok(())
    }

    /// [`DiskOp::Append`]: checked against the writer's epoch (see the
    /// module docs), each entry right after the last.
    fn append(&mut self, writer_epoch: u64, entries: &[Entry]) -> Result<(), String> {
        if writer_epoch < self.promised {
            return Err(format!(
                "append from epoch {writer_epoch} below promise {}",
                self.promised
            ));
        }
        for entry in entries {
            let last = self.last();
            if entry.pos.index != last.index + 1
                || entry.pos.epoch < last.epoch
                || entry.pos.epoch > writer_epoch
            {
                return Err(format!(
                    "append {} after {last} by epoch {writer_epoch}",
                    entry.pos
                ));
            }
            self.entries.push(entry.clone());
        }
        Ok(())
    }

    /// [`DiskOp::Stable`]: never beyond the last entry held.
    fn record_stable(&mut self, index: u64) -> Result<(), String> {
        if index > self.last().index {
            return Err(format!("stable {index} beyond {}", self.last()));
        }
        self.stable = self.stable.max(index);
        Ok(())
    }

    /// [`DiskOp::Compact`]: reduce the log through `pos` into the state.
    fn compact(&mut self, pos: LogPosition) -> Result<(), String> {
        // The log may only lose what is stable (I1), and the state
        // is the log's own entries reduced.
        if pos.index > self.stable || pos.index <= self.base.index {
            return Err(format!(
                "compact through {pos} outside (base {}, stable {}]",
                self.base, self.stable
            ));
        }
        let n = usize::try_from(pos.index - self.base.index).unwrap_or(usize::MAX);
        if self.entries.get(n - 1).map(|e| e.pos) != Some(pos) {
            return Err(format!("compact through {pos}, which the log lacks"));
        }
        for entry in self.entries.drain(..n) {
            reduce(&mut self.state, &entry);
        }
        self.base = pos;
        Ok(())
    }

    /// [`DiskOp::StageSnapshot`]: a chunk of a peer's state at `base`
    /// (`first`: start staging it afresh).
    fn stage_snapshot(
        &mut self,
        base: LogPosition,
        first: bool,
        pairs: &[(Bytes, Bytes)],
    ) -> Result<(), String> {
        if first {
            self.staging = Some((base, State::default()));
        }
        match &mut self.staging {
            Some((staged, state)) if *staged == base => {
                state.extend(pairs.iter().cloned());
            }
            _ => return Err(format!("a chunk of the state at {base}, not being staged")),
        }
        Ok(())
    }

    /// [`DiskOp::InstallSnapshot`]: the staged state at `base` replaces the
    /// state, and the log keeps only what follows `base` (if it holds `base`).
    fn install_snapshot(&mut self, base: LogPosition) -> Result<(), String> {
        if base.index <= self.stable {
            return Err(format!(
                "snapshot at {base} not above stable {}",
                self.stable
            ));
        }
        let state = match self.staging.take() {
            Some((staged, state)) if staged == base => state,
            _ => {
                return Err(format!(
                    "installing the state at {base}, which is not staged"
                ));
            }
        };
        let offset = base.index - self.base.index;
        let keep_from = usize::try_from(offset).unwrap_or(usize::MAX);
        if self.entries.get(keep_from.wrapping_sub(1)).map(|e| e.pos) == Some(base) {
            self.entries.drain(..keep_from);
        } else {
            self.entries.clear();
        }
        self.state = state;
        self.base = base;
        self.stable = base.index;
        Ok(())
    }

    /// The last position held.
    pub fn last(&self) -> LogPosition {
        self.entries.last().map_or(self.base, |e| e.pos)
    }

    /// The epoch runs a store rebuilds from this state when it restarts.
    pub fn runs(&self) -> EpochRuns {
        EpochRuns::from_base(self.base, self.entries.iter().map(|e| e.pos))
    }

    /// Up to `max` state pairs with keys above `after`.
    pub fn state_chunk(&self, after: Option<&Bytes>, max: usize) -> (Vec<(Bytes, Bytes)>, bool) {
        chunk_of(&self.state, after, max)
    }
}

/// Up to `max` pairs of `state` with keys above `after`, and whether they
/// are the last ones.
fn chunk_of(state: &State, after: Option<&Bytes>, max: usize) -> (Vec<(Bytes, Bytes)>, bool) {
    use std::ops::Bound;
    let lower = after.map_or(Bound::Unbounded, |k| Bound::Excluded(k.clone()));
    let mut iter = state.range((lower, Bound::Unbounded));
    let pairs: Vec<(Bytes, Bytes)> = iter
        .by_ref()
        .take(max.max(1))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let done = iter.next().is_none();
    (pairs, done)
}

/// A disk with a durable state and the ops applied since the last fsync.
#[derive(Debug, Clone, Default)]
pub struct SimDisk {
    /// What survives a crash for sure.
    durable: DiskState,
    /// What reads see: `durable` plus `pending`.
    current: DiskState,
    /// Ops applied to `current` but not yet fsynced.
    pending: Vec<DiskOp>,
    /// The snapshot a transfer is reading (as a store pins one view of its
    /// state while sending it); lost in a crash.
    pinned: Option<(LogPosition, State)>,
}

impl SimDisk {
    /// A new, empty disk created at `now`, with an incarnation above every
    /// disk created before; `joined` for a cluster that bootstrapped already.
    pub fn new(now: u64, joined: bool) -> Self {
        let state = DiskState {
            incarnation: now + 1,
            joined,
            ..DiskState::default()
        };
        SimDisk {
            durable: state.clone(),
            current: state,
            ..SimDisk::default()
        }
    }

    /// Apply ops (not yet durable). Stops at the first op that breaks the
    /// contract and returns its description.
    pub fn write(&mut self, ops: &[DiskOp]) -> Result<(), String> {
        for op in ops {
            self.current.apply(op)?;
            self.pending.push(op.clone());
        }
        Ok(())
    }

    /// The fsync: everything written becomes durable. Replays the pending ops on
    /// the durable state (cheaper than copying the whole log).
    pub fn sync(&mut self) {
        for op in self.pending.drain(..) {
            // Already validated against `current`, which started equal.
            let _ = self.durable.apply(&op);
        }
    }

    /// Power loss: keep a random prefix of the unsynced ops, lose the rest,
    /// and what was staged of a peer's state (the store drops it when it
    /// reopens). Returns whether a snapshot install was under way: the
    /// store restarts on its old state, whole.
    pub fn crash(&mut self, rng: &mut SplitMix64) -> bool {
        let keep = rng.below(self.pending.len() as u64 + 1) as usize;
        for op in self.pending.drain(..).take(keep) {
            let _ = self.durable.apply(&op);
        }
        let interrupted = self.current.staging.is_some();
        self.durable.staging = None;
        self.current = self.durable.clone();
        self.pinned = None;
        interrupted
    }

    /// One chunk of at most `max` pairs of the snapshot at `base` after
    /// `after`, or, if that snapshot is not the pinned one (or `after` is
    /// `None`), the first chunk of a new snapshot of the current state.
    /// Returns the snapshot's base, the key continued after, the pairs and
    /// whether they are the last.
    pub fn read_snapshot(
        &mut self,
        base: LogPosition,
        after: Option<Bytes>,
        max: usize,
    ) -> (LogPosition, Option<Bytes>, Vec<(Bytes, Bytes)>, bool) {
        let continuing = after.is_some() && self.pinned.as_ref().is_some_and(|(b, _)| *b == base);
        let after = if continuing {
            after
        } else {
            self.pinned = Some((self.current.base, self.current.state.clone()));
            None
        };
        let Some((base, state)) = self.pinned.as_ref() else {
            return (self.current.base, None, Vec::new(), true);
        };
        let (pairs, done) = chunk_of(state, after.as_ref(), max);
        (*base, after, pairs, done)
    }

    /// Whether the store's join is on disk for sure (survives a crash).
    pub fn joined_durably(&self) -> bool {
        self.durable.joined
    }

    /// What reads see now.
    pub fn current(&self) -> &DiskState {
        &self.current
    }

    /// Entries `from..=to` of the current state (none of the compacted ones).
    pub fn read(&self, from: u64, to: u64) -> Vec<Entry> {
        let base = self.current.base.index;
        if from <= base {
            return Vec::new();
        }
        let lo = usize::try_from(from - base - 1).unwrap_or(usize::MAX);
        let hi = usize::try_from(to.saturating_sub(base))
            .unwrap_or(usize::MAX)
            .min(self.current.entries.len());
        self.current
            .entries
            .get(lo..hi)
            .map_or_else(Vec::new, <[Entry]>::to_vec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_keeps_a_prefix_of_unsynced_ops() {
        let mut rng = SplitMix64::new(1);
        for _ in 0..20 {
            let mut disk = SimDisk::default();
            let append = |i| DiskOp::Append {
                writer_epoch: 1,
                entries: vec![Entry::new(1, i, "x")],
            };
            disk.write(&[append(1)]).unwrap();
            disk.sync();
            disk.write(&[append(2), append(3)]).unwrap();
            disk.crash(&mut rng);
            let len = disk.current().entries.len();
            assert!((1..=3).contains(&len));
        }
    }

    #[test]
    fn appends_are_checked_against_the_writer_epoch() {
        let mut disk = SimDisk::default();
        disk.write(&[DiskOp::Promise(3)]).unwrap();
        // An adopted epoch-1 entry re-replicated by the epoch-3 master is fine...
        let adopted = DiskOp::Append {
            writer_epoch: 3,
            entries: vec![Entry::new(1, 1, "x")],
        };
        assert!(disk.write(&[adopted]).is_ok());
        // ...an epoch-2 master is fenced.
        let stale = DiskOp::Append {
            writer_epoch: 2,
            entries: vec![Entry::new(2, 2, "y")],
        };
        assert!(disk.write(&[stale]).is_err());
    }
}
