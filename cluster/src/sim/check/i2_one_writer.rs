//! I2, one writer: no two nodes become master (and get writes stable) in the
//! same epoch, and no store writes an append from an epoch below its promise.

use std::collections::BTreeMap;

use crate::replication::{DiskOp, NodeId};

use super::{Incarnation, Violation};

/// Which broker incarnation became master of each epoch. Incarnations, not
/// nodes: a broker that restarts forgets its candidacy, so the same node in two
/// lives is two writers.
#[derive(Debug, Default)]
pub struct Masters {
    /// Epoch → the one incarnation allowed to report stable entries in it.
    by_epoch: BTreeMap<u64, Incarnation>,
}

impl Masters {
    /// `node` reports `BecameMaster` for `epoch`.
    pub fn on_became_master(&mut self, epoch: u64, node: Incarnation) -> Result<(), Violation> {
        let first = *self.by_epoch.entry(epoch).or_insert(node);
        if first == node {
            Ok(())
        } else {
            Err(Violation::new(
                "I2",
                format!("{first:?} and {node:?} both became master of epoch {epoch}"),
            ))
        }
    }

    /// `node` reports a write stable in `epoch`: it must be that epoch's master.
    pub fn on_stable(&self, epoch: u64, node: Incarnation) -> Result<(), Violation> {
        match self.by_epoch.get(&epoch) {
            Some(&master) if master == node => Ok(()),
            other => Err(Violation::new(
                "I2",
                format!("{node:?} got a write stable in epoch {epoch}, whose master is {other:?}"),
            )),
        }
    }

    /// The incarnation that became master of `epoch`, if one did.
    pub fn of(&self, epoch: u64) -> Option<Incarnation> {
        self.by_epoch.get(&epoch).copied()
    }

    /// How many masterships there were.
    pub fn count(&self) -> usize {
        self.by_epoch.len()
    }
}

/// A store with promise `promised` is about to write `ops` (in order): no append
/// may come from an epoch below the promise in force at that point.
pub fn check_persist(store: NodeId, mut promised: u64, ops: &[DiskOp]) -> Result<(), Violation> {
    for op in ops {
        match op {
            DiskOp::Promise(epoch) if *epoch < promised => {
                return Err(Violation::new(
                    "I2",
                    format!("store {store} lowered its promise from {promised} to {epoch}"),
                ));
            }
            DiskOp::Promise(epoch) => promised = *epoch,
            DiskOp::Append { writer_epoch, .. } if *writer_epoch < promised => {
                return Err(Violation::new(
                    "I2",
                    format!(
                        "store {store} accepted an append from epoch {writer_epoch} below its promise {promised}"
                    ),
                ));
            }
            DiskOp::Append { .. }
            | DiskOp::TruncateAfter(_)
            | DiskOp::Stable(_)
            | DiskOp::Compact(_)
            | DiskOp::StageSnapshot { .. }
            | DiskOp::InstallSnapshot { .. }
            | DiskOp::Joined => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_masters_in_one_epoch_and_stale_appends_are_caught() {
        let mut m = Masters::default();
        m.on_became_master(3, (1, 0)).unwrap();
        assert!(m.on_became_master(3, (2, 0)).is_err());
        assert!(m.on_became_master(3, (1, 1)).is_err());
        assert!(m.on_stable(3, (1, 0)).is_ok());
        assert!(m.on_stable(4, (1, 0)).is_err());
        let append = |writer_epoch| DiskOp::Append {
            writer_epoch,
            entries: vec![],
        };
        assert!(check_persist(1, 2, &[append(2), DiskOp::Promise(3)]).is_ok());
        assert!(check_persist(1, 2, &[DiskOp::Promise(3), append(2)]).is_err());
    }
}
