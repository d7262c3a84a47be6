//! A stream's state beside its entries: retention cuts and tracked
//! references (stored offsets, publisher sequences) under keys of their
//! own, and publisher sequences carried by the entries' own events.

use super::*;

/// A stream declared with `x-queue-type: stream`.
fn stream_declared(name: &str) -> Event {
    let mut arguments = FieldTable::default();
    arguments.insert(
        ShortString::from("x-queue-type"),
        AMQPValue::LongString("stream".into()),
    );
    Event::QueueDeclared {
        vhost: "/".into(),
        name: name.into(),
        spec: QueueSpec {
            durable: true,
            auto_delete: false,
            exclusive_owner: None,
            arguments,
        },
    }
}

/// Stored offsets and publisher sequences are written as often as clients
/// like: the state keeps the newest value per reference, not every event
/// (as definitions by log index it grew by one key per store-offset), and a
/// stream deleted and declared again keeps none of the old one's tracking or
/// cut.
#[test]
fn tracking_and_cuts_keep_one_key_each_and_go_with_their_stream() {
    let track = |reference: &str, value: u64| Event::StreamTracked {
        vhost: "/".into(),
        queue: "s".into(),
        kind: Tracking::Offset,
        reference: reference.into(),
        value,
    };
    let cut = |first_offset: u64| Event::StreamTruncated {
        vhost: "/".into(),
        queue: "s".into(),
        first_offset,
        msg_ids: Vec::new(),
    };
    let mut events = vec![stream_declared("s")];
    for v in 0..500 {
        events.push(track("reader", v));
    }
    events.push(track("other", 7));
    events.push(cut(3));
    events.push(cut(5));
    let store = materialize(&events, &[(64, false), (7, true)], 0);
    let state = state_of(&store);
    let tagged = |tag: u8| state.keys().filter(|k| k.first() == Some(&tag)).count();
    assert_eq!(tagged(b't'), 2, "one key per tracked reference");
    assert_eq!(tagged(b'f'), 1, "one key per stream's cut");
    let restored = restore(&config_vhosts(), &state).unwrap();
    let s = restored
        .queue("/", "s")
        .and_then(|q| q.stream.as_ref())
        .unwrap();
    assert_eq!(s.tracked(Tracking::Offset, "reader"), Some(499));
    assert_eq!(s.tracked(Tracking::Offset, "other"), Some(7));
    assert_eq!(s.first_offset(), 5);
    assert_eq!(summary(&restored), summary(&apply_all(&events)));

    // Deleted and declared again: nothing of the old stream's.
    events.push(Event::QueueDeleted {
        vhost: "/".into(),
        name: "s".into(),
    });
    events.push(stream_declared("s"));
    let store = materialize(&events, &[(64, false), (7, true)], 0);
    let state = state_of(&store);
    assert_eq!(tagged_count(&state, b't') + tagged_count(&state, b'f'), 0);
    let restored = restore(&config_vhosts(), &state).unwrap();
    let s = restored
        .queue("/", "s")
        .and_then(|q| q.stream.as_ref())
        .unwrap();
    assert_eq!(s.tracked(Tracking::Offset, "reader"), None);
    assert_eq!(s.first_offset(), 0);
    assert_eq!(summary(&restored), summary(&apply_all(&events)));
}

fn tagged_count(state: &BTreeMap<Bytes, Bytes>, tag: u8) -> usize {
    state.keys().filter(|k| k.first() == Some(&tag)).count()
}

/// A stream-protocol record of publisher `reference` ending the message
/// with publishing id `id`, as the bridge publishes it.
fn deduplicated_record(msg_id: u64, reference: &str, id: u64) -> Event {
    use crate::broker::stream_record::{PUBLISHER_HEADER, PUBLISHING_ID_HEADER, RECORD_HEADER};
    let mut headers = FieldTable::default();
    headers.insert(RECORD_HEADER.into(), AMQPValue::LongUInt(1));
    headers.insert(
        PUBLISHER_HEADER.into(),
        AMQPValue::LongString(reference.into()),
    );
    headers.insert(
        PUBLISHING_ID_HEADER.into(),
        AMQPValue::LongLongInt(id.cast_signed()),
    );
    Event::Published {
        vhost: "/".into(),
        exchange: "".into(),
        routing_key: "s".into(),
        msg_id,
        timestamp_ms: 0,
        properties: Arc::new(
            BasicProperties::default()
                .with_delivery_mode(2)
                .with_headers(headers),
        ),
        body: Bytes::from_static(b"record"),
        queues: ["s".into()].into_iter().collect(),
    }
}

/// A deduplicating publisher's sequence is logged in its entries' own
/// events (no `StreamTracked` of its own), so the log never holds an entry
/// without the sequence that deduplicates a resend of it: apply, the state
/// and a restore all know the sequence from the entries, also once
/// retention has cut them away, and an id above i64::MAX survives.
#[test]
fn a_publisher_sequence_rides_in_its_entries_events() {
    let big = u64::MAX - 1;
    let mut events = vec![stream_declared("s")];
    for (i, id) in [3, 4, 9].into_iter().enumerate() {
        events.push(deduplicated_record(10 + i as u64, "p", id));
    }
    events.push(deduplicated_record(20, "q", big));
    // A resend of a lower id (stored again only by a bug) lowers nothing.
    events.push(deduplicated_record(21, "p", 2));
    let applied = apply_all(&events);
    let s = applied
        .queue("/", "s")
        .and_then(|q| q.stream.as_ref())
        .unwrap();
    assert_eq!(s.tracked(Tracking::Sequence, "p"), Some(9));
    assert_eq!(s.tracked(Tracking::Sequence, "q"), Some(big));
    // Retention cuts every entry away; the sequences stay.
    events.push(Event::StreamTruncated {
        vhost: "/".into(),
        queue: "s".into(),
        first_offset: 5,
        msg_ids: vec![10, 11, 12, 20, 21],
    });
    for batches in [&[(64, false)][..], &[(2, true), (1, false)][..]] {
        let store = materialize(&events, batches, 0);
        let state = state_of(&store);
        assert_eq!(tagged_count(&state, b't'), 2, "one key per reference");
        let restored = restore(&config_vhosts(), &state).unwrap();
        let s = restored
            .queue("/", "s")
            .and_then(|q| q.stream.as_ref())
            .unwrap();
        assert_eq!(s.len(), 0);
        assert_eq!(s.tracked(Tracking::Sequence, "p"), Some(9));
        assert_eq!(s.tracked(Tracking::Sequence, "q"), Some(big));
        assert_eq!(summary(&restored), summary(&apply_all(&events)));
    }
}
