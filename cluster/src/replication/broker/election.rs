//! Candidacy: fence a quorum of stores, adopt the most up-to-date log among
//! them, append an epoch-start marker and make it stable. Only then is the node
//! master.
//!
//! Why adopting the best promised log is enough (I1): an entry is stable only
//! once a quorum of stores acked it in its master's epoch `e`. Our promise quorum
//! shares a store with that ack quorum; that store acked before promising us
//! (after promising it refuses epoch `e`), and its promise reported a last
//! position at least as high as the entry. The log with the highest last
//! position among our promises therefore contains the entry (log matching, plus
//! induction over the masters between `e` and us, whose logs all contain it).

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::position::{Entry, LogPosition};

use super::{BrokerCommand, BrokerNode, Role};
use crate::replication::NodeId;
use crate::replication::log::entries_follow;
use crate::replication::messages::{Endpoint, Message, Service};
use crate::replication::replicator::Replicator;

/// State of one candidacy.
#[derive(Debug)]
pub(super) struct Candidate {
    /// The epoch we fenced with.
    pub(super) epoch: u64,
    /// Random per candidacy; see [`Message::Fence`].
    nonce: u64,
    /// When we give up and campaign again with a higher epoch, if not master by
    /// then. Randomised, so competing candidates stop colliding.
    pub(super) deadline_ms: u64,
    /// When we last sent Fence or Fetch, for resending over a lossy network.
    last_sent_ms: u64,
    /// Where the candidacy is.
    phase: Phase,
}

#[derive(Debug)]
enum Phase {
    /// Waiting for a quorum of promises; each store's last position so far.
    Fencing {
        promises: BTreeMap<NodeId, LogPosition>,
    },
    /// Copying the adopted log from `source`, which ends at `target`; `next` is
    /// the next index we need.
    Fetching {
        source: NodeId,
        target: LogPosition,
        next: u64,
    },
    /// The marker at `marker` is appended; replicating until a quorum holds it.
    Confirming { repl: Replicator, marker: u64 },
}

impl Candidate {
    /// While fetching: the store whose log we adopt, and the next index we
    /// need.
    pub(super) fn fetch_next(&self) -> Option<(NodeId, u64)> {
        match &self.phase {
            Phase::Fetching { source, next, .. } => Some((*source, *next)),
            _ => None,
        }
    }

    /// The replicator while confirming the marker.
    pub(super) fn replicator(&mut self) -> Option<&mut Replicator> {
        match &mut self.phase {
            Phase::Confirming { repl, .. } => Some(repl),
            Phase::Fencing { .. } | Phase::Fetching { .. } => None,
        }
    }
}

impl BrokerNode {
    /// Start (or restart) an election with the highest epoch seen plus one.
    pub(super) fn campaign(&mut self, now: u64, out: &mut Vec<BrokerCommand>) {
        self.prevote = None;
        self.epoch += 1;
        let epoch = self.epoch;
        let deadline_ms = self.election_deadline(now);
        let nonce = self.rng.next_u64();
        self.role = Role::Candidate(Box::new(Candidate {
            epoch,
            nonce,
            deadline_ms,
            last_sent_ms: now,
            phase: Phase::Fencing {
                promises: BTreeMap::new(),
            },
        }));
        out.push(BrokerCommand::Campaign { epoch });
        for &store in &self.cfg.stores {
            out.push(BrokerCommand::Send {
                to: Endpoint::store(store),
                msg: Message::Fence { epoch, nonce },
            });
        }
    }

    /// Resend the Fence or Fetch of the current phase if it is overdue.
    pub(super) fn resend_election(&mut self, now: u64, out: &mut Vec<BrokerCommand>) {
        let Role::Candidate(c) = &mut self.role else {
            return;
        };
        if now.saturating_sub(c.last_sent_ms) < self.cfg.retry_ms {
            return;
        }
        c.last_sent_ms = now;
        let (epoch, nonce) = (c.epoch, c.nonce);
        match &c.phase {
            Phase::Fencing { promises } => {
                for &store in &self.cfg.stores {
                    if !promises.contains_key(&store) {
                        out.push(BrokerCommand::Send {
                            to: Endpoint::store(store),
                            msg: Message::Fence { epoch, nonce },
                        });
                    }
                }
            }
            Phase::Fetching {
                source,
                target,
                next,
            } => {
                // Continue a snapshot from the adopted store; one from any
                // other store (left from catching up as a slave), or one
                // whose source went silent, is dropped for a new Fetch.
                let resend = self
                    .snapshot_rx
                    .as_mut()
                    .filter(|rx| rx.source() == Endpoint::store(*source))
                    .and_then(|rx| rx.resend());
                match resend {
                    Some((to, msg)) => out.push(BrokerCommand::Send { to, msg }),
                    None => {
                        self.snapshot_rx = None;
                        out.push(fetch(&self.cfg, *source, epoch, *next, target.index));
                    }
                }
            }
            Phase::Confirming { .. } => {}
        }
    }

    pub(super) fn on_promise(
        &mut self,
        now: u64,
        from: Endpoint,
        epoch: u64,
        last: LogPosition,
        out: &mut Vec<BrokerCommand>,
    ) {
        let quorum = self.cfg.quorum();
        let Role::Candidate(c) = &mut self.role else {
            return;
        };
        let Phase::Fencing { promises } = &mut c.phase else {
            return;
        };
        if epoch != c.epoch
            || from.service != Service::Store
            || !self.cfg.stores.contains(&from.node)
        {
            return;
        }
        promises.insert(from.node, last);
        if promises.len() < quorum {
            return;
        }
        // The best log: highest (last epoch, last index); ties go to the lowest
        // node id, only so the choice is deterministic.
        let Some((source, target)) = promises
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(&n, &p)| (n, p))
        else {
            return;
        };
        if target.index < self.applied {
            // The adopted log would lack entries we applied as stable: I1 broken.
            self.anomalies += 1;
            return;
        }
        if self.log.pos_at(target.index) == Some(target) {
            // We already hold that log (log matching): no fetch needed.
            self.log.truncate_after(target.index);
            self.start_confirming(now);
            return;
        }
        if target.index <= self.applied {
            // Our stable prefix disagrees with the adopted log: I1 broken.
            self.anomalies += 1;
            return;
        }
        let next = self.applied + 1;
        c.phase = Phase::Fetching {
            source,
            target,
            next,
        };
        c.last_sent_ms = now;
        out.push(fetch(&self.cfg, source, epoch, next, target.index));
    }

    pub(super) fn on_entries(
        &mut self,
        now: u64,
        from: Endpoint,
        epoch: u64,
        entries: Vec<Entry>,
        out: &mut Vec<BrokerCommand>,
    ) {
        let Role::Candidate(c) = &mut self.role else {
            return;
        };
        let Phase::Fetching {
            source,
            target,
            next,
        } = &mut c.phase
        else {
            return;
        };
        if epoch != c.epoch || from != Endpoint::store(*source) {
            return;
        }
        if entries.first().is_none_or(|e| e.pos.index != *next) {
            // A duplicate of an earlier reply, or the store's log got shorter
            // (it cannot while it promised us): wait for the resend or the
            // deadline.
            return;
        }
        let Some(prev) = self.log.pos_at(*next - 1) else {
            self.anomalies += 1;
            return;
        };
        if !entries_follow(prev, &entries) || entries.len() as u64 > target.index - *next + 1 {
            return;
        }
        // Our own entries from `next` on are not known stable: replace them.
        self.log.truncate_after(*next - 1);
        for entry in entries {
            self.log.push(entry);
        }
        *next = self.log.last().index + 1;
        // Progress: a long fetch is not a failed election.
        c.deadline_ms = c.deadline_ms.max(now + self.cfg.election_timeout_ms);
        if *next <= target.index {
            c.last_sent_ms = now;
            out.push(fetch(&self.cfg, *source, epoch, *next, target.index));
            return;
        }
        if self.log.pos_at(target.index) != Some(*target) {
            // Not the log the store promised with; give up this candidacy.
            c.deadline_ms = now;
            return;
        }
        self.start_confirming(now);
    }

    /// A snapshot of the adopted store's state is installed (the log up to
    /// its base was compacted there): fetch what follows it, or confirm if
    /// the base is the adopted log's end.
    pub(super) fn fetch_after_snapshot(&mut self, now: u64, out: &mut Vec<BrokerCommand>) {
        let Role::Candidate(c) = &mut self.role else {
            return;
        };
        let epoch = c.epoch;
        let Phase::Fetching {
            source,
            target,
            next,
        } = &mut c.phase
        else {
            return;
        };
        *next = self.applied + 1;
        c.deadline_ms = c.deadline_ms.max(now + self.cfg.election_timeout_ms);
        if *next <= target.index {
            c.last_sent_ms = now;
            out.push(fetch(&self.cfg, *source, epoch, *next, target.index));
            return;
        }
        if self.log.pos_at(target.index) != Some(*target) {
            c.deadline_ms = now;
            return;
        }
        self.start_confirming(now);
    }

    /// Append the epoch-start marker and start replicating it.
    fn start_confirming(&mut self, now: u64) {
        let Role::Candidate(c) = &mut self.role else {
            return;
        };
        let marker = self.log.last().index + 1;
        self.log.push(Entry {
            pos: LogPosition::new(c.epoch, marker),
            payload: Bytes::new(),
        });
        let repl = Replicator::new(c.epoch, self.id, &self.cfg, &self.log, self.applied, now);
        c.phase = Phase::Confirming { repl, marker };
    }

    /// If the marker is stable, apply everything up to it and become master.
    pub(super) fn maybe_become_master(&mut self, out: &mut Vec<BrokerCommand>) {
        let Role::Candidate(c) = &mut self.role else {
            return;
        };
        let Phase::Confirming { repl, marker } = &c.phase else {
            return;
        };
        let stable = repl.stable();
        if stable < *marker {
            return;
        }
        let epoch = c.epoch;
        let Role::Candidate(c) = std::mem::replace(
            &mut self.role,
            Role::Slave {
                master: None,
                deadline_ms: 0,
            },
        ) else {
            return;
        };
        let Phase::Confirming { repl, .. } = c.phase else {
            return;
        };
        self.apply_up_to(stable, out);
        self.role = Role::Master(repl);
        out.push(BrokerCommand::BecameMaster { epoch, stable });
    }
}

/// A Fetch of at most `fetch_entries_max` entries from `next` towards `to`.
fn fetch(
    cfg: &crate::replication::Config,
    source: NodeId,
    epoch: u64,
    next: u64,
    to: u64,
) -> BrokerCommand {
    let to = to.min(next.saturating_add(cfg.fetch_entries_max.saturating_sub(1)));
    BrokerCommand::Send {
        to: Endpoint::store(source),
        msg: Message::Fetch {
            epoch,
            from: next,
            to,
        },
    }
}
