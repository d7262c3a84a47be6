//! basic.*, confirm.* and tx.*: publishing, consuming, acks, and delivery.

use super::Master;
use super::io::{ConnId, ToConn};
use super::session::{Consumer, ConsumerKey, HeldAck, HeldPublish, Tx, Unacked};
use crate::broker::event::Event;
use crate::error::{AmqpError, AmqpResult, ReplyCode};
use crate::metrics as m;
use bytes::Bytes;
use stablemq_protocol::methods::{basic as mb, confirm as mc, tx as mt};
use stablemq_protocol::{AMQPClass, BasicProperties};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

impl Master {
    pub(super) fn basic_method(
        &mut self,
        conn: ConnId,
        ch: u16,
        method: mb::AMQPMethod,
    ) -> AmqpResult<()> {
        let vhost = self.vhost_of(conn)?;
        match method {
            mb::AMQPMethod::Qos(q) => {
                let chan = self.chan(conn, ch)?;
                if q.global {
                    chan.channel_prefetch = q.prefetch_count;
                } else {
                    chan.consumer_prefetch = q.prefetch_count;
                }
                let queues = self.channel_queues(conn, ch);
                self.send_method(
                    conn,
                    ch,
                    AMQPClass::Basic(mb::AMQPMethod::QosOk(mb::QosOk {})),
                );
                for q in queues {
                    self.try_deliver(&vhost, &q);
                }
                Ok(())
            }
            mb::AMQPMethod::Consume(c) => self.consume(conn, ch, &vhost, c),
            mb::AMQPMethod::Cancel(c) => {
                let tag: Arc<str> = Arc::from(c.consumer_tag.as_str());
                let removed = self.chan(conn, ch)?.consumers.remove(&tag);
                if !c.nowait {
                    self.send_method(
                        conn,
                        ch,
                        AMQPClass::Basic(mb::AMQPMethod::CancelOk(mb::CancelOk {
                            consumer_tag: c.consumer_tag,
                        })),
                    );
                }
                if let Some(cons) = removed {
                    self.unregister_consumer(&vhost, &cons.queue, conn, ch, &tag);
                }
                Ok(())
            }
            mb::AMQPMethod::Get(g) => self.get(conn, ch, &vhost, g),
            mb::AMQPMethod::Ack(a) => self.ack(
                conn,
                ch,
                &vhost,
                HeldAck {
                    tag: a.delivery_tag,
                    multiple: a.multiple,
                    reject: None,
                },
            ),
            mb::AMQPMethod::Nack(n) => self.ack(
                conn,
                ch,
                &vhost,
                HeldAck {
                    tag: n.delivery_tag,
                    multiple: n.multiple,
                    reject: Some(n.requeue),
                },
            ),
            mb::AMQPMethod::Reject(r) => self.ack(
                conn,
                ch,
                &vhost,
                HeldAck {
                    tag: r.delivery_tag,
                    multiple: false,
                    reject: Some(r.requeue),
                },
            ),
            mb::AMQPMethod::Recover(r) => {
                self.recover_unacked(conn, ch, &vhost, r.requeue)?;
                self.send_method(
                    conn,
                    ch,
                    AMQPClass::Basic(mb::AMQPMethod::RecoverOk(mb::RecoverOk {})),
                );
                Ok(())
            }
            mb::AMQPMethod::RecoverAsync(r) => self.recover_unacked(conn, ch, &vhost, r.requeue),
            other => Err(AmqpError::command_invalid(format!(
                "unexpected basic method {}",
                AMQPClass::Basic(other).get_amqp_method_id()
            ))),
        }
    }

    fn chan(&mut self, conn: ConnId, ch: u16) -> AmqpResult<&mut super::Channel> {
        self.channel_mut(conn, ch).ok_or_else(|| {
            AmqpError::new(ReplyCode::ChannelError, format!("channel {ch} is not open"))
        })
    }

    /// Queues the channel's consumers read from (to retry delivery when capacity frees).
    fn channel_queues(&mut self, conn: ConnId, ch: u16) -> BTreeSet<String> {
        self.channel_mut(conn, ch)
            .map(|c| c.consumers.values().map(|c| c.queue.clone()).collect())
            .unwrap_or_default()
    }

    fn consume(&mut self, conn: ConnId, ch: u16, vhost: &str, c: mb::Consume) -> AmqpResult<()> {
        let queue = c.queue.to_string();
        if self.broker.queue(vhost, &queue).is_none() {
            return Err(AmqpError::no_queue(vhost, &queue));
        }
        self.exclusive_check(conn, vhost, &queue)?;
        let key = (vhost.to_string(), queue.clone());
        if let Some(qc) = self.consumers.get(&key)
            && (qc.exclusive || (c.exclusive && !qc.list.is_empty()))
        {
            return Err(AmqpError::access_refused(format!(
                "queue '{queue}' in vhost '{vhost}' in exclusive use"
            )));
        }
        let tag: Arc<str> = if c.consumer_tag.as_str().is_empty() {
            Arc::from(self.server_name("amq.ctag-"))
        } else {
            Arc::from(c.consumer_tag.as_str())
        };
        let chan = self.chan(conn, ch)?;
        if chan.consumers.contains_key(&tag) {
            return Err(AmqpError::new(
                ReplyCode::NotAllowed,
                format!("attempt to reuse consumer tag '{tag}'"),
            )
            .at_connection());
        }
        let prefetch = chan.consumer_prefetch;
        chan.consumers.insert(
            tag.clone(),
            Consumer {
                queue: queue.clone(),
                no_ack: c.no_ack,
                prefetch,
                unacked: 0,
            },
        );
        let qc = self.consumers.entry(key).or_default();
        qc.list.push(ConsumerKey {
            conn,
            ch,
            tag: tag.clone(),
        });
        qc.exclusive = c.exclusive;
        qc.ever_had_consumer = true;
        if !c.nowait {
            self.send_method(
                conn,
                ch,
                AMQPClass::Basic(mb::AMQPMethod::ConsumeOk(mb::ConsumeOk {
                    consumer_tag: tag.as_ref().into(),
                })),
            );
        }
        self.try_deliver(vhost, &queue);
        Ok(())
    }

    /// Drop a consumer from its queue's round robin (the channel entry is already gone).
    pub(super) fn unregister_consumer(
        &mut self,
        vhost: &str,
        queue: &str,
        conn: ConnId,
        ch: u16,
        tag: &Arc<str>,
    ) {
        let key = (vhost.to_string(), queue.to_string());
        if let Some(qc) = self.consumers.get_mut(&key) {
            qc.list
                .retain(|k| !(k.conn == conn && k.ch == ch && &k.tag == tag));
            if qc.list.is_empty() {
                qc.exclusive = false;
                qc.next = 0;
            } else {
                qc.next %= qc.list.len();
            }
        }
        self.maybe_auto_delete(vhost, queue);
    }

    fn get(&mut self, conn: ConnId, ch: u16, vhost: &str, g: mb::Get) -> AmqpResult<()> {
        let queue = g.queue.to_string();
        if self.broker.queue(vhost, &queue).is_none() {
            return Err(AmqpError::no_queue(vhost, &queue));
        }
        self.exclusive_check(conn, vhost, &queue)?;
        let stable = self.stable;
        let Some(q) = self.broker.queue_mut(vhost, &queue) else {
            return Ok(());
        };
        if q.peek_deliverable(stable).is_none() {
            if !q.ready.is_empty() {
                // The head is not stable yet: answer once it is, rather than say empty.
                if let Some(chan) = self.channel_mut(conn, ch) {
                    chan.pending_replies += 1;
                }
                let index = self.last_appended;
                self.push_waiting(
                    index,
                    conn,
                    ch,
                    super::Completion::Rerun(super::io::Input::Method {
                        conn,
                        ch,
                        method: AMQPClass::Basic(mb::AMQPMethod::Get(g)),
                    }),
                );
                return Ok(());
            }
            self.send_method(
                conn,
                ch,
                AMQPClass::Basic(mb::AMQPMethod::GetEmpty(mb::GetEmpty {})),
            );
            return Ok(());
        }
        let Some(msg) = q.pop() else {
            return Ok(());
        };
        let message_count = q.ready.len() as u32;
        let logged_removal = q.is_logged() && msg.msg.is_persistent();
        let (id, redelivered, content) = (msg.msg.id, msg.redelivered, msg.msg.clone());
        if !g.no_ack {
            q.unacked.insert(id, msg);
        }
        let chan = self.chan(conn, ch)?;
        let tag = chan.next_delivery_tag;
        chan.next_delivery_tag += 1;
        if !g.no_ack {
            chan.unacked.insert(
                tag,
                Unacked {
                    queue: queue.clone(),
                    msg_id: id,
                    consumer_tag: None,
                },
            );
        }
        metrics::counter!(m::DELIVERED_GET).increment(1);
        if redelivered {
            metrics::counter!(m::REDELIVERED).increment(1);
        }
        self.send(
            conn,
            ToConn::GetOk {
                ch,
                delivery_tag: tag,
                redelivered,
                message_count,
                msg: content,
            },
        );
        if g.no_ack {
            self.emit(
                Event::Removed {
                    vhost: vhost.to_string(),
                    queue,
                    msg_ids: vec![id],
                },
                logged_removal,
            );
        }
        Ok(())
    }

    /// ack / nack / reject (or their held form at tx.commit).
    fn ack(&mut self, conn: ConnId, ch: u16, vhost: &str, a: HeldAck) -> AmqpResult<()> {
        let chan = self.chan(conn, ch)?;
        if chan.tx.is_some() {
            // Checked now, applied at commit, as RabbitMQ does.
            if chan.select_tags(a.tag, a.multiple).is_none() {
                return Err(AmqpError::precondition(format!(
                    "unknown delivery tag {}",
                    a.tag
                )));
            }
            if let Some(tx) = chan.tx.as_mut() {
                tx.acks.push(a);
            }
            return Ok(());
        }
        self.apply_ack(conn, ch, vhost, a)
    }

    fn apply_ack(&mut self, conn: ConnId, ch: u16, vhost: &str, a: HeldAck) -> AmqpResult<()> {
        let chan = self.chan(conn, ch)?;
        let Some(tags) = chan.select_tags(a.tag, a.multiple) else {
            return Err(AmqpError::precondition(format!(
                "unknown delivery tag {}",
                a.tag
            )));
        };
        // queue -> message ids, in delivery order
        let mut by_queue: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let mut consumer_queues = BTreeSet::new();
        for t in tags {
            if let Some(u) = chan.unacked.remove(&t) {
                if let Some(ct) = &u.consumer_tag
                    && let Some(c) = chan.consumers.get_mut(ct)
                {
                    c.unacked = c.unacked.saturating_sub(1);
                    consumer_queues.insert(c.queue.clone());
                }
                by_queue.entry(u.queue).or_default().push(u.msg_id);
            }
        }
        for (queue, ids) in by_queue {
            match a.reject {
                Some(true) => {
                    if let Some(q) = self.broker.queue_mut(vhost, &queue) {
                        for id in ids {
                            q.requeue(id);
                        }
                    }
                    consumer_queues.insert(queue);
                }
                _ => {
                    let Some(q) = self.broker.queue(vhost, &queue) else {
                        continue; // the queue was deleted: nothing to remove
                    };
                    let logged = q.is_logged()
                        && ids
                            .iter()
                            .any(|id| q.unacked.get(id).is_some_and(|m| m.msg.is_persistent()));
                    if a.reject.is_none() {
                        metrics::counter!(m::ACKNOWLEDGED).increment(ids.len() as u64);
                    }
                    self.emit(
                        Event::Removed {
                            vhost: vhost.to_string(),
                            queue,
                            msg_ids: ids,
                        },
                        logged,
                    );
                }
            }
        }
        for q in consumer_queues {
            self.try_deliver(vhost, &q);
        }
        Ok(())
    }

    fn recover_unacked(
        &mut self,
        conn: ConnId,
        ch: u16,
        vhost: &str,
        requeue: bool,
    ) -> AmqpResult<()> {
        if !requeue {
            return Err(AmqpError::new(ReplyCode::NotImplemented, "requeue=false"));
        }
        let chan = self.chan(conn, ch)?;
        let unacked = std::mem::take(&mut chan.unacked);
        for c in chan.consumers.values_mut() {
            c.unacked = 0;
        }
        let mut touched = BTreeSet::new();
        for (_, u) in unacked {
            if let Some(q) = self.broker.queue_mut(vhost, &u.queue)
                && q.requeue(u.msg_id)
            {
                touched.insert(u.queue);
            }
        }
        for q in touched {
            self.try_deliver(vhost, &q);
        }
        Ok(())
    }

    pub(super) fn publish(
        &mut self,
        conn: ConnId,
        ch: u16,
        p: mb::Publish,
        properties: BasicProperties,
        body: Bytes,
    ) -> AmqpResult<()> {
        let vhost = self.vhost_of(conn)?;
        let user = self
            .sessions
            .get(&conn)
            .map(|s| s.user.clone())
            .unwrap_or_default();
        if p.immediate {
            return Err(AmqpError::new(ReplyCode::NotImplemented, "immediate=true").on(60, 40));
        }
        let exchange = p.exchange.as_str();
        let Some(x) = self.broker.exchange(&vhost, exchange) else {
            return Err(AmqpError::no_exchange(&vhost, exchange).on(60, 40));
        };
        if x.spec.internal {
            return Err(AmqpError::access_refused(format!(
                "cannot publish to internal exchange '{exchange}' in vhost '{vhost}'"
            ))
            .on(60, 40));
        }
        if let Some(uid) = properties.user_id()
            && uid.as_str() != user
        {
            return Err(AmqpError::precondition(format!(
                "user_id property set to '{}' but authenticated user was '{user}'",
                uid.as_str()
            ))
            .on(60, 40));
        }
        metrics::counter!(m::RECEIVED).increment(1);
        let chan = self.chan(conn, ch)?;
        if let Some(tx) = chan.tx.as_mut() {
            tx.publishes.push(HeldPublish {
                publish: p,
                properties,
                body,
            });
            return Ok(());
        }
        let tag = chan.confirm_next.map(|t| {
            chan.confirm_next = Some(t + 1);
            t
        });
        if tag.is_some() {
            metrics::counter!(m::RECEIVED_CONFIRM).increment(1);
        }
        self.route_and_enqueue(conn, ch, &vhost, p, properties, body);
        if let Some(tag) = tag {
            self.confirm(conn, ch, tag);
        }
        Ok(())
    }

    fn route_and_enqueue(
        &mut self,
        conn: ConnId,
        ch: u16,
        vhost: &str,
        p: mb::Publish,
        properties: BasicProperties,
        body: Bytes,
    ) {
        let exchange = p.exchange.to_string();
        let routing_key = p.routing_key.to_string();
        let queues = self.broker.route(
            vhost,
            &exchange,
            &routing_key,
            properties.headers().as_ref(),
        );
        if queues.is_empty() {
            if p.mandatory {
                metrics::counter!(m::UNROUTABLE_RETURNED).increment(1);
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
                metrics::counter!(m::UNROUTABLE_DROPPED).increment(1);
            }
            return;
        }
        metrics::counter!(m::ROUTED).increment(1);
        let persistent = properties.delivery_mode() == &Some(2);
        let logged = persistent
            && queues
                .iter()
                .any(|q| self.broker.queue(vhost, q).is_some_and(|q| q.is_logged()));
        let msg_id = self.next_msg_id;
        self.next_msg_id += 1;
        let ev = Event::Published {
            vhost: vhost.to_string(),
            exchange,
            routing_key,
            msg_id,
            properties,
            body,
            queues,
        };
        let applied = self.emit(ev, logged);
        for (v, q) in applied.filled {
            self.try_deliver(&v, &q);
        }
    }

    /// Hand ready, stable messages to consumers, round robin, within prefetch limits.
    pub(super) fn try_deliver(&mut self, vhost: &str, queue: &str) {
        let key = (vhost.to_string(), queue.to_string());
        let Some(qc) = self.consumers.get_mut(&key) else {
            return;
        };
        let Some(q) = self.broker.queue_mut(vhost, queue) else {
            return;
        };
        let stable = self.stable;
        let mut auto_acked = Vec::new();
        let mut auto_acked_persistent = false;
        loop {
            if q.peek_deliverable(stable).is_none() {
                if !q.ready.is_empty() {
                    self.stalled.insert(key.clone());
                }
                break;
            }
            let n = qc.list.len();
            let mut chosen = None;
            for i in 0..n {
                let idx = (qc.next + i) % n;
                let ck = &qc.list[idx];
                let Some(chan) = self
                    .sessions
                    .get(&ck.conn)
                    .and_then(|s| s.channels.get(&ck.ch))
                else {
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
                chosen = Some(idx);
                break;
            }
            let Some(idx) = chosen else {
                break;
            };
            qc.next = (idx + 1) % n;
            let Some(msg) = q.pop() else {
                break;
            };
            let ck = qc.list[idx].clone();
            let Some(chan) = self
                .sessions
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
            let (id, redelivered, content) = (msg.msg.id, msg.redelivered, msg.msg.clone());
            if c.no_ack {
                auto_acked_persistent |= content.is_persistent();
                auto_acked.push(id);
                metrics::counter!(m::DELIVERED_AUTO_ACK).increment(1);
            } else {
                c.unacked += 1;
                chan.unacked.insert(
                    tag,
                    Unacked {
                        queue: queue.to_string(),
                        msg_id: id,
                        consumer_tag: Some(ck.tag.clone()),
                    },
                );
                q.unacked.insert(id, msg);
                metrics::counter!(m::DELIVERED_MANUAL_ACK).increment(1);
            }
            metrics::counter!(m::DELIVERED).increment(1);
            if redelivered {
                metrics::counter!(m::REDELIVERED).increment(1);
            }
            self.out.push(super::Output::ToConn(
                ck.conn,
                ToConn::Deliver {
                    ch: ck.ch,
                    consumer_tag: ck.tag,
                    delivery_tag: tag,
                    redelivered,
                    msg: content,
                },
            ));
        }
        if !auto_acked.is_empty() {
            let logged = auto_acked_persistent && q.is_logged();
            self.emit(
                Event::Removed {
                    vhost: vhost.to_string(),
                    queue: queue.to_string(),
                    msg_ids: auto_acked,
                },
                logged,
            );
        }
    }

    pub(super) fn confirm_method(
        &mut self,
        conn: ConnId,
        ch: u16,
        method: mc::AMQPMethod,
    ) -> AmqpResult<()> {
        match method {
            mc::AMQPMethod::Select(s) => {
                let chan = self.chan(conn, ch)?;
                if chan.tx.is_some() {
                    return Err(AmqpError::precondition(
                        "cannot switch from tx to confirm mode",
                    ));
                }
                if chan.confirm_next.is_none() {
                    chan.confirm_next = Some(1);
                }
                if !s.nowait {
                    self.send_method(
                        conn,
                        ch,
                        AMQPClass::Confirm(mc::AMQPMethod::SelectOk(mc::SelectOk {})),
                    );
                }
                Ok(())
            }
            mc::AMQPMethod::SelectOk(_) => {
                Err(AmqpError::command_invalid("unexpected confirm.select-ok"))
            }
        }
    }

    pub(super) fn tx_method(
        &mut self,
        conn: ConnId,
        ch: u16,
        method: mt::AMQPMethod,
    ) -> AmqpResult<()> {
        let vhost = self.vhost_of(conn)?;
        match method {
            mt::AMQPMethod::Select(_) => {
                let chan = self.chan(conn, ch)?;
                if chan.confirm_next.is_some() {
                    return Err(AmqpError::precondition(
                        "cannot switch from confirm to tx mode",
                    ));
                }
                if chan.tx.is_none() {
                    chan.tx = Some(Tx::default());
                }
                self.send_method(
                    conn,
                    ch,
                    AMQPClass::Tx(mt::AMQPMethod::SelectOk(mt::SelectOk {})),
                );
                Ok(())
            }
            mt::AMQPMethod::Commit(_) => {
                let chan = self.chan(conn, ch)?;
                let Some(tx) = chan.tx.take() else {
                    return Err(AmqpError::precondition("channel is not transactional"));
                };
                // Run the held work outside tx mode, then start the next transaction.
                for p in tx.publishes {
                    self.route_and_enqueue(conn, ch, &vhost, p.publish, p.properties, p.body);
                }
                let mut result = Ok(());
                for a in tx.acks {
                    if let Err(e) = self.apply_ack(conn, ch, &vhost, a) {
                        result = Err(e);
                        break;
                    }
                }
                if let Some(chan) = self.channel_mut(conn, ch) {
                    chan.tx = Some(Tx::default());
                }
                result?;
                self.reply(
                    conn,
                    ch,
                    AMQPClass::Tx(mt::AMQPMethod::CommitOk(mt::CommitOk {})),
                );
                Ok(())
            }
            mt::AMQPMethod::Rollback(_) => {
                let chan = self.chan(conn, ch)?;
                if chan.tx.is_none() {
                    return Err(AmqpError::precondition("channel is not transactional"));
                }
                chan.tx = Some(Tx::default());
                self.send_method(
                    conn,
                    ch,
                    AMQPClass::Tx(mt::AMQPMethod::RollbackOk(mt::RollbackOk {})),
                );
                Ok(())
            }
            other => Err(AmqpError::command_invalid(format!(
                "unexpected tx method {}",
                AMQPClass::Tx(other).get_amqp_method_id()
            ))),
        }
    }
}
