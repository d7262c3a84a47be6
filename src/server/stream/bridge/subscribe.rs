//! Subscriptions: one channel each, deliveries packed into chunks of
//! consecutive offsets, acked once written.

use super::*;
use crate::broker::stream_filter::StreamFilter;
use crate::master::inout::StreamRecord;
use single_active::Sac;
use stablemq_protocol::stream::Properties;

/// One subscription's channel.
#[derive(Debug)]
pub(super) struct Subscription {
    pub(super) channel: u16,
    pub(super) stream: String,
    /// The subscribe's correlation id until consume-ok.
    pub(super) subscribing: Option<u32>,
    /// Deliveries not packed yet, in delivery order (a replica's reads
    /// too: `stream::replica`).
    pub(super) pending: Vec<StreamRecord>,
    /// The channel and last delivery tag of each chunk handed to the
    /// connection and not written yet, oldest first (a single active
    /// consumer that gave way has a new channel: the old one's are not
    /// acked).
    pub(super) in_flight: VecDeque<(u16, u64)>,
    /// Chunks the client will take now (the connection's count of its
    /// credit). Without any, deliveries wait here unpacked, so the chunk
    /// sent once credit comes holds all of them (as RabbitMQ's holds a
    /// whole publish batch) rather than the first of many small ones.
    pub(super) credit: u32,
    /// Its single active consumer group, if it asked for one.
    pub(super) sac: Option<Sac>,
    /// Its filter (`filter.N` and `match-unfiltered` properties), if any.
    pub(super) filter: Option<StreamFilter>,
    /// How many of `pending`, from its start, are whole stored chunks the
    /// filter kept.
    pub(super) checked: usize,
}

/// A subscribe request, as the bridge starts it.
#[derive(Debug)]
pub(super) struct NewSubscription {
    pub(super) id: u8,
    pub(super) stream: String,
    pub(super) offset: OffsetSpec,
    pub(super) credit: u16,
    pub(super) properties: Properties,
}

impl Bridge {
    /// What the master sent on a subscription's channel.
    pub(super) fn on_subscription(
        &mut self,
        m: ToConn,
        master: &mut Vec<Input>,
        conn: &mut Vec<sc::Input>,
    ) {
        match m {
            ToConn::StreamRecords { ch, records } => {
                if let Some(s) = self.channels.get(&ch).and_then(|id| self.subs.get_mut(id)) {
                    s.pending.extend(records);
                    if s.filter.is_some() {
                        let acks = drop_unmatched(s);
                        for (tag, multiple) in acks {
                            master.push(ack(self.conn, s.channel, tag, multiple));
                        }
                    }
                }
            }
            ToConn::Method(ch, AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(_))) => {
                if let Some(s) = self.channels.get(&ch).and_then(|id| self.subs.get_mut(id))
                    && let Some(correlation_id) = s.subscribing.take()
                {
                    conn.push(sc::Input::Reply {
                        correlation_id,
                        reply: Reply::Code(ResponseCode::Ok),
                    });
                }
            }
            // The master cancelled the consumer: its stream was deleted.
            ToConn::Method(ch, AMQPClass::Basic(basic::AMQPMethod::Cancel(_))) => {
                if let Some(id) = self.channels.remove(&ch)
                    && let Some(s) = self.subs.remove(&id)
                {
                    self.closing.insert(ch);
                    master.push(Input::ChannelClose {
                        conn: self.conn,
                        ch,
                    });
                    self.leave_group(id, &s, master);
                    conn.push(sc::Input::StreamGone {
                        stream: s.stream,
                        code: ResponseCode::StreamNotAvailable,
                    });
                }
            }
            ToConn::Method(ch, AMQPClass::Channel(channel::AMQPMethod::CloseOk(_))) => {
                self.closing.remove(&ch);
            }
            ToConn::CloseChannel(ch, e) => {
                if let Some(id) = self.channels.remove(&ch)
                    && let Some(s) = self.subs.remove(&id)
                {
                    self.leave_group(id, &s, master);
                    match s.subscribing {
                        Some(correlation_id) => conn.push(sc::Input::Reply {
                            correlation_id,
                            reply: Reply::Code(stream_code(e.code)),
                        }),
                        None => conn.push(sc::Input::StreamGone {
                            stream: s.stream,
                            code: ResponseCode::StreamNotAvailable,
                        }),
                    }
                }
            }
            _ => {}
        }
    }

    /// A subscription: a channel of its own, and there a basic.consume
    /// at once or, for a single active consumer, its group joined first
    /// (it consumes once active, `single_active`).
    pub(super) fn subscribe(
        &mut self,
        correlation_id: u32,
        new: NewSubscription,
        master: &mut Vec<Input>,
    ) {
        let NewSubscription {
            id,
            stream,
            offset,
            credit,
            properties,
        } = new;
        let ch = self.free_channel();
        master.push(Input::ChannelOpen {
            conn: self.conn,
            ch,
        });
        let sac = single_active::group_of(&properties, &offset);
        let filter = StreamFilter::from_properties(&properties);
        match &sac {
            Some(sac) => self.join_group(id, &stream, sac, master),
            None => self.consume(ch, id, &stream, offset, master),
        }
        self.channels.insert(ch, id);
        self.subs.insert(
            id,
            Subscription {
                channel: ch,
                stream,
                subscribing: Some(correlation_id),
                pending: Vec::new(),
                in_flight: VecDeque::new(),
                credit: u32::from(credit),
                sac,
                filter,
                checked: 0,
            },
        );
    }

    /// basic.qos and basic.consume from `offset` on a subscription's channel.
    pub(super) fn consume(
        &self,
        ch: u16,
        id: u8,
        stream: &str,
        offset: OffsetSpec,
        master: &mut Vec<Input>,
    ) {
        let start = match offset {
            OffsetSpec::First => AMQPValue::LongString("first".into()),
            OffsetSpec::Last => AMQPValue::LongString("last".into()),
            OffsetSpec::Next | OffsetSpec::None => AMQPValue::LongString("next".into()),
            OffsetSpec::Offset(o) => AMQPValue::LongLongInt(i64::try_from(o).unwrap_or(i64::MAX)),
            OffsetSpec::Timestamp(ms) => AMQPValue::LongLongInt(ms.max(0)),
        };
        let mut arguments = FieldTable::default();
        let key = if matches!(offset, OffsetSpec::Timestamp(_)) {
            crate::broker::stream_record::OFFSET_MS_ARG
        } else {
            "x-stream-offset"
        };
        arguments.insert(ShortString::from(key), start);
        arguments.insert(
            ShortString::from(crate::broker::stream_record::RECORDS_ARG),
            AMQPValue::Boolean(true),
        );
        master.push(method(
            self.conn,
            ch,
            AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
                prefetch_count: PREFETCH,
                global: false,
            })),
        ));
        master.push(method(
            self.conn,
            ch,
            AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
                queue: ShortString::from(stream),
                consumer_tag: ShortString::from(format!("stream-subscription-{id}")),
                no_local: false,
                no_ack: false,
                exclusive: false,
                nowait: false,
                arguments,
            })),
        ));
    }

    /// The lowest subscription channel neither in use nor closing.
    pub(super) fn free_channel(&self) -> u16 {
        (FIRST_SUBSCRIPTION..)
            .find(|c| !self.channels.contains_key(c) && !self.closing.contains(c))
            .unwrap_or(u16::MAX)
    }
}

/// The epoch in a delivered chunk's header: RabbitMQ's first epoch (a new
/// stream's writer starts at 1; rstream's test_deliver compares it).
const EPOCH: u64 = 1;

/// One chunk made of deliveries.
#[derive(Debug)]
pub(in crate::server::stream) struct Packed {
    pub(in crate::server::stream) id: u64,
    pub(in crate::server::stream) last_tag: u64,
    /// Records in it.
    pub(in crate::server::stream) records: u64,
    pub(in crate::server::stream) bytes: Bytes,
}

/// How many of `pending` (in delivery order) may be packed now: all but a
/// stored chunk whose start is here and whose last records have not been
/// delivered yet (they come with the next deliveries: a chunk's records are
/// published, and become stable, together). A subscription so sends each
/// stored chunk whole, as RabbitMQ sends an Osiris chunk, which clients
/// count on (one credit, one chunk: the js client's credit policies). A
/// chunk whose tail never comes (lost unstable in a failover, so never
/// confirmed) is held only until the next chunk: the newest start decides.
pub(in crate::server::stream) fn ready_len(pending: &[StreamRecord]) -> usize {
    let Some(last) = pending.last() else {
        return 0;
    };
    // The newest chunk start among the deliveries, and its size.
    for (i, d) in pending.iter().enumerate().rev() {
        if let ChunkMark::Starts(n) = d.mark {
            let end = d.offset.saturating_add(u64::from(n.unwrap_or(1)));
            return if last.offset.saturating_add(1) < end {
                i
            } else {
                pending.len()
            };
        }
    }
    pending.len()
}

/// Drop from a filtered subscription's `pending` the whole stored chunks
/// none of whose records matches its filter (RabbitMQ's chunk-level
/// filtering: such a chunk is not sent and costs no credit), and give the
/// delivery tags to ack for them, with whether each ack is `multiple`.
///
/// A chunk is whole once [`ready_len`] says so; the ones before
/// `s.checked` were kept already. A dropped chunk at the head of `pending`,
/// with no chunk of its channel waiting to be written, is acked with one
/// multiple ack; any other is acked tag by tag (a multiple ack would take
/// the kept deliveries before it too, whose own ack then would be of an
/// unknown tag).
pub(super) fn drop_unmatched(s: &mut Subscription) -> Vec<(u64, bool)> {
    let Some(filter) = &s.filter else {
        return Vec::new();
    };
    let ready = ready_len(&s.pending);
    if ready <= s.checked {
        return Vec::new();
    }
    let unwritten = s.in_flight.iter().any(|(ch, _)| *ch == s.channel);
    let mut acks = Vec::new();
    let tail = s.pending.split_off(ready);
    let fresh = s.pending.split_off(s.checked);
    for chunk in stored_chunks(fresh) {
        if filter.chunk_matches(chunk.iter().map(|d| d.filter_value.as_deref())) {
            s.pending.extend(chunk);
        } else if s.pending.is_empty() && !unwritten {
            acks.extend(chunk.last().map(|d| (d.delivery_tag, true)));
        } else {
            acks.extend(chunk.iter().map(|d| (d.delivery_tag, false)));
        }
    }
    s.checked = s.pending.len();
    s.pending.extend(tail);
    acks
}

/// Deliveries (in delivery order) cut into the stored chunks they belong
/// to: a new one at each chunk start and at a gap in the offsets.
pub(in crate::server::stream) fn stored_chunks(
    deliveries: Vec<StreamRecord>,
) -> Vec<Vec<StreamRecord>> {
    let mut out: Vec<Vec<StreamRecord>> = Vec::new();
    for d in deliveries {
        let continues = matches!(d.mark, ChunkMark::Continues)
            && out
                .last()
                .and_then(|c| c.last())
                .is_some_and(|p| p.offset.saturating_add(1) == d.offset);
        match out.last_mut() {
            Some(c) if continues => c.push(d),
            _ => out.push(vec![d]),
        }
    }
    out
}

/// Pack deliveries (in delivery order) into chunks of consecutive offsets,
/// at most [`CHUNK_RECORDS`] records and about `max_bytes` each. Stored
/// chunks that came together go out together (fewer, fuller chunks than
/// one per publish frame: a client grants credit per chunk).
pub(in crate::server::stream) fn pack(pending: Vec<StreamRecord>, max_bytes: usize) -> Vec<Packed> {
    // Each chunk's buffer is sized for what it will hold (at most the rest
    // of `pending`, at most `max_bytes`; only a single record larger than
    // that grows it), so it is written once.
    let mut left: usize = pending.iter().map(|d| d.record.len() + 4).sum();
    let room = |left: usize| left.min(max_bytes);
    let mut out = Vec::new();
    let mut b = ChunkBuilder::with_capacity(room(left));
    let mut first: Option<(u64, u64)> = None;
    let (mut next, mut records, mut bytes, mut last_tag) = (0u64, 0usize, 0usize, 0u64);
    // The trailers of the stored chunks this one holds the starts of.
    let mut trailer = 0u32;
    for d in pending {
        let (offset, tag, ts, body) = (d.offset, d.delivery_tag, d.timestamp_ms, d.record);
        if let Some((id, ts0)) = first
            && (offset != next || records >= CHUNK_RECORDS || bytes + body.len() + 4 > max_bytes)
        {
            let done = std::mem::replace(&mut b, ChunkBuilder::with_capacity(room(left)));
            out.push(packed(done, trailer, id, ts0, last_tag, records));
            first = None;
        }
        if first.is_none() {
            first = Some((offset, ts));
            (records, bytes, trailer) = (0, 0, 0);
        }
        b.simple(&body);
        left -= body.len() + 4;
        records += 1;
        bytes += body.len() + 4;
        trailer = trailer.saturating_add(d.trailer);
        next = offset + 1;
        last_tag = tag;
    }
    if let Some((id, ts0)) = first {
        out.push(packed(b, trailer, id, ts0, last_tag, records));
    }
    out
}

/// The chunk `b` holds, with chunk id `id` and timestamp `ts0`.
fn packed(
    mut b: ChunkBuilder,
    trailer: u32,
    id: u64,
    ts0: u64,
    last_tag: u64,
    records: usize,
) -> Packed {
    b.trailer_length(trailer);
    Packed {
        id,
        last_tag,
        records: records as u64,
        bytes: b.finish(i64::try_from(ts0).unwrap_or(i64::MAX), EPOCH, id),
    }
}
