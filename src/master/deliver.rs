//! Delivery: handing stable, unexpired queue heads to consumers.

use super::Master;
use super::inout::{ClientProtocol, ToConn};
use super::session::{QueueConsumers, Session, Unacked};
use crate::broker::event::Event;
use crate::broker::message::{Message, QueuedMessage};
use crate::broker::queue::Queue;
use crate::fastmap::FastMap;
use crate::metrics::QueueKind;
use stablemq_protocol::{AMQPValue, ShortString};
use std::sync::Arc;

/// [`with_delivery_count`] of a message that leaves the queue: moved, not
/// copied, unless the header must be added.
fn into_delivery(q: &Queue, qm: QueuedMessage) -> Message {
    if !counts_deliveries(q, &qm) {
        return qm.msg;
    }
    with_delivery_count(q, &qm)
}

/// Whether `qm` goes out with an `x-delivery-count` header: a quorum queue's
/// message delivered before.
fn counts_deliveries(q: &Queue, qm: &QueuedMessage) -> bool {
    q.args.quorum && qm.delivery_count > 0
}

/// The content to send for `qm`: quorum queues tell consumers how often a message
/// was delivered before in the `x-delivery-count` header.
pub(super) fn with_delivery_count(q: &Queue, qm: &QueuedMessage) -> Message {
    if !counts_deliveries(q, qm) {
        return qm.msg.clone();
    }
    let mut headers = qm.msg.properties.headers().clone().unwrap_or_default();
    headers.insert(
        ShortString::from("x-delivery-count"),
        AMQPValue::LongLongInt(i64::from(qm.delivery_count)),
    );
    Message {
        id: qm.msg.id,
        exchange: qm.msg.exchange.clone(),
        routing_key: qm.msg.routing_key.clone(),
        properties: Arc::new((*qm.msg.properties).clone().with_headers(headers)),
        body: qm.msg.body.clone(),
        timestamp_ms: qm.msg.timestamp_ms,
    }
}

/// Pick the consumer for the next message: among consumers with capacity, the
/// highest `x-priority`, round robin from `qc.next` among equals. With single active
/// consumer only the first consumer is considered.
fn choose(
    qc: &QueueConsumers,
    sessions: &FastMap<u64, Session>,
    single_active: bool,
) -> Option<usize> {
    let n = if single_active {
        qc.list.len().min(1)
    } else {
        qc.list.len()
    };
    let mut best: Option<(usize, i64)> = None;
    for i in 0..n {
        let idx = if single_active { 0 } else { (qc.next + i) % n };
        let ck = &qc.list[idx];
        let Some(chan) = sessions.get(&ck.conn).and_then(|s| s.channels.get(&ck.ch)) else {
            continue;
        };
        let Some(c) = chan.consumers.get(&ck.tag) else {
            continue;
        };
        if !chan.flow_active {
            continue;
        }
        if !c.no_ack {
            if c.prefetch > 0 && c.unacked >= u32::from(c.prefetch) {
                continue;
            }
            if chan.channel_prefetch > 0
                && chan.unacked_count() >= usize::from(chan.channel_prefetch)
            {
                continue;
            }
        }
        if best.is_none_or(|(_, p)| ck.priority > p) {
            best = Some((idx, ck.priority));
        }
    }
    best.map(|(i, _)| i)
}

impl Master {
    /// Hand ready, stable messages to consumers within their prefetch limits.
    /// Expired heads are dead-lettered on the way and never delivered.
    pub(super) fn try_deliver(&mut self, vhost: &str, queue: &str) {
        if let Some(index) = self.deliver_all(vhost, queue) {
            self.gate.stall(vhost, queue, index);
        }
    }

    /// [`Master::try_deliver`] without the bookkeeping: when the queue still
    /// has messages for its consumers that wait for the stable index, the
    /// log index the next of them waits for.
    pub(super) fn deliver_all(&mut self, vhost: &str, queue: &str) -> Option<u64> {
        loop {
            self.expire_heads(vhost, queue);
            match self.deliver_round(vhost, queue) {
                Round::Expired => continue,
                Round::Stalled(index) => return Some(index),
                Round::Done => return None,
            }
        }
    }

    /// Deliver until something stops it, and say what did.
    ///
    /// One piece on purpose: this is the per-message delivery loop, and it
    /// holds the queue, its consumer ring and the chosen channel borrowed at
    /// once (disjoint parts of the master). A helper per step would need them
    /// all passed in, or looked up again for every message.
    fn deliver_round(&mut self, vhost: &str, queue: &str) -> Round {
        let Some(qc) = self
            .sessions
            .consumers
            .get_mut(super::qkey(&(vhost, queue)))
        else {
            return Round::Done;
        };
        let Some(q) = self.broker.queue_mut(vhost, queue) else {
            return Round::Done;
        };
        if q.stream.is_some() {
            // Each stream consumer reads from its own offset.
            return match self.deliver_stream(vhost, queue) {
                Some(index) => Round::Stalled(index),
                None => Round::Done,
            };
        }
        let (stable, now_ms) = (self.gate.stable(), self.now_ms);
        // Auto-acked ids matter only to a logged queue's log: others collect
        // none (an id list per delivery round was an allocation per message).
        let log_auto_acks = q.is_logged();
        let mut auto_acked = Vec::new();
        let mut auto_acked_persistent = false;
        let mut stop = Round::Done;
        let quorum = q.args.quorum;
        loop {
            let Some(head) = q.peek_deliverable(stable) else {
                if let Some(head) = q.head() {
                    stop = Round::Stalled(head.wait_index);
                }
                break;
            };
            if head.is_expired(now_ms) {
                stop = Round::Expired;
                break;
            }
            let Some(idx) = choose(qc, &self.sessions.conns, q.args.single_active_consumer) else {
                break;
            };
            qc.next = (idx + 1) % qc.list.len();
            let Some(msg) = q.pop() else {
                break;
            };
            let ck = qc.list[idx].clone();
            let Some(chan) = self
                .sessions
                .conns
                .get_mut(&ck.conn)
                .and_then(|s| s.channels.get_mut(&ck.ch))
            else {
                break;
            };
            let Some(c) = chan.consumers.get_mut(&ck.tag) else {
                break;
            };
            let tag = chan.next_delivery_tag;
            chan.next_delivery_tag += 1;
            let (id, redelivered) = (msg.msg.id, msg.redelivered);
            let content;
            if c.no_ack {
                content = into_delivery(q, msg);
                if log_auto_acks {
                    auto_acked_persistent |= content.is_persistent();
                    auto_acked.push(id);
                }
            } else {
                content = with_delivery_count(q, &msg);
                c.unacked += 1;
                chan.unacked.insert(
                    tag,
                    Unacked {
                        queue: q.name.clone(),
                        msg_id: id,
                        consumer_tag: Some(ck.tag.clone()),
                        delivered_at_ms: now_ms,
                    },
                );
                q.unacked.insert(id, msg);
            }
            // Stream-protocol clients read streams only (master/stream.rs).
            let kind = QueueKind::of(quorum, false);
            self.counters
                .count_delivery(ClientProtocol::Amqp091, kind, c.no_ack, redelivered);
            self.stats
                .delivered(vhost, queue, false, c.no_ack, redelivered);
            self.out.send(
                ck.conn,
                ToConn::Deliver {
                    ch: ck.ch,
                    consumer_tag: ck.tag,
                    delivery_tag: tag,
                    redelivered,
                    msg: content,
                },
            );
        }
        // An auto-acked message already left the queue (`pop`): the event
        // only matters to the log, so an unlogged one is not built at all.
        if !auto_acked.is_empty() && auto_acked_persistent && q.is_logged() {
            let logged = true;
            self.emit(
                Event::Removed {
                    vhost: vhost.to_string(),
                    queue: queue.to_string(),
                    msg_ids: auto_acked,
                },
                logged,
            );
        }
        stop
    }
}

/// Why a delivery round stopped.
enum Round {
    /// Nothing more to do now: the queue is empty, or no consumer has room.
    Done,
    /// The head expired: expire it, then go on.
    Expired,
    /// The head waits for the stable index to reach this.
    Stalled(u64),
}
