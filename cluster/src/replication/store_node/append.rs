//! Accepting a master's Appends: refuse a deposed master (I2), check log
//! matching at `prev` (at the log base once compacted), skip what is held,
//! truncate a conflicting suffix (never a stable entry, I1), queue the new
//! entries and the stable index for disk, and ack once they are durable.

use super::*;
use crate::position::Entry;
use crate::replication::log::{entries_follow, mismatch_hint};
use crate::replication::messages::RejectReason;

impl StoreNode {
    pub(super) fn on_append(
        &mut self,
        now: u64,
        from: Endpoint,
        mut append: Append,
        out: &mut Vec<StoreCommand>,
    ) {
        if !self.admit_epoch(now, from, append.epoch, out) {
            return;
        }
        if !self.skip_compacted(&mut append) {
            return;
        }
        let prev = append.prev;
        if self.log.epoch_at(prev.index) != Some(prev.epoch) {
            self.reject_mismatch(now, from, &append, out);
            return;
        }
        let last = LogPosition::new(
            append.entries.last().map_or(prev.epoch, |e| e.pos.epoch),
            prev.index + append.entries.len() as u64,
        );
        if !entries_follow(prev, &append.entries) {
            // A malformed message (bug or corruption): drop it, ack nothing.
            tracing::warn!(%prev, "append with non-consecutive entries dropped");
            return;
        }
        let Some(skip) = self.reconcile_overlap(&append.entries) else {
            return;
        };
        self.queue_new_entries(append.epoch, append.entries, skip);
        // Stable only up to what this append proved we share with the master: a
        // divergent tail beyond it must never be marked stable.
        self.learn_stable(append.stable.min(last.index));
        // Also when not joined: an ack claims only what this disk holds
        // now, which is true of a new disk too (join.rs).
        let ack = Message::AppendAck {
            epoch: append.epoch,
            last,
            incarnation: self.incarnation,
        };
        self.queued_replies.push((from, ack));
    }

    /// Check the append's epoch against the promise (I2): refuse a deposed
    /// master (false), else note the master heard and raise the promise to
    /// its epoch.
    fn admit_epoch(
        &mut self,
        now: u64,
        from: Endpoint,
        epoch: u64,
        out: &mut Vec<StoreCommand>,
    ) -> bool {
        if epoch < self.promised {
            // I2: refuse a deposed master, and tell it the epoch that deposed it.
            let reject = Message::AppendReject {
                epoch: self.promised,
                reason: RejectReason::Fenced,
            };
            reply_now(from, reject, out);
            return false;
        }
        self.master_heard_ms = Some(now);
        // A master of a higher epoch exists, so a quorum promised it; raise
        // ours durably before acting on its entries. No candidacy of this
        // epoch can be answered again: it is decided.
        self.raise_promise_to(epoch);
        true
    }

    /// Rebase an append that starts below the log base onto the base: drop
    /// its entries up to it and move `prev` there. False (an anomaly) when
    /// the master disagrees with the compacted entry at the base.
    fn skip_compacted(&mut self, append: &mut Append) -> bool {
        let base = self.log.base();
        if append.prev.index < base.index {
            // Log matching at the base: the entries up to it are stable and
            // compacted, so the master's entries there are ours (I1). Check
            // the one at the base itself if sent, and go on from the base.
            let skip = usize::try_from(base.index - append.prev.index).unwrap_or(usize::MAX);
            if append
                .entries
                .get(skip.saturating_sub(1))
                .is_some_and(|e| e.pos != base)
            {
                tracing::error!(%base, "a master disagrees with a compacted (stable) entry");
                self.anomalies += 1;
                return false;
            }
            append.entries.drain(..skip.min(append.entries.len()));
            append.prev = base;
        }
        true
    }

    /// Reject an append whose `prev` this log does not hold (log matching),
    /// with a hint where to resend from; catch up from a peer store if the
    /// master no longer holds what we lack.
    fn reject_mismatch(
        &mut self,
        now: u64,
        from: Endpoint,
        append: &Append,
        out: &mut Vec<StoreCommand>,
    ) {
        let prev = append.prev;
        let hint = mismatch_hint(
            self.log.last().index,
            self.log.run_start(prev.index),
            prev,
            self.stable,
        );
        let reject = Message::AppendReject {
            epoch: append.epoch,
            reason: RejectReason::Mismatch {
                prev,
                hint,
                incarnation: self.incarnation,
            },
        };
        // The reject promises nothing durable, but a promise op may be queued
        // ahead of it: the ordering keeps "replies follow their ops" simple.
        self.queued_replies.push((from, reject));
        if hint < append.floor {
            // The master no longer holds what we lack (it dropped the
            // log up to `floor` from memory): catch up from a peer store.
            self.catch_up(now, false, out);
        }
    }

    /// How many of `entries` the log already holds; a conflicting suffix
    /// after them is truncated (and the truncation queued). `None` (an
    /// anomaly) when the conflict is at a stable entry: nothing is truncated.
    fn reconcile_overlap(&mut self, entries: &[Entry]) -> Option<usize> {
        // Skip what we already hold (a resend or duplicate); truncate at the first
        // conflict, never at a matching entry, so a stale duplicate of an older
        // append cannot cut off newer entries of the same master.
        let mut skip = 0;
        for entry in entries {
            match self.log.epoch_at(entry.pos.index) {
                Some(epoch) if epoch == entry.pos.epoch => skip += 1,
                Some(_) => {
                    let keep = entry.pos.index - 1;
                    if keep < self.stable {
                        // Stable entries are final (I1): a master that disagrees
                        // with them is broken. Refuse rather than lose them.
                        tracing::error!(
                            keep,
                            stable = self.stable,
                            "refused truncating stable entries"
                        );
                        self.anomalies += 1;
                        return None;
                    }
                    self.log.truncate_after(keep);
                    self.queued_ops.push(DiskOp::TruncateAfter(keep));
                    break;
                }
                None => break,
            }
        }
        Some(skip)
    }

    /// Add the entries after the first `skip` (those held already) to the
    /// log, and queue them for disk as written by `writer_epoch`.
    fn queue_new_entries(&mut self, writer_epoch: u64, entries: Vec<Entry>, skip: usize) {
        let rest: Vec<Entry> = entries.into_iter().skip(skip).collect();
        if !rest.is_empty() {
            for entry in &rest {
                self.log.push(entry.pos);
            }
            self.queued_ops.push(DiskOp::Append {
                writer_epoch,
                entries: rest,
            });
        }
    }

    /// Raise the stable index to `new_stable` (and queue it for disk) if
    /// that is higher.
    fn learn_stable(&mut self, new_stable: u64) {
        if new_stable > self.stable {
            self.stable = new_stable;
            self.queued_ops.push(DiskOp::Stable(new_stable));
        }
    }
}
