//! The recovery phase that ends every run: faults stop, the network heals,
//! every node crashes at once and restarts (or one store stays down for
//! good), and the final checks demand a master that made new entries stable
//! and holds every confirmed payload.

use crate::position::LogPosition;
use crate::replication::{NodeId, RoleKind};

use super::check::Violation;
use super::check::i1_no_confirmed_loss as i1;
use super::queue::Ev;
use super::world::World;

impl World {
    /// The end: stores consistent, a master exists and made new entries stable
    /// after every node crashed at once, and it holds every confirmed payload.
    pub(super) fn final_checks(&mut self) -> Result<(), Violation> {
        self.check_stores()?;
        i1::check_confirmed(&self.history, &self.oracle.confirmed)?;
        let master = self
            .nodes
            .iter()
            .filter(|(_, n)| n.up)
            .filter_map(|(&id, n)| Some(((id, n.inc), n.broker.as_ref()?)))
            .filter(|(_, b)| b.role() == RoleKind::Master)
            .max_by_key(|(_, b)| b.epoch());
        let Some((who, master)) = master else {
            return Err(Violation::new(
                "liveness",
                "no master at the end of the recovery phase",
            ));
        };
        if self.history.len() <= self.history_len_at_heal {
            return Err(Violation::new(
                "liveness",
                format!(
                    "nothing became stable after the final recovery (stable {})",
                    self.history.len()
                ),
            ));
        }
        // Entries the master dropped from memory were applied first, and every
        // applied entry was checked against the history (I4), which holds the
        // confirmed payloads (checked above): so the master applied them.
        let applied = self.applied.get(&who).copied().unwrap_or(0);
        i1::check_final_master(&self.oracle.confirmed, master.log_base(), applied, |i| {
            master.entry(i).cloned()
        })?;
        self.final_stream_check(who, applied)
    }

    /// End of the fault phase: heal the network, then crash every node at once
    /// (losing all unsynced writes) and restart them, to check that everything
    /// confirmed survives on the disks alone.
    pub(super) fn heal(&mut self) {
        self.faults_on = false;
        self.net.heal_all();
        self.net.params.drop_per_mille = 0;
        self.net.params.dup_per_mille = 0;
        self.history_len_at_heal = self.history.len();
        if self.params.heal_one_store_down && self.hold_one_store_down() {
            return;
        }
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for &id in &ids {
            self.crash(id);
        }
        for id in ids {
            self.schedule(5, Ev::Restart { node: id });
        }
    }

    /// Recovery with one store down for good: crash the node of the store
    /// with the most up-to-date log (among those whose loss leaves a
    /// broker), start every other crashed node, and restart a master that
    /// runs on a broker-only node (so a new one must be elected, or it
    /// comes back empty). Returns false if no store qualifies.
    fn hold_one_store_down(&mut self) -> bool {
        let brokers: Vec<NodeId> = self.params.cfg.brokers.clone();
        let pick = self
            .params
            .cfg
            .stores
            .iter()
            .copied()
            .filter(|id| brokers.iter().any(|b| b != id))
            .max_by_key(|id| {
                let disk = self.nodes[id].disk.as_ref().map(|d| d.current());
                let last = disk.map_or(LogPosition::ZERO, |d| {
                    d.entries.last().map_or(d.base, |e| e.pos)
                });
                (last, *id)
            });
        let Some(down) = pick else {
            return false;
        };
        self.held_down = Some(down);
        self.crash(down);
        let master = self
            .nodes
            .iter()
            .filter(|(_, n)| n.up && n.disk.is_none())
            .filter_map(|(&id, n)| Some((id, n.broker.as_ref()?)))
            .filter(|(_, b)| b.role() == RoleKind::Master)
            .map(|(id, _)| id)
            .next();
        if let Some(m) = master {
            self.crash(m);
        }
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            if id != down && !self.nodes[&id].up {
                self.schedule(5, Ev::Restart { node: id });
            }
        }
        true
    }
}
