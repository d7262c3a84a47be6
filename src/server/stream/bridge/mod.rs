//! The stream protocol spoken to the master in AMQP 0-9-1 terms.
//!
//! A stream connection is, to the master, one more AMQP connection: it opens
//! the virtual host with `Input::Open`, runs its requests on channels and gets
//! `ToConn` answers back. That is what lets a stream-protocol publish or read
//! get, unchanged, everything an AMQP one has: permissions, the event log and
//! its quorum (a confirm is sent only for stable entries, I1), replication,
//! failover, retention, and the same stream from both protocols.
//!
//! The channels of one stream connection:
//! - [`CONTROL`]: requests answered by the master one at a time, in order
//!   (create and delete stream, declare publisher and metadata as passive
//!   declares; create and delete super stream as a sequence of declares,
//!   binds and deletes). A refusal closes the channel; it is opened again for the next
//!   request.
//! - [`PUBLISH`]: every publisher's messages, with publisher confirms; each
//!   delivery tag remembers its publisher and publishing id.
//! - one per subscription (from [`FIRST_SUBSCRIPTION`]): basic.qos, then
//!   basic.consume with `x-stream-offset` and `RECORDS_ARG`. The master
//!   sends the entries of each visit of the stream as records in one
//!   `ToConn::StreamRecords` (an AMQP delivery per entry, as before
//!   2026-12-05, cost 30-45% more CPU per read: docs/streams.md). They are
//!   packed into chunks
//!   of consecutive offsets; a chunk's messages are acked (which moves the
//!   consumer's window, it removes nothing) once the connection has written
//!   it, so at most a prefetch of messages waits for the client's credit.
//!   A single active consumer's channel consumes only while the master's
//!   group makes it the active one (`single_active`).
//!
//! Sans-IO: every call takes what happened and appends what to send to the
//! master and to the stream connection. What it is not: the stream
//! protocol's state (`StreamConnection` owns it), or storage (the master's).

mod control;
mod publish;
mod single_active;
mod subscribe;
mod super_stream;

pub(super) use control::start_at;
use control::{ControlOp, Outcome, stream_code};
use publish::{Deduplicated, Unconfirmed};
use subscribe::Subscription;
pub(super) use subscribe::{Packed, pack, ready_len, stored_chunks};

use super::record;
use crate::broker::event::Tracking;
use crate::broker::stream_record::ChunkMark;
use crate::error::{AmqpError, ReplyCode};
use crate::master::inout::{ConnId, Input, ToConn, TrackAnswer, TrackOp};
use bytes::Bytes;
use stablemq_protocol::methods::{basic, channel, confirm, exchange, queue};
use stablemq_protocol::stream::conn::{self as sc, Reply, Request};
use stablemq_protocol::stream::{
    Broker, ChunkBuilder, Entry, OffsetSpec, PublishedMessage, PublishingError, ResponseCode,
    StreamMetadata,
};
use stablemq_protocol::{AMQPClass, AMQPValue, BasicProperties, FieldTable, Publish, ShortString};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

/// The channel of requests (create, delete, declare publisher, metadata).
pub(super) const CONTROL: u16 = 1;
/// The channel every publisher of the connection publishes on.
pub(super) const PUBLISH: u16 = 2;
/// The first channel a subscription may get.
pub(super) const FIRST_SUBSCRIPTION: u16 = 3;
/// Messages a subscription may have delivered and not yet written.
const PREFETCH: u16 = 2000;
/// Records per chunk at most.
const CHUNK_RECORDS: usize = 1000;
/// A chunk's data at most when the client set no frame_max.
const CHUNK_BYTES: usize = 1 << 20;

/// Where the stream protocol's clients should connect, as the metadata
/// answer tells them: the brokers, the leader of every stream (this node: it
/// is the master) and the replicas (the other broker nodes of a cluster).
#[derive(Debug, Clone)]
pub(super) struct Advertised {
    /// Every broker, by reference.
    pub(super) brokers: Vec<Broker>,
    /// This node's reference.
    pub(super) leader: u16,
}

impl Advertised {
    /// A single node: the listener the client dialed (plain or TLS) is the
    /// one broker, leader of every stream.
    pub(super) fn this_listener(local: std::net::SocketAddr) -> Advertised {
        Advertised {
            brokers: vec![Broker {
                reference: 0,
                host: local.ip().to_string(),
                port: u32::from(local.port()),
            }],
            leader: 0,
        }
    }
}

/// The stream connection's side of the master.
#[derive(Debug)]
pub(super) struct Bridge {
    conn: ConnId,
    advertised: Advertised,
    /// The master accepted the virtual host.
    opened: bool,
    control_open: bool,
    ops: VecDeque<ControlOp>,
    /// The op whose answer is awaited on the control channel.
    current: Option<ControlOp>,
    publish_open: bool,
    next_tag: u64,
    unconfirmed: BTreeMap<u64, Unconfirmed>,
    /// One shared properties value for every record published here that
    /// continues a chunk (one that starts a chunk carries its count).
    record_properties: Arc<BasicProperties>,
    /// Records of the current publish frame stored so far, and in all: the
    /// first, and every `STORED_CHUNK_RECORDS`th after it, starts a chunk.
    frame_records: usize,
    frame_total: usize,
    subs: HashMap<u8, Subscription>,
    /// Publishers declared with a reference.
    dedup: HashMap<u8, Deduplicated>,
    /// Subscription by channel.
    channels: HashMap<u16, u8>,
    /// Channels closed by us whose close-ok has not come yet.
    closing: HashSet<u16>,
    /// Confirms and errors of this pass, by publisher, sent at `flush`.
    confirms: BTreeMap<u8, Vec<u64>>,
    errors: BTreeMap<u8, Vec<PublishingError>>,
    /// A resource alarm is in effect (memory or disk): new publishers are
    /// refused, and the task stops reading a publishing client's socket.
    alarm: bool,
}

impl Bridge {
    pub(super) fn new(conn: ConnId, advertised: Advertised) -> Bridge {
        Bridge {
            conn,
            advertised,
            opened: false,
            control_open: false,
            ops: VecDeque::new(),
            current: None,
            publish_open: false,
            next_tag: 1,
            unconfirmed: BTreeMap::new(),
            record_properties: Arc::new(record::properties(None, None, None, None)),
            frame_records: 0,
            frame_total: 0,
            subs: HashMap::new(),
            dedup: HashMap::new(),
            channels: HashMap::new(),
            closing: HashSet::new(),
            confirms: BTreeMap::new(),
            errors: BTreeMap::new(),
            alarm: false,
        }
    }

    /// Whether a resource alarm is in effect. As RabbitMQ's stream reader
    /// does for a disk alarm, the task then reads nothing more from the
    /// socket of a connection with publishers until it clears (deliveries
    /// and confirms still go out). RabbitMQ leaves stream connections alone
    /// during a memory alarm, because Osiris writes to disk; StableMQ's
    /// entries pass through the master's RAM, so it blocks for both, as it
    /// blocks AMQP 0-9-1 publishers.
    pub(super) fn alarmed(&self) -> bool {
        self.alarm
    }

    /// Carry out one of the connection's actions that concerns the master
    /// (the caller handles writes, authentication and close).
    pub(super) fn on_action(
        &mut self,
        action: sc::Action,
        master: &mut Vec<Input>,
        conn: &mut Vec<sc::Input>,
    ) {
        match action {
            sc::Action::Request {
                correlation_id,
                request,
            } => self.on_request(correlation_id, request, master, conn),
            sc::Action::Publish {
                publisher_id,
                stream,
                messages,
                ..
            } => self.on_publish(publisher_id, &stream, messages, master),
            sc::Action::DeletePublisher { publisher_id, .. } => {
                self.dedup.remove(&publisher_id);
            }
            sc::Action::StoreOffset {
                reference,
                stream,
                offset,
            } => self.store_offset(reference, stream, offset, master),
            sc::Action::Unsubscribe {
                subscription_id, ..
            } => self.unsubscribe(subscription_id, master),
            sc::Action::ConsumerUpdateAnswered {
                subscription_id,
                code,
                offset,
            } => self.on_consumer_update_answered(subscription_id, code, offset, master),
            sc::Action::WriteChunk { head, .. } => self.ack_written_chunk(&head, master),
            sc::Action::Credit {
                subscription_id,
                credit,
            } => {
                if let Some(s) = self.subs.get_mut(&subscription_id) {
                    s.credit = s.credit.saturating_add(u32::from(credit));
                }
            }
            _ => {}
        }
    }

    /// A publish frame's messages: each stored, or confirmed at once if its
    /// publisher already published its publishing id.
    fn on_publish(
        &mut self,
        publisher_id: u8,
        stream: &Arc<str>,
        messages: Vec<PublishedMessage>,
        master: &mut Vec<Input>,
    ) {
        let mut stored = Vec::with_capacity(messages.len());
        for m in messages {
            // Compared with every id before it, those of this frame too: a
            // frame may repeat ids (a client's batch of two sends of the
            // same messages), and Osiris keeps only the first.
            let duplicate = self
                .dedup
                .get(&publisher_id)
                .is_some_and(|d| d.last.is_some_and(|last| m.publishing_id <= last));
            if duplicate {
                // A duplicate: confirmed, not stored (RabbitMQ).
                self.confirms
                    .entry(publisher_id)
                    .or_default()
                    .push(m.publishing_id);
                continue;
            }
            let records = publish::entry_records(m.entry);
            if records.is_empty() {
                // Refused, so not published: the sequence stays where it
                // was, and a resend of the id is taken (it would be
                // confirmed unstored otherwise).
                self.errors
                    .entry(publisher_id)
                    .or_default()
                    .push(PublishingError {
                        publishing_id: m.publishing_id,
                        code: ResponseCode::InternalError,
                    });
            } else {
                if let Some(d) = self.dedup.get_mut(&publisher_id) {
                    d.last = Some(m.publishing_id);
                }
                stored.push((m.publishing_id, m.filter_value, records));
            }
        }
        self.frame_records = 0;
        self.frame_total = stored.iter().map(|(_, _, r)| r.len()).sum();
        for (publishing_id, filter_value, records) in stored {
            let message = publish::Message {
                publishing_id,
                filter_value: filter_value.as_deref(),
                records,
            };
            self.publish(publisher_id, stream, message, master);
        }
        // No sequence event: each message's last record carries its
        // publishing id, logged with it (`record::properties`).
    }

    /// A consumer's offset, stored through the control channel.
    fn store_offset(
        &mut self,
        reference: String,
        stream: String,
        offset: u64,
        master: &mut Vec<Input>,
    ) {
        self.ensure_control(master);
        master.push(Input::StreamTrack {
            conn: self.conn,
            ch: CONTROL,
            op: TrackOp::Store {
                stream,
                kind: Tracking::Offset,
                reference,
                value: offset,
            },
        });
    }

    /// The client ended a subscription: close its channel.
    fn unsubscribe(&mut self, subscription_id: u8, master: &mut Vec<Input>) {
        if let Some(s) = self.subs.remove(&subscription_id) {
            self.close_subscription_channel(s.channel, master);
            self.leave_group(subscription_id, &s, master);
        }
    }

    /// A chunk was written: ack its messages (up to its last delivery tag),
    /// which moves its subscription's window (unless its channel was
    /// closed since: a single active consumer that gave way).
    fn ack_written_chunk(&mut self, head: &[u8], master: &mut Vec<Input>) {
        // The deliver frame's subscription id follows its size, key
        // and version.
        if let Some(&id) = head.get(8)
            && let Some(s) = self.subs.get_mut(&id)
            && let Some((ch, tag)) = s.in_flight.pop_front()
            && ch == s.channel
        {
            master.push(ack(self.conn, s.channel, tag, true));
        }
    }

    /// What the master sent this connection.
    pub(super) fn on_master(
        &mut self,
        m: ToConn,
        master: &mut Vec<Input>,
        conn: &mut Vec<sc::Input>,
    ) {
        match m {
            ToConn::Opened => {
                self.opened = true;
                conn.push(sc::Input::VhostOpened(true))
            }
            ToConn::Method(
                CONTROL,
                AMQPClass::Queue(
                    queue::AMQPMethod::DeclareOk(_)
                    | queue::AMQPMethod::DeleteOk(_)
                    | queue::AMQPMethod::BindOk(_),
                )
                | AMQPClass::Exchange(
                    exchange::AMQPMethod::DeclareOk(_) | exchange::AMQPMethod::DeleteOk(_),
                ),
            ) => self.on_control(Outcome::Done, master, conn),
            ToConn::Tracked { ch: CONTROL, value } => {
                self.on_control(Outcome::Tracked(value), master, conn)
            }
            ToConn::CloseChannel(CONTROL, e) => {
                self.control_open = false;
                self.on_control(Outcome::Refused(&e), master, conn)
            }
            ToConn::Confirm {
                ch: PUBLISH,
                tag,
                ack,
            } => self.on_confirm(tag, ack),
            ToConn::Return {
                ch: PUBLISH,
                routing_key,
                ..
            } => self.on_return(&routing_key),
            ToConn::CloseChannel(PUBLISH, _) => self.on_publish_closed(),
            ToConn::CloseConnection(e) if !self.opened => {
                tracing::info!(conn = self.conn, "stream open refused: {}", e.reply_text());
                conn.push(sc::Input::VhostOpened(false))
            }
            // An operator's close (the management API's DELETE, a deleted
            // user or vhost): RabbitMQ's stream reader drops the socket
            // without a close frame, and the js client, which cannot read a
            // close the server starts, relies on that.
            ToConn::CloseConnection(e) if e.code == ReplyCode::ConnectionForced => {
                conn.push(sc::Input::Abort)
            }
            ToConn::CloseConnection(e) => conn.push(close_input(&e)),
            ToConn::Alarm(reason) => self.alarm = reason.is_some(),
            // The state machine sends a metadata update if the connection
            // has a publisher or a subscription on it; a subscription's own
            // cancel follows and finds the subscription gone.
            ToConn::StreamDeleted(stream) => {
                self.drop_waiting_members(&stream, master);
                conn.push(sc::Input::StreamGone {
                    stream,
                    code: ResponseCode::StreamNotAvailable,
                })
            }
            ToConn::SingleActive(note) => self.on_single_active(note, master, conn),
            // Deliveries, and the subscriptions' channels; open-ok, qos-ok
            // and select-ok need nothing.
            other => self.on_subscription(other, master, conn),
        }
    }

    /// End of a pass: confirms and errors go out per publisher, and each
    /// subscription's deliveries as chunks (at most `frame_max` bytes each,
    /// 0 meaning no limit).
    pub(super) fn flush(&mut self, frame_max: u32, conn: &mut Vec<sc::Input>) {
        for (publisher_id, publishing_ids) in std::mem::take(&mut self.confirms) {
            conn.push(sc::Input::PublishConfirm {
                publisher_id,
                publishing_ids,
            });
        }
        for (publisher_id, errors) in std::mem::take(&mut self.errors) {
            conn.push(sc::Input::PublishError {
                publisher_id,
                errors,
            });
        }
        let max_bytes = chunk_max_bytes(frame_max);
        for (&id, s) in &mut self.subs {
            let ready = subscribe::ready_len(&s.pending);
            if ready == 0 || s.credit == 0 {
                continue;
            }
            let held = s.pending.split_off(ready);
            s.checked = 0;
            for chunk in pack(std::mem::replace(&mut s.pending, held), max_bytes) {
                s.credit = s.credit.saturating_sub(1);
                s.in_flight.push_back((s.channel, chunk.last_tag));
                conn.push(sc::Input::Deliver {
                    subscription_id: id,
                    committed_chunk_id: chunk.id,
                    chunk: sc::ChunkSource::Bytes(chunk.bytes),
                });
            }
        }
    }
}

/// The most data a chunk may hold for a client with `frame_max` (0: none
/// set): the frame's room less the deliver head.
pub(super) fn chunk_max_bytes(frame_max: u32) -> usize {
    match frame_max {
        0 => CHUNK_BYTES,
        n => (n as usize).saturating_sub(128).max(1),
    }
}

fn method(conn: ConnId, ch: u16, method: AMQPClass) -> Input {
    Input::Method { conn, ch, method }
}

/// basic.ack of a subscription's delivery tag.
fn ack(conn: ConnId, ch: u16, delivery_tag: u64, multiple: bool) -> Input {
    method(
        conn,
        ch,
        AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag,
            multiple,
        })),
    )
}

/// The master closed the connection (an operator, the vhost deleted, the
/// node stopping).
fn close_input(e: &AmqpError) -> sc::Input {
    sc::Input::Close {
        code: ResponseCode::InternalError,
        reason: e.reply_text(),
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_filter;
#[cfg(test)]
mod tests_sac;
#[cfg(test)]
mod tests_suites;
#[cfg(test)]
mod tests_super_stream;
