//! The broker's replication role: slave, candidate or master, one state machine
//! because a node moves between them (a slave campaigns, a candidate wins or
//! loses, a master steps down).
//!
//! The broker (the `stablemq` crate) drives it: it calls [`BrokerNode::append`]
//! for every event while master, `step` for every message and on a timer, and
//! acts on the commands: `Apply` entries (slave), release confirms up to
//! `Stable` (master), serve clients after `BecameMaster`, drop its clients and
//! rebuild from the stable log after `SteppedDown`.
//!
//! This module holds the node, its roles and the dispatch of inputs; each
//! role's protocol has a module of its own: `slave` (following the master,
//! catching up from the stores), `restore` (installing a store's state),
//! `prevote` and `election` (becoming master), and, for the master,
//! `replication::replicator`. `io` holds the inputs and commands.

use bytes::Bytes;

use crate::position::{Entry, LogPosition};
use crate::replication::log::MemLog;
use crate::replication::messages::{Append, Endpoint, Message, Service, SnapshotChunk};
use crate::replication::replicator::Replicator;
use crate::replication::rng::SplitMix64;
use crate::replication::snapshot::SnapshotRx;
use crate::replication::{Config, NodeId};

use election::Candidate;
use prevote::PreVoteRound;

mod election;
mod io;
mod prevote;
mod restore;
mod slave;

pub use io::{AppendError, BrokerCommand, BrokerInput, RoleKind};

/// The current role and its state.
#[derive(Debug)]
enum Role {
    Slave {
        /// Who we last accepted an Append from.
        master: Option<NodeId>,
        /// When we campaign if the master stays silent.
        deadline_ms: u64,
    },
    Candidate(Box<Candidate>),
    Master(Replicator),
}

/// A broker's replication state machine; see the module docs.
#[derive(Debug)]
pub struct BrokerNode {
    /// This node.
    id: NodeId,
    /// Membership and timing.
    cfg: Config,
    /// Randomness for election timeouts; seeded by the driver so a simulation
    /// replays exactly.
    rng: SplitMix64,
    /// Highest epoch seen anywhere (our own candidacy included).
    epoch: u64,
    /// Our copy of the log: stable prefix, then whatever the master sent beyond.
    log: MemLog,
    /// Highest index handed to the broker as stable (`Apply` or `Stable`). Never
    /// truncated; never goes back.
    applied: u64,
    /// Set when a consistency check fails; nonzero means a protocol bug. The
    /// simulator asserts it stays zero.
    anomalies: u64,
    /// The highest `floor` a master told us: every store holds the log up to
    /// it, so entries up to it (and applied) may leave memory.
    floor_seen: u64,
    /// Catching up from the stores (a slave behind the master's memory): when
    /// we last asked, and which store to ask next.
    catch_up_sent_ms: Option<u64>,
    catch_up_turn: usize,
    /// A store's state being received (catch-up below a store's log base).
    snapshot_rx: Option<SnapshotRx>,
    /// A slave's pre-vote under way (see [`PreVoteRound`]); dropped whenever
    /// the node becomes a slave of a master, a candidate or master.
    prevote: Option<PreVoteRound>,
    /// The role.
    role: Role,
}

impl BrokerNode {
    /// A node starting as a slave with an empty log, seeded for its timeouts.
    pub fn new(id: NodeId, cfg: Config, seed: u64, now: u64) -> Self {
        let mut node = BrokerNode {
            id,
            cfg,
            rng: SplitMix64::new(seed),
            epoch: 0,
            log: MemLog::default(),
            applied: 0,
            anomalies: 0,
            floor_seen: 0,
            catch_up_sent_ms: None,
            catch_up_turn: 0,
            snapshot_rx: None,
            prevote: None,
            role: Role::Slave {
                master: None,
                deadline_ms: 0,
            },
        };
        let deadline_ms = node.election_deadline(now);
        node.role = Role::Slave {
            master: None,
            deadline_ms,
        };
        node
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The current role.
    pub fn role(&self) -> RoleKind {
        match self.role {
            Role::Slave { .. } => RoleKind::Slave,
            Role::Candidate(_) => RoleKind::Candidate,
            Role::Master(_) => RoleKind::Master,
        }
    }

    /// Highest epoch seen.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Highest index handed to the broker as stable.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// The master this node follows, or itself while master; `None` while no
    /// master is known (an election is under way). Slaves use it to send
    /// clients to the master.
    pub fn master(&self) -> Option<NodeId> {
        match self.role {
            Role::Slave { master, .. } => master,
            Role::Candidate(_) => None,
            Role::Master(_) => Some(self.id),
        }
    }

    /// The entry at `index` in this node's log (stable or not), if still in
    /// memory (see [`BrokerNode::log_base`]).
    pub fn entry(&self, index: u64) -> Option<&Entry> {
        self.log.get(index)
    }

    /// Entries up to this index have left memory: every store holds them and
    /// this node applied them.
    pub fn log_base(&self) -> u64 {
        self.log.base()
    }

    /// A node that restarts its replication state after being deposed: a
    /// fresh slave (empty log, nothing applied) that still knows `epoch`, so
    /// it neither campaigns below it nor forgets that a newer master exists.
    /// Its broker rebuilds the stable state by catching up from the stores.
    pub fn after_step_down(id: NodeId, cfg: Config, seed: u64, now: u64, epoch: u64) -> Self {
        let mut node = BrokerNode::new(id, cfg, seed, now);
        node.epoch = epoch;
        node
    }

    /// Count of failed internal consistency checks (see the field).
    pub fn anomalies(&self) -> u64 {
        self.anomalies
    }

    /// Master only: give `payload` the next position. Nothing is sent until the
    /// next `step` (use [`BrokerInput::Flush`]), so a burst of appends leaves as
    /// one batch.
    pub fn append(&mut self, payload: Bytes) -> Result<LogPosition, AppendError> {
        if !matches!(self.role, Role::Master(_)) {
            let master = match self.role {
                Role::Slave { master, .. } => master,
                _ => None,
            };
            return Err(AppendError::NotMaster {
                epoch: self.epoch,
                master,
            });
        }
        if payload.is_empty() {
            return Err(AppendError::EmptyPayload);
        }
        let pos = LogPosition::new(self.epoch, self.log.last().index + 1);
        self.log.push(Entry { pos, payload });
        Ok(pos)
    }

    /// Advance by one input.
    pub fn step(&mut self, now: u64, input: BrokerInput) -> Vec<BrokerCommand> {
        let mut out = Vec::new();
        self.drop_settled();
        match input {
            BrokerInput::Receive { from, msg } => self.receive(now, from, msg, &mut out),
            BrokerInput::Tick => self.tick(now, &mut out),
            BrokerInput::Flush => {}
        }
        self.pump(now, &mut out);
        out
    }

    fn receive(&mut self, now: u64, from: Endpoint, msg: Message, out: &mut Vec<BrokerCommand>) {
        self.observe_epoch(now, msg.epoch(), out);
        match msg {
            Message::Append(append) if from.service == Service::Broker => {
                self.floor_seen = self.floor_seen.max(append.floor.min(append.stable));
                self.on_append(now, from, append, out);
            }
            Message::AppendAck {
                epoch,
                last,
                incarnation,
            } => {
                if let Some(repl) = self.replicator_of(epoch) {
                    repl.heard(from, now);
                }
                self.on_ack(now, from, epoch, last, incarnation, out);
            }
            Message::AppendReject { epoch, reason } => {
                if let Some(repl) = self.replicator_of(epoch) {
                    repl.heard(from, now);
                    repl.on_mismatch(now, from, &reason);
                }
            }
            Message::PreVoteReply { epoch, granted, .. } => {
                self.on_prevote_reply(now, from, epoch, granted, out);
            }
            Message::Promise { epoch, last, .. } => self.on_promise(now, from, epoch, last, out),
            Message::Entries { epoch, entries } => self.on_entries(now, from, epoch, entries, out),
            Message::StableEntries { entries, .. } => self.on_stable_entries(now, entries, out),
            Message::SnapshotChunk(chunk) if from.service == Service::Store => {
                self.on_snapshot_chunk(now, from, chunk, out);
            }
            // Store-bound requests, and refusals already handled by
            // `observe_epoch` (a refusal at or below our epoch changes nothing).
            Message::Append(Append { .. })
            | Message::Fence { .. }
            | Message::Fetch { .. }
            | Message::CatchUp { .. }
            | Message::SnapshotRequest { .. }
            | Message::SnapshotChunk(SnapshotChunk { .. })
            | Message::PreVote { .. }
            | Message::JoinProbe { .. }
            | Message::JoinInfo { .. }
            | Message::FenceRefused { .. } => {}
        }
    }

    /// I2: whoever learns of a higher epoch defers to it at once. A master steps
    /// down; a candidate gives up (its epoch can no longer win).
    fn observe_epoch(&mut self, now: u64, epoch: u64, out: &mut Vec<BrokerCommand>) {
        if epoch <= self.epoch {
            return;
        }
        self.epoch = epoch;
        match self.role {
            Role::Slave { ref mut master, .. } => *master = None,
            Role::Master(_) => {
                out.push(BrokerCommand::SteppedDown { epoch });
                self.become_slave(now, None);
            }
            Role::Candidate(_) => self.become_slave(now, None),
        }
    }

    fn become_slave(&mut self, now: u64, master: Option<NodeId>) {
        self.prevote = None;
        let deadline_ms = self.election_deadline(now);
        self.role = Role::Slave {
            master,
            deadline_ms,
        };
    }

    fn election_deadline(&mut self, now: u64) -> u64 {
        now + self.cfg.election_timeout_ms + self.rng.below(self.cfg.election_jitter_ms + 1)
    }

    /// The replicator, if we are master or confirming a marker in `epoch`.
    fn replicator_of(&mut self, epoch: u64) -> Option<&mut Replicator> {
        let repl = match &mut self.role {
            Role::Master(repl) => repl,
            Role::Candidate(c) => c.replicator()?,
            Role::Slave { .. } => return None,
        };
        (epoch == self.epoch).then_some(repl)
    }

    /// Drop from memory what no peer will need from us again: on a master,
    /// everything every store acked (and is stable); on a slave, what the
    /// master said every store holds and we applied. Done at the start of a
    /// step, so whoever reads entries right after a step still finds them.
    fn drop_settled(&mut self) {
        let upto = match &self.role {
            Role::Master(repl) => repl.floor(),
            Role::Slave { .. } => self.floor_seen,
            Role::Candidate(_) => return,
        };
        self.log.drop_up_to(upto.min(self.applied));
    }

    /// Hand the broker everything up to `index` not yet handed over.
    fn apply_up_to(&mut self, index: u64, out: &mut Vec<BrokerCommand>) {
        let index = index.min(self.log.last().index);
        if index > self.applied {
            out.push(BrokerCommand::Apply(
                self.log.range(self.applied + 1, index),
            ));
            self.applied = index;
        }
    }

    fn on_ack(
        &mut self,
        now: u64,
        from: Endpoint,
        epoch: u64,
        last: LogPosition,
        incarnation: u64,
        out: &mut Vec<BrokerCommand>,
    ) {
        if epoch != self.epoch {
            return;
        }
        match &mut self.role {
            Role::Master(repl) => {
                if repl.on_ack(now, from, last, incarnation, &self.log) {
                    let stable = repl.stable();
                    self.applied = stable;
                    out.push(BrokerCommand::Stable(stable));
                }
            }
            Role::Candidate(c) => {
                let timeout_ms = self.cfg.election_timeout_ms;
                let deadline_ms = c.deadline_ms;
                let Some(repl) = c.replicator() else { return };
                let before = repl.matched(from);
                let stable_moved = repl.on_ack(now, from, last, incarnation, &self.log);
                if from.service == Service::Store && repl.matched(from) > before {
                    // A store got further towards the marker: a slow
                    // catch-up is not a failed election. Only that: a
                    // heartbeat ack (or a slave's) proves nothing, and
                    // counting it kept a candidacy whose marker could never
                    // reach a quorum alive forever, with no master.
                    c.deadline_ms = deadline_ms.max(now + timeout_ms);
                }
                if stable_moved {
                    self.maybe_become_master(out);
                }
            }
            Role::Slave { .. } => {}
        }
    }

    fn tick(&mut self, now: u64, out: &mut Vec<BrokerCommand>) {
        match &self.role {
            Role::Slave { deadline_ms, .. } if now >= *deadline_ms => self.start_prevote(now, out),
            Role::Slave { .. } => self.resend_prevote(now, out),
            // A failed candidacy asks again before it raises its epoch once
            // more: a candidate cut off from the stores must not come back
            // with an epoch that deposes whoever won meanwhile.
            Role::Candidate(c) if now >= c.deadline_ms => {
                let master = None;
                self.become_slave(now, master);
                self.start_prevote(now, out);
            }
            Role::Candidate(_) => self.resend_election(now, out),
            Role::Master(repl) => {
                // Check-quorum: a master that no quorum of stores answers
                // makes nothing stable; it steps down so that its clients
                // (closed with 320) reconnect to a node that can serve.
                if repl.stores_heard(now, self.cfg.check_quorum_ms) < self.cfg.quorum() {
                    let epoch = self.epoch;
                    tracing::warn!(
                        node = self.id,
                        epoch,
                        "no quorum of stores answered for check_quorum_ms: stepping down"
                    );
                    out.push(BrokerCommand::SteppedDown { epoch });
                    self.become_slave(now, None);
                }
            }
        }
    }

    /// Send whatever the replicator has for its peers (master, or a candidate
    /// confirming its marker).
    fn pump(&mut self, now: u64, out: &mut Vec<BrokerCommand>) {
        let repl = match &mut self.role {
            Role::Master(repl) => repl,
            Role::Candidate(c) => match c.replicator() {
                Some(repl) => repl,
                None => return,
            },
            Role::Slave { .. } => return,
        };
        for (to, msg) in repl.replicate(now, &self.cfg, &self.log) {
            out.push(BrokerCommand::Send { to, msg });
        }
    }
}
