//! The split connection's decisions, frame by frame: what is served here,
//! what the master gets, and what the client sees.

use super::*;
use crate::broker::stream::StartAt;
use crate::broker::stream_record::ChunkMark;
use crate::users::{HashAlgorithm, User, password};
use bytes::Bytes;
use stablemq_protocol::stream::{Chunk, CommandVersion, decode_server_frame};

/// A client frame as `on_client` gets it (without the size field).
fn frame(m: ClientMessage) -> Bytes {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    Bytes::copy_from_slice(&b[4..])
}

/// A master frame as `on_master` gets it.
fn master_frame(m: ServerMessage) -> Bytes {
    let mut b = BytesMut::new();
    m.encode(&mut b);
    Bytes::copy_from_slice(&b[4..])
}

/// What the client got, decoded.
fn output(s: &mut Split) -> Vec<ServerMessage> {
    let mut out = s.take_output();
    let mut msgs = Vec::new();
    while let Some(m) = decode_server_frame(&mut out, 0).expect("whole frames") {
        msgs.push(m);
    }
    msgs
}

/// "reader" may read streams starting with "s"; "writer" may read nothing.
fn users() -> AccessTable {
    let mut t = AccessTable::default();
    for (name, read) in [("reader", "^s"), ("writer", "")] {
        t.put_user(User {
            name: name.into(),
            password_hash: password::hash("pw"),
            hashing_algorithm: HashAlgorithm::Sha256,
            tags: vec![],
        });
        t.set_permission(name, "/", ".*", ".*", read);
    }
    t
}

/// A split connection through the handshake as `user`, the master saying
/// `auth` to its SASL response, speaking deliver v2 or not.
fn opened(user: &str, auth: ResponseCode, v2: bool) -> Split {
    let t = users();
    let mut s = Split::new(("10.0.0.2".into(), 5553));
    let tune = ClientMessage::Tune {
        frame_max: 1 << 20,
        heartbeat: 60,
        as_response: true,
    };
    if v2 {
        let versions = ClientMessage::ExchangeCommandVersions {
            correlation_id: 1,
            commands: vec![CommandVersion {
                key: Command::Deliver.key(),
                min_version: 1,
                max_version: 2,
            }],
        };
        assert!(matches!(
            s.on_client(&frame(versions), &t),
            ClientStep::Relay
        ));
    }
    let sasl = ClientMessage::SaslAuthenticate {
        correlation_id: 2,
        mechanism: "PLAIN".into(),
        data: Some(Bytes::from(format!("\0{user}\0pw"))),
    };
    assert!(matches!(s.on_client(&frame(sasl), &t), ClientStep::Relay));
    s.on_master(master_frame(ServerMessage::SaslAuthenticateResponse {
        correlation_id: 2,
        code: auth,
        challenge: None,
    }));
    assert!(matches!(s.on_client(&frame(tune), &t), ClientStep::Relay));
    let open = ClientMessage::Open {
        correlation_id: 3,
        virtual_host: "/".into(),
    };
    assert!(matches!(s.on_client(&frame(open), &t), ClientStep::Relay));
    s.on_master(master_frame(ServerMessage::OpenResponse {
        correlation_id: 3,
        code: ResponseCode::Ok,
        properties: vec![
            ("advertised_port".into(), "5552".into()),
            ("advertised_host".into(), "10.0.0.1".into()),
        ],
    }));
    s
}

fn subscribe(id: u8, stream: &str, credit: u16, properties: Option<Properties>) -> Bytes {
    frame(ClientMessage::Subscribe {
        correlation_id: 10 + u32::from(id),
        subscription_id: id,
        stream: stream.into(),
        offset: OffsetSpec::First,
        credit,
        properties,
    })
}

/// `n` entries from `first`, each its own stored chunk.
fn entries(first: u64, n: u64) -> Vec<StreamRecord> {
    (first..first + n)
        .map(|offset| StreamRecord {
            offset,
            delivery_tag: offset,
            timestamp_ms: 1,
            record: Bytes::from(format!("m{offset}")),
            mark: ChunkMark::Starts(None),
            trailer: 0,
            filter_value: None,
        })
        .collect()
}

fn found(start: u64, n: u64) -> ReadAnswer {
    ReadAnswer::Entries {
        start,
        next: start + n,
        entries: entries(start, n),
    }
}

/// The offsets of the delivered chunks' records, chunk by chunk.
fn delivered(msgs: &[ServerMessage]) -> Vec<(Option<u64>, Vec<u64>)> {
    msgs.iter()
        .filter_map(|m| match m {
            ServerMessage::Deliver {
                committed_chunk_id,
                chunk,
                ..
            } => {
                let c = Chunk::parse(chunk).expect("a chunk");
                let first = c.header.chunk_id;
                let n = u64::from(c.header.num_records);
                Some((*committed_chunk_id, (first..first + n).collect()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn the_open_answer_advertises_this_node() {
    let mut s = opened("reader", ResponseCode::Ok, false);
    let msgs = output(&mut s);
    let ServerMessage::OpenResponse { properties, .. } = &msgs[1] else {
        panic!("{msgs:?}");
    };
    assert_eq!(
        properties,
        &vec![
            ("advertised_port".to_string(), "5553".to_string()),
            ("advertised_host".to_string(), "10.0.0.2".to_string()),
        ]
    );
}

#[test]
fn a_plain_subscribe_is_served_here_within_its_credit() {
    let t = users();
    let mut s = opened("reader", ResponseCode::Ok, true);
    output(&mut s);
    let ClientStep::Subscribe(p) = s.on_client(&subscribe(1, "s1", 2, None), &t) else {
        panic!("served here");
    };
    assert_eq!(p.read.from, From::Spec(StartAt::First));
    assert!(s.subscribed(p, found(0, 3)));
    let msgs = output(&mut s);
    assert!(matches!(
        msgs[0],
        ServerMessage::Response {
            command: Command::Subscribe,
            correlation_id: 11,
            code: ResponseCode::Ok
        }
    ));
    // Consecutive entries go out as one chunk; the committed id is its own.
    assert_eq!(delivered(&msgs), vec![(Some(0), vec![0, 1, 2])]);
    // Credit left and nothing packed: it reads on from offset 3.
    let reads = s.reads();
    assert_eq!(reads.len(), 1);
    assert_eq!(reads[0].1.from, From::Offset(3));
    s.on_read(1, found(3, 0));
    assert!(!s.wants_read(), "caught up until the replica grows");
    s.on_applied();
    let reads = s.reads();
    assert_eq!(reads.len(), 1);
    s.on_read(1, found(3, 2));
    assert_eq!(delivered(&output(&mut s)), vec![(Some(3), vec![3, 4])]);
    // No credit left: nothing is read, until the client grants some.
    s.on_applied();
    assert!(s.reads().is_empty());
    let credit = ClientMessage::Credit {
        subscription_id: 1,
        credit: 1,
    };
    assert!(matches!(s.on_client(&frame(credit), &t), ClientStep::Done));
    assert_eq!(s.reads().len(), 1);
    let unsubscribe = ClientMessage::Unsubscribe {
        correlation_id: 40,
        subscription_id: 1,
    };
    assert!(matches!(
        s.on_client(&frame(unsubscribe), &t),
        ClientStep::Done
    ));
    // A read that was out when it unsubscribed delivers nothing.
    s.on_read(1, found(5, 1));
    let msgs = output(&mut s);
    assert!(matches!(
        msgs[..],
        [ServerMessage::Response {
            command: Command::Unsubscribe,
            correlation_id: 40,
            code: ResponseCode::Ok
        }]
    ));
}

#[test]
fn the_master_gets_what_this_node_must_not_decide() {
    let t = users();
    // Before open, nothing is served here.
    let mut s = Split::new(("h".into(), 1));
    assert!(matches!(
        s.on_client(&subscribe(1, "s1", 1, None), &t),
        ClientStep::Relay
    ));
    // A failed login leaves no user.
    let mut s = opened("reader", ResponseCode::AuthenticationFailure, false);
    assert!(matches!(
        s.on_client(&subscribe(1, "s1", 1, None), &t),
        ClientStep::Relay
    ));
    // A user the replicated permissions do not let read it: the master
    // refuses it in its words.
    let mut s = opened("writer", ResponseCode::Ok, false);
    assert!(matches!(
        s.on_client(&subscribe(1, "s1", 1, None), &t),
        ClientStep::Relay
    ));
    let mut s = opened("reader", ResponseCode::Ok, false);
    assert!(matches!(
        s.on_client(&subscribe(1, "other", 1, None), &t),
        ClientStep::Relay
    ));
    // A single active consumer is the master's (it keeps the groups); so
    // are its credit and unsubscribe.
    let mut s = opened("reader", ResponseCode::Ok, false);
    let sac = vec![
        ("single-active-consumer".to_string(), "true".to_string()),
        ("name".to_string(), "app".to_string()),
    ];
    assert!(matches!(
        s.on_client(&subscribe(2, "s1", 1, Some(sac)), &t),
        ClientStep::Relay
    ));
    let credit = ClientMessage::Credit {
        subscription_id: 2,
        credit: 1,
    };
    assert!(matches!(s.on_client(&frame(credit), &t), ClientStep::Relay));
    // The same id again goes to the master too, which knows it.
    assert!(matches!(
        s.on_client(&subscribe(2, "s1", 1, None), &t),
        ClientStep::Relay
    ));
    // Publishing is the master's.
    let publish = ClientMessage::Publish {
        version: 1,
        publisher_id: 0,
        messages: vec![],
    };
    assert!(matches!(
        s.on_client(&frame(publish), &t),
        ClientStep::Relay
    ));
}

#[test]
fn a_stream_the_replica_lacks_goes_to_the_master_and_a_deleted_one_is_told() {
    let t = users();
    let mut s = opened("reader", ResponseCode::Ok, false);
    output(&mut s);
    let ClientStep::Subscribe(p) = s.on_client(&subscribe(1, "s1", 1, None), &t) else {
        panic!("served here");
    };
    assert!(!s.subscribed(p, ReadAnswer::NoStream));
    assert!(output(&mut s).is_empty(), "the master answers it");
    let ClientStep::Subscribe(p) = s.on_client(&subscribe(3, "s1", 1, None), &t) else {
        panic!("served here");
    };
    assert!(s.subscribed(p, found(0, 0)));
    let id_again = s.on_client(&subscribe(3, "s1", 1, None), &t);
    assert!(matches!(id_again, ClientStep::Done));
    let msgs = output(&mut s);
    assert!(matches!(
        msgs[..],
        [
            ServerMessage::Response {
                code: ResponseCode::Ok,
                ..
            },
            ServerMessage::Response {
                command: Command::Subscribe,
                code: ResponseCode::SubscriptionIdAlreadyExists,
                ..
            }
        ]
    ));
    s.on_applied();
    let reads = s.reads();
    assert_eq!(reads.len(), 1);
    s.on_read(3, ReadAnswer::NoStream);
    let msgs = output(&mut s);
    assert!(matches!(
        &msgs[..],
        [ServerMessage::MetadataUpdate { code: ResponseCode::StreamNotAvailable, stream }] if stream == "s1"
    ));
    assert!(!s.has_local());
}

#[test]
fn a_stored_chunk_goes_out_whole_and_retention_skips_ahead() {
    let t = users();
    let mut s = opened("reader", ResponseCode::Ok, false);
    output(&mut s);
    let ClientStep::Subscribe(p) = s.on_client(&subscribe(1, "s1", 5, None), &t) else {
        panic!("served here");
    };
    // A stored chunk of 3 of which 2 are applied here yet: held.
    let mut part = entries(0, 2);
    part[0].mark = ChunkMark::Starts(Some(3));
    part[1].mark = ChunkMark::Continues;
    let answer = ReadAnswer::Entries {
        start: 0,
        next: 2,
        entries: part,
    };
    assert!(s.subscribed(p, answer));
    assert!(delivered(&output(&mut s)).is_empty());
    let mut tail = entries(2, 1);
    tail[0].mark = ChunkMark::Continues;
    s.on_read(
        1,
        ReadAnswer::Entries {
            start: 2,
            next: 3,
            entries: tail,
        },
    );
    assert_eq!(delivered(&output(&mut s)), vec![(None, vec![0, 1, 2])]);
    // Retention removed offsets 3..10 before they were read.
    s.on_read(1, found(10, 1));
    assert_eq!(delivered(&output(&mut s)), vec![(None, vec![10])]);
}

#[test]
fn a_filtered_subscription_gets_only_the_stored_chunks_that_match() {
    let t = users();
    let mut s = opened("reader", ResponseCode::Ok, false);
    output(&mut s);
    let props = vec![("filter.0".to_string(), "red".to_string())];
    let ClientStep::Subscribe(p) = s.on_client(&subscribe(1, "s1", 5, Some(props)), &t) else {
        panic!("served here");
    };
    assert!(p.read.filter_values, "the read brings the filter values");
    // Stored chunks [0, 1] (blue, red), [2] (blue), [3] (none).
    let mut e = entries(0, 4);
    e[0].mark = ChunkMark::Starts(Some(2));
    e[1].mark = ChunkMark::Continues;
    for (d, v) in e
        .iter_mut()
        .zip([Some("blue"), Some("red"), Some("blue"), None])
    {
        d.filter_value = v.map(Box::from);
    }
    let answer = ReadAnswer::Entries {
        start: 0,
        next: 4,
        entries: e,
    };
    assert!(s.subscribed(p, answer));
    // The matching chunk whole (its blue entry too: chunk-level, as RabbitMQ).
    assert_eq!(delivered(&output(&mut s)), vec![(None, vec![0, 1])]);
    // Credit left and nothing packed: it reads on.
    assert_eq!(s.reads().len(), 1);
}

#[test]
fn frames_are_split_within_the_masters_frame_max() {
    let t = users();
    let mut s = Split::new(("h".into(), 1));
    assert_eq!(s.client_frame_max(), INITIAL_FRAME_MAX, "before the tune");
    for (client, agreed) in [
        (0, DEFAULT_FRAME_MAX),
        (1 << 30, DEFAULT_FRAME_MAX),
        (65536, 65536),
    ] {
        let tune = ClientMessage::Tune {
            frame_max: client,
            heartbeat: 60,
            as_response: true,
        };
        assert!(matches!(s.on_client(&frame(tune), &t), ClientStep::Relay));
        assert_eq!(s.client_frame_max(), agreed, "client tune {client}");
    }
}

#[test]
fn what_a_subscription_consumed_is_shown_once_it_changes() {
    let t = users();
    let mut s = opened("reader", ResponseCode::Ok, false);
    assert!(s.shown().is_none(), "nothing served here yet");
    let props = vec![("name".to_string(), "app".to_string())];
    let ClientStep::Subscribe(p) = s.on_client(&subscribe(7, "s1", 1, Some(props.clone())), &t)
    else {
        panic!("served here");
    };
    assert!(s.subscribed(p, found(0, 3)));
    let shown = s.shown().expect("a new subscription");
    assert_eq!(
        shown,
        vec![ConsumerStats {
            subscription_id: 7,
            stream: "s1".into(),
            credits: 0,
            consumed: 3,
            offset: Some(2),
            properties: props,
        }]
    );
    assert!(s.shown().is_none(), "unchanged since");
    assert_eq!(s.session(), (Some("reader"), Some("/")));
}
