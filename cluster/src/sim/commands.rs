//! Carrying out what the nodes ask: a broker's and a store's commands become
//! messages on the simulated network, disk writes with a simulated fsync
//! latency, and reads; on the way, every stability report, apply and restore
//! feeds the checkers.

use bytes::Bytes;

use crate::position::{Entry, LogPosition};
use crate::replication::{
    BrokerCommand, DiskOp, Endpoint, Message, NodeId, StoreCommand, StoreInput,
};

use super::check::i1_no_confirmed_loss as i1;
use super::check::i2_one_writer as i2;
use super::check::i4_apply_prefix as i4;
use super::check::i6_stream_offsets::Who;
use super::check::{Incarnation, Violation};
use super::queue::Ev;
use super::reducer::stream_bounds;
use super::world::World;

impl World {
    /// Put a message on the network.
    pub(super) fn send(&mut self, from: Endpoint, to: Endpoint, msg: Message) {
        let Some(inc) = self.nodes.get(&to.node).filter(|n| n.up).map(|n| n.inc) else {
            return; // connection refused
        };
        let delays = self.net.deliveries(&mut self.rng, from.node, to.node);
        for delay in delays {
            let msg = msg.clone();
            self.schedule(delay, Ev::Deliver { from, to, msg, inc });
        }
    }

    /// Carry out a broker's commands, feeding the checkers.
    pub(super) fn on_broker(
        &mut self,
        node: NodeId,
        cmds: Vec<BrokerCommand>,
    ) -> Result<(), Violation> {
        let Some(n) = self.nodes.get(&node) else {
            return Ok(());
        };
        let who = (node, n.inc);
        let Some(broker) = n.broker.as_ref() else {
            return Ok(());
        };
        let entry_at = |i: u64| broker.entry(i).cloned();
        let base = broker.log_base();
        // Stability reports first, so the history holds what Apply is checked
        // against (a new master's Apply precedes its BecameMaster).
        for cmd in &cmds {
            match *cmd {
                BrokerCommand::BecameMaster { epoch, stable } => {
                    self.masters.on_became_master(epoch, who)?;
                    i1::on_stable_report(&mut self.history, who, stable, base, entry_at)?;
                }
                BrokerCommand::Stable(stable) => {
                    self.masters.on_stable(broker.epoch(), who)?;
                    i1::on_stable_report(&mut self.history, who, stable, base, entry_at)?;
                    self.oracle.on_stable(who, stable, entry_at)?;
                }
                _ => {}
            }
        }
        for cmd in cmds {
            match cmd {
                BrokerCommand::Send { to, msg } => self.send(Endpoint::broker(node), to, msg),
                BrokerCommand::Apply(entries) => {
                    i4::on_apply(
                        self.applied.entry(who).or_default(),
                        &entries,
                        &self.history,
                    )?;
                    self.app_apply(who, &entries)?;
                }
                BrokerCommand::Stable(stable) => {
                    // The master applies its own entries as they become stable.
                    let applied = self.applied.entry(who).or_default();
                    let entries: Vec<Entry> = self
                        .nodes
                        .get(&node)
                        .and_then(|n| n.broker.as_ref())
                        .map(|b| {
                            (*applied + 1..=stable)
                                .filter_map(|i| b.entry(i).cloned())
                                .collect()
                        })
                        .unwrap_or_default();
                    i4::on_apply(applied, &entries, &self.history)?;
                    self.app_apply(who, &entries)?;
                }
                BrokerCommand::BecameMaster { .. } => {
                    if self.masters.count() > 1 {
                        self.stats.failovers += 1;
                    }
                }
                BrokerCommand::SteppedDown { epoch } => {
                    if self.masters.of(epoch) == Some(who) {
                        self.stats.check_quorum_step_downs += 1;
                    }
                    self.stats.step_downs += 1;
                    self.oracle.abandon(who);
                }
                BrokerCommand::Campaign { .. } => self.stats.campaigns += 1,
                BrokerCommand::Restore {
                    base,
                    first,
                    pairs,
                    done,
                } => self.on_restore_chunk(who, base, first, pairs, done)?,
            }
        }
        Ok(())
    }

    /// A chunk of the snapshot broker incarnation `who` is restoring;
    /// checked whole (I4, I6) with the last.
    fn on_restore_chunk(
        &mut self,
        who: Incarnation,
        base: LogPosition,
        first: bool,
        pairs: Vec<(Bytes, Bytes)>,
        done: bool,
    ) -> Result<(), Violation> {
        if first {
            self.restoring.insert(who, (base, Vec::new()));
        }
        let Some((held, so_far)) = self.restoring.get_mut(&who) else {
            return Err(Violation::new(
                "I4",
                format!("broker {who:?} got a chunk of the state at {base} before its first"),
            ));
        };
        if *held != base {
            return Err(Violation::new(
                "I4",
                format!("broker {who:?} mixed chunks of the states at {held} and {base}"),
            ));
        }
        so_far.extend(pairs);
        if done {
            let (_, all) = self.restoring.remove(&who).unwrap_or_default();
            self.stats.broker_snapshots += 1;
            let applied = self.applied.entry(who).or_default();
            i4::on_restore(applied, base, &all, &self.history, &mut self.replay)?;
            self.app_restore(who, &all)?;
        }
        Ok(())
    }

    /// Carry out a store's commands: sends, disk writes with a simulated fsync
    /// latency, reads.
    pub(super) fn on_store(
        &mut self,
        node: NodeId,
        cmds: Vec<StoreCommand>,
    ) -> Result<(), Violation> {
        for cmd in cmds {
            let Some(n) = self.nodes.get_mut(&node) else {
                return Ok(());
            };
            let inc = n.inc;
            match cmd {
                StoreCommand::Send { to, msg } => {
                    if matches!(msg, Message::PreVoteReply { granted: false, .. }) {
                        self.stats.prevotes_refused += 1;
                    }
                    self.send(Endpoint::store(node), to, msg)
                }
                StoreCommand::Persist(ops) => {
                    let Some(disk) = n.disk.as_mut() else {
                        continue;
                    };
                    i2::check_persist(node, disk.current().promised, &ops)?;
                    if disk.current().incarnation > 1 && ops.contains(&DiskOp::Joined) {
                        self.stats.rejoins += 1;
                    }
                    self.stats.store_snapshots += ops
                        .iter()
                        .filter(|op| matches!(op, DiskOp::InstallSnapshot { .. }))
                        .count() as u64;
                    // I6 on the state the ops change: the whole stream
                    // after an install, the offsets added by a compaction.
                    let install = ops
                        .iter()
                        .any(|op| matches!(op, DiskOp::InstallSnapshot { .. }));
                    let compact = ops.iter().any(|op| matches!(op, DiskOp::Compact(_)));
                    let from = compact.then(|| stream_bounds(&disk.current().state).1);
                    disk.write(&ops)
                        .map_err(|e| Violation::new("disk", format!("store {node}: {e}")))?;
                    let (who, state) = (Who::Store(node), &disk.current().state);
                    if install {
                        self.offsets.check_state(who, state)?;
                    } else if let Some(from) = from {
                        self.offsets.check_new(who, state, from)?;
                    }
                    let delay = self.rng.between(1, self.params.fsync_max_ms);
                    self.schedule(delay, Ev::Persisted { node, inc });
                }
                StoreCommand::AwaitCommitWindow { .. } => {
                    self.stats.commit_windows += 1;
                    let input = StoreInput::CommitWindow;
                    let delay = self.rng.between(0, 2);
                    self.schedule(delay, Ev::StoreJob { node, inc, input });
                }
                StoreCommand::ReadSnapshot(req) => {
                    let Some(disk) = n.disk.as_mut() else {
                        continue;
                    };
                    let max = self.rng.between(1, 8) as usize;
                    let (base, after, pairs, done) = disk.read_snapshot(req.base, req.after, max);
                    let input = StoreInput::SnapshotDone {
                        reply_to: req.reply_to,
                        base,
                        after,
                        pairs,
                        done,
                    };
                    self.schedule(1, Ev::StoreJob { node, inc, input });
                }
                StoreCommand::Read(req) => {
                    let Some(disk) = n.disk.as_ref() else {
                        continue;
                    };
                    let entries = disk.read(req.from, req.to);
                    self.schedule(
                        1,
                        Ev::ReadDone {
                            node,
                            inc,
                            req,
                            entries,
                        },
                    );
                }
            }
        }
        Ok(())
    }
}
