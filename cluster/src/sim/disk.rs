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

use crate::position::{Entry, LogPosition};
use crate::replication::{DiskOp, EpochRuns, SplitMix64};

/// What is on a disk at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiskState {
    /// `entries[i]` has index `i + 1`.
    pub entries: Vec<Entry>,
    /// The promised epoch.
    pub promised: u64,
    /// The stable index recorded.
    pub stable: u64,
}

impl DiskState {
    /// Apply one op. Returns a description of a contract breach (which the I2
    /// and I1 checkers report) instead of applying it.
    pub fn apply(&mut self, op: &DiskOp) -> Result<(), String> {
        match op {
            DiskOp::Promise(epoch) => {
                if *epoch < self.promised {
                    return Err(format!("promise {epoch} below {}", self.promised));
                }
                self.promised = *epoch;
            }
            DiskOp::TruncateAfter(index) => {
                if *index < self.stable {
                    return Err(format!(
                        "truncate after {index} below stable {}",
                        self.stable
                    ));
                }
                self.entries
                    .truncate(usize::try_from(*index).unwrap_or(usize::MAX));
            }
            DiskOp::Append {
                writer_epoch,
                entries,
            } => {
                if *writer_epoch < self.promised {
                    return Err(format!(
                        "append from epoch {writer_epoch} below promise {}",
                        self.promised
                    ));
                }
                for entry in entries {
                    let last = self.last();
                    if entry.pos.index != last.index + 1
                        || entry.pos.epoch < last.epoch
                        || entry.pos.epoch > *writer_epoch
                    {
                        return Err(format!(
                            "append {} after {last} by epoch {writer_epoch}",
                            entry.pos
                        ));
                    }
                    self.entries.push(entry.clone());
                }
            }
            DiskOp::Stable(index) => {
                if *index > self.last().index {
                    return Err(format!("stable {index} beyond {}", self.last()));
                }
                self.stable = self.stable.max(*index);
            }
        }
        Ok(())
    }

    /// The last position held.
    pub fn last(&self) -> LogPosition {
        self.entries.last().map_or(LogPosition::ZERO, |e| e.pos)
    }

    /// The epoch runs a store rebuilds from this state when it restarts.
    pub fn runs(&self) -> EpochRuns {
        EpochRuns::from_positions(self.entries.iter().map(|e| e.pos))
    }
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
}

impl SimDisk {
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

    /// Power loss: keep a random prefix of the unsynced ops, lose the rest.
    pub fn crash(&mut self, rng: &mut SplitMix64) {
        let keep = rng.below(self.pending.len() as u64 + 1) as usize;
        for op in self.pending.drain(..).take(keep) {
            let _ = self.durable.apply(&op);
        }
        self.current = self.durable.clone();
    }

    /// What reads see now.
    pub fn current(&self) -> &DiskState {
        &self.current
    }

    /// Entries `from..=to` of the current state.
    pub fn read(&self, from: u64, to: u64) -> Vec<Entry> {
        let lo = usize::try_from(from.max(1) - 1).unwrap_or(usize::MAX);
        let hi = usize::try_from(to)
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
