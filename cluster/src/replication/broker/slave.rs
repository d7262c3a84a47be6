//! A slave following the master: it takes the master's Appends (checking
//! that they continue its log), and, when it lacks entries the master no
//! longer holds in memory, catches up from the stores' stable logs.

use crate::position::{Entry, LogPosition};
use crate::replication::log::{entries_follow, mismatch_hint};
use crate::replication::messages::{Append, Endpoint, Message, RejectReason};

use super::{BrokerCommand, BrokerNode, Role};

impl BrokerNode {
    /// The master's Append (its `floor` was taken by the caller).
    pub(super) fn on_append(
        &mut self,
        now: u64,
        from: Endpoint,
        append: Append,
        out: &mut Vec<BrokerCommand>,
    ) {
        let Append {
            epoch,
            mut prev,
            mut entries,
            stable,
            ..
        } = append;
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

    /// Slave: ask a store (each in turn) for the stable entries after what we
    /// applied. `now_again` skips the rate limit (the previous answer just
    /// arrived and more is wanted).
    pub(super) fn catch_up(&mut self, now: u64, now_again: bool, out: &mut Vec<BrokerCommand>) {
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
    pub(super) fn on_stable_entries(
        &mut self,
        now: u64,
        entries: Vec<Entry>,
        out: &mut Vec<BrokerCommand>,
    ) {
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
}
