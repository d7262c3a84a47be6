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

/// A persistent publish of message `msg_id` to `queue` alone.
fn published(msg_id: u64, queue: &str) -> Event {
    Event::Published {
        vhost: "/".into(),
        exchange: "".into(),
        routing_key: queue.into(),
        msg_id,
        timestamp_ms: 0,
        properties: Arc::new(BasicProperties::default().with_delivery_mode(2)),
        body: Bytes::from(format!("body {msg_id}")),
        queues: [queue.into()].into_iter().collect(),
    }
}

fn stream_key(id: u64) -> Bytes {
    KeyArena::default().stream_entry_key("/", "s", id).unwrap()
}

/// `state` after `ops`, as a store writes them.
fn applied_ops(mut state: BTreeMap<Bytes, Bytes>, ops: &[StateOp]) -> BTreeMap<Bytes, Bytes> {
    for op in ops {
        match op {
            StateOp::Put { key, value } => {
                state.insert(key.clone(), value.clone());
            }
            StateOp::Delete { key } => {
                state.remove(key);
            }
            StateOp::DeletePrefix { prefix } => state.retain(|k, _| !k.starts_with(prefix)),
        }
    }
    state
}

/// A stream's entries are under a tag of their own (`0xf3`), apart from the
/// classic queues' messages (`m`), so that the stores keep them in a
/// keyspace of their own. A state written before holds a stream's older
/// entries under `m`: it restores them first (their ids are lower), and a
/// retention cut deletes both keys of each entry it removes, so nothing of
/// them is left to come back at a restore.
#[test]
fn stream_entries_have_a_tag_of_their_own_and_older_states_still_restore() {
    let classic = Event::QueueDeclared {
        vhost: "/".into(),
        name: "c".into(),
        spec: QueueSpec {
            durable: true,
            auto_delete: false,
            exclusive_owner: None,
            arguments: FieldTable::default(),
        },
    };
    let mut events = vec![stream_declared("s"), classic];
    events.extend((1..=4).map(|id| published(id, "s")));
    events.push(published(5, "c"));
    let state = state_of(&materialize(&events, &[(64, false)], 0));
    assert_eq!(tagged_count(&state, 0xf3), 4, "the stream's entries");
    assert_eq!(tagged_count(&state, b'm'), 1, "the classic queue's message");
    assert!(state.contains_key(&stream_key(4)));

    // The older layout: the stream's first two entries under `m`.
    let mut legacy = state.clone();
    for id in 1..=2 {
        let value = legacy.remove(&stream_key(id)).unwrap();
        legacy.insert(message_key("/", "s", id).unwrap(), value);
    }
    let restored = restore(&config_vhosts(), &legacy).unwrap();
    assert_eq!(summary(&restored), summary(&apply_all(&events)));

    // A cut of the first three entries, reduced after a restart.
    let cut = Event::StreamTruncated {
        vhost: "/".into(),
        queue: "s".into(),
        first_offset: 3,
        msg_ids: vec![1, 2, 3],
    };
    let reduce_cut = |state: &BTreeMap<Bytes, Bytes>| {
        let mut reducer = BrokerReducer::new(config_vhosts());
        reducer.restore(state).unwrap();
        let mut ops = Vec::new();
        reducer
            .reduce(&Entry::new(1, 100, cut.encode()), &mut ops)
            .unwrap();
        reducer.flush(&mut ops).unwrap();
        ops
    };
    let deletes = |ops: &[StateOp]| -> Vec<Bytes> {
        ops.iter()
            .filter_map(|op| match op {
                StateOp::Delete { key } => Some(key.clone()),
                _ => None,
            })
            .collect()
    };
    events.push(cut.clone());
    let expected = summary(&apply_all(&events));
    let ops = reduce_cut(&legacy);
    for id in 1..=3 {
        assert!(deletes(&ops).contains(&stream_key(id)), "{id} under s");
        assert!(
            deletes(&ops).contains(&message_key("/", "s", id).unwrap()),
            "{id} under m"
        );
    }
    let after = applied_ops(legacy, &ops);
    assert_eq!(tagged_count(&after, 0xf3) + tagged_count(&after, b'm'), 2);
    assert_eq!(
        summary(&restore(&config_vhosts(), &after).unwrap()),
        expected
    );
    // A stream with nothing under `m`: one delete per entry.
    let ops = reduce_cut(&state);
    assert_eq!(deletes(&ops), (1..=3).map(stream_key).collect::<Vec<_>>());
    let after = applied_ops(state, &ops);
    assert_eq!(
        summary(&restore(&config_vhosts(), &after).unwrap()),
        expected
    );
}
