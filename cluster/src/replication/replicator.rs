//! Per-peer replication for one epoch: what the master (and a candidate making
//! its marker stable) sends to each store and slave, and the stable rule.

use std::collections::BTreeMap;

use crate::position::LogPosition;

use super::Config;
use super::log::MemLog;
use super::messages::{Append, Endpoint, Message, RejectReason, Service};

/// What the replicator knows of one peer.
#[derive(Debug, Clone)]
struct Peer {
    /// Next index to send. Runs ahead of `matched` by at most the window: that
    /// gap is the pipeline (sent, not yet acked).
    next: u64,
    /// Highest index the peer acked in this epoch, matching our log.
    matched: u64,
    /// When we last sent anything, for the heartbeat.
    last_sent_ms: u64,
    /// The stable index the last message sent to it carried.
    stable_sent: u64,
    /// When `matched` last moved (or we last went back to it), for the resend.
    last_progress_ms: u64,
    /// When the peer last answered anything in this epoch (an ack or a
    /// reject), for check-quorum.
    heard_ms: u64,
    /// The newest incarnation the peer's acks carried (stores only; 0 until
    /// one carried more). A newer one means the store's disk was lost and
    /// `matched` must start again; an ack of an older one is a ghost.
    incarnation: u64,
}

impl Peer {
    /// Take the incarnation an answer carries. False for a ghost: an answer
    /// the store sent before its disk was lost speaks for entries it no
    /// longer holds (I1), and is ignored. A newer incarnation (the store
    /// lost its disk, or this is its first answer we see) resets what it
    /// matched: that went with the old disk.
    fn same_incarnation(&mut self, incarnation: u64, now: u64) -> bool {
        if incarnation < self.incarnation {
            return false;
        }
        if incarnation > self.incarnation {
            self.incarnation = incarnation;
            if self.matched > 0 {
                self.matched = 0;
                self.next = 1;
                self.last_progress_ms = now;
            }
        }
        true
    }
}

/// Replication state of one epoch. Created fresh by every new candidate: acks
/// from another epoch never count (I1).
#[derive(Debug, Clone)]
pub(crate) struct Replicator {
    /// The epoch every Append carries.
    epoch: u64,
    /// Every store and every other broker.
    peers: BTreeMap<Endpoint, Peer>,
    /// Stores needed for stability.
    quorum: usize,
    /// Highest index acked by a quorum of stores in this epoch whose entry is of
    /// this epoch. Never goes back.
    stable: u64,
    /// A store acked this far behind `stable` no longer holds the floor back
    /// (the pipeline window): it catches up from its peers instead.
    lag_max: u64,
}

impl Replicator {
    /// Start replicating `log` in `epoch`. Peers are assumed to hold everything
    /// before the last entry; a reject walks each one back as far as needed.
    pub(crate) fn new(
        epoch: u64,
        self_id: u64,
        cfg: &Config,
        log: &MemLog,
        stable: u64,
        now: u64,
    ) -> Self {
        let next = log.last().index.max(1);
        let peer = Peer {
            next,
            matched: 0,
            last_sent_ms: 0,
            stable_sent: 0,
            last_progress_ms: now,
            heard_ms: now,
            incarnation: 0,
        };
        let stores = cfg.stores.iter().map(|&n| Endpoint::store(n));
        let slaves = cfg
            .brokers
            .iter()
            .filter(|&&n| n != self_id)
            .map(|&n| Endpoint::broker(n));
        Replicator {
            epoch,
            peers: stores.chain(slaves).map(|e| (e, peer.clone())).collect(),
            quorum: cfg.quorum(),
            stable,
            lag_max: cfg.window_entries_max,
        }
    }

    pub(crate) fn stable(&self) -> u64 {
        self.stable
    }

    /// `peer` answered (an ack or a reject of this epoch) at `now`.
    pub(crate) fn heard(&mut self, peer: Endpoint, now: u64) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.heard_ms = p.heard_ms.max(now);
        }
    }

    /// How many stores answered within the last `within_ms` (counting from
    /// the replicator's start, so a new master gets a full period).
    pub(crate) fn stores_heard(&self, now: u64, within_ms: u64) -> usize {
        self.peers
            .iter()
            .filter(|(e, p)| {
                e.service == Service::Store && now.saturating_sub(p.heard_ms) < within_ms
            })
            .count()
    }

    /// The highest index `peer` acked in this epoch (0 if none, or not a
    /// peer).
    pub(crate) fn matched(&self, peer: Endpoint) -> u64 {
        self.peers.get(&peer).map_or(0, |p| p.matched)
    }

    /// What brokers may drop from memory: the lowest ack among the stores
    /// keeping up (acked within `lag_max` of `stable`), at most `stable`.
    /// Nothing up to it will be resent to those stores. A store further
    /// behind (down, cut off, or just restarted) no longer pins it: it
    /// catches up from its peer stores, from their log or their state, and
    /// memory stays bounded by about one window.
    pub(crate) fn floor(&self) -> u64 {
        self.peers
            .iter()
            .filter(|(e, _)| e.service == Service::Store)
            .map(|(_, p)| p.matched)
            .filter(|&m| m.saturating_add(self.lag_max) >= self.stable)
            .min()
            .unwrap_or(self.stable)
            .min(self.stable)
    }

    /// Send what is waiting to every peer, within its window, batched; a
    /// heartbeat to peers with nothing to send for `heartbeat_ms`; and go back to
    /// `matched` for peers that made no progress for `retry_ms` (a lost message
    /// or ack: go-back-N).
    pub(crate) fn replicate(
        &mut self,
        now: u64,
        cfg: &Config,
        log: &MemLog,
    ) -> Vec<(Endpoint, Message)> {
        let mut out = Vec::new();
        let last = log.last().index;
        let floor = self.floor();
        for (&to, peer) in &mut self.peers {
            if peer.next <= peer.matched {
                peer.next = peer.matched + 1;
            }
            let in_flight = peer.next - 1 > peer.matched;
            if in_flight && now.saturating_sub(peer.last_progress_ms) >= cfg.retry_ms {
                peer.next = peer.matched + 1;
                peer.last_progress_ms = now;
            }
            if peer.next <= log.base() {
                // Entries it needs are no longer in memory: anchor a
                // heartbeat at our first position, which the peer rejects
                // until it has caught up from a store (a slave from any
                // store, a store from its peers).
                //
                // Its floor is at least our base: a store catches up from
                // its peers only when it lacks entries below the floor, and
                // `floor()` alone can be lower than our base (a fresh
                // replicator counts a lagging store's `matched` as 0 while
                // the stable index is within a window, and a candidate's
                // base is where its snapshot left it). Without this a store
                // behind our base waits for entries we cannot send, and
                // with the third store down no marker ever becomes stable.
                // Our base is below what we applied, so it is stable, and
                // every store that acks our marker learns a stable index at
                // least this high: some live peer can serve it.
                if now.saturating_sub(peer.last_sent_ms) >= cfg.heartbeat_ms {
                    out.push((
                        to,
                        Message::Append(Append {
                            epoch: self.epoch,
                            prev: log.pos_at(log.base()).unwrap_or(LogPosition::ZERO),
                            entries: Vec::new(),
                            stable: self.stable,
                            floor: floor.max(log.base()),
                        }),
                    ));
                    peer.last_sent_ms = now;
                }
                continue;
            }
            let mut sent = false;
            let window_end = peer
                .matched
                .saturating_add(cfg.window_entries_max)
                .min(last);
            while peer.next <= window_end {
                let batch_end = window_end.min(peer.next + cfg.batch_entries_max as u64 - 1);
                let Some(prev) = log.pos_at(peer.next - 1) else {
                    break;
                };
                out.push((
                    to,
                    Message::Append(Append {
                        epoch: self.epoch,
                        prev,
                        entries: log.range(peer.next, batch_end),
                        stable: self.stable,
                        floor,
                    }),
                ));
                peer.next = batch_end + 1;
                sent = true;
            }
            // A slave broker applies only what it knows is stable, and serves
            // reads from that (stream subscriptions on a replica): it hears
            // of a new stable index at once, not at the next heartbeat (up to
            // `heartbeat_ms` later when no entries follow), at most once a
            // millisecond. A store needs no such news.
            let stable_news = to.service == Service::Broker
                && self.stable > peer.stable_sent
                && now > peer.last_sent_ms;
            if sent {
                peer.last_sent_ms = now;
                peer.stable_sent = self.stable;
            } else if stable_news || now.saturating_sub(peer.last_sent_ms) >= cfg.heartbeat_ms {
                // The heartbeat claims only what the peer acked, so it never
                // races entries still in flight into a spurious reject.
                let prev = log.pos_at(peer.matched).unwrap_or(LogPosition::ZERO);
                out.push((
                    to,
                    Message::Append(Append {
                        epoch: self.epoch,
                        prev,
                        entries: Vec::new(),
                        stable: self.stable,
                        floor,
                    }),
                ));
                peer.last_sent_ms = now;
                peer.stable_sent = self.stable;
            }
        }
        out
    }

    /// An ack of this epoch from `from` in its `incarnation`. Returns true
    /// if the stable index moved.
    pub(crate) fn on_ack(
        &mut self,
        now: u64,
        from: Endpoint,
        last: LogPosition,
        incarnation: u64,
        log: &MemLog,
    ) -> bool {
        let Some(peer) = self.peers.get_mut(&from) else {
            return false;
        };
        if !peer.same_incarnation(incarnation, now) {
            return false;
        }
        // Count only what matches our log at that position: with log matching
        // (I3) the peer then holds our log up to there.
        if log.pos_at(last.index) != Some(last) {
            return false;
        }
        if last.index > peer.matched {
            peer.matched = last.index;
            peer.last_progress_ms = now;
        }
        from.service == Service::Store && self.advance_stable(log)
    }

    /// A Mismatch reject of this epoch: send again from where the peer asked.
    pub(crate) fn on_mismatch(&mut self, now: u64, from: Endpoint, reason: &RejectReason) {
        let RejectReason::Mismatch {
            prev,
            hint,
            incarnation,
        } = reason
        else {
            return;
        };
        let Some(peer) = self.peers.get_mut(&from) else {
            return;
        };
        if !peer.same_incarnation(*incarnation, now) {
            return;
        }
        if prev.index > peer.matched {
            peer.next = peer.next.min(peer.matched.max(*hint) + 1);
        } else if from.service == Service::Broker && *hint < peer.matched {
            // A slave that restarted lost its in-memory log; a store never loses
            // what it acked (it was durable), so for a store this is a stale
            // reject overtaken by a later ack and is ignored.
            peer.matched = *hint;
            peer.next = hint + 1;
        }
    }

    /// The stable rule (I1): the highest index held by a quorum of stores, counted
    /// only if its entry is of this epoch. An older-epoch entry on a quorum may
    /// still be overwritten by a candidate that fenced a different quorum; once an
    /// entry of ours is on a quorum, every later candidate's adopted log holds it,
    /// and with it everything before it.
    fn advance_stable(&mut self, log: &MemLog) -> bool {
        let mut matched: Vec<u64> = self
            .peers
            .iter()
            .filter(|(e, _)| e.service == Service::Store)
            .map(|(_, p)| p.matched)
            .collect();
        if matched.len() < self.quorum {
            return false;
        }
        matched.sort_unstable_by(|a, b| b.cmp(a));
        let Some(&candidate) = matched.get(self.quorum - 1) else {
            return false;
        };
        let ours = log.pos_at(candidate).is_some_and(|p| p.epoch == self.epoch);
        if candidate > self.stable && ours {
            self.stable = candidate;
            return true;
        }
        false
    }
}
