use super::*;
use stablemq_protocol::{AMQPValue, LongString, ShortString};

#[test]
fn events_round_trip_through_the_codec() {
    let mut args = FieldTable::default();
    args.insert(
        ShortString::from("x-queue-type"),
        AMQPValue::LongString(LongString::from("quorum")),
    );
    args.insert(ShortString::from("n"), AMQPValue::LongLongInt(-5));
    let props = BasicProperties::default()
        .with_delivery_mode(2)
        .with_headers(args.clone())
        .with_content_type(ShortString::from("text/plain"));
    let evs = vec![
        Event::QueueDeclared {
            vhost: "/".into(),
            name: "q".into(),
            spec: QueueSpec {
                durable: true,
                auto_delete: false,
                exclusive_owner: None,
                arguments: args.clone(),
            },
        },
        Event::Published {
            vhost: "/".into(),
            exchange: "amq.direct".into(),
            routing_key: "k".into(),
            msg_id: 42,
            timestamp_ms: 1_700_000_000_000,
            properties: Arc::new(props),
            body: Bytes::from_static(b"hello"),
            queues: ["q".into()].into_iter().collect(),
        },
        Event::Removed {
            vhost: "/".into(),
            queue: "q".into(),
            msg_ids: vec![1, 2, 3],
        },
        Event::ParameterSet {
            vhost: "/".into(),
            component: "vhost-limits".into(),
            name: "limits".into(),
            value: r#"{"max-queues":3}"#.into(),
        },
        Event::GlobalParameterCleared { name: "g".into() },
        Event::UserLimitsSet {
            name: "alice".into(),
            value: r#"{"max-channels":3,"max-connections":null}"#.into(),
        },
    ];
    for e in evs {
        assert_eq!(Event::decode(&e.encode()).unwrap(), e);
    }
    assert!(Event::decode(&[]).is_err());
    assert!(Event::decode(&[9, 1, 2]).is_err());
    assert!(Event::decode(&[EVENT_FORMAT_VERSION, 200, 200, 200]).is_err());
}

fn published(body: &'static [u8]) -> Event {
    Event::Published {
        vhost: "/".into(),
        exchange: "".into(),
        routing_key: "q".into(),
        msg_id: 7,
        timestamp_ms: 1,
        properties: Arc::default(),
        body: Bytes::from_static(body),
        queues: ["q".into()].into_iter().collect(),
    }
}

fn body_of(e: &Event) -> &Bytes {
    match e {
        Event::Published { body, .. } => body,
        other => panic!("not a publish: {other:?}"),
    }
}

#[test]
fn a_shared_decode_slices_the_body_out_of_the_entry_and_a_plain_one_copies_it() {
    let e = published(b"a body of some length");
    let wire = e.encode();
    let range = wire.as_ptr() as usize..wire.as_ptr() as usize + wire.len();

    let shared = Event::decode_shared(&wire).unwrap();
    assert_eq!(shared, e);
    assert!(range.contains(&(body_of(&shared).as_ptr() as usize)));

    let copied = Event::decode(&wire).unwrap();
    assert_eq!(copied, e);
    assert!(!range.contains(&(body_of(&copied).as_ptr() as usize)));
    // The source is forgotten after a shared decode: a later plain
    // decode of the same buffer copies again.
    let again = Event::decode(&wire).unwrap();
    assert!(!range.contains(&(body_of(&again).as_ptr() as usize)));
}

#[test]
fn a_shared_decode_slices_the_exchange_and_routing_key_too() {
    let e = Event::Published {
        vhost: "/".into(),
        exchange: "amq.topic".into(),
        routing_key: "a.b.ключ".into(),
        msg_id: 7,
        timestamp_ms: 1,
        properties: Arc::new(BasicProperties::default().with_delivery_mode(2)),
        body: Bytes::from_static(b"body"),
        queues: ["q".into()].into_iter().collect(),
    };
    let wire = e.encode();
    let range = wire.as_ptr() as usize..wire.as_ptr() as usize + wire.len();
    let in_entry = |s: &ByteString| range.contains(&(s.as_ptr() as usize));
    let Event::Published {
        exchange,
        routing_key,
        ..
    } = Event::decode_shared(&wire).unwrap()
    else {
        panic!("not a publish");
    };
    assert_eq!((&*exchange, &*routing_key), ("amq.topic", "a.b.ключ"));
    assert!(in_entry(&exchange) && in_entry(&routing_key));
    let Event::Published { routing_key, .. } = Event::decode(&wire).unwrap() else {
        panic!("not a publish");
    };
    assert!(!in_entry(&routing_key), "a plain decode copies");
    assert_eq!(Event::decode_shared(&wire).unwrap(), e);
}

fn names_of(e: &Event) -> (Arc<str>, Arc<str>) {
    match e {
        Event::Published { vhost, queues, .. } => (vhost.clone(), queues[0].clone()),
        other => panic!("not a publish: {other:?}"),
    }
}

#[test]
fn decoding_reuses_the_names_it_saw_lately_and_still_decodes_new_ones() {
    let wire = published(b"x").encode();
    let (vhost, queue) = names_of(&Event::decode(&wire).unwrap());
    let (vhost2, queue2) = names_of(&Event::decode_shared(&wire).unwrap());
    assert!(Arc::ptr_eq(&vhost, &vhost2) && Arc::ptr_eq(&queue, &queue2));
    // Equal properties share one value too; different ones do not.
    let props = |e: Event| match e {
        Event::Published { properties, .. } => properties,
        other => panic!("not a publish: {other:?}"),
    };
    let persistent = |id| Event::Published {
        vhost: "/".into(),
        exchange: "".into(),
        routing_key: "q".into(),
        msg_id: id,
        timestamp_ms: 1,
        properties: Arc::new(BasicProperties::default().with_delivery_mode(2)),
        body: Bytes::new(),
        queues: ["q".into()].into_iter().collect(),
    };
    let first = props(Event::decode(&persistent(1).encode()).unwrap());
    let second = props(Event::decode(&persistent(2).encode()).unwrap());
    assert!(Arc::ptr_eq(&first, &second));
    let other = props(Event::decode(&wire).unwrap());
    assert_eq!(*other, BasicProperties::default());
    assert!(!Arc::ptr_eq(&first, &other));
    // More names than are kept: each still decodes to itself.
    for i in 0..40 {
        let name: Arc<str> = format!("q{i}").into();
        let e = Event::Published {
            vhost: name.clone(),
            exchange: "".into(),
            routing_key: "".into(),
            msg_id: i,
            timestamp_ms: 0,
            properties: Arc::default(),
            body: Bytes::new(),
            queues: [name.clone(), "other".into()].into_iter().collect(),
        };
        assert_eq!(Event::decode(&e.encode()).unwrap(), e);
    }
}

#[test]
fn entries_cut_from_an_arena_are_the_plain_encoding_back_to_back() {
    let mut arena = BytesMut::new();
    let events = [
        published(b"one"),
        published(&[7; 100_000]),
        Event::QueueDeleted {
            vhost: "/".into(),
            name: "q".into(),
        },
        published(b"two"),
        published(b"three"),
    ];
    let entries: Vec<Bytes> = events.iter().map(|e| e.encode_into(&mut arena)).collect();
    for (e, entry) in events.iter().zip(&entries) {
        assert_eq!(entry, &e.encode());
        assert_eq!(&Event::decode(entry).unwrap(), e);
    }
    // Small entries follow each other in one chunk (the big one filled
    // its own, which the one after it used up).
    assert_eq!(entries[3].as_ptr_range().end, entries[4].as_ptr());
}

#[test]
fn a_shared_decode_of_a_failing_entry_leaves_nothing_behind() {
    let bad = Bytes::from_static(&[EVENT_FORMAT_VERSION, 200, 200, 200]);
    assert!(Event::decode_shared(&bad).is_err());
    let e = published(b"x");
    assert_eq!(Event::decode_shared(&e.encode()).unwrap(), e);
}
