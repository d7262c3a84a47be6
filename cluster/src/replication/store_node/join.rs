//! Joining: a store whose disk is new (or was lost) votes only once it is
//! sure to hold everything its earlier life may have promised or acked.
//!
//! A store that loses its disk and comes back empty would otherwise break
//! two invariants. It may promise an epoch it already promised to another
//! candidacy (two masters of one epoch, I2). And it no longer holds entries
//! it acked: a later promise quorum that meets the acking quorum only in this
//! store could adopt a log without them (I1).
//!
//! So a store knows whether it has *joined* (a flag its disk keeps, written
//! at creation as "not joined"; see `DiskOp::Joined`). Until it has, it never
//! sends a `Promise` and refuses every pre-vote. It still accepts entries,
//! catches up from its peers and acks like any store: an ack claims only
//! what this disk holds now, which is as true of a new disk as of an old
//! one. Every ack carries the disk's incarnation, so the master forgets
//! what the old disk matched at the first ack of the new one, and ignores
//! the old disk's acks still in flight (ghosts). (The design first said an
//! unjoined store never acks; then the master resent its whole window to it
//! every `retry_ms` until it joined, a message storm the simulator found.)
//!
//! To join it asks its peers (`JoinProbe`) until `n - quorum + 1` of them
//! answered (`JoinInfo`): every quorum that could have promised or acked
//! something with this store's help has a member among them that holds it.
//! If they are all pristine (promise 0, empty log), no quorum ever promised
//! anything: this is a new cluster's bootstrap, and it joins at once.
//! Otherwise it catches up until its stable index reaches the highest `last`
//! it was told, raises its promise to the highest promise it was told, and
//! only then records `joined` (durable before any reply that depends on it).

use std::collections::BTreeMap;

use super::*;

/// Where a store not yet joined is in joining.
#[derive(Debug, Default)]
pub(super) struct Join {
    /// Peers that answered: their promise and last position.
    answers: BTreeMap<NodeId, (u64, LogPosition)>,
    /// When the probes were last sent (resent every `retry_ms`).
    probe_sent_ms: Option<u64>,
    /// Once enough peers answered: the index the stable index must reach,
    /// and the promise to take, before joining.
    target: Option<(u64, u64)>,
    /// Answers needed: `n - quorum + 1` (at most the number of peers).
    pub(super) need: usize,
}

impl StoreNode {
    /// Set the store's identity as its disk records it: whether it has
    /// joined (an existing disk that predates the flag and holds data has)
    /// and its incarnation (ordered: a newer disk has a higher one).
    pub fn with_identity(mut self, joined: bool, incarnation: u64) -> Self {
        self.joined = joined;
        self.incarnation = incarnation;
        self
    }

    /// Whether this store may promise and ack (see the module docs).
    pub fn joined(&self) -> bool {
        self.joined
    }

    /// This disk's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Drive joining from any input: probe the peers that have not
    /// answered (at most once per `retry_ms`), or catch up towards the
    /// target.
    pub(super) fn join_step(&mut self, now: u64, out: &mut Vec<StoreCommand>) {
        if self.joined {
            return;
        }
        if self.join.target.is_some() {
            if self
                .join
                .target
                .is_some_and(|(index, _)| self.stable < index)
            {
                self.catch_up(now, false, out);
            }
            return;
        }
        if self.join.need == 0 {
            // No peer to ask (a single store): nothing to protect.
            self.join.target = Some((0, 0));
            return;
        }
        if self
            .join
            .probe_sent_ms
            .is_some_and(|at| now.saturating_sub(at) < self.retry_ms)
        {
            return;
        }
        self.join.probe_sent_ms = Some(now);
        for &peer in &self.peers {
            if !self.join.answers.contains_key(&peer) {
                out.push(StoreCommand::Send {
                    to: Endpoint::store(peer),
                    msg: Message::JoinProbe {
                        incarnation: self.incarnation,
                    },
                });
            }
        }
    }

    /// A peer's answer to our probe.
    pub(super) fn on_join_info(
        &mut self,
        now: u64,
        from: NodeId,
        promised: u64,
        last: LogPosition,
        out: &mut Vec<StoreCommand>,
    ) {
        if self.joined || self.join.target.is_some() {
            return;
        }
        self.join.answers.insert(from, (promised, last));
        if self.join.answers.len() < self.join.need {
            return;
        }
        let promise = self.join.answers.values().map(|a| a.0).max().unwrap_or(0);
        let index = self
            .join
            .answers
            .values()
            .map(|a| a.1.index)
            .max()
            .unwrap_or(0);
        // All pristine: (0, 0), join at once. Otherwise catch up first.
        self.join.target = Some((index, promise));
        tracing::info!(
            store = self.id,
            target = index,
            promise,
            "store not yet joined: catching up before it votes"
        );
        self.join_step(now, out);
    }

    /// Join once the stable index reached the target: raise the promise to
    /// the highest learned, then record `joined` behind everything it
    /// depends on.
    pub(super) fn try_finish_join(&mut self) {
        let Some((index, promise)) = self.join.target.filter(|_| !self.joined) else {
            return;
        };
        if self.stable < index {
            return;
        }
        self.raise_promise_to(promise);
        self.queued_ops.push(DiskOp::Joined);
        self.joined = true;
        tracing::info!(
            store = self.id,
            stable = self.stable,
            promised = self.promised,
            "store joined: it promises and acks from now on"
        );
    }
}
