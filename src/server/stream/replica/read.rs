//! A read of a stream from this node's replica of the broker state, run
//! inside the master task (between two of its messages, as a management
//! query is) so it sees a consistent state without locks.
//!
//! A replica is fed stable entries only (`server::replica`), so everything
//! it holds may be shown (I1) with no stable index to compare against.

use crate::broker::Broker;
use crate::broker::stream::StartAt;
use crate::broker::stream_filter::filter_value;
use crate::broker::stream_record::{chunk_mark, record_of, trailer_length};
use crate::master::inout::StreamRecord;

/// Where a read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::server::stream) enum From {
    /// A subscription's offset specification, resolved against the
    /// replica's stream as the master resolves it.
    Spec(StartAt),
    /// The next offset a subscription reads (the first kept, if retention
    /// removed it).
    Offset(u64),
}

/// What to read.
#[derive(Debug, Clone)]
pub(in crate::server::stream) struct ReadRequest {
    pub(in crate::server::stream) vhost: String,
    pub(in crate::server::stream) stream: String,
    pub(in crate::server::stream) from: From,
    /// Entries at most.
    pub(in crate::server::stream) max_records: usize,
    /// Record bytes at most (the entry that crosses it is the last).
    pub(in crate::server::stream) max_bytes: usize,
    /// Each entry's filter value is wanted (a filtered subscription).
    pub(in crate::server::stream) filter_values: bool,
}

/// What a read found.
#[derive(Debug)]
pub(in crate::server::stream) enum ReadAnswer {
    /// No such stream in the replica (none, deleted, or not replicated here
    /// yet).
    NoStream,
    /// The entries read, in offset order, from `start`; the next read
    /// starts at `next`.
    Entries {
        start: u64,
        next: u64,
        entries: Vec<StreamRecord>,
    },
}

/// Read `req` from `broker`'s replica of the stream.
pub(in crate::server::stream) fn read(broker: &Broker, req: &ReadRequest) -> ReadAnswer {
    let Some(log) = broker
        .queue(&req.vhost, &req.stream)
        .and_then(|q| q.stream.as_ref())
    else {
        return ReadAnswer::NoStream;
    };
    let start = match req.from {
        From::Spec(at) => log.start(at),
        From::Offset(n) => n.max(log.first_offset()),
    };
    let mut entries = Vec::new();
    let (mut next, mut bytes) = (start, 0usize);
    log.visit_from(start, req.max_records, |offset, entry| {
        let record = record_of(&entry.msg);
        bytes += record.len();
        entries.push(StreamRecord {
            offset,
            delivery_tag: offset,
            timestamp_ms: entry.msg.timestamp_ms,
            record,
            mark: chunk_mark(&entry.msg),
            trailer: trailer_length(&entry.msg),
            filter_value: req
                .filter_values
                .then(|| filter_value(&entry.msg).map(Box::from))
                .flatten(),
        });
        next = offset + 1;
        bytes < req.max_bytes
    });
    ReadAnswer::Entries {
        start,
        next,
        entries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::event::Event;

    use crate::broker::event::QueueSpec;
    use bytes::Bytes;
    use stablemq_protocol::{AMQPValue, BasicProperties, FieldTable, ShortString};
    use std::sync::Arc;

    /// A replica that applied a stream's declare and `entries` publishes.
    fn broker_with_stream(entries: u64) -> Broker {
        let mut b = Broker::new();
        b.apply(&Event::VhostCreated { vhost: "/".into() }, 0);
        let mut arguments = FieldTable::default();
        arguments.insert(
            ShortString::from("x-queue-type"),
            AMQPValue::LongString("stream".into()),
        );
        let declare = Event::QueueDeclared {
            vhost: "/".into(),
            name: "s".into(),
            spec: QueueSpec {
                durable: true,
                auto_delete: false,
                exclusive_owner: None,
                arguments,
            },
        };
        b.apply(&declare, 0);
        for i in 0..entries {
            let publish = Event::Published {
                vhost: "/".into(),
                exchange: "".into(),
                routing_key: "s".into(),
                msg_id: i + 1,
                timestamp_ms: 1000 * i,
                properties: Arc::new(BasicProperties::default().with_delivery_mode(2)),
                body: Bytes::from(format!("m{i}")),
                queues: ["s".into()].into_iter().collect(),
            };
            b.apply(&publish, 0);
        }
        b
    }

    fn req(from: From, max_records: usize) -> ReadRequest {
        ReadRequest {
            vhost: "/".into(),
            stream: "s".into(),
            from,
            max_records,
            max_bytes: usize::MAX,
            filter_values: false,
        }
    }

    #[test]
    fn a_read_resolves_the_spec_and_stops_at_the_bounds() {
        let b = broker_with_stream(5);
        let ReadAnswer::Entries {
            start,
            next,
            entries,
        } = read(&b, &req(From::Spec(StartAt::First), 3))
        else {
            panic!("the stream is there");
        };
        assert_eq!((start, next), (0, 3));
        assert_eq!(
            entries.iter().map(|d| d.offset).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        let ReadAnswer::Entries { start, next, .. } = read(&b, &req(From::Spec(StartAt::Next), 9))
        else {
            panic!("the stream is there");
        };
        assert_eq!((start, next), (5, 5));
        let ReadAnswer::Entries { entries, .. } = read(&b, &req(From::Offset(4), 9)) else {
            panic!("the stream is there");
        };
        assert_eq!(entries.len(), 1);
        let mut one_byte = req(From::Offset(0), 9);
        one_byte.max_bytes = 1;
        let ReadAnswer::Entries { next, .. } = read(&b, &one_byte) else {
            panic!("the stream is there");
        };
        assert_eq!(next, 1, "the entry that crosses max_bytes is the last");
    }

    #[test]
    fn a_stream_the_replica_lacks_is_no_stream() {
        let b = broker_with_stream(1);
        let mut r = req(From::Spec(StartAt::First), 1);
        r.stream = "other".into();
        assert!(matches!(read(&b, &r), ReadAnswer::NoStream));
        r.vhost = "nope".into();
        assert!(matches!(read(&b, &r), ReadAnswer::NoStream));
    }
}
