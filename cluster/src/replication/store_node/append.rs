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
        append: Append,
        out: &mut Vec<StoreCommand>,
    ) {
        let Append {
            epoch,
            mut prev,
            mut entries,
            stable,
            floor,
        } = append;
        if epoch < self.promised {
            // I2: refuse a deposed master, and tell it the epoch that deposed it.
            let reject = Message::AppendReject {
                epoch: self.promised,
                reason: RejectReason::Fenced,
            };
            reply_now(from, reject, out);
            return;
        }
        self.master_heard_ms = Some(now);
        if epoch > self.promised {
            // A master of a higher epoch exists, so a quorum promised it; raise
            // ours durably before acting on its entries. No candidacy of this
            // epoch can be answered again: it is decided.
            self.promised = epoch;
            self.promised_to = None;
            self.queued_ops.push(DiskOp::Promise(epoch));
        }
        let base = self.log.base();
        if prev.index < base.index {
            // Log matching at the base: the entries up to it are stable and
            // compacted, so the master's entries there are ours (I1). Check
            // the one at the base itself if sent, and go on from the base.
            let skip = usize::try_from(base.index - prev.index).unwrap_or(usize::MAX);
            if entries
                .get(skip.saturating_sub(1))
                .is_some_and(|e| e.pos != base)
            {
                tracing::error!(%base, "a master disagrees with a compacted (stable) entry");
                self.anomalies += 1;
                return;
            }
            entries.drain(..skip.min(entries.len()));
            prev = base;
        }
        if self.log.epoch_at(prev.index) != Some(prev.epoch) {
            let hint = mismatch_hint(
                self.log.last().index,
                self.log.run_start(prev.index),
                prev,
                self.stable,
            );
            let reject = Message::AppendReject {
                epoch,
                reason: RejectReason::Mismatch {
                    prev,
                    hint,
                    incarnation: self.incarnation,
                },
            };
            // The reject promises nothing durable, but a promise op may be queued
            // ahead of it: the ordering keeps "replies follow their ops" simple.
            self.queued_replies.push((from, reject));
            if hint < floor {
                // The master no longer holds what we lack (it dropped the
                // log up to `floor` from memory): catch up from a peer store.
                self.catch_up(now, false, out);
            }
            return;
        }
        let last = LogPosition::new(
            entries.last().map_or(prev.epoch, |e| e.pos.epoch),
            prev.index + entries.len() as u64,
        );
        if !entries_follow(prev, &entries) {
            // A malformed message (bug or corruption): drop it, ack nothing.
            tracing::warn!(%prev, "append with non-consecutive entries dropped");
            return;
        }
        // Skip what we already hold (a resend or duplicate); truncate at the first
        // conflict, never at a matching entry, so a stale duplicate of an older
        // append cannot cut off newer entries of the same master.
        let mut skip = 0;
        for entry in &entries {
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
                        return;
                    }
                    self.log.truncate_after(keep);
                    self.queued_ops.push(DiskOp::TruncateAfter(keep));
                    break;
                }
                None => break,
            }
        }
        let rest: Vec<Entry> = entries.into_iter().skip(skip).collect();
        if !rest.is_empty() {
            for entry in &rest {
                self.log.push(entry.pos);
            }
            self.queued_ops.push(DiskOp::Append {
                writer_epoch: epoch,
                entries: rest,
            });
        }
        // Stable only up to what this append proved we share with the master: a
        // divergent tail beyond it must never be marked stable.
        let new_stable = stable.min(last.index);
        if new_stable > self.stable {
            self.stable = new_stable;
            self.queued_ops.push(DiskOp::Stable(new_stable));
        }
        // Also when not joined: an ack claims only what this disk holds
        // now, which is true of a new disk too (join.rs).
        let ack = Message::AppendAck {
            epoch,
            last,
            incarnation: self.incarnation,
        };
        self.queued_replies.push((from, ack));
    }
}
