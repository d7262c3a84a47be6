//! Keeping up: compaction of the log into the state, catching up from peers
//! (log suffix or snapshot) when behind, and installing what arrives.

use super::*;
use crate::position::Entry;
use crate::replication::log::entries_follow;
use crate::replication::snapshot::ChunkOutcome;

impl StoreNode {
    /// Compaction rides on a Persist that is going out anyway: the state
    /// follows the stable index already on disk, `retention` entries behind
    /// (and at most an eighth more),
    /// so a follower slightly behind still catches up from the log alone.
    /// The op goes first: every truncation in the batch is above the stable
    /// index, which is above the new base.
    pub(super) fn compact(&mut self) {
        let Some(retention) = self.retention else {
            return;
        };
        let through = self.stable_on_disk.saturating_sub(retention);
        // In steps of an eighth of the retention, so that the reducer's
        // read-back and the deletions come in batches, not per fsync.
        let step = (retention / 8).max(1);
        if through < self.log.base().index.saturating_add(step) {
            return;
        }
        let Some(epoch) = self.log.epoch_at(through) else {
            self.anomalies += 1;
            return;
        };
        let pos = LogPosition::new(epoch, through);
        self.log.compact_through(pos);
        self.queued_ops.insert(0, DiskOp::Compact(pos));
    }

    /// Ask a peer store (each in turn) for the stable entries after our
    /// stable index, or for the next chunk of the snapshot being received.
    /// At most once per `retry_ms` unless `now_again`.
    pub(super) fn catch_up(&mut self, now: u64, now_again: bool, out: &mut Vec<StoreCommand>) {
        if self.peers.is_empty() {
            return;
        }
        if !now_again
            && self
                .catch_up_sent_ms
                .is_some_and(|at| now.saturating_sub(at) < self.retry_ms)
        {
            return;
        }
        self.catch_up_sent_ms = Some(now);
        if let Some(rx) = &mut self.snapshot_rx {
            if let Some((to, msg)) = rx.resend() {
                out.push(StoreCommand::Send { to, msg });
                return;
            }
            // The source went silent: ask the next peer from scratch.
            self.snapshot_rx = None;
        }
        let peer = self.peers[self.catch_up_turn % self.peers.len()];
        self.catch_up_turn = self.catch_up_turn.wrapping_add(1);
        let from = self.stable + 1;
        out.push(StoreCommand::Send {
            to: Endpoint::store(peer),
            msg: Message::CatchUp {
                epoch: self.promised,
                from,
                to: from.saturating_add(self.fetch_entries_max - 1),
            },
        });
    }

    /// Stable entries from a peer, after our stable index. Whatever of ours
    /// conflicts with them was never stable and goes; they become stable
    /// here. A stable entry of epoch e proves a master of e existed, so the
    /// promise rises to it (as for an Append of a higher epoch).
    pub(super) fn on_stable_entries(
        &mut self,
        now: u64,
        entries: Vec<Entry>,
        out: &mut Vec<StoreCommand>,
    ) {
        if entries
            .first()
            .is_none_or(|e| e.pos.index != self.stable + 1)
        {
            return; // empty, or late
        }
        let Some(prev_epoch) = self.log.epoch_at(self.stable) else {
            self.anomalies += 1;
            return;
        };
        if !entries_follow(LogPosition::new(prev_epoch, self.stable), &entries) {
            // Stable entries that do not continue our stable prefix: I1 or
            // I3 is broken somewhere.
            self.anomalies += 1;
            return;
        }
        let full = entries.len() as u64 >= self.fetch_entries_max;
        let Some(last_index) = entries.last().map(|e| e.pos.index) else {
            return;
        };
        self.raise_promise_to(entries.iter().map(|e| e.pos.epoch).max().unwrap_or(0));
        let mut rest = Vec::new();
        for entry in entries {
            if rest.is_empty() {
                match self.log.epoch_at(entry.pos.index) {
                    Some(epoch) if epoch == entry.pos.epoch => continue, // ours already
                    Some(_) => {
                        // Above our stable index (the first entry is right
                        // after it), so never stable: it conflicts with one
                        // that is.
                        let keep = entry.pos.index - 1;
                        self.log.truncate_after(keep);
                        self.queued_ops.push(DiskOp::TruncateAfter(keep));
                    }
                    None => {}
                }
            }
            self.log.push(entry.pos);
            rest.push(entry);
        }
        if !rest.is_empty() {
            self.queued_ops.push(DiskOp::Append {
                writer_epoch: self.promised,
                entries: rest,
            });
        }
        // The log now holds every entry sent, and they are stable.
        if last_index > self.stable {
            self.stable = last_index;
            self.queued_ops.push(DiskOp::Stable(last_index));
        }
        if full {
            self.catch_up(now, true, out);
        }
    }

    pub(super) fn on_snapshot_chunk(
        &mut self,
        now: u64,
        from: Endpoint,
        chunk: SnapshotChunk,
        out: &mut Vec<StoreCommand>,
    ) {
        match SnapshotRx::on_chunk(&mut self.snapshot_rx, from, self.stable, chunk) {
            ChunkOutcome::Ignored => {}
            ChunkOutcome::Taken {
                base,
                first,
                pairs,
                next,
            } => {
                // Each chunk goes to disk as it comes (staged beside the live
                // state), so the transfer holds no more than a chunk or two
                // in memory whatever the state's size.
                self.queued_ops
                    .push(DiskOp::StageSnapshot { base, first, pairs });
                match next {
                    Some(request) => {
                        // Asked for once this chunk is on disk: a disk slower
                        // than the network queues no more than one chunk
                        // behind the one being written.
                        self.catch_up_sent_ms = Some(now);
                        self.queued_replies.push(request);
                    }
                    None => {
                        self.raise_promise_to(base.epoch);
                        self.log.compact_through(base);
                        self.stable = self.stable.max(base.index);
                        self.queued_ops.push(DiskOp::InstallSnapshot { base });
                        self.installed_snapshots += 1;
                        // Then the entries after it.
                        self.catch_up(now, true, out);
                    }
                }
            }
        }
    }

    /// Raise the promise to `epoch` (durably, ahead of what depends on it):
    /// a master of that epoch exists, so a quorum promised it.
    pub(super) fn raise_promise_to(&mut self, epoch: u64) {
        if epoch > self.promised {
            self.promised = epoch;
            self.promised_to = None;
            self.queued_ops.push(DiskOp::Promise(epoch));
        }
    }

    /// Snapshots this store installed from its peers (for the simulator's
    /// statistics).
    pub fn installed_snapshots(&self) -> u64 {
        self.installed_snapshots
    }
}
