//! Stream records as the master stores them: the properties a record
//! published over the stream protocol is stored with.
//!
//! A record published over the stream protocol is stored as it came (an
//! AMQP 1.0 message for RabbitMQ's clients, or any bytes): its body is the
//! record, and its properties carry [`RECORD_HEADER`], which tells every
//! reader so. A stream-protocol reader gets such a record back byte for byte;
//! an AMQP 0-9-1 reader gets it converted (`broker::stream_record`).

use crate::broker::stream_filter::FILTER_VALUE_HEADER;
use crate::broker::stream_record::{
    PUBLISHER_HEADER, PUBLISHING_ID_HEADER, RECORD_HEADER, WRITER_HEADER,
};
use stablemq_protocol::{AMQPValue, BasicProperties, FieldTable, ShortString};

/// The properties of a record published over the stream protocol:
/// persistent, and marked as a stream record. The header holds the record
/// count of the chunk it starts (a chunk: the records of a publish frame, at
/// most 100; `last` starts at the newest, and a subscription delivers one
/// whole), or `false` on a record that continues one
/// (`broker::stream_record::chunk_mark`).
///
/// The first record of a chunk of a deduplicating publisher also names the
/// publisher (`x-stream-writer`), as Osiris stores its tracking entry in
/// the chunk's trailer, whose length a delivered chunk's header states.
///
/// The record that ends a message of a deduplicating publisher carries its
/// reference and publishing id (`sequence`; `PUBLISHER_HEADER`), so the
/// publisher's sequence is logged in the entry's own event.
///
/// A record of a message published with a filter value (publish v2) keeps
/// it under `x-stream-filter-value` (`broker::stream_filter`), logged with
/// it; no reader sees it (a stream-protocol reader gets the record, an AMQP
/// 0-9-1 reader the properties of the AMQP 1.0 message inside it).
pub(super) fn properties(
    starts_chunk_of: Option<u32>,
    writer: Option<&str>,
    sequence: Option<(&str, u64)>,
    filter_value: Option<&str>,
) -> BasicProperties {
    let mut headers = FieldTable::default();
    let mark = match starts_chunk_of {
        Some(n) => AMQPValue::LongUInt(n),
        None => AMQPValue::Boolean(false),
    };
    headers.insert(ShortString::from(RECORD_HEADER), mark);
    if let (Some(_), Some(w)) = (starts_chunk_of, writer) {
        headers.insert(
            ShortString::from(WRITER_HEADER),
            AMQPValue::LongString(w.into()),
        );
    }
    if let Some((reference, id)) = sequence {
        headers.insert(
            ShortString::from(PUBLISHER_HEADER),
            AMQPValue::LongString(reference.into()),
        );
        headers.insert(
            ShortString::from(PUBLISHING_ID_HEADER),
            AMQPValue::LongLongInt(id.cast_signed()),
        );
    }
    if let Some(v) = filter_value {
        headers.insert(
            ShortString::from(FILTER_VALUE_HEADER),
            AMQPValue::LongString(v.into()),
        );
    }
    BasicProperties::default()
        .with_delivery_mode(2)
        .with_headers(headers)
}
