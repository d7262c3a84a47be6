//! Stream queues over AMQP 0-9-1, the master's side: what RabbitMQ refuses
//! on a stream, where a consumer starts (`x-stream-offset`), delivery from
//! each consumer's own offset, and retention after a publish.
//!
//! A stream consumer reads every entry from its offset on, independently of
//! the others; its prefetch is a credit window that acks move, and an ack
//! removes nothing. Only stable entries go out (I1), as for any queue: a
//! consumer that reaches an unstable entry stalls the stream until the
//! stable index passes it. The entries themselves are `broker::stream`.

use super::Master;
use super::inout::{
    ClientProtocol, ConnId, NotResolved, StreamRecord, ToConn, TrackAnswer, TrackOp,
};
use super::session::{Channel, ConsumerKey, Unacked};
use crate::broker::event::Event;
use crate::broker::message::Message;
use crate::broker::stream::{StartAt, parse_start};
use crate::broker::stream_filter::filter_value;
use crate::broker::stream_record::{
    OFFSET_MS_ARG, RECORDS_ARG, chunk_mark, for_amqp091, record_of, trailer_length,
};
use crate::error::{AmqpError, AmqpResult, ReplyCode};
use crate::metrics::QueueKind;
use stablemq_protocol::{AMQPValue, FieldTable, ShortString};
use std::sync::Arc;

/// RabbitMQ's largest `x-stream-max-segment-size-bytes` (3 GB).
const MAX_SEGMENT_SIZE_BYTES: u64 = 3_000_000_000;

/// A stream's segment size over RabbitMQ's bound, and a filter size out of
/// 16..=255 or not an integer, are refused with RabbitMQ's wording (the
/// segment bound since 3.10, the filter size since 3.13, which brought the
/// stream filtering StableMQ implements; 3.10 ignores the argument).
pub(super) fn check_sizes(arguments: &FieldTable) -> AmqpResult<()> {
    let args = crate::broker::queue_args::QueueArgs::parse(arguments).unwrap_or_default();
    if args
        .max_segment_bytes
        .is_some_and(|n| n > MAX_SEGMENT_SIZE_BYTES)
    {
        return Err(AmqpError::precondition(
            "Exceeded max value for x-stream-max-segment-size-bytes".to_string(),
        ));
    }
    let Some(v) = arguments.inner().get("x-stream-filter-size-bytes") else {
        return Ok(());
    };
    match crate::broker::queue_args::int(v) {
        // A timestamp reads as an integer elsewhere; not here.
        Some(_) if matches!(v, AMQPValue::Timestamp(_)) => Err(AmqpError::precondition(
            "Invalid type for x-stream-filter-size-bytes".to_string(),
        )),
        Some(n) if (16..=255).contains(&n) => Ok(()),
        Some(_) => Err(AmqpError::precondition(
            "Invalid value for x-stream-filter-size-bytes".to_string(),
        )),
        None => Err(AmqpError::precondition(
            "Invalid type for x-stream-filter-size-bytes".to_string(),
        )),
    }
}

/// RabbitMQ's answer to a method streams do not support: connection.close
/// 540 NOT_IMPLEMENTED.
pub(super) fn not_supported(what: &str, vhost: &str, queue: &str) -> AmqpError {
    AmqpError::new(
        ReplyCode::NotImplemented,
        format!("{what} not supported by stream queues queue '{queue}' in vhost '{vhost}'"),
    )
    .at_connection()
}

/// The content of a stream delivery: the entry with its `x-stream-offset`
/// header, as RabbitMQ sends it.
fn with_offset(msg: &Message, offset: u64) -> Message {
    let mut headers = msg.properties.headers().clone().unwrap_or_default();
    headers.insert(
        ShortString::from("x-stream-offset"),
        AMQPValue::LongLongInt(i64::try_from(offset).unwrap_or(i64::MAX)),
    );
    Message {
        properties: Arc::new((*msg.properties).clone().with_headers(headers)),
        ..msg.clone()
    }
}

/// Entries a filtered consumer reads past per visit of the stream, beyond
/// its credit (a visit reads paged entries back in one batch).
const SKIP_BATCH: usize = 1024;

/// Entries a filtered consumer may pass over in one call of
/// `deliver_stream`: a filter that matches nothing of a long stream would
/// otherwise hold the master (and every other client) until the end of
/// the stream. Past it the queue waits in [`Master::stream_rescans`] and
/// the master task comes back to it after its next batch of inputs.
pub(super) const SCAN_MAX: usize = 64 * SKIP_BATCH;

/// Where the stream deliveries of one queue go, and what counts them.
struct Sink<'a> {
    out: &'a mut super::inout::Outputs,
    counters: &'a mut super::counters::HotCounters,
    stats: &'a mut super::stats::Stats,
    vhost: &'a str,
    queue: &'a str,
    /// The queue's own shared name, for the unacked entry.
    name: &'a Arc<str>,
    now_ms: u64,
}

impl Sink<'_> {
    /// Note the delivery of the entry at `offset` to consumer `ck` on
    /// `chan` (its delivery tag, unacked entry and counters), and return its
    /// delivery tag.
    fn note(&mut self, chan: &mut Channel, ck: &ConsumerKey, raw: bool, msg: &Message) -> u64 {
        if let Some(c) = chan.consumers.get_mut(&ck.tag) {
            c.unacked += 1;
        }
        let tag = chan.next_delivery_tag;
        chan.next_delivery_tag += 1;
        chan.unacked.insert(
            tag,
            Unacked {
                queue: self.name.clone(),
                msg_id: msg.id,
                consumer_tag: Some(ck.tag.clone()),
                delivered_at_ms: self.now_ms,
            },
        );
        let protocol = match raw {
            true => ClientProtocol::Stream,
            false => ClientProtocol::Amqp091,
        };
        self.counters
            .count_delivery(protocol, QueueKind::Stream, false, false);
        self.stats
            .delivered(self.vhost, self.queue, false, false, false);
        tag
    }

    /// Deliver the entry at `offset` to AMQP 0-9-1 consumer `ck` on `chan`,
    /// converted for AMQP 0-9-1, with its `x-stream-offset` header.
    fn deliver(&mut self, chan: &mut Channel, ck: &ConsumerKey, offset: u64, msg: &Message) {
        let tag = self.note(chan, ck, false, msg);
        self.out.send(
            ck.conn,
            ToConn::Deliver {
                ch: ck.ch,
                consumer_tag: ck.tag.clone(),
                delivery_tag: tag,
                redelivered: false,
                msg: match for_amqp091(msg) {
                    Some(converted) => with_offset(&converted, offset),
                    None => with_offset(msg, offset),
                },
            },
        );
    }

    /// The entry at `offset` for stream-protocol consumer `ck` on `chan`,
    /// as the record a stream reader gets; the caller sends a visit's
    /// records in one [`ToConn::StreamRecords`].
    fn record(
        &mut self,
        chan: &mut Channel,
        ck: &ConsumerKey,
        offset: u64,
        msg: &Message,
    ) -> StreamRecord {
        StreamRecord {
            delivery_tag: self.note(chan, ck, true, msg),
            offset,
            timestamp_ms: msg.timestamp_ms,
            record: record_of(msg),
            mark: chunk_mark(msg),
            trailer: trailer_length(msg),
            filter_value: filter_value(msg).map(Box::from),
        }
    }
}

/// How many more deliveries a stream consumer may get now: the smaller room
/// of its own prefetch and its channel's (0 is no limit, as in basic.qos).
fn credit_room(
    prefetch: u16,
    unacked: u32,
    channel_prefetch: usize,
    channel_unacked: usize,
) -> usize {
    let own = match prefetch {
        0 => usize::MAX,
        p => usize::try_from(u32::from(p).saturating_sub(unacked)).unwrap_or(0),
    };
    let channel = match channel_prefetch {
        0 => usize::MAX,
        p => p.saturating_sub(channel_unacked),
    };
    // A stream consumer always has a prefetch (basic.consume requires one),
    // so this bound is only the type's.
    own.min(channel).min(usize::from(u16::MAX))
}

impl Master {
    /// The checks of basic.consume on stream `queue`, and where the consumer
    /// starts: a prefetch is required (406), automatic acks are not
    /// supported (540), `x-stream-offset` must parse (406).
    pub(super) fn stream_start(
        &mut self,
        conn: ConnId,
        ch: u16,
        vhost: &str,
        queue: &str,
        no_ack: bool,
        arguments: &FieldTable,
    ) -> AmqpResult<u64> {
        if no_ack {
            return Err(not_supported("automatic acknowledgement", vhost, queue));
        }
        let chan = self.chan(conn, ch)?;
        if chan.consumer_prefetch == 0 {
            return Err(AmqpError::precondition(format!(
                "consumer prefetch count is not set for 'queue '{queue}' in vhost '{vhost}''"
            )));
        }
        let at = match arguments.inner().get(OFFSET_MS_ARG) {
            Some(AMQPValue::LongLongInt(ms)) => {
                StartAt::TimestampMs(u64::try_from(*ms).unwrap_or(0))
            }
            _ => parse_start(arguments.inner().get("x-stream-offset"), self.now_ms).map_err(
                |why| AmqpError::precondition(format!("invalid x-stream-offset: {why}")),
            )?,
        };
        let start = self
            .broker
            .queue(vhost, queue)
            .and_then(|q| q.stream.as_ref())
            .map_or(0, |s| s.start(at));
        Ok(start)
    }

    /// Hand each consumer of stream `queue` the stable entries from its
    /// offset on, within its prefetch. When a consumer waits for an entry
    /// that is not stable yet (the queue stalls, I1), the lowest log index
    /// one waits for.
    ///
    /// A consumer with a filter (`x-stream-filter`) gets only the entries
    /// that match it, entry by entry (each AMQP 0-9-1 publish is a chunk of
    /// its own here): the others move its offset on and cost no credit.
    pub(super) fn deliver_stream(&mut self, vhost: &str, queue: &str) -> Option<u64> {
        let qc = self.sessions.consumers.get(super::qkey(&(vhost, queue)))?;
        let keys = qc.list.clone();
        let q = self.broker.queue(vhost, queue)?;
        let stream = q.stream.as_ref()?;
        let stable = self.gate.stable();
        let mut sink = Sink {
            out: &mut self.out,
            counters: &mut self.counters,
            stats: &mut self.stats,
            vhost,
            queue,
            name: &q.name,
            now_ms: self.now_ms,
        };
        let (mut stalled, mut rescan) = (None::<u64>, false);
        for ck in keys {
            let Some(chan) = self
                .sessions
                .conns
                .get_mut(&ck.conn)
                .and_then(|s| s.channels.get_mut(&ck.ch))
            else {
                continue;
            };
            if !chan.flow_active {
                continue;
            }
            let Some(c) = chan.consumers.get(&ck.tag) else {
                continue;
            };
            // The stream protocol's consumers get records as stored.
            let raw = c.arguments.inner().contains_key(RECORDS_ARG);
            let filter = c.stream_filter.clone();
            // Retention may have cut entries this consumer had not read yet:
            // it goes on from the oldest entry kept (without this it waited
            // for ever on an offset that is gone).
            let Some(mut at) = c.stream_offset.map(|o| o.max(stream.first_offset())) else {
                continue;
            };
            let mut left = credit_room(
                c.prefetch,
                c.unacked,
                usize::from(chan.channel_prefetch),
                chan.unacked_count(),
            );
            let mut scanned = 0usize;
            let mut records = Vec::new();
            loop {
                // A filtered consumer reads on past the entries it skips,
                // a batch at a time, until its credit or the stream ends,
                // or [`SCAN_MAX`] for now.
                let budget = match filter {
                    Some(_) => left.saturating_add(SKIP_BATCH),
                    None => left,
                };
                let (mut visited, mut stop) = (0usize, false);
                stream.visit_from(at, budget, |offset, entry| {
                    visited += 1;
                    if entry.wait_index > stable {
                        let at = stalled.map_or(entry.wait_index, |s| s.min(entry.wait_index));
                        (stalled, stop) = (Some(at), true);
                        return false;
                    }
                    let Some(c) = chan.consumers.get_mut(&ck.tag) else {
                        stop = true;
                        return false;
                    };
                    let skip = filter
                        .as_ref()
                        .is_some_and(|f| !f.matches(filter_value(&entry.msg)));
                    if !skip && left == 0 {
                        stop = true;
                        return false;
                    }
                    c.stream_offset = Some(offset + 1);
                    at = offset + 1;
                    if !skip {
                        left -= 1;
                        match raw {
                            true => records.push(sink.record(chan, &ck, offset, &entry.msg)),
                            false => sink.deliver(chan, &ck, offset, &entry.msg),
                        }
                    }
                    true
                });
                if stop || visited < budget || filter.is_none() {
                    break;
                }
                scanned += visited;
                if scanned >= SCAN_MAX {
                    rescan = true;
                    break;
                }
            }
            if !records.is_empty() {
                sink.out
                    .send(ck.conn, ToConn::StreamRecords { ch: ck.ch, records });
            }
        }
        if rescan {
            let key = (vhost.to_string(), queue.to_string());
            if !self.stream_rescans.contains(&key) {
                self.stream_rescans.push(key);
            }
        }
        stalled
    }

    /// Whether a filtered stream consumer stopped at `SCAN_MAX` entries and waits
    /// for [`Master::resume_stream_scans`].
    pub fn has_stream_rescans(&self) -> bool {
        !self.stream_rescans.is_empty()
    }

    /// Go on with the stream queues whose filtered consumers stopped at
    /// `SCAN_MAX` entries (each another `SCAN_MAX` at most).
    pub fn resume_stream_scans(&mut self) {
        for (vhost, queue) in std::mem::take(&mut self.stream_rescans) {
            self.try_deliver(&vhost, &queue);
        }
    }

    /// Retention after `queue` got an entry: whole closed segments go, oldest
    /// first, while the stream is over `max-length-bytes` or their entries
    /// are older than `max-age`; the cut is logged, so every replica and
    /// store drops the same entries.
    pub(super) fn stream_retention(&mut self, vhost: &str, queue: &str) {
        let Some(q) = self.broker.queue(vhost, queue) else {
            return;
        };
        let Some(s) = q.stream.as_ref() else {
            return;
        };
        let Some(first_offset) =
            s.retention(q.args.max_length_bytes, q.args.max_age_ms, self.now_ms)
        else {
            return;
        };
        let msg_ids = s.ids_below(first_offset);
        self.emit(
            Event::StreamTruncated {
                vhost: vhost.to_string(),
                queue: queue.to_string(),
                first_offset,
                msg_ids,
            },
            true,
        );
    }

    /// Retention of every stream with a limit (of `vhost`'s only, when
    /// given), in name order so that the cuts are logged in the same order
    /// whatever the maps' order: at the tick, for `max-age` while nothing is
    /// published, and after a policy change, for the limits it sets (as
    /// Osiris evaluates retention when it is updated).
    pub(super) fn every_stream_retention(&mut self, vhost: Option<&str>) {
        let mut limited: Vec<(String, String)> = Vec::new();
        for (vname, v) in &self.broker.vhosts {
            if vhost.is_some_and(|only| only != vname.as_str()) {
                continue;
            }
            for (qname, q) in &v.queues {
                if q.stream.is_some()
                    && (q.args.max_age_ms.is_some() || q.args.max_length_bytes.is_some())
                {
                    limited.push((vname.clone(), qname.to_string()));
                }
            }
        }
        limited.sort();
        for (v, q) in limited {
            self.stream_retention(&v, &q);
        }
    }

    /// The stream protocol's tracking: a store is logged (a definition in
    /// the state, so it survives a restart and a failover); a query (a
    /// stored value, a super stream's route or partitions) is answered from
    /// the state once stable. A stream that does not exist stores nothing
    /// and answers `Err`.
    pub(super) fn stream_track(&mut self, conn: ConnId, ch: u16, op: TrackOp) {
        let Some(vhost) = self.sessions.conns.get(&conn).map(|s| s.vhost.to_string()) else {
            return;
        };
        match op {
            TrackOp::Store {
                stream,
                kind,
                reference,
                value,
            } => {
                if self.is_stream(&vhost, &stream) {
                    self.emit(
                        Event::StreamTracked {
                            vhost,
                            queue: stream,
                            kind,
                            reference,
                            value,
                        },
                        true,
                    );
                }
            }
            TrackOp::Query {
                stream,
                kind,
                reference,
            } => {
                let value = self
                    .broker
                    .queue(&vhost, &stream)
                    .and_then(|q| q.stream.as_ref())
                    .map(|s| s.tracked(kind, &reference))
                    .ok_or(());
                self.reply_tracked(conn, ch, TrackAnswer::Value(value));
            }
            TrackOp::Route {
                exchange,
                routing_key,
            } => {
                let streams =
                    super::super_stream::route(&self.broker, &vhost, &exchange, &routing_key);
                self.reply_tracked(conn, ch, TrackAnswer::Streams(streams));
            }
            TrackOp::Stats { stream } => {
                let stats = self
                    .broker
                    .queue(&vhost, &stream)
                    .and_then(|q| q.stream.as_ref())
                    .map(stream_stats)
                    .ok_or(());
                self.reply_tracked(conn, ch, TrackAnswer::Stats(stats));
            }
            TrackOp::Resolve { stream, at } => {
                let resolved = if self
                    .authorize(conn, crate::users::Perm::Read, "queue", &stream)
                    .is_err()
                {
                    Err(NotResolved::AccessRefused)
                } else {
                    self.broker
                        .queue(&vhost, &stream)
                        .and_then(|q| q.stream.as_ref())
                        .map(|s| s.start(at))
                        .ok_or(NotResolved::NoStream)
                };
                self.reply_tracked(conn, ch, TrackAnswer::Resolved(resolved));
            }
            TrackOp::Partitions { exchange } => {
                let streams = super::super_stream::partitions(&self.broker, &vhost, &exchange);
                self.reply_tracked(conn, ch, TrackAnswer::Streams(streams));
            }
            TrackOp::SuperStreamPermitted {
                exchange,
                partitions,
            } => {
                let user = self.sessions.conns.get(&conn).map(|s| s.user.clone());
                let permitted = user.is_some_and(|user| {
                    super::super_stream::permitted(
                        &self.broker,
                        &user,
                        &vhost,
                        &exchange,
                        partitions.as_deref(),
                    )
                });
                self.reply_tracked(conn, ch, TrackAnswer::Permitted(permitted));
            }
            TrackOp::AnyExists { exchange, queues } => {
                let exists =
                    super::super_stream::any_exists(&self.broker, &vhost, &exchange, &queues);
                self.reply_tracked(conn, ch, TrackAnswer::Exists(exists));
            }
        }
    }

    /// Whether `queue` is a stream.
    pub(super) fn is_stream(&self, vhost: &str, queue: &str) -> bool {
        self.broker
            .queue(vhost, queue)
            .is_some_and(|q| q.stream.is_some())
    }
}

/// The stream protocol's stream stats (RabbitMQ 3.11+): the first offset
/// kept, and the start of the newest chunk as the last and the committed
/// one (the answer waits until what the state holds is stable, I1); -1 for
/// each while the stream is empty, as Osiris reports an empty range.
fn stream_stats(s: &crate::broker::stream::StreamLog) -> Vec<(String, i64)> {
    let (first, last) = match s.last_offset() {
        Some(_) => (
            i64::try_from(s.first_offset()).unwrap_or(i64::MAX),
            i64::try_from(s.start(StartAt::Last)).unwrap_or(i64::MAX),
        ),
        None => (-1, -1),
    };
    vec![
        ("first_chunk_id".to_owned(), first),
        ("last_chunk_id".to_owned(), last),
        ("committed_chunk_id".to_owned(), last),
    ]
}
