//! What the passing of time does: message TTL, queue expiry (`x-expires`) and the
//! consumer timeout. Driven by `Input::Tick`; the clock is the master's `now_ms`.

use super::Master;
use crate::error::AmqpError;
use std::collections::HashMap;

impl Master {
    pub(super) fn tick(&mut self) {
        let now = self.now_ms;
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
                let has_consumers = self.consumers.get(&key).is_some_and(|c| !c.list.is_empty());
                let last = *self.queue_last_used.entry(key.clone()).or_insert(now);
                if !has_consumers && now.saturating_sub(last) >= ttl {
                    expired_queues.push(key);
                }
            }
        }
        for (v, q) in expired_queues {
            self.queue_last_used.remove(&(v.clone(), q.clone()));
            self.delete_queue(&v, &q);
        }

        // Consumer timeout: a delivery unacked for too long closes its channel with 406.
        let mut timeouts: HashMap<(u64, u16), u64> = HashMap::new();
        for (conn, s) in &self.sessions {
            for (ch, chan) in &s.channels {
                // Tags grow with time, so the oldest delivery is the first one.
                let Some((_, u)) = chan.unacked.first_key_value() else {
                    continue;
                };
                let limit = self
                    .broker
                    .queue(&s.vhost, &u.queue)
                    .and_then(|q| q.args.consumer_timeout)
                    .unwrap_or(self.consumer_timeout_ms);
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
