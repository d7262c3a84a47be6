//! Input from a broken or hostile peer: the decoder must never panic or overflow
//! the stack, and each fault must map to the error RabbitMQ would report.

mod common;

use bytes::{BufMut, BytesMut};
use common::*;
use proptest::prelude::*;
use stablemq_protocol::methods::{basic, connection, exchange, queue};
use stablemq_protocol::{
    AMQPClass, BasicProperties, FieldTable, Frame, FrameError, MAX_TABLE_DEPTH, decode_frame,
};
use std::sync::Arc;

/// Decodes until the input is exhausted, skipping one octet after each error so
/// the rest of the garbage is exercised too. Checks the buffer contract on the
/// way: an error or `None` leaves the buffer as it was (same start, same length;
/// comparing contents would make this quadratic).
fn chew(bytes: &[u8], frame_max: u32) -> (usize, usize) {
    let mut buf = BytesMut::from(bytes);
    let (mut frames, mut errors) = (0, 0);
    loop {
        let before = (buf.as_ptr(), buf.len());
        match decode_frame(&mut buf, frame_max) {
            Ok(Some(_)) => {
                assert!(buf.len() < before.1, "a frame consumed nothing");
                frames += 1;
            }
            Ok(None) => {
                assert_eq!((buf.as_ptr(), buf.len()), before);
                return (frames, errors);
            }
            Err(err) => {
                assert_eq!((buf.as_ptr(), buf.len()), before, "an error consumed input");
                assert!(err.reply_text().len() <= 255);
                assert!([501, 505, 540].contains(&err.reply_code()), "{err:?}");
                errors += 1;
                let _ = buf.split_to(1);
            }
        }
    }
}

/// A well-formed frame around an arbitrary payload.
fn framed(frame_type: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![frame_type];
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out.push(0xCE);
    out
}

fn known_method_ids() -> impl Strategy<Value = (u16, u16)> {
    prop::sample::select(vec![
        (10, 10),
        (10, 11),
        (10, 20),
        (10, 21),
        (10, 30),
        (10, 31),
        (10, 40),
        (10, 41),
        (10, 50),
        (10, 60),
        (10, 70),
        (20, 10),
        (20, 20),
        (20, 40),
        (40, 10),
        (40, 20),
        (40, 30),
        (40, 40),
        (50, 10),
        (50, 11),
        (50, 20),
        (50, 30),
        (50, 40),
        (50, 50),
        (60, 10),
        (60, 20),
        (60, 30),
        (60, 40),
        (60, 50),
        (60, 60),
        (60, 70),
        (60, 71),
        (60, 80),
        (60, 90),
        (60, 120),
        (85, 10),
        (90, 10),
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..2048),
        frame_max in prop_oneof![Just(0u32), Just(4096u32), any::<u32>()],
    ) {
        chew(&bytes, frame_max);
    }

    #[test]
    fn arbitrary_method_arguments_never_panic(
        (class_id, method_id) in known_method_ids(),
        args in prop::collection::vec(prop_oneof![any::<u8>(), Just(0u8), Just(b'F'), Just(b'A')], 0..300),
    ) {
        let mut payload = class_id.to_be_bytes().to_vec();
        payload.extend_from_slice(&method_id.to_be_bytes());
        payload.extend_from_slice(&args);
        let (frames, errors) = chew(&framed(1, 1, &payload), 0);
        prop_assert!(frames + errors >= 1);
    }

    #[test]
    fn arbitrary_content_headers_never_panic(
        class_id in prop_oneof![Just(60u16), any::<u16>()],
        flags in any::<u16>(),
        props in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut payload = class_id.to_be_bytes().to_vec();
        payload.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
        payload.extend_from_slice(&flags.to_be_bytes());
        payload.extend_from_slice(&props);
        chew(&framed(2, 1, &payload), 0);
    }

    #[test]
    fn corrupting_one_octet_of_a_valid_frame_never_panics(
        frame in frame(),
        at in any::<prop::sample::Index>(),
        value in any::<u8>(),
    ) {
        let mut wire = encode(&frame).to_vec();
        let i = at.index(wire.len());
        wire[i] = value;
        chew(&wire, 0);
        chew(&wire, 4096);
    }
}

/// A deterministic PRNG, so the garbage loop needs no dependency and replays.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn decode_loop_over_random_garbage() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut garbage = Vec::with_capacity(1 << 20);
    while garbage.len() < 1 << 20 {
        // Mostly noise, sometimes a plausible frame header so payload parsers run.
        if rng.next().is_multiple_of(8) {
            let kind = [1u8, 2, 3, 8][(rng.next() % 4) as usize];
            let size = (rng.next() % 64) as usize;
            let mut payload: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
            if kind == 1 && size >= 4 {
                payload[..4].copy_from_slice(&[0, 50, 0, 10]); // queue.declare
            }
            garbage.extend_from_slice(&framed(kind, rng.next() as u16, &payload));
        } else {
            garbage.extend((0..(rng.next() % 32)).map(|_| rng.next() as u8));
        }
    }
    let (frames, errors) = chew(&garbage, 131_072);
    // Both paths must have been exercised for this test to mean anything.
    assert!(
        frames > 100 && errors > 100,
        "frames {frames}, errors {errors}"
    );
}

#[test]
fn each_fault_maps_to_rabbitmq_reply_code() {
    let cases: Vec<(Vec<u8>, u16, (u16, u16))> = vec![
        // wrong frame-end octet
        ([1, 0, 1, 0, 0, 0, 0, 0x00].to_vec(), 501, (0, 0)),
        // frame type 4 does not exist
        (framed(4, 1, &[1, 2]), 501, (0, 0)),
        // heartbeat with a payload
        (framed(8, 0, &[0]), 501, (0, 0)),
        // method frame too short to hold its ids
        (framed(1, 1, &[0, 60, 0]), 501, (0, 0)),
        // content header too short
        (
            framed(2, 1, &[0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            501,
            (0, 0),
        ),
        // unknown class
        (framed(1, 1, &[0, 70, 0, 10]), 540, (70, 10)),
        // unknown method of a known class
        (framed(1, 1, &[0, 60, 0, 75]), 540, (60, 75)),
        // basic.ack truncated
        (framed(1, 1, &[0, 60, 0, 80, 0, 0, 0]), 501, (60, 80)),
        // basic.ack with a trailing octet
        (
            framed(1, 1, &[0, 60, 0, 80, 0, 0, 0, 0, 0, 0, 0, 1, 0, 7]),
            501,
            (60, 80),
        ),
        // basic.publish with a routing key that is not UTF-8
        (
            framed(1, 1, &[0, 60, 0, 40, 0, 0, 0, 1, 0xFF, 0]),
            501,
            (60, 40),
        ),
        // queue.declare whose arguments table holds an unknown type tag
        (
            framed(1, 1, &[0, 50, 0, 10, 0, 0, 0, 0, 0, 0, 0, 3, 1, b'k', b'Z']),
            501,
            (50, 10),
        ),
        // content header with weight 1
        (
            framed(2, 1, &[0, 60, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            505,
            (0, 0),
        ),
        // content header whose content-type runs past the payload
        (
            framed(
                2,
                1,
                &[0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0, 5, b'a'],
            ),
            501,
            (0, 0),
        ),
    ];
    for (wire, code, class_method) in cases {
        let mut buf = BytesMut::from(&wire[..]);
        let err = decode_frame(&mut buf, 0).expect_err(&format!("{wire:?} decoded"));
        assert_eq!(err.reply_code(), code, "{err:?}");
        assert_eq!(err.class_method(), class_method, "{err:?}");
        let name = match code {
            501 => "FRAME_ERROR - ",
            505 => "UNEXPECTED_FRAME - ",
            _ => "NOT_IMPLEMENTED - ",
        };
        assert!(err.reply_text().starts_with(name), "{}", err.reply_text());
    }
}

/// Every method that carries a field table, built around `table`.
fn table_methods(table: &FieldTable) -> Vec<AMQPClass> {
    let t = || table.clone();
    vec![
        AMQPClass::Connection(connection::AMQPMethod::Start(connection::Start {
            version_minor: 9,
            server_properties: t(),
            mechanisms: "PLAIN".into(),
            ..Default::default()
        })),
        AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
            client_properties: t(),
            mechanism: "PLAIN".into(),
            ..Default::default()
        })),
        AMQPClass::Exchange(exchange::AMQPMethod::Declare(exchange::Declare {
            exchange: "x".into(),
            kind: "topic".into(),
            durable: true,
            arguments: t(),
            ..Default::default()
        })),
        AMQPClass::Exchange(exchange::AMQPMethod::Bind(exchange::Bind {
            destination: "d".into(),
            source: "s".into(),
            routing_key: "rk".into(),
            arguments: t(),
            ..Default::default()
        })),
        AMQPClass::Exchange(exchange::AMQPMethod::Unbind(exchange::Unbind {
            destination: "d".into(),
            arguments: t(),
            ..Default::default()
        })),
        AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: "q".into(),
            exclusive: true,
            arguments: t(),
            ..Default::default()
        })),
        AMQPClass::Queue(queue::AMQPMethod::Bind(queue::Bind {
            queue: "q".into(),
            exchange: "x".into(),
            routing_key: "#".into(),
            arguments: t(),
            ..Default::default()
        })),
        AMQPClass::Queue(queue::AMQPMethod::Unbind(queue::Unbind {
            queue: "q".into(),
            exchange: "x".into(),
            routing_key: "a.b".into(),
            arguments: t(),
        })),
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: "q".into(),
            consumer_tag: "c".into(),
            no_ack: true,
            arguments: t(),
            ..Default::default()
        })),
    ]
}

#[test]
fn nesting_limit_is_exact_for_every_method_with_a_table_and_for_headers() {
    // nested_table(n) has depth n + 1.
    let deepest = nested_table(MAX_TABLE_DEPTH - 1);
    let too_deep = nested_table(MAX_TABLE_DEPTH);
    for (ok, bad) in table_methods(&deepest)
        .into_iter()
        .zip(table_methods(&too_deep))
    {
        let ok = Frame::Method {
            channel: 1,
            method: ok,
        };
        assert_eq!(decode_frame(&mut encode(&ok), 0), Ok(Some(ok.clone())));

        let ids = (bad.get_amqp_class_id(), bad.get_amqp_method_id());
        let err = decode_frame(
            &mut encode(&Frame::Method {
                channel: 1,
                method: bad,
            }),
            0,
        )
        .unwrap_err();
        assert!(matches!(err, FrameError::TooDeeplyNested { .. }), "{err:?}");
        assert_eq!((err.reply_code(), err.class_method()), (501, ids));
    }

    let header = |headers| Frame::Header {
        channel: 1,
        class_id: 60,
        body_size: 0,
        properties: Arc::new(
            BasicProperties::default()
                .with_content_type("text/plain".into())
                .with_content_encoding("gzip".into())
                .with_headers(headers),
        ),
    };
    let ok = header(deepest);
    assert_eq!(decode_frame(&mut encode(&ok), 0), Ok(Some(ok.clone())));
    let err = decode_frame(&mut encode(&header(too_deep)), 0).unwrap_err();
    assert!(matches!(err, FrameError::TooDeeplyNested { .. }), "{err:?}");
}

/// `levels` nested field arrays as one value, built without recursion.
fn deep_arrays(levels: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(levels * 5);
    for i in 0..levels {
        out.push(b'A');
        out.extend_from_slice(&((5 * (levels - 1 - i)) as u32).to_be_bytes());
    }
    out
}

#[test]
fn absurd_nesting_is_refused_without_overflowing_the_stack() {
    let levels = 200_000; // ~1 MB: each level is 5 octets
    let mut table = vec![1, b'k'];
    table.extend(deep_arrays(levels));
    let mut args = BytesMut::new();
    args.put_u32(table.len() as u32);
    args.extend_from_slice(&table);

    // queue.declare: ids, ticket, queue "q", bits, arguments
    let mut method = vec![0, 50, 0, 10, 0, 0, 1, b'q', 0];
    method.extend_from_slice(&args);
    let err = decode_frame(&mut BytesMut::from(&framed(1, 1, &method)[..]), 0).unwrap_err();
    assert!(matches!(
        err,
        FrameError::TooDeeplyNested {
            class_id: 50,
            method_id: 10,
            ..
        }
    ));

    // content header: class 60, weight 0, size 0, flags = headers only
    let mut header = vec![0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0];
    header.extend_from_slice(&args);
    let err = decode_frame(&mut BytesMut::from(&framed(2, 1, &header)[..]), 0).unwrap_err();
    assert!(matches!(
        err,
        FrameError::TooDeeplyNested { class_id: 60, .. }
    ));
}

#[test]
fn deep_arrays_helper_matches_amq_protocol_encoding() {
    use stablemq_protocol::{AMQPValue, FieldArray};
    let mut value = AMQPValue::FieldArray(FieldArray::default());
    for _ in 1..4 {
        value = AMQPValue::FieldArray(FieldArray::from(vec![value]));
    }
    let mut table = FieldTable::default();
    table.insert("k".into(), value);
    let frame = Frame::Header {
        channel: 1,
        class_id: 60,
        body_size: 0,
        properties: Arc::new(BasicProperties::default().with_headers(table)),
    };
    let wire = encode(&frame);
    // header payload: 12 octets of ids/size, 2 of flags, 4 of table length, then "k"
    assert_eq!(&wire[7 + 14 + 4 + 2..wire.len() - 1], &deep_arrays(4)[..]);
}

#[test]
fn the_deepest_accepted_frames_fit_half_a_tokio_worker_stack() {
    // Decode, re-encode and drop the worst accepted case on 1 MiB of stack: tokio
    // gives its workers 2 MiB, and the broker needs the rest.
    let handle = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(|| {
            let mut wire = BytesMut::new();
            let headers = nested_table(MAX_TABLE_DEPTH - 1);
            for method in table_methods(&headers) {
                wire.extend_from_slice(&encode(&Frame::Method { channel: 1, method }));
            }
            let props = BasicProperties::default().with_headers(headers);
            wire.extend_from_slice(&encode(&Frame::Header {
                channel: 1,
                class_id: 60,
                body_size: 0,
                properties: Arc::new(props),
            }));
            let frames = decode_all(&mut wire, 0).unwrap();
            for frame in &frames {
                wire.extend_from_slice(&encode(frame));
            }
            drop(frames);
            wire.len()
        })
        .unwrap();
    assert!(handle.join().unwrap() > 0);
}
