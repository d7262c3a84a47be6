//! basic.publish: checks, routing, length limits and confirms.

use super::Master;
use super::inout::{ClientProtocol, ConnId, ToConn};
use super::session::HeldPublish;
use crate::broker::QueueList;
use crate::broker::event::{Event, ExchangeKind};
use crate::broker::message::Message;
use crate::broker::queue_args::Overflow;
use crate::broker::queue_args::text;
use crate::error::{AmqpError, AmqpResult, ReplyCode};
use crate::metrics as m;
use bytes::Bytes;
use stablemq_protocol::{AMQPValue, BasicProperties, ByteString, FieldTable, Publish};
use std::sync::Arc;

impl Master {
    pub(super) fn publish(
        &mut self,
        conn: ConnId,
        ch: u16,
        p: Publish,
        properties: Arc<BasicProperties>,
        body: Bytes,
    ) -> AmqpResult<()> {
        let vhost = self.vhost_of(conn)?;
        if p.immediate {
            return Err(AmqpError::new(ReplyCode::NotImplemented, "immediate=true").on(60, 40));
        }
        let exchange = &*p.exchange;
        // Write on the exchange before looking it up, as RabbitMQ does.
        self.authorize_publish(conn, ch, exchange)
            .map_err(|e| e.on(60, 40))?;
        let Some(x) = self.broker.exchange(&vhost, exchange) else {
            return Err(AmqpError::no_exchange(&vhost, exchange).on(60, 40));
        };
        if x.spec.internal {
            return Err(AmqpError::access_refused(format!(
                "cannot publish to internal exchange '{exchange}' in vhost '{vhost}'"
            ))
            .on(60, 40));
        }
        // Topic permissions only apply to topic exchanges: known now, so the
        // usual publish does not look the exchange up a second time.
        let topic = x.spec.kind == ExchangeKind::Topic;
        let user = self
            .sessions
            .get(conn)
            .map(|s| s.user.as_str())
            .unwrap_or_default();
        if let Some(uid) = properties.user_id()
            && uid.as_str() != user
        {
            return Err(AmqpError::precondition(format!(
                "user_id property set to '{}' but authenticated user was '{user}'",
                uid.as_str()
            ))
            .on(60, 40));
        }
        if let Some(e) = properties.expiration()
            && e.as_str().parse::<u64>().is_err()
        {
            return Err(AmqpError::precondition(format!(
                "invalid expiration '{}' for message",
                e.as_str()
            ))
            .on(60, 40));
        }
        if topic {
            self.authorize_topic(
                conn,
                crate::users::Perm::Write,
                &vhost,
                exchange,
                &p.routing_key,
            )
            .map_err(|e| e.on(60, 40))?;
        }
        let properties = self.rewrite_reply_to(conn, ch, properties)?;
        let protocol = self.sessions.protocol_of(conn);
        self.counters.of(protocol).received.increment(1);
        m::observe_message_size(body.len());
        let chan = self.chan(conn, ch)?;
        chan.publishing = true;
        if let Some(tx) = chan.tx.as_mut() {
            tx.publishes.push(HeldPublish {
                publish: p,
                properties,
                body,
            });
            return Ok(());
        }
        let tag = chan.confirm_next;
        if let Some(t) = tag {
            chan.confirm_next = Some(t + 1);
        }
        if tag.is_some() {
            self.counters.of(protocol).received_confirm.increment(1);
        }
        let held = HeldPublish {
            publish: p,
            properties,
            body,
        };
        let accepted = self.route_and_enqueue(conn, ch, protocol, &vhost, held);
        if let Some(tag) = tag {
            self.confirm(conn, ch, tag, accepted);
        }
        Ok(())
    }

    /// Count `n` routings of a message published over `protocol`: for AMQP
    /// 0-9-1 only, as rabbitmq_stream appends to its stream without routing
    /// (its routed counter stays 0).
    fn count_routed(&self, protocol: ClientProtocol, n: u64) {
        if protocol == ClientProtocol::Amqp091 {
            self.counters.of(protocol).routed.increment(n);
        }
    }

    /// Route a message `conn` published over `protocol` and enqueue it.
    /// Returns false when a queue refused it (`x-overflow` reject-publish*),
    /// which a confirming publisher sees as a nack.
    pub(super) fn route_and_enqueue(
        &mut self,
        conn: ConnId,
        ch: u16,
        protocol: ClientProtocol,
        vhost: &Arc<str>,
        held: HeldPublish,
    ) -> bool {
        let HeldPublish {
            publish: p,
            properties,
            body,
        } = held;
        let mandatory = p.mandatory;
        let Publish {
            exchange,
            routing_key,
            ..
        } = p;
        if exchange.is_empty()
            && routing_key.starts_with(super::reply_to::REPLY_TO_PREFIX)
            && self.deliver_reply(&routing_key, properties.clone(), body.clone())
        {
            self.count_routed(protocol, 1);
            return true;
        }
        let (mut queues, properties) =
            self.route_with_cc(vhost, &exchange, &routing_key, properties);
        // Full queues that refuse new messages drop out of the route.
        let mut refused_by = Vec::new();
        queues.retain(|qn| {
            let Some(q) = self.broker.queue(vhost, qn) else {
                return false;
            };
            let refuse =
                q.args.overflow != Overflow::DropHead && q.would_overflow(body.len() as u64);
            if refuse {
                refused_by.push((qn.clone(), q.args.overflow));
            }
            !refuse
        });
        let accepted = refused_by.is_empty();
        if !refused_by.is_empty() {
            let msg = Message {
                id: 0,
                exchange: exchange.clone(),
                routing_key: routing_key.clone(),
                properties: properties.clone(),
                body: body.clone(),
                timestamp_ms: self.now_ms,
            };
            for (qn, overflow) in refused_by {
                if overflow == Overflow::RejectPublishDlx {
                    self.dead_letter(vhost, &qn, std::slice::from_ref(&msg), "maxlen");
                }
            }
            if queues.is_empty() {
                return false;
            }
        }
        if queues.is_empty() {
            self.stats.published(vhost, &exchange, &[]);
            if mandatory {
                m::global(m::UNROUTABLE_RETURNED).increment(1);
                self.stats.global.return_unroutable += 1;
                self.send(
                    conn,
                    ToConn::Return {
                        ch,
                        reply_code: ReplyCode::NoRoute as u16,
                        reply_text: "NO_ROUTE".into(),
                        exchange,
                        routing_key,
                        properties,
                        body,
                    },
                );
            } else {
                self.counters.of(protocol).unroutable_dropped.increment(1);
            }
            return accepted;
        }
        // RabbitMQ counts one per target queue.
        self.count_routed(protocol, queues.len() as u64);
        self.stats.published(vhost, &exchange, &queues);
        self.enqueue(vhost, exchange, routing_key, properties, body, queues);
        accepted
    }

    /// Route by the routing key and, as RabbitMQ's sender-selected distribution does,
    /// by every key in the `CC` and `BCC` headers. `BCC` is removed from the message.
    fn route_with_cc(
        &self,
        vhost: &str,
        exchange: &str,
        routing_key: &str,
        properties: Arc<BasicProperties>,
    ) -> (QueueList, Arc<BasicProperties>) {
        let headers = properties.headers().as_ref();
        let mut queues = self.broker.route(vhost, exchange, routing_key, headers);
        let Some(h) = headers else {
            return (queues, properties);
        };
        let mut extra = Vec::new();
        for name in ["CC", "BCC"] {
            if let Some(AMQPValue::FieldArray(keys)) = h.inner().get(name) {
                extra.extend(keys.as_slice().iter().filter_map(text));
            }
        }
        if extra.is_empty() {
            return (queues, properties);
        }
        for key in extra {
            self.broker
                .route_into(vhost, exchange, &key, headers, &mut queues);
        }
        if h.inner().contains_key("BCC") {
            let mut map = h.inner().clone();
            map.remove("BCC");
            let properties =
                Arc::new(Arc::unwrap_or_clone(properties).with_headers(FieldTable::from(map)));
            return (queues, properties);
        }
        (queues, properties)
    }

    /// Emit the publish event for already-routed `queues`, then deliver, enforce
    /// length limits and expire what must not wait.
    pub(super) fn enqueue(
        &mut self,
        vhost: &Arc<str>,
        exchange: ByteString,
        routing_key: ByteString,
        properties: Arc<BasicProperties>,
        body: Bytes,
        queues: QueueList,
    ) {
        // delivery_mode 2; a dead-lettered copy keeps its original's.
        let persistent = properties.delivery_mode() == &Some(2);
        // A stream keeps every message, persistent or not, as RabbitMQ's do.
        let logged = queues.iter().any(|q| {
            self.broker
                .queue(vhost, q)
                .is_some_and(|q| q.stream.is_some() || (persistent && q.is_logged()))
        });
        let msg_id = self.next_msg_id;
        self.next_msg_id += 1;
        let msg_ttl_zero = crate::broker::message::expiration_ms(&properties) == Some(0);
        let msg = Message {
            id: msg_id,
            exchange,
            routing_key,
            properties,
            body,
            timestamp_ms: self.now_ms,
        };
        let ev = Event::published(vhost.clone(), msg, queues);
        let applied = self.emit(ev, logged);
        for q in applied.filled {
            self.enforce_length_limit(vhost, &q);
            self.try_deliver(vhost, &q);
            // A TTL of 0 means: deliver now or never. Only such a message
            // can need this second pass (a queue's older heads were expired
            // by `try_deliver` already), so others skip its lookups.
            let ttl_zero = msg_ttl_zero
                || self
                    .broker
                    .queue(vhost, &q)
                    .is_some_and(|x| x.args.message_ttl == Some(0));
            if ttl_zero {
                self.expire_heads_at(vhost, &q, self.now_ms + 1);
            }
        }
    }
}
