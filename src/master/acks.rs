//! basic.ack, basic.nack and basic.reject (or their held form at
//! tx.commit): settling a channel's deliveries, one tag or many, and what
//! settling does to their queues (removed, requeued, dead-lettered; a
//! stream's entries stay).

use super::Master;
use super::inout::{ClientProtocol, ConnId};
use super::session::HeldAck;
use crate::error::{AmqpError, AmqpResult};
use crate::metrics::QueueKind;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

impl Master {
    /// ack / nack / reject (or their held form at tx.commit).
    pub(super) fn ack(&mut self, conn: ConnId, ch: u16, vhost: &str, a: HeldAck) -> AmqpResult<()> {
        if a.reject.is_some() {
            let chan = self.chan(conn, ch)?;
            let queue = match a.multiple {
                false => chan.unacked.get(&a.tag),
                true => chan.unacked.first().map(|(_, u)| u),
            }
            .map(|u| Arc::clone(&u.queue));
            if let Some(q) = queue
                && self.is_stream(vhost, &q)
            {
                return Err(super::stream::not_supported(
                    "basic.nack and basic.reject",
                    vhost,
                    &q,
                ));
            }
        }
        let chan = self.chan(conn, ch)?;
        if chan.tx.is_some() {
            // Checked now, applied at commit, as RabbitMQ does.
            if chan.select_tags(a.tag, a.multiple).is_none() {
                return Err(unknown_tag(a.tag));
            }
            if let Some(tx) = chan.tx.as_mut() {
                tx.acks.push(a);
            }
            return Ok(());
        }
        self.apply_ack(conn, ch, vhost, a)
    }

    pub(super) fn apply_ack(
        &mut self,
        conn: ConnId,
        ch: u16,
        vhost: &str,
        a: HeldAck,
    ) -> AmqpResult<()> {
        let chan = self.chan(conn, ch)?;
        // One tag: not multiple, or multiple reaching only the oldest (a
        // client acking each message with `multiple` set, as the load
        // generator does), or everything (tag 0) when one is outstanding.
        let one = match chan.unacked.first() {
            _ if !a.multiple => Some(a.tag),
            Some((&first, _)) if first == a.tag || (a.tag == 0 && chan.unacked.len() == 1) => {
                Some(first)
            }
            _ => None,
        };
        if let Some(tag) = one {
            return self.apply_ack_one(conn, ch, vhost, tag, a);
        }
        let Some(tags) = chan.select_tags(a.tag, a.multiple) else {
            return Err(unknown_tag(a.tag));
        };
        // queue -> message ids, in delivery order
        let mut by_queue: BTreeMap<Arc<str>, Vec<u64>> = BTreeMap::new();
        let mut consumer_queues = BTreeSet::new();
        let count = tags.len();
        // A run of tags of one consumer (the usual multiple ack) looks the
        // consumer up once, not once per tag.
        let mut run: Option<(Arc<str>, u32)> = None;
        for t in tags {
            if let Some(u) = chan.unacked.remove(&t) {
                if let Some(ct) = u.consumer_tag {
                    match &mut run {
                        Some((tag, n)) if Arc::ptr_eq(tag, &ct) || *tag == ct => *n += 1,
                        _ => {
                            if let Some((tag, n)) = run.replace((ct, 1)) {
                                consumer_acked(&mut chan.consumers, &mut consumer_queues, &tag, n);
                            }
                        }
                    }
                }
                // Sized for every tag at once: usually they all share a queue,
                // and growing by doubling was a reallocation per power of two.
                by_queue
                    .entry(u.queue)
                    .or_insert_with(|| Vec::with_capacity(count))
                    .push(u.msg_id);
            }
        }
        if let Some((tag, n)) = run {
            consumer_acked(&mut chan.consumers, &mut consumer_queues, &tag, n);
        }
        for (queue, ids) in by_queue {
            if self.settle(conn, vhost, &queue, &ids, &a) {
                consumer_queues.insert(queue);
            }
        }
        for q in consumer_queues {
            self.try_deliver(vhost, &q);
        }
        Ok(())
    }

    /// [`Master::apply_ack`] of the one delivery tag `tag`, the common case (a
    /// consumer acking each message): the same effects, in the same order,
    /// without the maps and sets of many tags (five allocations per ack).
    fn apply_ack_one(
        &mut self,
        conn: ConnId,
        ch: u16,
        vhost: &str,
        tag: u64,
        a: HeldAck,
    ) -> AmqpResult<()> {
        let chan = self.chan(conn, ch)?;
        let Some(u) = chan.unacked.remove(&tag) else {
            return Err(unknown_tag(tag));
        };
        let mut consumer_queue = None;
        if let Some(ct) = &u.consumer_tag
            && let Some(c) = chan.consumers.get_mut(ct)
        {
            c.unacked = c.unacked.saturating_sub(1);
            // A consumer's deliveries come from its own queue: share the name.
            consumer_queue = Some(match *u.queue == *c.queue {
                true => Arc::clone(&u.queue),
                false => Arc::<str>::from(c.queue.as_str()),
            });
        }
        let requeued = self.settle(conn, vhost, &u.queue, &[u.msg_id], &a);
        // Delivery is tried per distinct queue, in name order, as for many tags.
        let mut queues = [consumer_queue, requeued.then_some(u.queue)];
        if let [Some(x), Some(y)] = &queues
            && x >= y
        {
            queues.swap(0, 1);
            if queues[0] == queues[1] {
                queues[1] = None;
            }
        }
        for q in queues.into_iter().flatten() {
            self.try_deliver(vhost, &q);
        }
        Ok(())
    }

    /// Ack, reject or requeue `ids` of `queue` as `a` says; whether they went
    /// back to the queue (so it may deliver again).
    fn settle(&mut self, conn: ConnId, vhost: &str, queue: &str, ids: &[u64], a: &HeldAck) -> bool {
        match a.reject {
            Some(true) => {
                self.requeue_messages(vhost, queue, ids, !a.is_nack);
                true
            }
            Some(false) => {
                self.remove_messages(vhost, queue, ids, Some("rejected"));
                false
            }
            None => {
                let (quorum, stream) = self
                    .broker
                    .queue(vhost, queue)
                    .map_or((false, false), |q| (q.args.quorum, q.stream.is_some()));
                // The stream bridge acks what it wrote; rabbitmq_stream
                // counts no acks.
                if self.sessions.protocol_of(conn) == ClientProtocol::Amqp091 {
                    let kind = QueueKind::of(quorum, stream) as usize;
                    self.counters.acknowledged[kind].increment(ids.len() as u64);
                }
                self.stats.acked(vhost, queue, ids.len() as u64);
                // A stream's ack only moves the consumer's credit window.
                if !stream {
                    self.remove_messages(vhost, queue, ids, None);
                }
                false
            }
        }
    }
}

/// What RabbitMQ answers an ack, nack or reject of a tag the channel does not
/// hold (channel error 406).
fn unknown_tag(tag: u64) -> AmqpError {
    AmqpError::precondition(format!("unknown delivery tag {tag}"))
}

/// `n` deliveries of consumer `tag` were settled: its unacked count drops,
/// and its queue is one to deliver to next (looked up before a key is
/// built: one per queue, not per tag).
fn consumer_acked(
    consumers: &mut crate::fastmap::FastMap<Arc<str>, super::session::Consumer>,
    consumer_queues: &mut BTreeSet<Arc<str>>,
    tag: &Arc<str>,
    n: u32,
) {
    if let Some(c) = consumers.get_mut(tag) {
        c.unacked = c.unacked.saturating_sub(n);
        if !consumer_queues.contains(c.queue.as_str()) {
            consumer_queues.insert(Arc::<str>::from(c.queue.as_str()));
        }
    }
}
