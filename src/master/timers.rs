//! What the passing of time does: message TTL, queue expiry (`x-expires`), the
//! consumer timeout and a stream's `max-age` while nothing is published to it.
//! Driven by `Input::Tick`; the clock is the master's `now_ms`.

use super::Master;
use super::queue_key::QueueKey;
use crate::error::AmqpError;
use crate::fastmap::FastMap;
use std::collections::HashMap;

use crate::broker::Broker;
use crate::broker::event::Event;
use crate::config::Config;

/// Whether anything in `broker` can expire, so that the tick has to look at
/// its queues: a queue with a message TTL or `x-expires` (declared, or from
/// a policy), or any message at all (one recovered from the log may carry
/// its own `expiration`; telling would mean reading every message, paged
/// ones too). A fresh or drained broker without TTLs needs no look.
pub(super) fn state_may_expire(broker: &Broker) -> bool {
    broker
        .vhosts
        .values()
        .flat_map(|v| v.queues.values())
        .any(|q| {
            q.args.message_ttl.is_some()
                || q.args.expires.is_some()
                || !q.ready.is_empty()
                || !q.unacked.is_empty()
        })
}

/// What may expire and when queues were last used: the master's part the
/// tick reads to decide what time takes away.
#[derive(Debug)]
pub(super) struct Expiry {
    /// Default consumer timeout (ms).
    consumer_timeout_ms: u64,
    /// When queues with `x-expires` were last used (ms).
    last_used: FastMap<QueueKey, u64>,
    /// Whether the tick must look at every queue for expired heads and
    /// unused `x-expires` queues (see [`Master::may_expire`]).
    scan: bool,
    /// How often the tick applies every stream's retention (ms).
    stream_retention_interval_ms: u64,
    /// When the tick last did; `None` until the first tick, which does at
    /// once: a master that starts (or takes over) applies retention as
    /// Osiris's writer does when it opens a stream.
    stream_retention_at: Option<u64>,
}

impl Expiry {
    /// Expiry for a broker state recovered as `broker`.
    pub(super) fn new(config: &Config, broker: &Broker) -> Expiry {
        Expiry {
            consumer_timeout_ms: config.consumer_timeout_ms,
            last_used: FastMap::default(),
            scan: state_may_expire(broker),
            stream_retention_interval_ms: config.stream_retention_interval_ms,
            stream_retention_at: None,
        }
    }

    /// Whether every stream's retention is due at `now` (and if so, it is
    /// counted as done).
    fn stream_retention_due(&mut self, now: u64) -> bool {
        let due = self
            .stream_retention_at
            .is_none_or(|at| now.saturating_sub(at) >= self.stream_retention_interval_ms);
        if due {
            self.stream_retention_at = Some(now);
        }
        due
    }

    /// Before `ev` is applied: switch the scan on for what can expire by
    /// itself. A declared queue is returned, to be looked at once applied
    /// (its arguments then include the policies that match it).
    pub(super) fn note_event(&mut self, ev: &Event) -> Option<(String, String)> {
        if self.scan {
            return None;
        }
        match ev {
            Event::Published { properties, .. } => {
                if properties.expiration().is_some() {
                    self.scan = true;
                }
                None
            }
            Event::QueueDeclared { vhost, name, .. } => Some((vhost.clone(), name.clone())),
            // A policy can give queues a message TTL or `expires`, and
            // clearing one can uncover another that does.
            Event::PolicySet { .. } | Event::PolicyCleared { .. } => {
                self.scan = true;
                None
            }
            _ => None,
        }
    }

    /// After a queue was declared: switch the scan on if it has a message
    /// TTL or `x-expires`.
    pub(super) fn note_declared(&mut self, broker: &Broker, vhost: &str, name: &str) {
        if broker
            .queue(vhost, name)
            .is_some_and(|q| q.args.message_ttl.is_some() || q.args.expires.is_some())
        {
            self.scan = true;
        }
    }

    /// `vhost`/`queue` was used now (a get, a consume, a redeclare).
    pub(super) fn touch(&mut self, vhost: &str, queue: &str, now_ms: u64) {
        self.last_used
            .insert((vhost.to_string(), queue.to_string()), now_ms);
    }

    /// A queue was deleted: its last use goes with it. Kept, it grew with
    /// every `x-expires` queue ever deleted, and a new queue of the same
    /// name inherited it and could expire at its first tick.
    pub(super) fn forget(&mut self, key: &QueueKey) {
        self.last_used.remove(key);
    }
}

impl Master {
    /// Whether the tick looks at every queue for expired heads and unused
    /// `x-expires` queues. That look costs a pass over all queues 20 times a
    /// second (a cache miss or two per queue: with 1000 idle queues it was
    /// most of an idle broker's CPU), so it starts only once something can
    /// expire, and then stays on: a publish with an `expiration`, a queue
    /// whose arguments have a TTL or `x-expires`, any policy change, or a
    /// recovered state that holds either (see `state_may_expire`).
    pub fn may_expire(&self) -> bool {
        self.expiry.scan
    }

    pub(super) fn tick(&mut self) {
        let now = self.now_ms;
        if self.expiry.scan {
            self.expire_by_time(now);
        }
        self.consumer_timeouts(now);
        if self.expiry.stream_retention_due(now) {
            self.every_stream_retention(None);
        }
    }

    /// Message TTL and queue expiry, over every queue.
    fn expire_by_time(&mut self, now: u64) {
        // Message TTL: expired heads leave even when nobody consumes.
        let mut with_expired_head = Vec::new();
        for (vname, v) in &self.broker.vhosts {
            for (qname, q) in &v.queues {
                if q.head().is_some_and(|m| m.is_expired(now)) {
                    with_expired_head.push((vname.clone(), qname.clone()));
                }
            }
        }
        for (v, q) in with_expired_head {
            self.try_deliver(&v, &q);
        }

        // Queue expiry: unused (no consumers, no get, no redeclare) for x-expires ms.
        let mut expired_queues = Vec::new();
        for (vname, v) in &self.broker.vhosts {
            for (qname, q) in &v.queues {
                let Some(ttl) = q.args.expires else {
                    continue;
                };
                let key = (vname.clone(), qname.clone());
                let has_consumers = self
                    .sessions
                    .consumers
                    .get(&key)
                    .is_some_and(|c| !c.list.is_empty());
                let last = *self.expiry.last_used.entry(key.clone()).or_insert(now);
                if !has_consumers && now.saturating_sub(last) >= ttl {
                    expired_queues.push(key);
                }
            }
        }
        for (v, q) in expired_queues {
            self.expiry.last_used.remove(&(v.clone(), q.clone()));
            self.delete_queue(&v, &q);
        }
    }

    /// Consumer timeout: a delivery unacked for too long closes its channel with 406.
    fn consumer_timeouts(&mut self, now: u64) {
        let mut timeouts: HashMap<(u64, u16), u64> = HashMap::new();
        for (conn, s) in &self.sessions.conns {
            for (ch, chan) in &s.channels {
                // Tags grow with time, so the oldest delivery is the first one.
                let Some((_, u)) = chan.unacked.first() else {
                    continue;
                };
                let limit = self
                    .broker
                    .queue(&s.vhost, &u.queue)
                    .and_then(|q| q.args.consumer_timeout)
                    .unwrap_or(self.expiry.consumer_timeout_ms);
                if now.saturating_sub(u.delivered_at_ms) > limit {
                    timeouts.insert((*conn, *ch), limit);
                }
            }
        }
        for ((conn, ch), limit) in timeouts {
            let e = AmqpError::precondition(format!(
                "delivery acknowledgement on channel {ch} timed out. Timeout value used: {limit} ms. This timeout value can be configured, see consumers doc guide to learn more"
            ));
            self.fail(conn, ch, e);
        }
    }
}
