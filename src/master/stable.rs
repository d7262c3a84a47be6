//! Effects a client may observe only once the log holds what they depend
//! on (I1): method replies and publisher confirms wait in the master's
//! `waiting` queue until the stable index reaches their log index, in
//! order, so a channel's replies and confirms keep theirs (I5). A stable
//! index that advances also lets the queues that stalled on unstable
//! messages deliver again.

use super::Master;
use super::io::{ConnId, Input, ToConn};
use stablemq_protocol::AMQPClass;

/// How many released `stalled` keys the master keeps for reuse.
const STALLED_KEYS_KEPT: usize = 16;

/// An effect that waits for the stable index.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // moved once; boxing would allocate per message
pub(super) enum Completion {
    /// A method reply on a channel (declare-ok, commit-ok, ...).
    Reply(AMQPClass),
    /// A publisher confirm: (tag, ack) where ack=false sends basic.nack.
    Confirm(u64, bool),
    /// A method the broker sends on its own (basic.cancel of a deleted queue's
    /// consumer); unlike `Reply` it does not hold back the channel.
    Notify(AMQPClass),
    /// A method that arrived while earlier replies of its channel were waiting;
    /// it runs once they are sent, so replies keep their order.
    Rerun(Input),
}

#[derive(Debug)]
pub(super) struct Waiting {
    /// Log index that must be stable first.
    pub(super) index: u64,
    pub(super) conn: ConnId,
    pub(super) ch: u16,
    /// Which incarnation of the channel this belongs to (a closed and reopened
    /// channel number must not receive the old one's replies).
    pub(super) chan_uid: u64,
    pub(super) what: Completion,
}

impl Master {
    /// Send a reply once everything appended so far is stable.
    pub(super) fn reply(&mut self, conn: ConnId, ch: u16, method: AMQPClass) {
        if self.stable >= self.last_appended {
            self.send(conn, ToConn::Method(ch, method));
        } else if let Some(chan) = self.channel_mut(conn, ch) {
            chan.pending_replies += 1;
            let index = self.last_appended;
            self.push_waiting(index, conn, ch, Completion::Reply(method));
        }
    }

    /// Send a publisher confirm once everything appended so far is stable (I5: confirms
    /// of one channel are queued, and so sent, in tag order).
    pub(super) fn confirm(&mut self, conn: ConnId, ch: u16, tag: u64, ack: bool) {
        if self.stable >= self.last_appended && self.waiting.is_empty() {
            self.send_confirm(conn, ch, tag, ack);
        } else {
            let index = self.last_appended;
            self.push_waiting(index, conn, ch, Completion::Confirm(tag, ack));
        }
    }

    fn send_confirm(&mut self, conn: ConnId, ch: u16, tag: u64, ack: bool) {
        if let Some(chan) = self.channel_mut(conn, ch) {
            // I5: a channel confirms tag N only after every tag below N.
            debug_assert!(
                tag > chan.last_confirmed,
                "I5: confirm {tag} after {}",
                chan.last_confirmed
            );
            chan.last_confirmed = tag;
            self.counters.confirmed.increment(1);
            self.stats.global.confirm += 1;
            self.send(conn, ToConn::Confirm { ch, tag, ack });
        }
    }

    pub(super) fn push_waiting(&mut self, index: u64, conn: ConnId, ch: u16, what: Completion) {
        let chan_uid = self.chan_uids.get(&(conn, ch)).copied().unwrap_or(0);
        debug_assert!(self.waiting.back().is_none_or(|w| w.index <= index));
        self.waiting.push_back(Waiting {
            index,
            conn,
            ch,
            chan_uid,
            what,
        });
    }

    pub(super) fn on_stable(&mut self, index: u64) {
        if index <= self.stable {
            return;
        }
        // I1: the store can only report what was appended.
        assert!(
            index <= self.last_appended,
            "I1: stable index {index} beyond last appended {}",
            self.last_appended
        );
        self.stable = index;
        metrics::gauge!(crate::metrics::STABLE_INDEX).set(index as f64);
        while self.waiting.front().is_some_and(|w| w.index <= self.stable) {
            let Some(w) = self.waiting.pop_front() else {
                break;
            };
            if self.chan_uids.get(&(w.conn, w.ch)) != Some(&w.chan_uid) {
                continue; // that channel is gone
            }
            match w.what {
                Completion::Confirm(tag, ack) => self.send_confirm(w.conn, w.ch, tag, ack),
                Completion::Notify(m) => self.send(w.conn, ToConn::Method(w.ch, m)),
                Completion::Reply(m) => {
                    if let Some(chan) = self.channel_mut(w.conn, w.ch) {
                        chan.pending_replies -= 1;
                    }
                    self.send(w.conn, ToConn::Method(w.ch, m));
                }
                Completion::Rerun(input) => {
                    if let Some(chan) = self.channel_mut(w.conn, w.ch) {
                        chan.pending_replies -= 1;
                    }
                    self.handle(input);
                }
            }
        }
        self.release_admin();
        let spare = std::mem::take(&mut self.stalled_spare);
        let mut stalled = std::mem::replace(&mut self.stalled, spare);
        for key in stalled.drain(..) {
            if self.deliver_all(&key.0, &key.1) && !self.is_stalled(&key.0, &key.1) {
                self.stalled.push(key);
            } else if self.stalled_keys.len() < STALLED_KEYS_KEPT {
                self.stalled_keys.push(key);
            }
        }
        self.stalled_spare = stalled;
    }
}
