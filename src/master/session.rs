//! Per-connection and per-channel state the master keeps: consumers, unacked
//! deliveries, prefetch, confirm and tx modes. None of it is replicated: a
//! failover closes every connection, and unacked messages return to their queues.

use super::inout::{ClientProtocol, ConnId, ConnInfo};
use crate::broker::stream_filter::StreamFilter;
use crate::fastmap::FastMap;
use crate::fifo_map::FifoMap;
use bytes::Bytes;
use stablemq_protocol::{BasicProperties, FieldTable, Publish};
use std::sync::Arc;

/// A logged-in connection.
#[derive(Debug)]
pub struct Session {
    /// Authenticated user.
    pub user: String,
    /// The vhost it opened (shared into every publish event it makes).
    pub vhost: Arc<str>,
    /// Open channels by number.
    pub channels: FastMap<u16, Channel>,
    /// Exclusive queues this connection owns (deleted when it goes).
    pub exclusive_queues: Vec<String>,
    /// Addresses and negotiated settings, for the management API.
    pub info: Box<ConnInfo>,
    /// The master's clock when the connection opened (ms since the epoch),
    /// RabbitMQ's `connected_at`.
    pub connected_at_ms: u64,
}

/// A delivery awaiting ack.
#[derive(Debug, Clone)]
pub struct Unacked {
    /// Queue the message came from (the queue's own shared name: a delivery
    /// copies no string).
    pub queue: Arc<str>,
    /// Message id in that queue.
    pub msg_id: u64,
    /// Consumer that got it (None for basic.get).
    pub consumer_tag: Option<Arc<str>>,
    /// When it was delivered (ms since the epoch), for the consumer timeout.
    pub delivered_at_ms: u64,
}

/// A consumer on a channel.
#[derive(Debug)]
pub struct Consumer {
    /// Queue it consumes from.
    pub queue: String,
    /// Deliveries need no ack.
    pub no_ack: bool,
    /// Per-consumer prefetch limit (0 = none), fixed at basic.consume time.
    pub prefetch: u16,
    /// Unacked deliveries of this consumer.
    pub unacked: u32,
    /// The arguments of basic.consume (`x-priority`, ...), listed by the
    /// management API.
    pub arguments: FieldTable,
    /// A stream consumer's next offset (None: not a stream consumer).
    pub stream_offset: Option<u64>,
    /// A stream consumer's filter (`x-stream-filter`), if it has one.
    pub stream_filter: Option<Arc<StreamFilter>>,
}

/// A publish held back until tx.commit.
#[derive(Debug)]
pub struct HeldPublish {
    /// The method.
    pub publish: Publish,
    /// Properties.
    pub properties: Arc<BasicProperties>,
    /// Body.
    pub body: Bytes,
}

/// An ack, nack or reject held back until tx.commit.
#[derive(Debug, Clone, Copy)]
pub struct HeldAck {
    /// Delivery tag.
    pub tag: u64,
    /// Covers every tag up to `tag`.
    pub multiple: bool,
    /// None = ack; Some(requeue) = nack/reject.
    pub reject: Option<bool>,
    /// basic.nack rather than basic.reject: since RabbitMQ 4.3 a nack with requeue
    /// does not count towards a quorum queue's delivery limit.
    pub is_nack: bool,
}

/// Work buffered in a transaction.
#[derive(Debug, Default)]
pub struct Tx {
    /// Publishes in order.
    pub publishes: Vec<HeldPublish>,
    /// Acks in order.
    pub acks: Vec<HeldAck>,
}

/// An open channel.
#[derive(Debug)]
pub struct Channel {
    /// Next delivery tag to hand out (starts at 1).
    pub next_delivery_tag: u64,
    /// Deliveries awaiting ack, by delivery tag.
    pub unacked: FifoMap<u64, Unacked>,
    /// Consumers by tag.
    pub consumers: FastMap<Arc<str>, Consumer>,
    /// Prefetch given to consumers created from now on (basic.qos global=false).
    pub consumer_prefetch: u16,
    /// Limit on unacked deliveries across the channel (basic.qos global=true; 0 = none).
    pub channel_prefetch: u16,
    /// channel.flow: false stops deliveries.
    pub flow_active: bool,
    /// Confirm mode: the next publish sequence number (None = not in confirm mode).
    pub confirm_next: Option<u64>,
    /// Highest confirm tag sent, to check I5.
    pub last_confirmed: u64,
    /// Transaction buffer (None = not in tx mode).
    pub tx: Option<Tx>,
    /// The consumer tag of this channel's direct reply-to consumer
    /// (`amq.rabbitmq.reply-to`), if any.
    pub reply_consumer: Option<Arc<str>>,
    /// Replies of this channel still waiting for the log; while non-zero, later
    /// methods on the channel are deferred so replies keep their order.
    pub pending_replies: u32,
    /// Methods of this channel deferred (`Completion::Rerun`) and not run yet;
    /// while non-zero, later methods are deferred behind them, so they run
    /// in the order they came.
    pub deferred_inputs: u32,
    /// It has published at least once: RabbitMQ's `rabbitmq_global_publishers`
    /// counts such channels while they are open.
    pub publishing: bool,
    /// The exchange of this channel's last publish that passed the write
    /// permission check, with the access table's generation then: later
    /// publishes to it skip the check (two map lookups and a regex match)
    /// until any access event bumps the generation, so a revoked permission
    /// refuses the very next publish.
    pub write_permitted: Option<(u64, String)>,
    /// The queue of this channel's last queue.declare-ok (server-named or
    /// not, passive or not; empty: none yet): an empty queue name in
    /// queue.bind, unbind, purge, delete, basic.consume and basic.get means
    /// it (AMQP 0-9-1, RabbitMQ's "most recently declared queue").
    pub declared_queue: String,
}

impl Default for Channel {
    fn default() -> Self {
        Channel {
            next_delivery_tag: 1,
            unacked: FifoMap::default(),
            consumers: FastMap::default(),
            consumer_prefetch: 0,
            channel_prefetch: 0,
            flow_active: true,
            confirm_next: None,
            last_confirmed: 0,
            tx: None,
            reply_consumer: None,
            pending_replies: 0,
            deferred_inputs: 0,
            publishing: false,
            write_permitted: None,
            declared_queue: String::new(),
        }
    }
}

impl Channel {
    /// Unacked deliveries that count against the channel limit.
    pub fn unacked_count(&self) -> usize {
        self.unacked.len()
    }

    /// Delivery tags selected by an ack/nack: one tag, or all up to it (`multiple`);
    /// `multiple` with tag 0 means every outstanding tag.
    pub fn select_tags(&self, tag: u64, multiple: bool) -> Option<Vec<u64>> {
        if multiple {
            let upto = if tag == 0 { u64::MAX } else { tag };
            if tag != 0 && !self.unacked.contains_key(&tag) {
                return None;
            }
            // At most one tag per number from the oldest to `upto`: sized
            // once instead of doubling (a reallocation per power of two).
            let first = self.unacked.first().map_or(upto, |(t, _)| *t);
            let bound = upto.saturating_sub(first).saturating_add(1);
            let mut tags = Vec::with_capacity(self.unacked.len().min(bound as usize));
            tags.extend(self.unacked.keys_through(upto));
            Some(tags)
        } else if self.unacked.contains_key(&tag) {
            Some(vec![tag])
        } else {
            None
        }
    }
}

/// Identifies one consumer across the broker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConsumerKey {
    /// Connection.
    pub conn: ConnId,
    /// Channel.
    pub ch: u16,
    /// Consumer tag.
    pub tag: Arc<str>,
    /// `x-priority` of the consumer: higher priorities get messages first.
    pub priority: i64,
}

impl ConsumerKey {
    /// Same consumer (priority aside).
    pub fn is(&self, conn: ConnId, ch: u16, tag: &Arc<str>) -> bool {
        self.conn == conn && self.ch == ch && &self.tag == tag
    }
}

/// The consumers of one queue, in round-robin order.
#[derive(Debug, Default)]
pub struct QueueConsumers {
    /// Consumers in subscription order.
    pub list: Vec<ConsumerKey>,
    /// Index of the consumer to try first next time.
    pub next: usize,
    /// One consumer holds the queue exclusively.
    pub exclusive: bool,
    /// Whether the queue ever had a consumer (auto-delete waits for the first one).
    pub ever_had_consumer: bool,
}

/// Who is connected, and who consumes from what: the master's part that owns
/// every open connection and channel and each queue's consumer list. Handlers
/// that only look up a channel borrow this part alone; none of it is
/// replicated.
#[derive(Debug, Default)]
pub struct Sessions {
    /// Logged-in connections.
    pub(super) conns: FastMap<ConnId, Session>,
    /// Channel incarnation ids, by (conn, ch): a closed and reopened channel
    /// number gets a new one, so what waits for the old one is dropped.
    chan_uids: FastMap<(ConnId, u16), u64>,
    /// The next incarnation id.
    next_chan_uid: u64,
    /// Each queue's consumers, in delivery order.
    pub(super) consumers: FastMap<super::QueueKey, QueueConsumers>,
}

impl Sessions {
    /// A connection's session, if it is open.
    pub fn get(&self, conn: ConnId) -> Option<&Session> {
        self.conns.get(&conn)
    }

    /// The protocol a connection speaks (AMQP 0-9-1 if it is not open).
    pub fn protocol_of(&self, conn: ConnId) -> ClientProtocol {
        self.conns
            .get(&conn)
            .map_or(ClientProtocol::Amqp091, |s| s.info.protocol)
    }

    /// Every open connection.
    pub fn iter(&self) -> impl Iterator<Item = (&ConnId, &Session)> {
        self.conns.iter()
    }

    /// A connection's session, to change.
    pub fn get_mut(&mut self, conn: ConnId) -> Option<&mut Session> {
        self.conns.get_mut(&conn)
    }

    /// An open channel, to change.
    pub fn channel_mut(&mut self, conn: ConnId, ch: u16) -> Option<&mut Channel> {
        self.conns.get_mut(&conn)?.channels.get_mut(&ch)
    }

    /// Open channel `ch` on `conn` with a fresh incarnation id; false when the
    /// connection is not open.
    pub fn open_channel(&mut self, conn: ConnId, ch: u16) -> bool {
        let Some(s) = self.conns.get_mut(&conn) else {
            return false;
        };
        s.channels.insert(ch, Channel::default());
        self.next_chan_uid += 1;
        self.chan_uids.insert((conn, ch), self.next_chan_uid);
        true
    }

    /// Forget channel `ch` of `conn`: its state is returned for cleaning up.
    pub fn remove_channel(&mut self, conn: ConnId, ch: u16) -> Option<(Arc<str>, Channel)> {
        let s = self.conns.get_mut(&conn)?;
        let chan = s.channels.remove(&ch)?;
        self.chan_uids.remove(&(conn, ch));
        Some((s.vhost.clone(), chan))
    }

    /// The current incarnation id of channel `ch` (0 when it is not open).
    pub fn chan_uid(&self, conn: ConnId, ch: u16) -> u64 {
        self.chan_uids.get(&(conn, ch)).copied().unwrap_or(0)
    }

    /// Whether channel `ch` of `conn` is still the incarnation `uid`.
    pub fn is_current(&self, conn: ConnId, ch: u16, uid: u64) -> bool {
        self.chan_uids.get(&(conn, ch)) == Some(&uid)
    }
}
