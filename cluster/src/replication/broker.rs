//! The broker's replication role: slave, candidate or master, one state machine
//! because a node moves between them (a slave campaigns, a candidate wins or
//! loses, a master steps down).
//!
//! The broker (the `stablemq` crate) drives it: it calls [`BrokerNode::append`]
//! for every event while master, `step` for every message and on a timer, and
//! acts on the commands: `Apply` entries (slave), release confirms up to
//! `Stable` (master), serve clients after `BecameMaster`, drop its clients and
//! rebuild from the stable log after `SteppedDown`.

use bytes::Bytes;

use crate::position::{Entry, LogPosition};

use super::election::Candidate;
use super::log::{MemLog, entries_follow, mismatch_hint};
use super::messages::{Endpoint, Message, RejectReason, Service};
use super::prevote::PreVoteRound;
use super::replicator::Replicator;
use super::rng::SplitMix64;
use super::snapshot::{ChunkOutcome, SnapshotRx};
use super::{Config, NodeId};

/// What drives a broker node.
#[derive(Debug, Clone, PartialEq)]
pub enum BrokerInput {
    /// A message from a peer.
    Receive {
        /// The sender.
        from: Endpoint,
        /// The message.
        msg: Message,
    },
    /// Time passed: check the election timeout, resend what is overdue, send
    /// heartbeats. Call it every few milliseconds (well under `heartbeat_ms`).
    Tick,
    /// Entries were appended: send them. Call it after a run of
    /// [`BrokerNode::append`] calls, so one Append carries all of them (the batch
    /// is whatever the client produced meanwhile, never a fixed sleep).
    Flush,
}

/// What a broker node asks its driver (and the broker) to do.
#[derive(Debug, Clone, PartialEq)]
pub enum BrokerCommand {
    /// Send a message.
    Send {
        /// The receiver.
        to: Endpoint,
        /// The message.
        msg: Message,
    },
    /// Slave (or a candidate becoming master): these entries are stable; apply
    /// them, in order. Consecutive with the previous `Apply`. Epoch markers
    /// ([`super::is_epoch_marker`]) are included and must be skipped.
    Apply(Vec<Entry>),
    /// Slave or candidate: one chunk of a store's materialized state of the
    /// stable log up to `base` (the entries the node needs were compacted),
    /// as it arrives, so no one holds the whole state at once. `first`
    /// starts it (drop whatever an earlier, abandoned transfer delivered);
    /// `done`: it is complete and replaces the broker's state. `Apply`
    /// continues from `base.index + 1`.
    Restore {
        /// The last entry the state covers.
        base: LogPosition,
        /// These pairs start the state.
        first: bool,
        /// The chunk's pairs, in key order, after every earlier chunk's.
        pairs: Vec<(bytes::Bytes, bytes::Bytes)>,
        /// The last chunk.
        done: bool,
    },
    /// Master: every entry up to this index is stable; release the confirms and
    /// replies waiting for it. Strictly increasing within one mastership.
    Stable(u64),
    /// This node started an election for `epoch` (for metrics and logs).
    Campaign {
        /// The epoch it fenced the stores with.
        epoch: u64,
    },
    /// The epoch-start marker is stable: this node is master of `epoch` and may
    /// serve clients. Everything up to `stable` was applied before this command.
    BecameMaster {
        /// The new epoch.
        epoch: u64,
        /// The marker's index: the stable index the mastership starts from.
        stable: u64,
    },
    /// This node was master and learned of a higher `epoch`, or (check-quorum,
    /// `epoch` is then its own) heard no quorum of stores for
    /// `check_quorum_ms`: stop at once (close client connections with 320),
    /// discard every effect past the last `Stable` index, and carry on as a
    /// slave (I2).
    SteppedDown {
        /// The higher epoch that deposed us.
        epoch: u64,
    },
}

/// Why [`BrokerNode::append`] refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AppendError {
    /// Only the master appends. `master` is the node this one last heard from.
    #[error("not master (epoch {epoch}, master {master:?})")]
    NotMaster {
        /// The highest epoch this node knows.
        epoch: u64,
        /// The master it follows, if it knows one.
        master: Option<NodeId>,
    },
    /// An empty payload is reserved for epoch markers.
    #[error("empty payloads are reserved for epoch markers")]
    EmptyPayload,
}

/// Which role a broker node is in, for status pages and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleKind {
    /// Applies stable entries; may campaign when the master goes quiet.
    Slave,
    /// Fencing, fetching, or making its marker stable.
    Candidate,
    /// Serves clients.
    Master,
}

/// The current role and its state.
#[derive(Debug)]
pub(super) enum Role {
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
    pub(super) id: NodeId,
    /// Membership and timing.
    pub(super) cfg: Config,
    /// Randomness for election timeouts; seeded by the driver so a simulation
    /// replays exactly.
    pub(super) rng: SplitMix64,
    /// Highest epoch seen anywhere (our own candidacy included).
    pub(super) epoch: u64,
    /// Our copy of the log: stable prefix, then whatever the master sent beyond.
    pub(super) log: MemLog,
    /// Highest index handed to the broker as stable (`Apply` or `Stable`). Never
    /// truncated; never goes back.
    pub(super) applied: u64,
    /// Set when a consistency check fails; nonzero means a protocol bug. The
    /// simulator asserts it stays zero.
    pub(super) anomalies: u64,
    /// The highest `floor` a master told us: every store holds the log up to
    /// it, so entries up to it (and applied) may leave memory.
    pub(super) floor_seen: u64,
    /// Catching up from the stores (a slave behind the master's memory): when
    /// we last asked, and which store to ask next.
    pub(super) catch_up_sent_ms: Option<u64>,
    pub(super) catch_up_turn: usize,
    /// A store's state being received (catch-up below a store's log base).
    pub(super) snapshot_rx: Option<SnapshotRx>,
    /// A slave's pre-vote under way (see [`PreVoteRound`]); dropped whenever
    /// the node becomes a slave of a master, a candidate or master.
    pub(super) prevote: Option<PreVoteRound>,
    /// The role.
    pub(super) role: Role,
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
            Message::Append {
                epoch,
                prev,
                entries,
                stable,
                floor,
            } if from.service == Service::Broker => {
                self.floor_seen = self.floor_seen.max(floor.min(stable));
                self.on_append(now, from, epoch, prev, entries, stable, out);
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
            Message::SnapshotChunk {
                base,
                after,
                pairs,
                done,
            } if from.service == Service::Store => {
                self.on_snapshot_chunk(now, from, base, after, pairs, done, out);
            }
            // Store-bound requests, and refusals already handled by
            // `observe_epoch` (a refusal at or below our epoch changes nothing).
            Message::Append { .. }
            | Message::Fence { .. }
            | Message::Fetch { .. }
            | Message::CatchUp { .. }
            | Message::SnapshotRequest { .. }
            | Message::SnapshotChunk { .. }
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

    pub(super) fn become_slave(&mut self, now: u64, master: Option<NodeId>) {
        self.prevote = None;
        let deadline_ms = self.election_deadline(now);
        self.role = Role::Slave {
            master,
            deadline_ms,
        };
    }

    pub(super) fn election_deadline(&mut self, now: u64) -> u64 {
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

    #[allow(clippy::too_many_arguments)]
    fn on_append(
        &mut self,
        now: u64,
        from: Endpoint,
        epoch: u64,
        mut prev: LogPosition,
        mut entries: Vec<Entry>,
        stable: u64,
        out: &mut Vec<BrokerCommand>,
    ) {
        if epoch < self.epoch || matches!(self.role, Role::Master(_)) {
            // A deposed master (or, impossibly, a second master of our epoch):
            // tell it the epoch that deposed it.
            let reject = Message::AppendReject {
                epoch: self.epoch,
                reason: RejectReason::Fenced,
            };
            out.push(BrokerCommand::Send {
                to: from,
                msg: reject,
            });
            return;
        }
        // The master of our epoch: follow it (a candidate of the same epoch lost,
        // since the stores promised it to the sender).
        self.become_slave(now, Some(from.node));
        let base = self.log.base();
        if prev.index < base {
            // A resend reaching into what we dropped: that prefix is stable and
            // applied, so the master's entries there are ours (I1). Start the
            // check at our first position instead of rejecting down a prefix we
            // no longer hold.
            let skip = usize::try_from(base - prev.index).unwrap_or(usize::MAX);
            entries.drain(..skip.min(entries.len()));
            prev = self.log.pos_at(base).unwrap_or(LogPosition::ZERO);
        }
        if prev.index > self.log.last().index && stable > self.applied {
            // We lack entries the master may no longer hold in memory: fetch the
            // stable ones from a store meanwhile.
            self.catch_up(now, false, out);
        }
        if self.log.pos_at(prev.index) != Some(prev) {
            let hint = mismatch_hint(
                self.log.last().index,
                self.log.run_start(prev.index),
                prev,
                self.applied,
            );
            let reason = RejectReason::Mismatch {
                prev,
                hint,
                incarnation: 0,
            };
            out.push(BrokerCommand::Send {
                to: from,
                msg: Message::AppendReject { epoch, reason },
            });
            return;
        }
        if !entries_follow(prev, &entries) {
            self.anomalies += 1; // malformed: ack nothing
            return;
        }
        let last_index = prev.index + entries.len() as u64;
        let last = LogPosition::new(
            entries.last().map_or(prev.epoch, |e| e.pos.epoch),
            last_index,
        );
        for entry in entries {
            let index = entry.pos.index;
            match self.log.pos_at(index) {
                Some(pos) if pos == entry.pos => {}
                Some(_) if index <= self.applied => {
                    // Applied entries are stable and final (I1/I4).
                    self.anomalies += 1;
                    return;
                }
                Some(_) => {
                    self.log.truncate_after(index - 1);
                    self.log.push(entry);
                }
                None => self.log.push(entry),
            }
        }
        // Stable only up to what this append proved we share with the master.
        self.apply_up_to(stable.min(last_index), out);
        out.push(BrokerCommand::Send {
            to: from,
            msg: Message::AppendAck {
                epoch,
                last,
                incarnation: 0,
            },
        });
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

    /// Slave: ask a store (each in turn) for the stable entries after what we
    /// applied. `now_again` skips the rate limit (the previous answer just
    /// arrived and more is wanted).
    fn catch_up(&mut self, now: u64, now_again: bool, out: &mut Vec<BrokerCommand>) {
        if !matches!(self.role, Role::Slave { .. }) || self.cfg.stores.is_empty() {
            return;
        }
        if !now_again
            && self
                .catch_up_sent_ms
                .is_some_and(|at| now.saturating_sub(at) < self.cfg.retry_ms)
        {
            return;
        }
        self.catch_up_sent_ms = Some(now);
        if let Some(rx) = &mut self.snapshot_rx {
            if let Some((to, msg)) = rx.resend() {
                out.push(BrokerCommand::Send { to, msg });
                return;
            }
            // The source went silent: ask the next store from scratch.
            self.snapshot_rx = None;
        }
        let store = self.cfg.stores[self.catch_up_turn % self.cfg.stores.len()];
        self.catch_up_turn = self.catch_up_turn.wrapping_add(1);
        let from = self.applied + 1;
        out.push(BrokerCommand::Send {
            to: Endpoint::store(store),
            msg: Message::CatchUp {
                epoch: self.epoch,
                from,
                to: from.saturating_add(self.cfg.fetch_entries_max.saturating_sub(1)),
            },
        });
    }

    /// Slave: stable entries from a store. They follow what we applied (the
    /// stable log is the same everywhere, I1/I3); anything of ours beyond
    /// that was not known stable and is replaced.
    fn on_stable_entries(&mut self, now: u64, entries: Vec<Entry>, out: &mut Vec<BrokerCommand>) {
        if !matches!(self.role, Role::Slave { .. }) {
            return;
        }
        if entries
            .first()
            .is_none_or(|e| e.pos.index != self.applied + 1)
        {
            return; // empty, or a late answer to an older request
        }
        let Some(prev) = self.log.pos_at(self.applied) else {
            self.anomalies += 1;
            return;
        };
        if !entries_follow(prev, &entries) {
            // Stable entries that do not continue our stable prefix: I1 or I3
            // is broken somewhere.
            self.anomalies += 1;
            return;
        }
        // A stable entry of epoch e means a master of e existed: anyone still
        // appending in an older epoch is deposed (I2), and we must not follow
        // it over entries we now hold as stable.
        if let Some(newest) = entries.iter().map(|e| e.pos.epoch).max() {
            self.observe_epoch(now, newest, out);
        }
        let full = entries.len() as u64 >= self.cfg.fetch_entries_max;
        self.log.truncate_after(self.applied);
        for entry in entries {
            self.log.push(entry);
        }
        let last = self.log.last().index;
        self.apply_up_to(last, out);
        if full {
            self.catch_up(now, true, out);
        }
    }

    /// A chunk of a store's state: a slave catching up, or a candidate
    /// fetching the adopted log, below that store's log base.
    #[allow(clippy::too_many_arguments)]
    fn on_snapshot_chunk(
        &mut self,
        now: u64,
        from: Endpoint,
        base: LogPosition,
        after: Option<bytes::Bytes>,
        pairs: Vec<(bytes::Bytes, bytes::Bytes)>,
        done: bool,
        out: &mut Vec<BrokerCommand>,
    ) {
        let have = match &self.role {
            Role::Slave { .. } => self.applied,
            Role::Candidate(c) => match c.fetch_next() {
                // Only from the store whose log we adopt: its state is a
                // prefix of that log.
                Some((source, next)) if source == from.node => next - 1,
                _ => return,
            },
            Role::Master(_) => return,
        };
        match SnapshotRx::on_chunk(&mut self.snapshot_rx, from, have, base, after, pairs, done) {
            ChunkOutcome::Ignored => {}
            ChunkOutcome::Taken {
                base,
                first,
                pairs,
                next: Some((to, msg)),
            } => {
                // Each chunk goes to the broker as it comes.
                out.push(BrokerCommand::Restore {
                    base,
                    first,
                    pairs,
                    done: false,
                });
                self.catch_up_sent_ms = Some(now);
                out.push(BrokerCommand::Send { to, msg });
            }
            ChunkOutcome::Taken {
                base,
                first,
                pairs,
                next: None,
            } => {
                // A stable entry of epoch e proves a master of e existed (see
                // `on_stable_entries`).
                self.observe_epoch(now, base.epoch, out);
                self.log.reset_to(base);
                self.applied = base.index;
                out.push(BrokerCommand::Restore {
                    base,
                    first,
                    pairs,
                    done: true,
                });
                match self.role {
                    Role::Slave { .. } => self.catch_up(now, true, out),
                    Role::Candidate(_) => self.fetch_after_snapshot(now, out),
                    Role::Master(_) => {}
                }
            }
        }
    }

    /// Hand the broker everything up to `index` not yet handed over.
    pub(super) fn apply_up_to(&mut self, index: u64, out: &mut Vec<BrokerCommand>) {
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
