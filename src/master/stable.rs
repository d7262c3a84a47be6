//! Effects a client may observe only once the log holds what they depend
//! on (I1): method replies and publisher confirms wait in the master's
//! `waiting` queue until the stable index reaches their log index, in
//! order, so a channel's replies and confirms keep theirs (I5). A stable
//! index that advances also lets the queues that stalled on unstable
//! messages deliver again.

use super::Master;
use super::inout::{ConnId, Input, ToConn, TrackAnswer};
use super::queue_key::QueueKey;
use crate::broker::event::Event;
use bytes::Bytes;
use stablemq_protocol::AMQPClass;
use std::collections::VecDeque;

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
    /// The answer to a stream tracking query.
    Tracked(TrackAnswer),
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

/// The gate between what the master has done and what a client may see (I1):
/// the master's part that owns the log position (last appended, highest
/// stable) and everything waiting for it. Only this part moves the stable
/// index, and a confirm, a deferred reply or a stalled queue's delivery goes
/// out only when [`StableGate::advance`] passes its index.
#[derive(Debug)]
pub(super) struct StableGate {
    /// Index of the last event appended to the log.
    last_appended: u64,
    /// Highest index known stable.
    stable: u64,
    /// The buffer log entries are encoded into ([`Event::encode_into`]).
    log_arena: bytes::BytesMut,
    /// Replies, confirms and notifications, in log order.
    waiting: VecDeque<Waiting>,
    /// Queues whose head message waits for the stable index.
    /// (A list, in the order they stalled: there are few, and a queue that
    /// stays stalled from one stable index to the next keeps its key, so the
    /// per-message path allocates none.)
    stalled: Vec<QueueKey>,
    /// The other of the two `stalled` buffers, swapped in by `take_stalled`.
    stalled_spare: Vec<QueueKey>,
    /// Keys of queues that stalled lately, kept (a few) for their next stall.
    stalled_keys: Vec<QueueKey>,
    /// See [`StableGate::needed`].
    needed: u64,
}

impl StableGate {
    /// A gate over a log that ends, stably, at `last_index`.
    pub(super) fn new(last_index: u64) -> StableGate {
        StableGate {
            last_appended: last_index,
            stable: last_index,
            log_arena: bytes::BytesMut::new(),
            waiting: VecDeque::new(),
            stalled: Vec::new(),
            stalled_spare: Vec::new(),
            stalled_keys: Vec::new(),
            needed: last_index,
        }
    }

    /// Index of the last appended event.
    pub(super) fn last_appended(&self) -> u64 {
        self.last_appended
    }

    /// Highest stable index seen.
    pub(super) fn stable(&self) -> u64 {
        self.stable
    }

    /// Encode `ev` as the next log entry: its index and its bytes.
    pub(super) fn append(&mut self, ev: &Event) -> (u64, Bytes) {
        self.last_appended += 1;
        (self.last_appended, ev.encode_into(&mut self.log_arena))
    }

    /// Everything appended is stable.
    pub(super) fn settled(&self) -> bool {
        self.stable >= self.last_appended
    }

    /// The highest log index something waits for: a held effect's, or a
    /// stalled queue's next delivery's. Never goes down.
    pub(super) fn needed(&self) -> u64 {
        self.needed
    }

    /// Something waits for `index` to be stable.
    pub(super) fn need(&mut self, index: u64) {
        self.needed = self.needed.max(index);
    }

    /// Everything appended is stable and nothing waits: an effect may go out
    /// now without passing one that waits (I5).
    pub(super) fn clear(&self) -> bool {
        self.settled() && self.waiting.is_empty()
    }

    /// Hold `what` until `index` is stable. `chan_uid` names the channel
    /// incarnation it belongs to.
    pub(super) fn hold(
        &mut self,
        index: u64,
        conn: ConnId,
        ch: u16,
        chan_uid: u64,
        what: Completion,
    ) {
        debug_assert!(self.waiting.back().is_none_or(|w| w.index <= index));
        self.need(index);
        self.waiting.push_back(Waiting {
            index,
            conn,
            ch,
            chan_uid,
            what,
        });
    }

    /// Move the stable index to `index`; false if it is not past the current one.
    pub(super) fn advance(&mut self, index: u64) -> bool {
        if index <= self.stable {
            return false;
        }
        // I1: the store can only report what was appended.
        assert!(
            index <= self.last_appended,
            "I1: stable index {index} beyond last appended {}",
            self.last_appended
        );
        self.stable = index;
        true
    }

    /// The next held effect whose index is stable, in order.
    pub(super) fn next_released(&mut self) -> Option<Waiting> {
        if self.waiting.front().is_some_and(|w| w.index <= self.stable) {
            self.waiting.pop_front()
        } else {
            None
        }
    }

    /// Note that `vhost`/`queue` has a head waiting for the stable index
    /// (unless it is noted already): its next delivery waits for `index`.
    pub(super) fn stall(&mut self, vhost: &str, queue: &str, index: u64) {
        self.need(index);
        if self.is_stalled(vhost, queue) {
            return;
        }
        // A queue stalls at nearly every publish of a logged message and
        // is released at the next stable index: its key is reused.
        let key = match self
            .stalled_keys
            .iter()
            .position(|(v, q)| v == vhost && q == queue)
        {
            Some(i) => self.stalled_keys.swap_remove(i),
            None => (vhost.to_string(), queue.to_string()),
        };
        self.stalled.push(key);
    }

    /// Whether `queue` is on the list of queues waiting for the stable index.
    pub(super) fn is_stalled(&self, vhost: &str, queue: &str) -> bool {
        self.stalled.iter().any(|(v, q)| v == vhost && q == queue)
    }

    /// A deleted queue waits for nothing.
    pub(super) fn forget_queue(&mut self, key: &QueueKey) {
        self.stalled.retain(|k| k != key);
    }

    /// The stalled queues, to try again after the stable index moved; each
    /// goes back through [`StableGate::restall`] or [`StableGate::recycle`].
    pub(super) fn take_stalled(&mut self) -> Vec<QueueKey> {
        let spare = std::mem::take(&mut self.stalled_spare);
        std::mem::replace(&mut self.stalled, spare)
    }

    /// A queue taken by `take_stalled` that still waits.
    pub(super) fn restall(&mut self, key: QueueKey, index: u64) {
        self.need(index);
        self.stalled.push(key);
    }

    /// A queue taken by `take_stalled` that waits no more: its key is kept
    /// (a few) for its next stall.
    pub(super) fn recycle(&mut self, key: QueueKey) {
        if self.stalled_keys.len() < STALLED_KEYS_KEPT {
            self.stalled_keys.push(key);
        }
    }

    /// The emptied buffer of `take_stalled`, kept for the next swap.
    pub(super) fn return_spare(&mut self, spare: Vec<QueueKey>) {
        debug_assert!(spare.is_empty());
        self.stalled_spare = spare;
    }
}

impl Master {
    /// The highest log index a client (or the management API) waits for: a
    /// held reply or confirm, a queue whose next delivery waits for its head,
    /// a management write. The single node's log commits at once only what
    /// something waits for (`LocalLog::append_deferred`): an entry above it,
    /// a consumer's ack say, may wait for the next commit.
    pub fn stable_needed(&self) -> u64 {
        self.gate.needed()
    }

    /// Send a reply once everything appended so far is stable.
    pub(super) fn reply(&mut self, conn: ConnId, ch: u16, method: AMQPClass) {
        if self.gate.settled() {
            self.send(conn, ToConn::Method(ch, method));
        } else if let Some(chan) = self.sessions.channel_mut(conn, ch) {
            chan.pending_replies += 1;
            let index = self.gate.last_appended();
            self.push_waiting(index, conn, ch, Completion::Reply(method));
        }
    }

    /// Answer a stream tracking query once everything appended so far is
    /// stable (the value may come from an event not stable yet, I1).
    pub(super) fn reply_tracked(&mut self, conn: ConnId, ch: u16, value: TrackAnswer) {
        if self.gate.settled() {
            self.send(conn, ToConn::Tracked { ch, value });
        } else if let Some(chan) = self.sessions.channel_mut(conn, ch) {
            chan.pending_replies += 1;
            let index = self.gate.last_appended();
            self.push_waiting(index, conn, ch, Completion::Tracked(value));
        }
    }

    /// Send a publisher confirm once everything appended so far is stable (I5: confirms
    /// of one channel are queued, and so sent, in tag order).
    pub(super) fn confirm(&mut self, conn: ConnId, ch: u16, tag: u64, ack: bool) {
        if self.gate.clear() {
            self.send_confirm(conn, ch, tag, ack);
        } else {
            let index = self.gate.last_appended();
            self.push_waiting(index, conn, ch, Completion::Confirm(tag, ack));
        }
    }

    fn send_confirm(&mut self, conn: ConnId, ch: u16, tag: u64, ack: bool) {
        let Some(session) = self.sessions.conns.get_mut(&conn) else {
            return;
        };
        let protocol = session.info.protocol;
        if let Some(chan) = session.channels.get_mut(&ch) {
            // I5: a channel confirms tag N only after every tag below N.
            debug_assert!(
                tag > chan.last_confirmed,
                "I5: confirm {tag} after {}",
                chan.last_confirmed
            );
            chan.last_confirmed = tag;
            self.counters.of(protocol).confirmed.increment(1);
            self.stats.global.confirm += 1;
            self.out.send(conn, ToConn::Confirm { ch, tag, ack });
        }
    }

    /// Hold `what` for channel `ch` of `conn` until `index` is stable.
    pub(super) fn push_waiting(&mut self, index: u64, conn: ConnId, ch: u16, what: Completion) {
        let chan_uid = self.sessions.chan_uid(conn, ch);
        self.gate.hold(index, conn, ch, chan_uid, what);
    }

    /// Run a deferred method of `conn`'s channel `ch` now that every effect
    /// queued before it is out. Replies still waiting for the channel were
    /// made by methods that came before this one (later ones are deferred
    /// behind it), so it goes back behind them; with none it runs, even if
    /// later methods of the channel are still deferred: they stay behind it.
    fn rerun(&mut self, conn: ConnId, ch: u16, input: Input) {
        let settled = self.gate.settled();
        let Some(chan) = self.sessions.channel_mut(conn, ch) else {
            return;
        };
        chan.deferred_inputs -= 1;
        // A reply waits only for an index past the stable one, so once
        // everything is stable none can be waiting (I1).
        debug_assert!(
            !(settled && chan.pending_replies > 0),
            "{} replies counted as waiting on a settled log",
            chan.pending_replies
        );
        if chan.pending_replies > 0 && !settled {
            chan.deferred_inputs += 1;
            let index = self.gate.last_appended();
            self.push_waiting(index, conn, ch, Completion::Rerun(input));
            return;
        }
        self.channel_input(conn, ch, input);
    }

    /// The log is stable up to `index`: release what waited for it.
    pub(super) fn on_stable(&mut self, index: u64) {
        if !self.gate.advance(index) {
            return;
        }
        metrics::gauge!(crate::metrics::STABLE_INDEX).set(index as f64);
        while let Some(w) = self.gate.next_released() {
            if !self.sessions.is_current(w.conn, w.ch, w.chan_uid) {
                continue; // that channel is gone
            }
            match w.what {
                Completion::Confirm(tag, ack) => self.send_confirm(w.conn, w.ch, tag, ack),
                Completion::Notify(m) => self.send(w.conn, ToConn::Method(w.ch, m)),
                Completion::Reply(m) => {
                    if let Some(chan) = self.sessions.channel_mut(w.conn, w.ch) {
                        chan.pending_replies -= 1;
                    }
                    self.send(w.conn, ToConn::Method(w.ch, m));
                }
                Completion::Rerun(input) => self.rerun(w.conn, w.ch, input),
                Completion::Tracked(value) => {
                    if let Some(chan) = self.sessions.channel_mut(w.conn, w.ch) {
                        chan.pending_replies -= 1;
                    }
                    self.send(w.conn, ToConn::Tracked { ch: w.ch, value });
                }
            }
        }
        self.release_admin();
        let mut stalled = self.gate.take_stalled();
        for key in stalled.drain(..) {
            match self.deliver_all(&key.0, &key.1) {
                Some(index) if !self.gate.is_stalled(&key.0, &key.1) => {
                    self.gate.restall(key, index);
                }
                // Stalled again meanwhile (the key is on the list already).
                Some(index) => {
                    self.gate.need(index);
                    self.gate.recycle(key);
                }
                None => self.gate.recycle(key),
            }
        }
        self.gate.return_spare(stalled);
    }
}
