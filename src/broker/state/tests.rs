//! The reducer and [`restore`] against plain apply: for random event sequences,
//! batch boundaries, reducer restarts and split points, the state plus the
//! log suffix gives the same broker as applying the whole log (I4).

use super::keys::put_message_key;
use super::*;
use crate::broker::event::{Binding, Destination, ExchangeKind, ExchangeSpec, QueueSpec, Tracking};
use proptest::prelude::*;
use stablemq_cluster::store::Materializer;
use stablemq_cluster::{EventStore, MemoryStore};
use stablemq_protocol::{AMQPValue, FieldTable, ShortString};
use std::collections::BTreeMap;

const VHOSTS: [&str; 2] = ["/", "v2"];
/// Includes a name that is a prefix of another, and one with a NUL byte.
const QUEUES: [&str; 4] = ["q", "q1", "q\0x", "dlq"];
const EXCHANGES: [&str; 2] = ["x1", "x2"];
/// A stream (`x-queue-type: stream`); publishes pick it as queue index
/// `QUEUES.len()`.
const STREAM: &str = "s";

/// The name of queue index `i`: one of `QUEUES`, or the stream.
fn qname(i: usize) -> &'static str {
    QUEUES.get(i).copied().unwrap_or(STREAM)
}

fn config_vhosts() -> Vec<String> {
    vec!["/".to_string()]
}

/// An event with its ids still to be made increasing.
#[derive(Debug, Clone)]
enum Gen {
    Vhost(usize),
    DeclareQueue(usize, usize, Option<u16>, Option<u8>),
    DeleteQueue(usize, usize),
    DeclareExchange(usize, usize, bool),
    DeleteExchange(usize, usize),
    BindQueue(usize, usize, usize, bool),
    BindExchange(usize, usize, usize, bool),
    Publish(usize, Vec<usize>, Option<u16>, Option<u8>, u8),
    Remove(usize, usize, Vec<u8>),
    /// Declare the stream with this segment size.
    DeclareStream(usize, u8),
    /// Retention: cut the stream this many entries past its first offset.
    Truncate(usize, u8),
    /// The stream protocol's tracking: offset (true) or sequence, of one of
    /// two references, with this value.
    Track(usize, bool, bool, u8),
}

fn gen_event() -> impl Strategy<Value = Gen> {
    let v = 0..VHOSTS.len();
    let q = 0..QUEUES.len();
    let x = 0..EXCHANGES.len();
    prop_oneof![
        1 => v.clone().prop_map(Gen::Vhost),
        3 => (v.clone(), q.clone(), proptest::option::of(1..500u16), proptest::option::of(1..9u8))
            .prop_map(|(a, b, c, d)| Gen::DeclareQueue(a, b, c, d)),
        1 => (v.clone(), q.clone()).prop_map(|(a, b)| Gen::DeleteQueue(a, b)),
        2 => (v.clone(), x.clone(), any::<bool>()).prop_map(|(a, b, c)| Gen::DeclareExchange(a, b, c)),
        1 => (v.clone(), x.clone()).prop_map(|(a, b)| Gen::DeleteExchange(a, b)),
        2 => (v.clone(), x.clone(), q.clone(), any::<bool>()).prop_map(|(a, b, c, d)| Gen::BindQueue(a, b, c, d)),
        1 => (v.clone(), x.clone(), x.clone(), any::<bool>()).prop_map(|(a, b, c, d)| Gen::BindExchange(a, b, c, d)),
        1 => (v.clone(), 1..40u8).prop_map(|(a, b)| Gen::DeclareStream(a, b)),
        1 => (v.clone(), 0..6u8).prop_map(|(a, b)| Gen::Truncate(a, b)),
        1 => (v.clone(), any::<bool>(), any::<bool>(), any::<u8>())
            .prop_map(|(a, b, c, d)| Gen::Track(a, b, c, d)),
        8 => (v.clone(), proptest::collection::vec(0..QUEUES.len() + 1, 0..3), proptest::option::of(1..500u16),
              proptest::option::of(0..9u8), any::<u8>())
            .prop_map(|(a, b, c, d, e)| Gen::Publish(a, b, c, d, e)),
        5 => (v, q, proptest::collection::vec(0..40u8, 1..4)).prop_map(|(a, b, c)| Gen::Remove(a, b, c)),
    ]
}

fn to_events(gens: &[Gen]) -> Vec<Event> {
    let mut next_id = 1u64;
    let mut out = Vec::new();
    // Retention cuts name the entries the master saw: it applies as it goes.
    let mut seen = apply_all(&[]);
    for (i, g) in gens.iter().enumerate() {
        let vh = |v: usize| VHOSTS[v].to_string();
        let ev = match g {
            Gen::Vhost(v) => Event::VhostCreated { vhost: vh(*v) },
            Gen::DeclareQueue(v, q, ttl, prio) => {
                let mut arguments = FieldTable::default();
                if let Some(ttl) = ttl {
                    arguments.insert(
                        ShortString::from("x-message-ttl"),
                        AMQPValue::LongInt(i32::from(*ttl)),
                    );
                }
                if let Some(p) = prio {
                    arguments.insert(
                        ShortString::from("x-max-priority"),
                        AMQPValue::ShortShortUInt(*p),
                    );
                }
                Event::QueueDeclared {
                    vhost: vh(*v),
                    name: QUEUES[*q].into(),
                    spec: QueueSpec {
                        durable: true,
                        auto_delete: false,
                        exclusive_owner: None,
                        arguments,
                    },
                }
            }
            Gen::DeleteQueue(v, q) => Event::QueueDeleted {
                vhost: vh(*v),
                name: QUEUES[*q].into(),
            },
            Gen::DeclareExchange(v, x, auto_delete) => Event::ExchangeDeclared {
                vhost: vh(*v),
                name: EXCHANGES[*x].into(),
                spec: ExchangeSpec {
                    kind: ExchangeKind::Direct,
                    durable: true,
                    auto_delete: *auto_delete,
                    internal: false,
                    arguments: FieldTable::default(),
                },
            },
            Gen::DeleteExchange(v, x) => Event::ExchangeDeleted {
                vhost: vh(*v),
                name: EXCHANGES[*x].into(),
            },
            Gen::BindQueue(v, x, q, unbind) | Gen::BindExchange(v, x, q, unbind) => {
                let destination = match g {
                    Gen::BindQueue(..) => Destination::Queue(QUEUES[*q].into()),
                    _ => Destination::Exchange(EXCHANGES[*q].into()),
                };
                let binding = Binding {
                    source: EXCHANGES[*x].into(),
                    destination,
                    routing_key: "k".into(),
                    arguments: FieldTable::default(),
                };
                match unbind {
                    true => Event::Unbound {
                        vhost: vh(*v),
                        binding,
                    },
                    false => Event::Bound {
                        vhost: vh(*v),
                        binding,
                    },
                }
            }
            Gen::Publish(v, queues, expiration, priority, body) => {
                let mut props = BasicProperties::default().with_delivery_mode(2);
                if let Some(e) = expiration {
                    props = props.with_expiration(ShortString::from(e.to_string()));
                }
                if let Some(p) = priority {
                    props = props.with_priority(*p);
                }
                let msg_id = next_id;
                next_id += 1 + u64::from(*body % 3);
                Event::Published {
                    vhost: vh(*v).into(),
                    exchange: "".into(),
                    routing_key: "k".into(),
                    msg_id,
                    timestamp_ms: 1_000 * i as u64,
                    properties: Arc::new(props),
                    body: Bytes::from(vec![*body; usize::from(*body % 7)]),
                    // Routing never lists a queue twice (`Broker::route`).
                    queues: {
                        let mut names: Vec<String> = Vec::new();
                        for q in queues {
                            if !names.iter().any(|n| n == qname(*q)) {
                                names.push(qname(*q).to_string());
                            }
                        }
                        names.into_iter().map(Into::into).collect()
                    },
                }
            }
            Gen::Remove(v, q, ids) => Event::Removed {
                vhost: vh(*v),
                queue: QUEUES[*q].into(),
                msg_ids: ids.iter().map(|i| u64::from(*i)).collect(),
            },
            Gen::DeclareStream(v, segment) => {
                let mut arguments = FieldTable::default();
                arguments.insert(
                    ShortString::from("x-queue-type"),
                    AMQPValue::LongString("stream".into()),
                );
                arguments.insert(
                    ShortString::from("x-stream-max-segment-size-bytes"),
                    AMQPValue::LongInt(i32::from(*segment)),
                );
                Event::QueueDeclared {
                    vhost: vh(*v),
                    name: STREAM.into(),
                    spec: QueueSpec {
                        durable: true,
                        auto_delete: false,
                        exclusive_owner: None,
                        arguments,
                    },
                }
            }
            Gen::Truncate(v, by) => {
                let Some(s) = seen.queue(&vh(*v), STREAM).and_then(|q| q.stream.as_ref()) else {
                    continue;
                };
                let first_offset = s.first_offset() + u64::from(*by).min(s.len() as u64);
                Event::StreamTruncated {
                    vhost: vh(*v),
                    queue: STREAM.into(),
                    first_offset,
                    msg_ids: s.ids_below(first_offset),
                }
            }
            Gen::Track(v, offset, first, value) => Event::StreamTracked {
                vhost: vh(*v),
                queue: STREAM.into(),
                kind: if *offset {
                    Tracking::Offset
                } else {
                    Tracking::Sequence
                },
                reference: if *first { "r1" } else { "r2" }.into(),
                value: u64::from(*value),
            },
        };
        seen.apply(&ev, 0);
        out.push(ev);
    }
    out
}

/// Everything a broker holds that the log decides, in a comparable form.
fn summary(b: &Broker) -> String {
    let mut out = format!("max_msg_id={}\n", b.max_msg_id);
    for (vname, v) in &b.vhosts {
        out += &format!("vhost {vname:?}\n");
        let xs: BTreeMap<_, _> = v.exchanges.iter().collect();
        for (name, x) in xs {
            out += &format!("  x {name:?} {:?} {:?}\n", x.spec, x.bindings);
        }
        let qs: BTreeMap<_, _> = v.queues.iter().collect();
        for (name, q) in qs {
            out += &format!("  q {name:?} {:?} bytes={}\n", q.spec, q.ready_bytes);
            if let Some(s) = &q.stream {
                out += &format!(
                    "    stream first={} next={}\n",
                    s.first_offset(),
                    s.next_offset()
                );
                for kind in [Tracking::Offset, Tracking::Sequence] {
                    for r in ["r1", "r2"] {
                        out += &format!("    {kind:?} {r} {:?}\n", s.tracked(kind, r));
                    }
                }
                for off in s.first_offset()..s.next_offset() {
                    let m = s.get(off).expect("an entry at every kept offset");
                    out += &format!(
                        "    @{off} id={} {:?} ts={}\n",
                        m.msg.id, m.msg.body, m.msg.timestamp_ms
                    );
                }
            }
            for (key, m) in q.ready.to_vec() {
                out += &format!(
                    "    {key:?} {:?} {:?} {:?} exp={:?} red={} ts={} {:?}\n",
                    m.msg.exchange,
                    m.msg.routing_key,
                    m.msg.body,
                    m.expires_at_ms,
                    m.redelivered,
                    m.msg.timestamp_ms,
                    m.msg.properties
                );
            }
        }
    }
    out
}

fn apply_all(events: &[Event]) -> Broker {
    let mut b = Broker::new();
    for v in config_vhosts() {
        b.apply(&Event::VhostCreated { vhost: v }, 0);
    }
    for e in events {
        b.apply(e, 0);
    }
    b
}

/// Reduce `events` on a memory store in batches of the given sizes, restarting
/// the reducer (from the state) where asked; returns the store.
fn materialize(events: &[Event], batches: &[(usize, bool)], retention: u64) -> MemoryStore {
    let open = |store: &MemoryStore| {
        Materializer::open(
            Box::new(BrokerReducer::new(config_vhosts())),
            retention,
            store,
        )
        .unwrap()
    };
    let mut store = MemoryStore::new();
    let mut m = open(&store);
    let mut at = 0usize;
    let mut sizes = batches.iter().cycle();
    while at < events.len() {
        let &(size, restart) = sizes.next().unwrap();
        let end = (at + size.max(1)).min(events.len());
        let entries: Vec<Entry> = events[at..end]
            .iter()
            .enumerate()
            .map(|(i, e)| Entry::new(1, (at + i + 1) as u64, e.encode()))
            .collect();
        store.append(&entries).unwrap();
        store.sync().unwrap();
        store.set_stable_index(end as u64).unwrap();
        m.advance(&mut store, &entries).unwrap();
        if restart {
            store.sync().unwrap();
            store.crash();
            m = open(&store);
        }
        at = end;
    }
    store.sync().unwrap();
    store
}

fn state_of(store: &MemoryStore) -> BTreeMap<Bytes, Bytes> {
    store.state_scan(b"").unwrap().into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn restore_from_state_plus_suffix_equals_apply_all(
        gens in proptest::collection::vec(gen_event(), 0..80),
        batches in proptest::collection::vec((1..9usize, proptest::bool::weighted(0.2)), 1..6),
        split_pct in 0..=100usize,
        retention in 0..5u64,
        chunk in 1..8usize,
    ) {
        let events = to_events(&gens);
        let expected = summary(&apply_all(&events));

        // The whole log reduced: the state alone is the broker.
        let store = materialize(&events, &batches, retention);
        let restored = restore(&config_vhosts(), &state_of(&store)).unwrap();
        prop_assert_eq!(summary(&restored), expected.clone());
        prop_assert_eq!(restored.max_msg_id, apply_all(&events).max_msg_id);
        prop_assert_eq!(store.state_index(), events.len() as u64);
        // The same state streamed in chunks, as a slave gets a snapshot.
        let mut builder = RestoreBuilder::new(&config_vhosts());
        let pairs: Vec<_> = state_of(&store).into_iter().collect();
        for part in pairs.chunks(chunk) {
            builder.feed(part.to_vec()).unwrap();
        }
        let streamed = builder.finish();
        prop_assert_eq!(summary(&streamed), expected.clone());
        prop_assert_eq!(streamed.max_msg_id, restored.max_msg_id);

        // A prefix reduced, the rest applied on top (a restart's suffix).
        let split = events.len() * split_pct / 100;
        let store = materialize(&events[..split], &batches, retention);
        let mut restored = restore(&config_vhosts(), &state_of(&store)).unwrap();
        for e in &events[split..] {
            restored.apply(e, 0);
        }
        prop_assert_eq!(summary(&restored), expected);
    }
}

/// A message's state key, as the reducer makes it.
fn message_key(vhost: &str, queue: &str, id: u64) -> Result<Bytes, ReduceError> {
    KeyArena::default().message_key(vhost, queue, id)
}

#[test]
fn the_key_arena_cuts_whole_keys_from_one_buffer() {
    let mut arena = KeyArena::default();
    let keys: Vec<Bytes> = (0..100)
        .map(|id| arena.message_key("/", "queue", id).unwrap())
        .collect();
    for (id, key) in keys.iter().enumerate() {
        let mut want = Vec::new();
        put_message_key(&mut want, "/", "queue", id as u64).unwrap();
        assert_eq!(&key[..], &want[..]);
    }
    // Back to back in one buffer: no allocation per key.
    for pair in keys.windows(2) {
        assert_eq!(pair[0].as_ptr_range().end, pair[1].as_ptr());
    }
    // A name too long for a key fails, and leaves nothing behind.
    let long = "q".repeat(70_000);
    assert!(arena.message_key("/", &long, 1).is_err());
    let next = arena.message_key("/", "queue", 7).unwrap();
    assert_eq!(next, keys[7]);
}

#[test]
fn publish_and_ack_in_one_batch_leave_no_message_in_the_state() {
    let q = |name: &str| Event::QueueDeclared {
        vhost: "/".into(),
        name: name.into(),
        spec: QueueSpec {
            durable: true,
            auto_delete: false,
            exclusive_owner: None,
            arguments: FieldTable::default(),
        },
    };
    let publish = |id: u64| Event::Published {
        vhost: "/".into(),
        exchange: "".into(),
        routing_key: "q".into(),
        msg_id: id,
        timestamp_ms: 0,
        properties: Arc::new(BasicProperties::default()),
        body: Bytes::from_static(b"body"),
        queues: ["q".into()].into_iter().collect(),
    };
    let removed = |id: u64| Event::Removed {
        vhost: "/".into(),
        queue: "q".into(),
        msg_ids: vec![id],
    };
    let events = vec![q("q"), publish(1), removed(1), publish(2)];
    let store = materialize(&events, &[(4, false)], 0);
    let state = state_of(&store);
    let messages: Vec<_> = state.keys().filter(|k| k.first() == Some(&b'm')).collect();
    assert_eq!(messages, vec![&message_key("/", "q", 2).unwrap()]);
    assert_eq!(
        state.get(&b"x"[..]),
        Some(&Bytes::copy_from_slice(&2u64.to_be_bytes()))
    );
    // Compacted with retention 0: the log holds nothing, the state everything.
    assert_eq!(store.log_base().index, 4);
    let restored = restore(&config_vhosts(), &state).unwrap();
    assert_eq!(restored.queue("/", "q").unwrap().ready_ids(), vec![2]);
}

#[test]
fn a_streamed_state_out_of_order_is_an_error() {
    let mut builder = RestoreBuilder::new(&config_vhosts());
    let pair = |k: &[u8]| (Bytes::copy_from_slice(k), Bytes::from(vec![0u8; 8]));
    builder.feed(vec![pair(b"x")]).unwrap();
    assert!(matches!(
        builder.feed(vec![pair(b"m")]),
        Err(RestoreError::Corrupt(_))
    ));
}

#[test]
fn corrupt_state_is_an_error_not_a_panic() {
    let mut state = BTreeMap::new();
    state.insert(Bytes::from_static(b"m\x00"), Bytes::from_static(b"x"));
    assert!(matches!(
        restore(&config_vhosts(), &state),
        Err(RestoreError::Corrupt(_))
    ));
    let mut state = BTreeMap::new();
    state.insert(
        message_key("/", "nope", 1).unwrap(),
        Bytes::from_static(b"\x01"),
    );
    assert!(restore(&config_vhosts(), &state).is_err());
    let mut state = BTreeMap::new();
    state.insert(Bytes::from_static(b"x"), Bytes::from_static(b"short"));
    assert!(restore(&config_vhosts(), &state).is_err());
}

#[test]
fn a_message_consumed_in_its_own_batch_costs_no_op_and_an_older_one_a_delete() {
    let declare = Event::QueueDeclared {
        vhost: "/".into(),
        name: "q".into(),
        spec: QueueSpec {
            durable: true,
            auto_delete: false,
            exclusive_owner: None,
            arguments: FieldTable::default(),
        },
    };
    let publish = |id: u64| Event::Published {
        vhost: "/".into(),
        exchange: "".into(),
        routing_key: "q".into(),
        msg_id: id,
        timestamp_ms: 0,
        properties: Arc::new(BasicProperties::default()),
        body: Bytes::from_static(b"body"),
        queues: ["q".into()].into_iter().collect(),
    };
    let removed = |id: u64| Event::Removed {
        vhost: "/".into(),
        queue: "q".into(),
        msg_ids: vec![id],
    };
    let mut reducer = BrokerReducer::new(config_vhosts());
    reducer.restore(&BTreeMap::new()).unwrap();
    let mut ops = Vec::new();
    let mut index = 0;
    let mut feed = |reducer: &mut BrokerReducer, ops: &mut Vec<StateOp>, ev: Event| {
        index += 1;
        let entry = Entry {
            pos: stablemq_cluster::LogPosition::new(1, index),
            payload: ev.encode(),
        };
        reducer.reduce(&entry, ops).unwrap();
    };
    feed(&mut reducer, &mut ops, declare);
    feed(&mut reducer, &mut ops, publish(1));
    reducer.flush(&mut ops).unwrap();
    let keys = |ops: &[StateOp]| -> Vec<Bytes> {
        ops.iter()
            .map(|op| match op {
                StateOp::Put { key, .. } | StateOp::Delete { key } => key.clone(),
                StateOp::DeletePrefix { prefix } => prefix.clone(),
            })
            .collect()
    };
    let first = keys(&ops);
    assert!(
        first.contains(&message_key("/", "q", 1).unwrap()),
        "{first:?}"
    );
    ops.clear();
    // Next batch: 2 is published and removed within it, 1 is an older one.
    feed(&mut reducer, &mut ops, publish(2));
    feed(&mut reducer, &mut ops, removed(2));
    feed(&mut reducer, &mut ops, removed(1));
    reducer.flush(&mut ops).unwrap();
    assert_eq!(
        ops,
        vec![
            StateOp::Delete {
                key: message_key("/", "q", 1).unwrap()
            },
            StateOp::Put {
                key: Bytes::from_static(b"x"),
                value: Bytes::copy_from_slice(&2u64.to_be_bytes())
            }
        ]
    );
}

#[test]
fn the_borrowed_encoding_decodes_as_a_stored_message() {
    let mut properties = BasicProperties::default();
    properties = properties.with_priority(3);
    let msg = Message {
        id: 9,
        exchange: "x".into(),
        routing_key: "rk".into(),
        properties: Arc::new(properties),
        body: Bytes::from_static(b"the body"),
        timestamp_ms: 1234,
    };
    let decoded = decode_message(&encode_message(&msg, Some(99))).unwrap();
    assert_eq!(decoded.exchange, "x");
    assert_eq!(decoded.routing_key, "rk");
    assert_eq!(decoded.timestamp_ms, 1234);
    assert_eq!(decoded.properties.priority(), &Some(3));
    assert_eq!(&decoded.body[..], b"the body");
    assert_eq!(decoded.expires_at_ms, Some(99));
}

#[test]
fn values_cut_from_one_arena_are_whole_and_share_its_chunk() {
    let msg = |id: u64, body: &'static [u8]| Message {
        id,
        exchange: "x".into(),
        routing_key: "rk".into(),
        properties: Arc::new(BasicProperties::default().with_delivery_mode(2)),
        body: Bytes::from_static(body),
        timestamp_ms: id,
    };
    let mut arena = BytesMut::new();
    let a = encode_message_into(&mut arena, &msg(1, b"first"), None);
    let b = encode_message_into(&mut arena, &msg(2, b"second body"), Some(7));
    // Byte for byte what a value of its own is.
    assert_eq!(a, encode_message(&msg(1, b"first"), None));
    assert_eq!(b, encode_message(&msg(2, b"second body"), Some(7)));
    // Back to back in one chunk: the second starts where the first ends.
    assert_eq!(a.as_ptr().wrapping_add(a.len()), b.as_ptr());
    let (da, db) = (decode_message(&a).unwrap(), decode_message(&b).unwrap());
    assert_eq!((&da.body[..], da.expires_at_ms), (&b"first"[..], None));
    assert_eq!(
        (&db.body[..], db.expires_at_ms),
        (&b"second body"[..], Some(7))
    );
}

mod streams;
