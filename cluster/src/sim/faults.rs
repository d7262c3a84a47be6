//! Fault injection: crashes (losing unsynced writes), restarts, symmetric and
//! asymmetric partitions, and isolating the master. Half the crashes aim at the
//! master, because failover is what the checkers are for.

use crate::replication::{BrokerNode, NodeId, RoleKind, StoreNode};

use super::disk::SimDisk;
use super::net::cut;
use super::queue::Ev;
use super::world::World;

impl World {
    /// The node that currently believes it is master with the highest epoch.
    fn master(&self) -> Option<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.up)
            .filter_map(|(&id, n)| n.broker.as_ref().map(|b| (id, b)))
            .filter(|(_, b)| b.role() == RoleKind::Master)
            .max_by_key(|(_, b)| b.epoch())
            .map(|(id, _)| id)
    }

    /// Inject one fault, then schedule the next.
    pub(super) fn fault(&mut self) {
        if !self.faults_on {
            return;
        }
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        let master = self.master();
        let roll = self.rng.below(100);
        match roll {
            0..30 => {
                let up: Vec<NodeId> = ids.iter().copied().filter(|id| self.nodes[id].up).collect();
                let target = match master {
                    Some(m) if self.rng.chance(500) => Some(m),
                    _ if up.is_empty() => None,
                    _ => Some(up[self.rng.below(up.len() as u64) as usize]),
                };
                if let Some(target) = target {
                    self.stats.crashes += 1;
                    if Some(target) == master {
                        self.stats.master_crashes += 1;
                    }
                    self.crash(target);
                    if self.params.lose_disks && self.rng.chance(500) {
                        self.lose_disk(target);
                    }
                    // Now and then a long outage, so the node falls behind
                    // the stores' log bases and must catch up by snapshot.
                    let down_ms = if self.rng.chance(200) {
                        self.rng.between(400, 1_200)
                    } else {
                        self.rng.between(10, 400)
                    };
                    self.schedule(down_ms, Ev::Restart { node: target });
                }
            }
            30..80 => {
                let (a, b): (Vec<NodeId>, Vec<NodeId>) = if roll >= 70 {
                    // Isolate the master (if there is one) from everyone.
                    let Some(m) = master else {
                        return self.next_fault();
                    };
                    ids.iter().partition(|&&id| id == m)
                } else {
                    let mut a = Vec::new();
                    let mut b = Vec::new();
                    for &id in &ids {
                        if self.rng.chance(500) {
                            a.push(id)
                        } else {
                            b.push(id)
                        }
                    }
                    (a, b)
                };
                if !a.is_empty() && !b.is_empty() {
                    // 30..55 and the master isolation are symmetric; 55..70 is one-way.
                    let links = cut(&a, &b, !(55..70).contains(&roll));
                    self.stats.partitions += 1;
                    self.net.block(&links);
                    let heal_ms = self.rng.between(30, 500);
                    self.schedule(heal_ms, Ev::Unblock { links });
                }
            }
            _ => {}
        }
        self.next_fault();
    }

    /// `SimParams::cut_slave_at_ms`: the master stops reaching one slave
    /// (one way) until the heal.
    pub(super) fn cut_slave(&mut self) {
        let Some(m) = self.master() else {
            return;
        };
        let slave = self
            .nodes
            .iter()
            .find(|(id, n)| **id != m && n.up && n.broker.is_some())
            .map(|(&id, _)| id);
        let Some(s) = slave else {
            return;
        };
        let epoch = self.nodes[&m].broker.as_ref().map_or(0, |b| b.epoch());
        self.stats.cut_master = Some((m, epoch));
        self.stats.partitions += 1;
        self.net.block(&cut(&[m], &[s], false));
    }

    fn next_fault(&mut self) {
        let (lo, hi) = self.params.fault_every_ms;
        let delay = self.rng.between(lo, hi);
        self.schedule(delay, Ev::Fault);
    }

    /// Power loss: memory gone, in-flight messages to it lost, unsynced disk
    /// writes lost (a random prefix of them survives).
    pub(super) fn crash(&mut self, id: NodeId) {
        let Some(node) = self.nodes.get_mut(&id).filter(|n| n.up) else {
            return;
        };
        node.up = false;
        node.inc += 1;
        node.broker = None;
        node.store = None;
        if let Some(disk) = node.disk.as_mut()
            && disk.crash(&mut self.rng)
        {
            self.stats.installs_interrupted += 1;
        }
        let old = (id, node.inc - 1);
        self.abandon(old);
    }

    /// The crashed node's store disk is lost: it restarts on a new, empty
    /// disk that must rejoin. Only while every other store's disk has
    /// joined (durably), so at most one store is without its disk and a
    /// quorum of intact stores remains.
    fn lose_disk(&mut self, id: NodeId) {
        let others_joined = self
            .nodes
            .iter()
            .filter(|(other, _)| **other != id)
            .filter_map(|(_, n)| n.disk.as_ref())
            .all(|d| d.joined_durably());
        let now = self.now;
        let Some(node) = self.nodes.get_mut(&id).filter(|n| !n.up) else {
            return;
        };
        if others_joined && node.disk.is_some() {
            node.disk = Some(SimDisk::new(now, false));
            self.stats.disk_losses += 1;
        }
    }

    /// Start a crashed node again: the store recovers from its disk, the broker
    /// starts as an empty slave and is caught up by the master.
    pub(super) fn restart(&mut self, id: NodeId) {
        let now = self.now;
        let cfg = self.params.cfg.clone();
        let seed = self.rng.next_u64();
        if self.held_down == Some(id) {
            return; // kept down through the recovery phase
        }
        let Some(node) = self.nodes.get_mut(&id).filter(|n| !n.up) else {
            return;
        };
        node.up = true;
        if node.has_broker {
            node.broker = Some(BrokerNode::new(id, cfg.clone(), seed, now));
        }
        if let Some(disk) = node.disk.as_ref() {
            let state = disk.current();
            node.store = Some(
                StoreNode::new(id, state.promised, state.stable, state.runs())
                    .with_config(&cfg)
                    .with_identity(state.joined, state.incarnation),
            );
        }
        let inc = node.inc;
        self.schedule(1, Ev::Tick { node: id, inc });
    }
}
