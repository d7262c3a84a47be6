//! basic.*, confirm.* and tx.*: consuming, get, recover, confirm mode and
//! transactions (acks are `acks.rs`, publishing `publish.rs`).

use super::Master;
use super::inout::{ConnId, ToConn};
use super::session::{Consumer, ConsumerKey, HeldAck, Tx, Unacked};
use crate::broker::event::Event;
use crate::broker::stream_filter::StreamFilter;
use crate::error::{AmqpError, AmqpResult, ReplyCode};
use crate::metrics::{self as m, QueueKind};
use stablemq_protocol::AMQPClass;
use stablemq_protocol::methods::{basic as mb, confirm as mc, tx as mt};
use std::collections::BTreeSet;
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
                let chan = self.chan(conn, ch)?;
                if chan.reply_consumer.as_ref() == Some(&tag) {
                    chan.reply_consumer = None;
                }
                let removed = chan.consumers.remove(&tag);
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
                    is_nack: false,
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
                    is_nack: true,
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
                    is_nack: false,
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

    pub(super) fn chan(&mut self, conn: ConnId, ch: u16) -> AmqpResult<&mut super::Channel> {
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
        if c.queue.as_str() == super::reply_to::REPLY_TO {
            return self.consume_reply_to(conn, ch, c);
        }
        let queue = self.queue_shortcut(conn, ch, c.queue.as_str())?;
        self.authorize(conn, crate::users::Perm::Read, "queue", &queue)?;
        if self.broker.queue(vhost, &queue).is_none() {
            return Err(AmqpError::no_queue(vhost, &queue));
        }
        self.exclusive_check(conn, vhost, &queue)?;
        let key = (vhost.to_string(), queue.clone());
        if let Some(qc) = self.sessions.consumers.get(&key)
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
        let priority = match c.arguments.inner().get("x-priority") {
            None => 0,
            Some(v) => crate::broker::queue_args::int(v)
                .and_then(|p| i64::try_from(p).ok())
                .ok_or_else(|| {
                    AmqpError::precondition(format!(
                        "invalid arg 'x-priority' for consumer '{tag}': {v:?}"
                    ))
                })?,
        };
        let stream_offset = match self.is_stream(vhost, &queue) {
            true => Some(self.stream_start(conn, ch, vhost, &queue, c.no_ack, &c.arguments)?),
            false => None,
        };
        // A filter is read only for a stream consumer, as RabbitMQ's stream
        // queue type reads it. The stream protocol's subscriptions pass
        // none: they filter whole chunks in the bridge.
        let stream_filter = stream_offset
            .and_then(|_| StreamFilter::from_consume_args(&c.arguments))
            .map(Arc::new);
        let chan = self.chan(conn, ch)?;
        let prefetch = chan.consumer_prefetch;
        chan.consumers.insert(
            tag.clone(),
            Consumer {
                queue: queue.clone(),
                no_ack: c.no_ack,
                prefetch,
                unacked: 0,
                arguments: c.arguments.clone(),
                stream_offset,
                stream_filter,
            },
        );
        let qc = self.sessions.consumers.entry(key).or_default();
        qc.list.push(ConsumerKey {
            conn,
            ch,
            tag: tag.clone(),
            priority,
        });
        qc.exclusive = c.exclusive;
        qc.ever_had_consumer = true;
        self.touch_queue(vhost, &queue);
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
        if let Some(qc) = self.sessions.consumers.get_mut(&key) {
            qc.list.retain(|k| !k.is(conn, ch, tag));
            if qc.list.is_empty() {
                qc.exclusive = false;
                qc.next = 0;
            } else {
                qc.next %= qc.list.len();
            }
        }
        self.maybe_auto_delete(vhost, queue);
    }

    /// basic.get: the head if it is stable, else a deferred retry (I1).
    ///
    /// One piece: like `deliver_round`, it holds the queue and the channel
    /// borrowed together while it moves one message between them.
    fn get(&mut self, conn: ConnId, ch: u16, vhost: &str, g: mb::Get) -> AmqpResult<()> {
        let queue = self.queue_shortcut(conn, ch, g.queue.as_str())?;
        self.authorize(conn, crate::users::Perm::Read, "queue", &queue)?;
        if self.broker.queue(vhost, &queue).is_none() {
            return Err(AmqpError::no_queue(vhost, &queue));
        }
        if self.is_stream(vhost, &queue) {
            return Err(super::stream::not_supported("basic.get", vhost, &queue));
        }
        self.exclusive_check(conn, vhost, &queue)?;
        self.touch_queue(vhost, &queue);
        self.expire_heads(vhost, &queue);
        let stable = self.gate.stable();
        let Some(q) = self.broker.queue_mut(vhost, &queue) else {
            return Ok(());
        };
        let quorum = q.args.quorum;
        if q.peek_deliverable(stable).is_none() {
            if !q.ready.is_empty() {
                // The head is not stable yet: answer once it is, rather than say empty.
                if let Some(chan) = self.channel_mut(conn, ch) {
                    chan.deferred_inputs += 1;
                }
                let index = self.gate.last_appended();
                self.push_waiting(
                    index,
                    conn,
                    ch,
                    super::Completion::Rerun(super::inout::Input::Method {
                        conn,
                        ch,
                        method: AMQPClass::Basic(mb::AMQPMethod::Get(g)),
                    }),
                );
                return Ok(());
            }
            m::global_by_queue(m::GET_EMPTY, QueueKind::of(quorum, false)).increment(1);
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
        let (id, redelivered) = (msg.msg.id, msg.redelivered);
        let content = super::deliver::with_delivery_count(q, &msg);
        if !g.no_ack {
            q.unacked.insert(id, msg);
        }
        let now_ms = self.now_ms;
        let chan = self.chan(conn, ch)?;
        let tag = chan.next_delivery_tag;
        chan.next_delivery_tag += 1;
        if !g.no_ack {
            chan.unacked.insert(
                tag,
                Unacked {
                    queue: queue.as_str().into(),
                    msg_id: id,
                    consumer_tag: None,
                    delivered_at_ms: now_ms,
                },
            );
        }
        let q = QueueKind::of(quorum, false) as usize;
        match g.no_ack {
            true => self.counters.get_auto_ack[q].increment(1),
            false => self.counters.get_manual_ack[q].increment(1),
        }
        self.counters.delivered[q].increment(1);
        self.stats
            .delivered(vhost, &queue, true, g.no_ack, redelivered);
        if redelivered {
            self.counters.redelivered[q].increment(1);
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
        self.requeue_unacked(vhost, unacked.into_values());
        Ok(())
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
                let protocol = self.sessions.protocol_of(conn);
                for held in tx.publishes {
                    self.route_and_enqueue(conn, ch, protocol, &vhost, held);
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
