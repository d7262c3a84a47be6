//! The simulated cluster: nodes, their disks, the network, the event queue and
//! the checkers, all in one thread and driven by one seeded PRNG.
//!
//! Time is a u64 of milliseconds that jumps from event to event; nothing reads a
//! real clock, so a seed replays exactly. Every random choice (topology, delays,
//! drops, faults, each broker's election timeouts) comes from the seed.
//!
//! This module holds the world and its main loop: it builds the cluster,
//! pops events and hands each to its node. The rest of a run has modules of
//! its own: `queue` (the events and their order), `commands` (carrying out
//! what the nodes ask), `faults`, `recovery` (the final phase and checks),
//! `oracle` (the client), `app` (what brokers materialize, and the stream
//! checks), `net` and `disk`.

use std::collections::BTreeMap;

use crate::position::{Entry, LogPosition};
use crate::replication::{
    BrokerInput, BrokerNode, NodeId, RoleKind, Service, SplitMix64, StoreInput, StoreNode,
};

use super::check::i1_no_confirmed_loss::History;
use super::check::i2_one_writer::Masters;
use super::check::i3_log_matching as i3;
use super::check::i4_apply_prefix as i4;
use super::check::i6_stream_offsets::Offsets;
use super::check::{Incarnation, Violation};
use super::disk::SimDisk;
use super::net::Network;
use super::oracle::Oracle;
use super::queue::{Ev, EventQueue};
use super::reducer::{Replay, State};
use super::{SimParams, StreamBug};

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
    /// Commit windows a paced store waited for (`Config::commit_interval_us`).
    pub commit_windows: u64,
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
    /// Stream offsets any node held (I6).
    pub stream_offsets: u64,
    /// The final master's first stream offset: what retention cut.
    pub stream_first: u64,
    /// Confirmed stream appends the final master holds (the rest were cut).
    pub stream_held: u64,
    /// Stream appends (and sequences) the client sent again after their
    /// master was gone: each must be stored once (I6).
    pub stream_resent: u64,
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
    queue: EventQueue,
    pub(super) nodes: BTreeMap<NodeId, Node>,
    pub(super) net: Network,
    pub(super) history: History,
    pub(super) masters: Masters,
    /// Highest index applied by each broker incarnation (I4).
    pub(super) applied: BTreeMap<Incarnation, u64>,
    /// A snapshot each broker is receiving, chunk by chunk (`Restore` with
    /// `done: false`): its base and the pairs so far, checked whole when done.
    pub(super) restoring: BTreeMap<Incarnation, (LogPosition, Vec<(bytes::Bytes, bytes::Bytes)>)>,
    pub(super) oracle: Oracle,
    pub(super) stats: SimStats,
    /// Off once the final recovery starts.
    pub(super) faults_on: bool,
    /// Stable history length when the final recovery started.
    pub(super) history_len_at_heal: u64,
    /// A node kept down through the recovery phase
    /// ([`SimParams::heal_one_store_down`]).
    pub(super) held_down: Option<NodeId>,
    /// The state of the stable history's prefixes, for the I4 state checks.
    pub(super) replay: Replay,
    /// What each live broker incarnation materialized (`sim/app.rs`).
    pub(super) apps: BTreeMap<Incarnation, State>,
    /// Every stream offset seen on any node (I6).
    pub(super) offsets: Offsets,
}

impl World {
    /// Build the cluster for `params`; nothing runs until [`World::run`].
    pub fn new(params: SimParams) -> Self {
        let sequence_apart = params.stream_bug == Some(StreamBug::SequenceApart);
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
            queue: EventQueue::default(),
            nodes,
            history: History::default(),
            masters: Masters::default(),
            applied: BTreeMap::new(),
            restoring: BTreeMap::new(),
            oracle: Oracle::new(sequence_apart),
            stats: SimStats::default(),
            faults_on: true,
            history_len_at_heal: 0,
            held_down: None,
            replay: Replay::default(),
            apps: BTreeMap::new(),
            offsets: Offsets::default(),
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
        while let Some((at, ev)) = self.queue.pop() {
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
        self.queue.push(self.now + delay_ms, ev);
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
            Ev::StoreJob { node, inc, input } => {
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
            Ev::Restart { node } => {
                self.restart(node);
                self.check_disk_stream(node)?;
            }
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
            let (payloads, resent) = self.oracle.next_batch(burst);
            self.stats.stream_resent += resent;
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
    pub(super) fn check_stores(&mut self) -> Result<(), Violation> {
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

        self.check_streams()?;

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
        self.apps.remove(&who);
    }
}
