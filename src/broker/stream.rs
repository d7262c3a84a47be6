//! Streams (`x-queue-type: stream`): an append-only queue that consumers read
//! from any offset without removing anything, as RabbitMQ's stream queues.
//!
//! A stream's entries are the messages published to it, numbered with
//! consecutive offsets in log order: every replica applies the same
//! `Published` events in the same order, so an offset means the same entry on
//! every node and after a failover (I4). Acks remove nothing. Entries leave
//! only by retention, whole segments at a time, oldest first; the master
//! decides it and logs `Event::StreamTruncated` with the new first offset, so
//! the stores drop the same entries and a restore numbers the survivors from
//! there.
//!
//! The entries themselves are [`StreamEntries`]: the newest in RAM, the rest
//! paged out to the broker's body store and read back by offset, so a stream
//! need not fit in RAM (the event store keeps them durable, as it keeps a
//! durable queue's messages). Segments are counted here, for retention; they
//! are not the files.
//!
//! What this is not (yet): the stream protocol's storage of whole chunks,
//! delivered from the files without decoding (docs/streams.md).

use super::event::Tracking;
use super::message::QueuedMessage;
use super::paging::{Pager, StreamEntries};
use stablemq_protocol::AMQPValue;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// RabbitMQ's default `x-stream-max-segment-size-bytes` (500 MB).
pub const DEFAULT_MAX_SEGMENT_BYTES: u64 = 500_000_000;

/// A run of consecutive entries that retention removes as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    /// Offset of its first entry.
    first: u64,
    /// Entries in it.
    count: u64,
    /// Body bytes in it.
    bytes: u64,
    /// Timestamp of its newest entry (ms since the epoch).
    newest_ms: u64,
}

/// The entries of one stream.
#[derive(Debug, Default)]
pub struct StreamLog {
    /// Entries from the first offset on.
    entries: StreamEntries,
    /// Body bytes of `entries`.
    bytes: u64,
    /// The entries' segments, oldest first; the last one is open.
    segments: VecDeque<Segment>,
    /// Stored consumer offsets and publisher sequences, by reference.
    tracking: HashMap<(Tracking, String), u64>,
    /// Offset of the newest entry that starts a chunk: where `last` starts,
    /// as RabbitMQ's `last` is the newest chunk. A stream-protocol publish
    /// frame is one chunk in Osiris; an AMQP 0-9-1 message is its own.
    last_chunk: u64,
}

impl StreamLog {
    /// An empty stream, paging through `pager` (None: all in RAM).
    pub fn new(pager: Option<Arc<Pager>>) -> StreamLog {
        StreamLog {
            entries: StreamEntries::new(pager),
            ..StreamLog::default()
        }
    }

    /// Store a consumer offset or a publisher's last publishing id (a
    /// sequence only grows: a late, lower one changes nothing).
    pub fn track(&mut self, kind: Tracking, reference: &str, value: u64) {
        let slot = self
            .tracking
            .entry((kind, reference.to_owned()))
            .or_insert(value);
        *slot = match kind {
            Tracking::Offset => value,
            Tracking::Sequence => (*slot).max(value),
        };
    }

    /// A stored consumer offset or publisher sequence.
    pub fn tracked(&self, kind: Tracking, reference: &str) -> Option<u64> {
        self.tracking.get(&(kind, reference.to_owned())).copied()
    }

    /// Offset of the oldest entry kept (of the next one when empty).
    pub fn first_offset(&self) -> u64 {
        self.entries.first_offset()
    }

    /// Offset the next entry gets.
    pub fn next_offset(&self) -> u64 {
        self.entries.next_offset()
    }

    /// Offset of the newest entry.
    pub fn last_offset(&self) -> Option<u64> {
        self.next_offset()
            .checked_sub(1)
            .filter(|_| !self.is_empty())
    }

    /// Entries kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No entries kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries and body bytes kept whose log index is stable (I1: what may
    /// be shown to anyone); `None`: all of them (a replica holds stable
    /// entries only).
    pub fn stable_counts(&self, stable: Option<u64>) -> (usize, u64) {
        let (n, b) = stable.map_or((0, 0), |s| self.entries.unstable_tail(s));
        (self.len() - n, self.bytes - b)
    }

    /// Entries kept on disk only (paged out of RAM).
    pub fn paged_len(&self) -> usize {
        self.entries.paged_len()
    }

    /// Body bytes of the entries kept on disk only.
    pub fn paged_bytes(&self) -> u64 {
        self.entries.paged_bytes()
    }

    /// Body bytes kept.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Segments kept (the open one included).
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Append `m` at the next offset; a new segment opens once the open one
    /// holds `max_segment_bytes` or more.
    pub fn push(&mut self, m: QueuedMessage, max_segment_bytes: u64) -> u64 {
        let offset = self.next_offset();
        let len = m.msg.body.len() as u64;
        let ts = m.msg.timestamp_ms;
        match self.segments.back_mut() {
            Some(s) if s.bytes < max_segment_bytes => {
                s.count += 1;
                s.bytes += len;
                s.newest_ms = s.newest_ms.max(ts);
            }
            _ => self.segments.push_back(Segment {
                first: offset,
                count: 1,
                bytes: len,
                newest_ms: ts,
            }),
        }
        self.bytes += len;
        if super::stream_record::starts_chunk(&m.msg) {
            self.last_chunk = offset;
        }
        // The publisher's sequence moves with its entry, in the same event
        // (`stream_record::PUBLISHER_HEADER`).
        if let Some((reference, id)) = super::stream_record::publisher_sequence(&m.msg) {
            self.track(Tracking::Sequence, reference, id);
        }
        self.entries.push(m);
        offset
    }

    /// The entry at `offset`, if kept (read back from disk when paged out).
    pub fn get(&self, offset: u64) -> Option<QueuedMessage> {
        self.entries.get(offset)
    }

    /// Visit the entries from `offset` on, in order, at most `max` of them,
    /// until `f` says stop (paged entries are read back in batches).
    pub fn visit_from(&self, offset: u64, max: usize, f: impl FnMut(u64, &QueuedMessage) -> bool) {
        self.entries.visit_from(offset, max, f);
    }

    /// Message ids of the entries below `offset`, oldest first.
    pub fn ids_below(&self, offset: u64) -> Vec<u64> {
        let mut ids = Vec::new();
        self.entries
            .visit_meta(self.first_offset(), offset, |_, id| ids.push(id));
        ids
    }

    /// Body bytes of the entries `[from, to)`.
    fn body_bytes(&self, from: u64, to: u64) -> u64 {
        let mut bytes = 0;
        self.entries.visit_meta(from, to, |len, _| bytes += len);
        bytes
    }

    /// Drop every entry below `offset` (a first offset past the end empties
    /// the stream and moves its next offset there, as a restore that starts
    /// from a truncated state needs).
    pub fn truncate_to(&mut self, offset: u64) {
        let first = self.first_offset();
        if offset <= first {
            return;
        }
        self.bytes -= self.body_bytes(first, offset.min(self.next_offset()));
        self.entries.truncate_to(offset);
        let first = self.first_offset();
        while let Some(s) = self.segments.front() {
            let end = s.first + s.count;
            if end <= first {
                self.segments.pop_front();
                continue;
            }
            if s.first < first {
                // The bytes of a cut segment are recounted from what is left.
                let bytes = self.body_bytes(first, end);
                if let Some(s) = self.segments.front_mut() {
                    s.count = end - first;
                    s.first = first;
                    s.bytes = bytes;
                }
            }
            break;
        }
    }

    /// Where retention moves the first offset, if anywhere: whole closed
    /// segments go, oldest first, while the stream holds more than
    /// `max_bytes`, or while a segment's newest entry is older than
    /// `max_age_ms` at `now_ms`. The open segment always stays, as in
    /// RabbitMQ.
    pub fn retention(
        &self,
        max_bytes: Option<u64>,
        max_age_ms: Option<u64>,
        now_ms: u64,
    ) -> Option<u64> {
        let mut bytes = self.bytes;
        let mut first = None;
        let closed = self.segments.len().saturating_sub(1);
        for s in self.segments.iter().take(closed) {
            let too_big = max_bytes.is_some_and(|max| bytes > max);
            let too_old = max_age_ms.is_some_and(|age| s.newest_ms.saturating_add(age) < now_ms);
            if !(too_big || too_old) {
                break;
            }
            bytes -= s.bytes;
            first = Some(s.first + s.count);
        }
        first
    }

    /// Where a consumer starting at `at` begins reading.
    pub fn start(&self, at: StartAt) -> u64 {
        match at {
            StartAt::First => self.first_offset(),
            StartAt::Last => match self.last_offset() {
                // A chunk start that retention removed: the oldest kept.
                Some(_) => self.last_chunk.max(self.first_offset()),
                None => self.first_offset(),
            },
            StartAt::Next => self.next_offset(),
            StartAt::Offset(n) => n.max(self.first_offset()),
            StartAt::TimestampMs(t) => self.first_at_or_after(t),
        }
    }

    /// The first entry published at or after `t_ms` (the next offset if
    /// none), by binary search: entries are stamped by the master's clock as
    /// they are published, so their timestamps do not decrease.
    fn first_at_or_after(&self, t_ms: u64) -> u64 {
        let (mut lo, mut hi) = (self.first_offset(), self.next_offset());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.entries.get(mid) {
                Some(m) if m.msg.timestamp_ms < t_ms => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo
    }
}

/// Where a stream consumer starts (`x-stream-offset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// The oldest entry kept.
    First,
    /// The newest entry (each entry is its own chunk here, so RabbitMQ's
    /// "the last chunk" is the last entry).
    Last,
    /// The next entry published (the default).
    Next,
    /// This offset (or the first kept, if it is gone).
    Offset(u64),
    /// The first entry published at or after this time (ms since the epoch).
    TimestampMs(u64),
}

/// Parse `x-stream-offset` as RabbitMQ does: `first`, `last`, `next`, an
/// offset (negative: the first), an AMQP timestamp (seconds), or an interval
/// back from `now_ms` (`1h`, `7D`, ...). None when absent: `next`.
pub fn parse_start(v: Option<&AMQPValue>, now_ms: u64) -> Result<StartAt, String> {
    let Some(v) = v else {
        return Ok(StartAt::Next);
    };
    if let AMQPValue::Timestamp(secs) = v {
        return Ok(StartAt::TimestampMs(secs.saturating_mul(1000)));
    }
    if let Some(n) = super::queue_args::int(v) {
        return Ok(StartAt::Offset(u64::try_from(n.max(0)).unwrap_or(u64::MAX)));
    }
    let text = super::queue_args::text(v).ok_or_else(|| format!("{v:?} is not an offset"))?;
    match text.as_str() {
        "first" => Ok(StartAt::First),
        "last" => Ok(StartAt::Last),
        "next" => Ok(StartAt::Next),
        other => match parse_age_ms(other) {
            Some(age) => Ok(StartAt::TimestampMs(now_ms.saturating_sub(age))),
            None => Err(format!("'{other}' is not an offset specification")),
        },
    }
}

/// A RabbitMQ age (`x-max-age`, interval offsets): a positive number and a
/// unit, `Y`, `M`, `D`, `h`, `m` or `s`; in ms.
pub fn parse_age_ms(s: &str) -> Option<u64> {
    let unit = s.chars().last()?;
    let n: u64 = s[..s.len() - unit.len_utf8()].parse().ok()?;
    let secs: u64 = match unit {
        'Y' => 365 * 24 * 3600,
        'M' => 30 * 24 * 3600,
        'D' => 24 * 3600,
        'h' => 3600,
        'm' => 60,
        's' => 1,
        _ => return None,
    };
    (n > 0).then(|| n.saturating_mul(secs).saturating_mul(1000))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::message::Message;
    use bytes::Bytes;
    use std::sync::Arc;

    fn entry(id: u64, len: usize, ts: u64) -> QueuedMessage {
        QueuedMessage {
            msg: Message {
                id,
                exchange: "".into(),
                routing_key: "s".into(),
                properties: Arc::new(Default::default()),
                body: Bytes::from(vec![0u8; len]),
                timestamp_ms: ts,
            },
            redelivered: false,
            wait_index: id,
            expires_at_ms: None,
            delivery_count: 0,
        }
    }

    #[test]
    fn counts_leave_out_the_entries_that_are_not_stable() {
        let mut s = StreamLog::new(None);
        for i in 1..=5 {
            // Entry i waits for log index 10 * i.
            let mut e = entry(i, 7, i);
            e.wait_index = 10 * i;
            s.push(e, 1 << 20);
        }
        assert_eq!(s.stable_counts(None), (5, 35));
        assert_eq!(s.stable_counts(Some(50)), (5, 35));
        assert_eq!(s.stable_counts(Some(35)), (3, 21));
        assert_eq!(s.stable_counts(Some(9)), (0, 0));
    }

    #[test]
    fn offsets_are_consecutive_and_survive_truncation() {
        let mut s = StreamLog::new(None);
        for i in 0..10 {
            assert_eq!(s.push(entry(100 + i, 10, i), 30), i);
        }
        // Segments of 30 bytes close after 3 entries of 10: [0..3) [3..6) [6..9) [9].
        assert_eq!(s.segment_count(), 4);
        assert_eq!(s.get(4).map(|m| m.msg.id), Some(104));
        assert_eq!(s.ids_below(3), [100, 101, 102]);
        s.truncate_to(3);
        assert_eq!((s.first_offset(), s.next_offset(), s.len()), (3, 10, 7));
        assert_eq!(s.get(2).map(|m| m.msg.id), None);
        assert_eq!(s.get(3).map(|m| m.msg.id), Some(103));
        assert_eq!(s.bytes(), 70);
        assert_eq!(s.segment_count(), 3);
        assert_eq!(s.push(entry(110, 10, 10), 30), 10);
    }

    #[test]
    fn retention_drops_whole_closed_segments_oldest_first() {
        let mut s = StreamLog::new(None);
        for i in 0..10 {
            s.push(entry(i, 10, 1000 + i), 30);
        }
        assert_eq!(s.retention(Some(100), None, 0), None, "100 bytes fit");
        assert_eq!(s.retention(Some(65), None, 0), Some(6), "two segments go");
        assert_eq!(s.retention(Some(0), None, 0), Some(9), "the open one stays");
        // Age: the first segment's newest entry is at 1002.
        assert_eq!(s.retention(None, Some(10), 1012), None);
        assert_eq!(s.retention(None, Some(10), 1013), Some(3));
    }

    #[test]
    fn a_truncated_start_past_the_end_moves_the_next_offset() {
        let mut s = StreamLog::new(None);
        s.truncate_to(42);
        assert_eq!((s.first_offset(), s.next_offset()), (42, 42));
        assert_eq!(s.push(entry(1, 1, 0), 30), 42);
    }

    #[test]
    fn last_is_the_first_entry_of_the_newest_chunk() {
        use crate::broker::stream_record::RECORD_HEADER;
        use stablemq_protocol::{BasicProperties, FieldTable, ShortString};
        let record = |id, starts: bool| {
            let mut e = entry(id, 1, 0);
            let mut h = FieldTable::default();
            h.insert(ShortString::from(RECORD_HEADER), AMQPValue::Boolean(starts));
            e.msg.properties = Arc::new(BasicProperties::default().with_headers(h));
            e
        };
        let mut s = StreamLog::new(None);
        // A frame of three records, then one of two.
        for (id, starts) in [(0, true), (1, false), (2, false), (3, true), (4, false)] {
            s.push(record(id, starts), DEFAULT_MAX_SEGMENT_BYTES);
        }
        assert_eq!(s.start(StartAt::Last), 3);
        // An AMQP 0-9-1 message is a chunk of its own.
        s.push(entry(5, 1, 0), DEFAULT_MAX_SEGMENT_BYTES);
        assert_eq!(s.start(StartAt::Last), 5);
    }

    #[test]
    fn start_positions_follow_rabbitmq() {
        let mut s = StreamLog::new(None);
        for i in 0..5 {
            s.push(entry(i, 1, 1000 * i), DEFAULT_MAX_SEGMENT_BYTES);
        }
        s.truncate_to(1);
        assert_eq!(s.start(StartAt::First), 1);
        assert_eq!(s.start(StartAt::Last), 4);
        assert_eq!(s.start(StartAt::Next), 5);
        assert_eq!(s.start(StartAt::Offset(0)), 1);
        assert_eq!(s.start(StartAt::Offset(3)), 3);
        assert_eq!(s.start(StartAt::Offset(100)), 100);
        assert_eq!(s.start(StartAt::TimestampMs(2500)), 3);
        assert_eq!(s.start(StartAt::TimestampMs(9000)), 5);
    }

    #[test]
    fn offset_specifications_parse_as_rabbitmq_reads_them() {
        use stablemq_protocol::LongString;
        let text = |s: &str| AMQPValue::LongString(LongString::from(s));
        assert_eq!(parse_start(None, 0), Ok(StartAt::Next));
        assert_eq!(parse_start(Some(&text("first")), 0), Ok(StartAt::First));
        assert_eq!(parse_start(Some(&text("last")), 0), Ok(StartAt::Last));
        assert_eq!(parse_start(Some(&text("next")), 0), Ok(StartAt::Next));
        assert_eq!(
            parse_start(Some(&AMQPValue::LongInt(-1)), 0),
            Ok(StartAt::Offset(0))
        );
        assert_eq!(
            parse_start(Some(&AMQPValue::LongLongInt(7)), 0),
            Ok(StartAt::Offset(7))
        );
        assert_eq!(
            parse_start(Some(&AMQPValue::Timestamp(5)), 0),
            Ok(StartAt::TimestampMs(5000))
        );
        assert_eq!(
            parse_start(Some(&text("1h")), 7_200_000),
            Ok(StartAt::TimestampMs(3_600_000))
        );
        assert!(parse_start(Some(&text("bad")), 0).is_err());
        assert_eq!(parse_age_ms("7D"), Some(7 * 86_400_000));
        assert_eq!(parse_age_ms("45s"), Some(45_000));
        assert_eq!(parse_age_ms("10X"), None);
        assert_eq!(parse_age_ms("0s"), None);
        assert_eq!(parse_age_ms("s"), None);
    }
}
