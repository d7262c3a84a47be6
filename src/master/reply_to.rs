//! Direct reply-to (`amq.rabbitmq.reply-to`): RPC replies that go straight to the
//! requesting channel without a queue, as in RabbitMQ.
//!
//! A channel consumes from the pseudo-queue `amq.rabbitmq.reply-to` (auto-ack
//! only), publishes requests with `reply_to = amq.rabbitmq.reply-to`, and the
//! broker rewrites that to a name that identifies the channel. A reply published
//! to the default exchange with that name as routing key is delivered directly.
//! Nothing is stored or logged: like RabbitMQ, replies are lost if the requester
//! is gone.

use super::Master;
use super::inout::{ConnId, ToConn};
use crate::broker::message::Message;
use crate::error::{AmqpError, AmqpResult};
use bytes::Bytes;
use stablemq_protocol::methods::basic as mb;
use stablemq_protocol::{AMQPClass, ShortString};
use stablemq_protocol::{BasicProperties, ByteString};
use std::sync::Arc;

/// The pseudo-queue name clients consume from and put in `reply_to`.
pub const REPLY_TO: &str = "amq.rabbitmq.reply-to";
/// Prefix of the per-channel names the broker hands out.
pub const REPLY_TO_PREFIX: &str = "amq.rabbitmq.reply-to.";

impl Master {
    /// basic.consume on `amq.rabbitmq.reply-to`.
    pub(super) fn consume_reply_to(
        &mut self,
        conn: ConnId,
        ch: u16,
        c: mb::Consume,
    ) -> AmqpResult<()> {
        if !c.no_ack {
            return Err(AmqpError::precondition("reply consumer cannot acknowledge"));
        }
        let tag: Arc<str> = if c.consumer_tag.as_str().is_empty() {
            Arc::from(self.server_name("amq.ctag-"))
        } else {
            Arc::from(c.consumer_tag.as_str())
        };
        let chan = self.chan(conn, ch)?;
        if chan.reply_consumer.is_some() {
            return Err(AmqpError::precondition("reply consumer already set"));
        }
        chan.reply_consumer = Some(tag.clone());
        if !c.nowait {
            self.send_method(
                conn,
                ch,
                AMQPClass::Basic(mb::AMQPMethod::ConsumeOk(mb::ConsumeOk {
                    consumer_tag: tag.as_ref().into(),
                })),
            );
        }
        Ok(())
    }

    /// A publish with `reply_to = amq.rabbitmq.reply-to` gets the channel's own name.
    pub(super) fn rewrite_reply_to(
        &mut self,
        conn: ConnId,
        ch: u16,
        properties: Arc<BasicProperties>,
    ) -> AmqpResult<Arc<BasicProperties>> {
        if properties
            .reply_to()
            .as_ref()
            .is_none_or(|r| r.as_str() != REPLY_TO)
        {
            return Ok(properties);
        }
        let uid = self.sessions.chan_uid(conn, ch);
        if self.chan(conn, ch)?.reply_consumer.is_none() {
            return Err(AmqpError::precondition("fast reply consumer does not exist").on(60, 40));
        }
        let name = format!("{REPLY_TO_PREFIX}{conn}.{ch}.{uid}");
        Ok(Arc::new(
            Arc::unwrap_or_clone(properties).with_reply_to(ShortString::from(name)),
        ))
    }

    /// Deliver a reply published to the default exchange with a reply-to name.
    /// Returns false when the requester is gone (the reply is dropped, or returned
    /// if mandatory).
    pub(super) fn deliver_reply(
        &mut self,
        routing_key: &ByteString,
        properties: Arc<BasicProperties>,
        body: Bytes,
    ) -> bool {
        let Some(target) = parse(routing_key) else {
            return false;
        };
        let (conn, ch, uid) = target;
        if !self.sessions.is_current(conn, ch, uid) {
            return false;
        }
        let Some(chan) = self.channel_mut(conn, ch) else {
            return false;
        };
        let Some(tag) = chan.reply_consumer.clone() else {
            return false;
        };
        let delivery_tag = chan.next_delivery_tag;
        chan.next_delivery_tag += 1;
        let msg = Message {
            id: 0,
            exchange: ByteString::new(),
            routing_key: routing_key.clone(),
            properties,
            body,
            timestamp_ms: self.now_ms,
        };
        self.send(
            conn,
            ToConn::Deliver {
                ch,
                consumer_tag: tag,
                delivery_tag,
                redelivered: false,
                msg,
            },
        );
        true
    }

    /// Whether a reply-to name still has its consumer (passive queue.declare on it).
    pub(super) fn reply_to_exists(&self, name: &str) -> bool {
        parse(name).is_some_and(|(conn, ch, uid)| {
            self.sessions.is_current(conn, ch, uid)
                && self
                    .sessions
                    .get(conn)
                    .and_then(|s| s.channels.get(&ch))
                    .is_some_and(|c| c.reply_consumer.is_some())
        })
    }
}

fn parse(name: &str) -> Option<(ConnId, u16, u64)> {
    let rest = name.strip_prefix(REPLY_TO_PREFIX)?;
    let mut it = rest.split('.');
    let conn = it.next()?.parse().ok()?;
    let ch = it.next()?.parse().ok()?;
    let uid = it.next()?.parse().ok()?;
    if it.next().is_some() {
        return None;
    }
    Some((conn, ch, uid))
}
