//! The simulated cluster: nodes, their disks, the network, the event queue and
//! the checkers, all in one thread and driven by one seeded PRNG.
//!
//! Time is a u64 of milliseconds that jumps from event to event; nothing reads a
//! real clock, so a seed replays exactly. Every random choice (topology, delays,
//! drops, faults, each broker's election timeouts) comes from the seed.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};

use crate::position::{Entry, LogPosition};
use crate::replication::{
    BrokerCommand, BrokerInput, BrokerNode, DiskOp, Endpoint, Message, NodeId, ReadRequest,
    RoleKind, Service, SplitMix64, StoreCommand, StoreInput, StoreNode,
};

use super::SimParams;
use super::check::i1_no_confirmed_loss::{self as i1, History};
use super::check::i2_one_writer::{self as i2, Masters};
use super::check::i3_log_matching as i3;
use super::check::i4_apply_prefix as i4;
use super::check::{Incarnation, Violation};
use super::disk::SimDisk;
use super::net::Network;
use super::oracle::Oracle;
use super::reducer::{Replay, State};

/// What happened in one run, for the tests that make sure faults really occur.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimStats {
    /// Events processed.
    pub events: u64,
    /// Elections started.
    pub campaigns: u64,
    /// Masterships after the first: each is a failover.
    pub failovers: u64,
    /// Masters that stepped down on seeing a higher epoch.
    pub step_downs: u64,
    /// Node crashes injected (the final crash of every node not counted).
    pub crashes: u64,
    /// Of those, crashes of the node that was master.
    pub master_crashes: u64,
    /// Partitions injected.
    pub partitions: u64,
    /// Payloads confirmed to the client oracle.
    pub confirmed: u64,
    /// Length of the stable history at the end.
    pub stable_len: u64,
    /// Snapshots brokers installed (catch-up below a store's log base).
    pub broker_snapshots: u64,
    /// Snapshots stores installed from a peer.
    pub store_snapshots: u64,
    /// Store crashes while a peer's state was being staged: the store
    /// restarted on its old state and caught up again.
    pub installs_interrupted: u64,
    /// Highest log base any store reached.
    pub max_base: u64,
    /// Pre-votes a store refused (an epoch not above its promise, or a
    /// master heard within the election timeout).
    pub prevotes_refused: u64,
    /// Masters that stepped down because no quorum of stores answered
    /// (check-quorum), rather than on a higher epoch.
    pub check_quorum_step_downs: u64,
    /// With `cut_slave_at_ms`: the master and its epoch when the link was
    /// cut, and whether that node was still master of that epoch at the heal.
    pub cut_master: Option<(NodeId, u64)>,
    /// See `cut_master`.
    pub cut_master_kept: bool,
    /// Store disks lost in a crash (`SimParams::lose_disks`).
    pub disk_losses: u64,
    /// Stores that joined on a disk that replaced a lost one.
    pub rejoins: u64,
}

/// One scheduled event.
#[derive(Debug)]
pub(super) enum Ev {
    Deliver {
        from: Endpoint,
        to: Endpoint,
        msg: Message,
        /// The receiver's incarnation when sent: a restart loses what was in flight
        /// to it, as a broken TCP connection would.
        inc: u64,
    },
    Persisted {
        node: NodeId,
        inc: u64,
    },
    ReadDone {
        node: NodeId,
        inc: u64,
        req: ReadRequest,
        entries: Vec<Entry>,
    },
    SnapshotDone {
        node: NodeId,
        inc: u64,
        input: StoreInput,
    },
    Tick {
        node: NodeId,
        inc: u64,
    },
    Client,
    Fault,
    Restart {
        node: NodeId,
    },
    Unblock {
        links: Vec<(NodeId, NodeId)>,
    },
    Check,
    Heal,
    CutSlave,
}

struct Scheduled {
    at: u64,
    /// Tie-breaker: events at the same time run in scheduling order.
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    /// Reversed, so the max-heap pops the earliest event.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// One simulated machine.
pub(super) struct Node {
    pub(super) up: bool,
    /// Bumped by every crash.
    pub(super) inc: u64,
    pub(super) has_broker: bool,
    pub(super) broker: Option<BrokerNode>,
    pub(super) store: Option<StoreNode>,
    /// Present iff the node hosts a store; survives crashes.
    pub(super) disk: Option<SimDisk>,
}

/// The whole simulation.
pub struct World {
    pub(super) params: SimParams,
    pub(super) rng: SplitMix64,
    pub(super) now: u64,
    seq: u64,
    queue: BinaryHeap<Scheduled>,
    pub(super) nodes: BTreeMap<NodeId, Node>,
    pub(super) net: Network,
    history: History,
    masters: Masters,
    /// Highest index applied by each broker incarnation (I4).
    applied: BTreeMap<Incarnation, u64>,
    /// A snapshot each broker is receiving, chunk by chunk (`Restore` with
    /// `done: false`): its base and the pairs so far, checked whole when done.
    restoring: BTreeMap<Incarnation, (LogPosition, Vec<(bytes::Bytes, bytes::Bytes)>)>,
    oracle: Oracle,
    pub(super) stats: SimStats,
    /// Off once the final recovery starts.
    pub(super) faults_on: bool,
    /// Stable history length when the final recovery started.
    history_len_at_heal: u64,
    /// A node kept down through the recovery phase
    /// ([`SimParams::heal_one_store_down`]).
    pub(super) held_down: Option<NodeId>,
    /// The state of the stable history's prefixes, for the I4 state checks.
    replay: Replay,
}

impl World {
    /// Build the cluster for `params`; nothing runs until [`World::run`].
    pub fn new(params: SimParams) -> Self {
        let mut rng = SplitMix64::new(params.seed);
        let mut nodes = BTreeMap::new();
        let ids: Vec<NodeId> = params
            .cfg
            .stores
            .iter()
            .chain(&params.cfg.brokers)
            .copied()
            .collect();
        for id in ids {
            let has_broker = params.cfg.brokers.contains(&id);
            let has_store = params.cfg.stores.contains(&id);
            nodes.entry(id).or_insert_with(|| Node {
                up: true,
                inc: 0,
                has_broker,
                broker: has_broker
                    .then(|| BrokerNode::new(id, params.cfg.clone(), rng.next_u64(), 0)),
                // With `lose_disks` the cluster starts on new disks that
                // must join (the bootstrap); otherwise as bootstrapped.
                store: has_store.then(|| {
                    StoreNode::new(id, 0, 0, Default::default())
                        .with_config(&params.cfg)
                        .with_identity(!params.lose_disks, 1)
                }),
                disk: has_store.then(|| SimDisk::new(0, !params.lose_disks)),
            });
        }
        World {
            net: Network::new(params.net.clone()),
            params,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            nodes,
            history: History::default(),
            masters: Masters::default(),
            applied: BTreeMap::new(),
            restoring: BTreeMap::new(),
            oracle: Oracle::default(),
            stats: SimStats::default(),
            faults_on: true,
            history_len_at_heal: 0,
            held_down: None,
            replay: Replay::default(),
        }
    }

    /// Run to the end and check everything; the stats are filled either way.
    pub fn run(&mut self) -> Result<(), Violation> {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            self.schedule(1, Ev::Tick { node: id, inc: 0 });
        }
        self.schedule(1, Ev::Client);
        self.schedule(self.params.fault_every_ms.0, Ev::Fault);
        self.schedule(self.params.check_every_ms, Ev::Check);
        self.schedule(self.params.main_ms, Ev::Heal);
        if let Some(at) = self.params.cut_slave_at_ms {
            self.schedule(at, Ev::CutSlave);
        }
        let end = self.params.main_ms + self.params.heal_ms;
        while let Some(Scheduled { at, ev, .. }) = self.queue.pop() {
            if at > end {
                break;
            }
            self.now = at;
            self.stats.events += 1;
            if self.stats.events > self.params.max_events {
                return Err(Violation::new(
                    "liveness",
                    "event budget exhausted (message storm?)",
                ));
            }
            if self.params.trace {
                eprintln!("{at:>6} {ev:?}");
            }
            self.handle(ev)?;
        }
        self.stats.confirmed = self.oracle.confirmed.len() as u64;
        self.stats.stable_len = self.history.len();
        self.final_checks()
    }

    pub(super) fn schedule(&mut self, delay_ms: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at: self.now + delay_ms,
            seq: self.seq,
            ev,
        });
    }

    fn handle(&mut self, ev: Ev) -> Result<(), Violation> {
        match ev {
            Ev::Deliver { from, to, msg, inc } => {
                let now = self.now;
                let Some(node) = self
                    .nodes
                    .get_mut(&to.node)
                    .filter(|n| n.up && n.inc == inc)
                else {
                    return Ok(());
                };
                match to.service {
                    Service::Broker => {
                        let Some(broker) = node.broker.as_mut() else {
                            return Ok(());
                        };
                        let cmds = broker.step(now, BrokerInput::Receive { from, msg });
                        self.on_broker(to.node, cmds)?;
                    }
                    Service::Store => {
                        let Some(store) = node.store.as_mut() else {
                            return Ok(());
                        };
                        let cmds = store.step(now, StoreInput::Receive { from, msg });
                        self.on_store(to.node, cmds)?;
                    }
                }
            }
            Ev::Persisted { node, inc } => {
                let now = self.now;
                let Some(n) = self.nodes.get_mut(&node).filter(|n| n.up && n.inc == inc) else {
                    return Ok(());
                };
                if let (Some(disk), Some(store)) = (n.disk.as_mut(), n.store.as_mut()) {
                    disk.sync();
                    let cmds = store.step(now, StoreInput::Persisted);
                    self.on_store(node, cmds)?;
                }
            }
            Ev::ReadDone {
                node,
                inc,
                req,
                entries,
            } => {
                let now = self.now;
                let Some(n) = self.nodes.get_mut(&node).filter(|n| n.up && n.inc == inc) else {
                    return Ok(());
                };
                if let Some(store) = n.store.as_mut() {
                    let cmds = store.step(now, StoreInput::ReadDone { req, entries });
                    self.on_store(node, cmds)?;
                }
            }
            Ev::SnapshotDone { node, inc, input } => {
                let now = self.now;
                let Some(n) = self.nodes.get_mut(&node).filter(|n| n.up && n.inc == inc) else {
                    return Ok(());
                };
                if let Some(store) = n.store.as_mut() {
                    let cmds = store.step(now, input);
                    self.on_store(node, cmds)?;
                }
            }
            Ev::Tick { node, inc } => {
                let now = self.now;
                let Some(n) = self.nodes.get_mut(&node).filter(|n| n.up && n.inc == inc) else {
                    return Ok(());
                };
                if let Some(broker) = n.broker.as_mut() {
                    let cmds = broker.step(now, BrokerInput::Tick);
                    self.on_broker(node, cmds)?;
                }
                self.schedule(self.params.tick_ms, Ev::Tick { node, inc });
            }
            Ev::Client => self.client()?,
            Ev::Fault => self.fault(),
            Ev::Restart { node } => self.restart(node),
            Ev::Unblock { links } => self.net.unblock(&links),
            Ev::Check => {
                self.check_stores()?;
                self.schedule(self.params.check_every_ms, Ev::Check);
            }
            Ev::Heal => {
                if let Some((m, epoch)) = self.stats.cut_master {
                    self.stats.cut_master_kept = self.nodes[&m].broker.as_ref().is_some_and(|b| {
                        b.role() == crate::replication::RoleKind::Master && b.epoch() == epoch
                    });
                }
                self.heal();
            }
            Ev::CutSlave => self.cut_slave(),
        }
        Ok(())
    }

    /// Put a message on the network.
    fn send(&mut self, from: Endpoint, to: Endpoint, msg: Message) {
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
    fn on_broker(&mut self, node: NodeId, cmds: Vec<BrokerCommand>) -> Result<(), Violation> {
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
                } => {
                    if first {
                        self.restoring.insert(who, (base, Vec::new()));
                    }
                    let Some((held, so_far)) = self.restoring.get_mut(&who) else {
                        return Err(Violation::new(
                            "I4",
                            format!(
                                "broker {who:?} got a chunk of the state at {base} before its first"
                            ),
                        ));
                    };
                    if *held != base {
                        return Err(Violation::new(
                            "I4",
                            format!(
                                "broker {who:?} mixed chunks of the states at {held} and {base}"
                            ),
                        ));
                    }
                    so_far.extend(pairs);
                    if done {
                        let (_, all) = self.restoring.remove(&who).unwrap_or_default();
                        self.stats.broker_snapshots += 1;
                        let applied = self.applied.entry(who).or_default();
                        i4::on_restore(applied, base, &all, &self.history, &mut self.replay)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Carry out a store's commands: sends, disk writes with a simulated fsync
    /// latency, reads.
    fn on_store(&mut self, node: NodeId, cmds: Vec<StoreCommand>) -> Result<(), Violation> {
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
                    disk.write(&ops)
                        .map_err(|e| Violation::new("disk", format!("store {node}: {e}")))?;
                    let delay = self.rng.between(1, self.params.fsync_max_ms);
                    self.schedule(delay, Ev::Persisted { node, inc });
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
                    self.schedule(1, Ev::SnapshotDone { node, inc, input });
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

    /// The client: a few payloads to a random node that believes it is master.
    fn client(&mut self) -> Result<(), Violation> {
        let masters: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, n)| {
                n.up && n
                    .broker
                    .as_ref()
                    .is_some_and(|b| b.role() == RoleKind::Master)
            })
            .map(|(&id, _)| id)
            .collect();
        if !masters.is_empty() {
            let node = masters[self.rng.below(masters.len() as u64) as usize];
            let burst = self.rng.between(1, 4);
            let payloads: Vec<_> = (0..burst).map(|_| self.oracle.payload()).collect();
            let now = self.now;
            if let Some(n) = self.nodes.get_mut(&node)
                && let Some(broker) = n.broker.as_mut()
            {
                for payload in payloads {
                    if let Ok(pos) = broker.append(payload.clone()) {
                        self.oracle.submitted((node, n.inc), pos, payload);
                    }
                }
                let cmds = broker.step(now, BrokerInput::Flush);
                self.on_broker(node, cmds)?;
            }
        }
        let (lo, hi) = self.params.client_every_ms;
        let delay = self.rng.between(lo, hi);
        self.schedule(delay, Ev::Client);
        Ok(())
    }

    /// I3 over every store's disk, and the engine's own consistency counters.
    fn check_stores(&mut self) -> Result<(), Violation> {
        let logs: Vec<(NodeId, u64, &[Entry])> = self
            .nodes
            .iter()
            .filter_map(|(&id, n)| {
                n.disk
                    .as_ref()
                    .map(|d| (id, d.current().base.index, d.current().entries.as_slice()))
            })
            .collect();
        i3::check_logs(&logs)?;
        // I4 on the stores: each store's state is the stable history's
        // prefix up to its base, replayed (state + suffix == full replay).
        let mut states: Vec<(NodeId, LogPosition, &State)> = self
            .nodes
            .iter()
            .filter_map(|(&id, n)| {
                n.disk
                    .as_ref()
                    .map(|d| (id, d.current().base, &d.current().state))
            })
            .collect();
        states.sort_by_key(|(_, base, _)| base.index);
        for (id, base, state) in states {
            self.stats.max_base = self.stats.max_base.max(base.index);
            i4::check_state(
                &format!("store {id}"),
                base,
                state,
                &self.history,
                &mut self.replay,
            )?;
        }

        for (id, n) in &self.nodes {
            let anomalies = n.broker.as_ref().map_or(0, BrokerNode::anomalies)
                + n.store.as_ref().map_or(0, StoreNode::anomalies);
            if anomalies > 0 {
                return Err(Violation::new(
                    "engine",
                    format!("node {id} failed {anomalies} internal checks"),
                ));
            }
        }
        Ok(())
    }

    /// A broker incarnation is gone: its pending client payloads have an
    /// unknown fate.
    pub(super) fn abandon(&mut self, who: Incarnation) {
        self.oracle.abandon(who);
    }

    /// The end: stores consistent, a master exists and made new entries stable
    /// after every node crashed at once, and it holds every confirmed payload.
    fn final_checks(&mut self) -> Result<(), Violation> {
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
        })
    }

    /// End of the fault phase: heal the network, then crash every node at once
    /// (losing all unsynced writes) and restart them, to check that everything
    /// confirmed survives on the disks alone.
    fn heal(&mut self) {
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
