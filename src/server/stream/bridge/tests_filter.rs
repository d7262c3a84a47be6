//! Chunk-level filtering of a subscription (`subscribe::drop_unmatched`):
//! which stored chunks are dropped, and how their deliveries are acked.

use super::subscribe::{Subscription, drop_unmatched, ready_len};
use crate::broker::stream_filter::StreamFilter;
use crate::broker::stream_record::ChunkMark::{self, Continues, Starts};
use crate::master::inout::StreamRecord;
use bytes::Bytes;
use std::collections::VecDeque;

fn d(offset: u64, mark: ChunkMark, value: Option<&str>) -> StreamRecord {
    StreamRecord {
        offset,
        delivery_tag: offset + 1,
        timestamp_ms: 0,
        record: Bytes::from("r"),
        mark,
        trailer: 0,
        filter_value: value.map(Box::from),
    }
}

fn sub(values: &[&str], match_unfiltered: bool) -> Subscription {
    Subscription {
        channel: 3,
        stream: "s".into(),
        subscribing: None,
        pending: Vec::new(),
        in_flight: VecDeque::new(),
        credit: 0,
        sac: None,
        filter: Some(StreamFilter::new(
            values.iter().map(|v| (*v).to_owned()),
            match_unfiltered,
        )),
        checked: 0,
    }
}

fn offsets(s: &Subscription) -> Vec<u64> {
    s.pending.iter().map(|d| d.offset).collect()
}

#[test]
fn chunks_without_a_match_are_dropped_and_acked_without_credit() {
    let mut s = sub(&["a"], false);
    // Chunk 0-1 of "b", chunk 2-3 mixed, chunk 4 of "b", then chunk 5-6
    // whose last record has not come.
    s.pending = vec![
        d(0, Starts(Some(2)), Some("b")),
        d(1, Continues, Some("b")),
        d(2, Starts(Some(2)), Some("b")),
        d(3, Continues, Some("a")),
        d(4, Starts(Some(1)), Some("b")),
        d(5, Starts(Some(2)), Some("b")),
    ];
    let acks = drop_unmatched(&mut s);
    // The first is at the head with nothing before it: one multiple ack;
    // the one after the kept chunk is acked tag by tag.
    assert_eq!(acks, [(2, true), (5, false)]);
    // The mixed chunk is kept whole; the incomplete one waits.
    assert_eq!(offsets(&s), [2, 3, 5]);
    assert_eq!(s.checked, 2);
    // Its tail comes: the chunk is whole and has no match.
    s.pending.push(d(6, Continues, Some("b")));
    assert_eq!(ready_len(&s.pending), 4);
    assert_eq!(drop_unmatched(&mut s), [(6, false), (7, false)]);
    assert_eq!(offsets(&s), [2, 3]);
}

#[test]
fn a_chunk_of_its_channel_being_written_makes_acks_single() {
    let mut s = sub(&["a"], false);
    s.in_flight.push_back((3, 9));
    s.pending = vec![d(10, Starts(Some(2)), Some("b")), d(11, Continues, None)];
    assert_eq!(drop_unmatched(&mut s), [(11, false), (12, false)]);
    assert!(s.pending.is_empty());
}

#[test]
fn match_unfiltered_keeps_chunks_with_a_record_without_a_value() {
    let mut s = sub(&["a"], true);
    s.pending = vec![
        d(0, Starts(Some(2)), Some("b")),
        d(1, Continues, None),
        d(2, Starts(None), Some("b")),
        d(3, Starts(None), Some("a")),
    ];
    assert_eq!(drop_unmatched(&mut s), [(3, false)]);
    assert_eq!(offsets(&s), [0, 1, 3]);
}

#[test]
fn create_stream_takes_a_filter_size_in_rabbitmq_s_range() {
    let args = |v: &str| [("stream-filter-size-bytes".to_owned(), v.to_owned())];
    assert!(super::control::stream_arguments(&args("16")).is_ok());
    assert!(super::control::stream_arguments(&args("255")).is_ok());
    for bad in ["15", "256", "x"] {
        assert!(
            super::control::stream_arguments(&args(bad)).is_err(),
            "{bad}"
        );
    }
}
