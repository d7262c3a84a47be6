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
use super::replicator::Replicator;
use super::rng::SplitMix64;
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
    /// This node was master and learned of a higher `epoch`: stop at once (close
    /// client connections with 320), discard every effect past the last `Stable`
    /// index, and carry on as a slave (I2).
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

    /// Every stable entry, from index 1: what a deposed master rebuilds its
    /// broker state from, since its own state ran ahead of the stable index.
    pub fn stable_entries(&self) -> Vec<Entry> {
        self.log.range(1, self.applied)
    }

    /// The entry at `index` in this node's log (stable or not).
    pub fn entry(&self, index: u64) -> Option<&Entry> {
        self.log.get(index)
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
            } if from.service == Service::Broker => {
                self.on_append(now, from, epoch, prev, entries, stable, out);
            }
            Message::AppendAck { epoch, last } => self.on_ack(now, from, epoch, last, out),
            Message::AppendReject { epoch, reason } => {
                if let Some(repl) = self.replicator_of(epoch) {
                    repl.on_mismatch(from, &reason);
                }
            }
            Message::Promise { epoch, last, .. } => self.on_promise(now, from, epoch, last, out),
            Message::Entries { epoch, entries } => self.on_entries(now, from, epoch, entries, out),
            // Store-bound requests, and refusals already handled by
            // `observe_epoch` (a refusal at or below our epoch changes nothing).
            Message::Append { .. }
            | Message::Fence { .. }
            | Message::Fetch { .. }
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
        prev: LogPosition,
        entries: Vec<Entry>,
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
        if self.log.pos_at(prev.index) != Some(prev) {
            let hint = mismatch_hint(
                self.log.last().index,
                self.log.run_start(prev.index),
                prev,
                self.applied,
            );
            let reason = RejectReason::Mismatch { prev, hint };
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
            msg: Message::AppendAck { epoch, last },
        });
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
        out: &mut Vec<BrokerCommand>,
    ) {
        if epoch != self.epoch {
            return;
        }
        match &mut self.role {
            Role::Master(repl) => {
                if repl.on_ack(now, from, last, &self.log) {
                    let stable = repl.stable();
                    self.applied = stable;
                    out.push(BrokerCommand::Stable(stable));
                }
            }
            Role::Candidate(c) => {
                // Progress towards the marker: a slow catch-up of the stores is
                // not a failed election.
                c.deadline_ms = c.deadline_ms.max(now + self.cfg.election_timeout_ms);
                let Some(repl) = c.replicator() else { return };
                if repl.on_ack(now, from, last, &self.log) {
                    self.maybe_become_master(out);
                }
            }
            Role::Slave { .. } => {}
        }
    }

    fn tick(&mut self, now: u64, out: &mut Vec<BrokerCommand>) {
        match &self.role {
            Role::Slave { deadline_ms, .. } if now >= *deadline_ms => self.campaign(now, out),
            Role::Candidate(c) if now >= c.deadline_ms => self.campaign(now, out),
            Role::Candidate(_) => self.resend_election(now, out),
            Role::Slave { .. } | Role::Master(_) => {}
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
