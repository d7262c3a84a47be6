//! Messages leaving a queue other than by ack: rejection, expiry, length limits and
//! delivery limits, with dead-lettering as RabbitMQ does it.
//!
//! The master decides all of it with its own clock and emits ordinary events
//! (`Published` to the dead-letter exchange, then `Removed`), so replicas never
//! consult their clocks (I4). The copy is published before the removal: a crash
//! between the two duplicates a message rather than losing it.

use super::Master;
use super::session::Unacked;
use crate::broker::event::Event;
use crate::broker::message::Message;
use crate::broker::queue_args::{Overflow, text};
use stablemq_protocol::{
    AMQPValue, BasicProperties, ByteString, FieldArray, FieldTable, LongString, ShortString,
};
use std::collections::BTreeSet;
use std::sync::Arc;

/// How many dead-letter hops one operation may cause.
const MAX_DEAD_LETTER_DEPTH: u32 = 16;

fn longstr(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

fn lookup<'a>(t: &'a FieldTable, k: &str) -> Option<&'a AMQPValue> {
    t.inner().get(k)
}

/// The properties of a dead-lettered copy: `x-death` updated as RabbitMQ does
/// (one entry per queue and reason, newest first, with a count), the
/// `x-first-death-*` and `x-last-death-*` headers, and `expiration` moved into
/// the entry as `original-expiration` so the copy does not expire again.
fn dead_letter_properties(
    msg: &Message,
    queue: &str,
    reason: &str,
    now_ms: u64,
) -> BasicProperties {
    let mut headers = msg.properties.headers().clone().unwrap_or_default();
    let entry = death_entry(msg, &headers, queue, reason, now_ms);
    let mut deaths: Vec<AMQPValue> = match lookup(&headers, "x-death") {
        Some(AMQPValue::FieldArray(a)) => a.as_slice().to_vec(),
        _ => Vec::new(),
    };
    add_death(&mut deaths, entry, queue, reason, now_ms);
    headers.insert(
        "x-death".into(),
        AMQPValue::FieldArray(FieldArray::from(deaths)),
    );
    for (k, v) in [
        ("reason", reason),
        ("queue", queue),
        ("exchange", &*msg.exchange),
    ] {
        let first = ShortString::from(format!("x-first-death-{k}"));
        if !headers.contains_key(first.as_str()) {
            headers.insert(first, longstr(v));
        }
        headers.insert(ShortString::from(format!("x-last-death-{k}")), longstr(v));
    }
    without_expiration(&msg.properties, headers)
}

/// A new `x-death` entry for `msg` dying in `queue` for `reason`.
fn death_entry(
    msg: &Message,
    headers: &FieldTable,
    queue: &str,
    reason: &str,
    now_ms: u64,
) -> FieldTable {
    let mut entry = FieldTable::default();
    entry.insert("count".into(), AMQPValue::LongLongInt(1));
    entry.insert("reason".into(), longstr(reason));
    entry.insert("queue".into(), longstr(queue));
    entry.insert("time".into(), AMQPValue::Timestamp(now_ms / 1000));
    entry.insert("exchange".into(), longstr(&msg.exchange));
    let mut keys = vec![longstr(&msg.routing_key)];
    // CC keys are recorded; BCC keys are secret and never are (RabbitMQ).
    if let Some(AMQPValue::FieldArray(a)) = lookup(headers, "CC") {
        keys.extend(a.as_slice().iter().cloned());
    }
    entry.insert(
        "routing-keys".into(),
        AMQPValue::FieldArray(FieldArray::from(keys)),
    );
    if let Some(exp) = msg.properties.expiration() {
        entry.insert("original-expiration".into(), longstr(exp.as_str()));
    }
    entry
}

/// Put a death first in `deaths`: the entry of the same queue and reason,
/// counted once more and re-timed, or `entry` when there is none.
fn add_death(
    deaths: &mut Vec<AMQPValue>,
    entry: FieldTable,
    queue: &str,
    reason: &str,
    now_ms: u64,
) {
    let same = |v: &AMQPValue| match v {
        AMQPValue::FieldTable(t) => {
            lookup(t, "queue").and_then(text).as_deref() == Some(queue)
                && lookup(t, "reason").and_then(text).as_deref() == Some(reason)
        }
        _ => false,
    };
    if let Some(pos) = deaths.iter().position(same) {
        let mut old = deaths.remove(pos);
        if let AMQPValue::FieldTable(t) = &mut old {
            let count = match lookup(t, "count") {
                Some(AMQPValue::LongLongInt(n)) => *n,
                Some(AMQPValue::LongInt(n)) => i64::from(*n),
                _ => 0,
            };
            t.insert("count".into(), AMQPValue::LongLongInt(count + 1));
            t.insert("time".into(), AMQPValue::Timestamp(now_ms / 1000));
        }
        deaths.insert(0, old);
    } else {
        deaths.insert(0, AMQPValue::FieldTable(entry));
    }
}

/// `p` with `headers` and without its expiration (BasicProperties has no
/// "unset", so it is rebuilt field by field).
fn without_expiration(p: &BasicProperties, headers: FieldTable) -> BasicProperties {
    let mut out = BasicProperties::default().with_headers(headers);
    if let Some(v) = p.content_type() {
        out = out.with_content_type(v.clone());
    }
    if let Some(v) = p.content_encoding() {
        out = out.with_content_encoding(v.clone());
    }
    if let Some(v) = p.delivery_mode() {
        out = out.with_delivery_mode(*v);
    }
    if let Some(v) = p.priority() {
        out = out.with_priority(*v);
    }
    if let Some(v) = p.correlation_id() {
        out = out.with_correlation_id(v.clone());
    }
    if let Some(v) = p.reply_to() {
        out = out.with_reply_to(v.clone());
    }
    if let Some(v) = p.message_id() {
        out = out.with_message_id(v.clone());
    }
    if let Some(v) = p.timestamp() {
        out = out.with_timestamp(*v);
    }
    if let Some(v) = p.kind() {
        out = out.with_type(v.clone());
    }
    if let Some(v) = p.user_id() {
        out = out.with_user_id(v.clone());
    }
    if let Some(v) = p.app_id() {
        out = out.with_app_id(v.clone());
    }
    if let Some(v) = p.cluster_id() {
        out = out.with_cluster_id(v.clone());
    }
    out
}

/// RabbitMQ's cycle rule: a dead-lettered message is dropped for a target queue it
/// already died in, unless a rejection (a client decision) lies on that cycle.
fn is_cycle(props: &BasicProperties, target: &str) -> bool {
    let Some(AMQPValue::FieldArray(deaths)) =
        props.headers().as_ref().and_then(|h| lookup(h, "x-death"))
    else {
        return false;
    };
    // The newest entry is the death being recorded now: a message dead-lettered
    // back to the queue it is leaving is a cycle at once, as in RabbitMQ.
    for d in deaths.as_slice() {
        let AMQPValue::FieldTable(t) = d else {
            return false;
        };
        if lookup(t, "reason").and_then(text).as_deref() == Some("rejected") {
            return false;
        }
        if lookup(t, "queue").and_then(text).as_deref() == Some(target) {
            return true;
        }
    }
    false
}

impl Master {
    /// Publish dead-lettered copies of `msgs` leaving `queue` to its dead-letter
    /// exchange, if it has one that exists (RabbitMQ drops them silently otherwise).
    pub(super) fn dead_letter(&mut self, vhost: &str, queue: &str, msgs: &[Message], reason: &str) {
        if let Some(q) = self.broker.queue(vhost, queue) {
            let has_dlx = q.args.dead_letter_exchange.is_some();
            crate::metrics::dead_lettered(reason, q.args.quorum, has_dlx, msgs.len() as u64);
        }
        // Cycle detection stops loops through x-death; this bound is the backstop for
        // chains it cannot see (each hop re-enters here through enqueue).
        if self.dead_letter_depth >= MAX_DEAD_LETTER_DEPTH {
            tracing::warn!(queue, reason, "dead-letter chain too deep; dropping");
            return;
        }
        self.dead_letter_depth += 1;
        self.dead_letter_inner(vhost, queue, msgs, reason);
        self.dead_letter_depth -= 1;
    }

    fn dead_letter_inner(&mut self, vhost: &str, queue: &str, msgs: &[Message], reason: &str) {
        let Some(q) = self.broker.queue(vhost, queue) else {
            return;
        };
        let Some(dlx) = q.args.dead_letter_exchange.clone() else {
            return;
        };
        let dlrk = q.args.dead_letter_routing_key.clone();
        if self.broker.exchange(vhost, &dlx).is_none() {
            return;
        }
        for msg in msgs {
            let properties = dead_letter_properties(msg, queue, reason, self.now_ms);
            let routing_key = dlrk
                .as_deref()
                .map_or_else(|| msg.routing_key.clone(), ByteString::from);
            let mut targets =
                self.broker
                    .route(vhost, &dlx, &routing_key, properties.headers().as_ref());
            if reason != "rejected" {
                targets.retain(|t| !is_cycle(&properties, t));
            }
            if targets.is_empty() {
                continue;
            }
            self.enqueue(
                &Arc::from(vhost),
                ByteString::from(dlx.as_str()),
                routing_key,
                Arc::new(properties),
                msg.body.clone(),
                targets,
            );
        }
    }

    /// Remove messages (ready or unacked) from a queue, dead-lettering them first when
    /// `reason` is given.
    pub(super) fn remove_messages(
        &mut self,
        vhost: &str,
        queue: &str,
        ids: &[u64],
        reason: Option<&str>,
    ) {
        let Some(q) = self.broker.queue(vhost, queue) else {
            return; // the queue was deleted: nothing to remove
        };
        // Flags come from RAM; contents only when there is somewhere to send
        // them, since a paged-out message is read from disk.
        let (mut found, mut persistent) = (0u64, false);
        for id in ids {
            if let Some(p) = q.is_persistent(*id) {
                found += 1;
                persistent |= p;
            }
        }
        let logged = q.is_logged() && persistent;
        if let Some(reason) = reason {
            if q.args.dead_letter_exchange.is_some() {
                let msgs: Vec<Message> = ids.iter().filter_map(|id| q.message(*id)).collect();
                self.dead_letter(vhost, queue, &msgs, reason);
            } else {
                crate::metrics::dead_lettered(reason, q.args.quorum, false, found);
            }
        }
        self.emit(
            Event::Removed {
                vhost: vhost.to_string(),
                queue: queue.to_string(),
                msg_ids: ids.to_vec(),
            },
            logged,
        );
    }

    /// Return delivered messages to their queue; ones past `x-delivery-limit` are
    /// dead-lettered with reason `delivery_limit` instead.
    pub(super) fn requeue_messages(
        &mut self,
        vhost: &str,
        queue: &str,
        ids: &[u64],
        counted: bool,
    ) {
        let mut over = Vec::new();
        if let Some(q) = self.broker.queue_mut(vhost, queue) {
            for id in ids {
                if let Some(count) = q.requeue(*id, counted)
                    && q.args
                        .effective_delivery_limit()
                        .is_some_and(|limit| u64::from(count) > limit)
                {
                    over.push(*id);
                }
            }
        }
        if !over.is_empty() {
            self.remove_messages(vhost, queue, &over, Some("delivery_limit"));
        }
    }

    /// Requeue a channel's unacked deliveries (channel close, basic.recover), in
    /// delivery order, then deliver again.
    pub(super) fn requeue_unacked(&mut self, vhost: &str, unacked: impl Iterator<Item = Unacked>) {
        let mut touched = BTreeSet::new();
        for u in unacked {
            self.requeue_messages(vhost, &u.queue, &[u.msg_id], true);
            touched.insert(u.queue);
        }
        for q in touched {
            self.try_deliver(vhost, &q);
        }
    }

    /// Drop (dead-letter with `maxlen`) the oldest messages of a queue over its
    /// length limit, for the default `drop-head` overflow (a stream: its
    /// retention, `Master::stream_retention`).
    pub(super) fn enforce_length_limit(&mut self, vhost: &str, queue: &str) {
        let Some(q) = self.broker.queue(vhost, queue) else {
            return;
        };
        if q.stream.is_some() {
            // A stream's limit is its retention: whole segments go.
            return self.stream_retention(vhost, queue);
        }
        if q.args.overflow != Overflow::DropHead || !q.is_over_limit() {
            return;
        }
        let mut bytes = 0u64;
        let mut ids = Vec::new();
        let (len, total) = (q.ready.len() as u64, q.ready_bytes);
        q.ready.visit(|id, body_len, _| {
            let dropped = ids.len() as u64;
            let fits_len = q.args.max_length.is_none_or(|max| len - dropped <= max);
            let fits_bytes = q
                .args
                .max_length_bytes
                .is_none_or(|max| total - bytes <= max);
            if fits_len && fits_bytes {
                return false;
            }
            bytes += body_len;
            ids.push(id);
            true
        });
        self.remove_messages(vhost, queue, &ids, Some("maxlen"));
    }

    /// Remove expired messages from the head of a queue (RabbitMQ expires only at the
    /// head), dead-lettering them with reason `expired`.
    pub(super) fn expire_heads(&mut self, vhost: &str, queue: &str) {
        self.expire_heads_at(vhost, queue, self.now_ms);
    }

    /// Expire heads as if the clock read `now`; `enqueue` passes now + 1 so that a
    /// message with TTL 0 that no consumer took at once goes.
    pub(super) fn expire_heads_at(&mut self, vhost: &str, queue: &str, now: u64) {
        // The head as far as RAM holds it; removing it brings the next part of
        // a paged-out queue into RAM, so this repeats until the head is live.
        loop {
            let Some(q) = self.broker.queue(vhost, queue) else {
                return;
            };
            if q.ready.is_empty() {
                return; // the usual case on the publish path: it was delivered
            }
            let ids: Vec<u64> = q
                .ready
                .head_run()
                .take_while(|m| m.is_expired(now))
                .map(|m| m.msg.id)
                .collect();
            if ids.is_empty() {
                return;
            }
            self.remove_messages(vhost, queue, &ids, Some("expired"));
        }
    }

    /// Note that a queue was used now (for `x-expires`).
    pub(super) fn touch_queue(&mut self, vhost: &str, queue: &str) {
        if self
            .broker
            .queue(vhost, queue)
            .is_some_and(|q| q.args.expires.is_some())
        {
            self.expiry.touch(vhost, queue, self.now_ms);
        }
    }
}
