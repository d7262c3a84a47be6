//! Encode then decode gives back the same frame, and our bytes are the bytes
//! amq-protocol's own frame codec produces and accepts.

mod common;

use amq_protocol::frame::{AMQPContentHeader, AMQPFrame, WriteContext, gen_frame, parse_frame};
use bytes::{Bytes, BytesMut};
use common::*;
use proptest::prelude::*;
use stablemq_protocol::methods::basic;
use stablemq_protocol::{
    AMQPClass, AMQPValue, BasicProperties, FieldTable, Frame, FrameError, ShortString,
    decode_frame, encode_content, encode_deliver,
};
use std::sync::Arc;

/// amq-protocol's encoding of the same frame, as an independent reference.
fn reference_encoding(frame: &Frame) -> Vec<u8> {
    let frame = match frame.clone() {
        Frame::Method { channel, method } => AMQPFrame::Method(channel, method),
        Frame::Publish { channel, publish } => AMQPFrame::Method(channel, publish.to_method()),
        Frame::Header {
            channel,
            class_id,
            body_size,
            properties,
        } => AMQPFrame::Header(
            channel,
            AMQPContentHeader {
                class_id,
                body_size,
                properties: (*properties).clone(),
            },
        ),
        Frame::Body { channel, payload } => AMQPFrame::Body(channel, payload.to_vec()),
        Frame::Heartbeat { channel: 0 } => AMQPFrame::Heartbeat,
        Frame::Heartbeat { channel } => AMQPFrame::InvalidHeartbeat(channel),
    };
    let ctx = gen_frame(&frame)(WriteContext::from(Vec::new())).expect("reference encoder failed");
    ctx.write
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_frame_round_trips(frame in frame()) {
        let mut buf = encode(&frame);
        let decoded = decode_frame(&mut buf, 0).unwrap();
        prop_assert_eq!(decoded, Some(frame));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn encoding_matches_amq_protocol(frame in frame()) {
        let ours = encode(&frame);
        prop_assert_eq!(&ours[..], &reference_encoding(&frame)[..]);
        // ...and amq-protocol's parser reads our bytes back as the same frame.
        let (rest, _) = parse_frame(&ours[..]).unwrap();
        prop_assert!(rest.is_empty());
    }

    #[test]
    fn content_round_trips_through_frame_max(
        channel in 1u16..,
        method in any::<u64>().prop_map(|tag| AMQPClass::Basic(basic::AMQPMethod::GetOk(basic::GetOk {
            delivery_tag: tag, redelivered: false, exchange: "x".into(), routing_key: "rk".into(), message_count: 3,
        }))),
        properties in properties(),
        body in body_bytes(3000),
        frame_max in prop_oneof![Just(0u32), 9u32..64, 64u32..5000],
    ) {
        let mut out = BytesMut::new();
        encode_content(channel, &method, &properties, &body, frame_max, &mut out);
        let frames = decode_all(&mut out, 0).unwrap();
        prop_assert!(out.is_empty());

        prop_assert_eq!(&frames[0], &Frame::Method { channel, method: method.clone() });
        let header = Frame::Header { channel, class_id: 60, body_size: body.len() as u64, properties: Arc::new(properties) };
        prop_assert_eq!(&frames[1], &header);
        let mut reassembled = Vec::new();
        for frame in &frames[2..] {
            let Frame::Body { channel: c, payload } = frame else {
                return Err(TestCaseError::fail(format!("expected a body frame, got {frame:?}")));
            };
            prop_assert_eq!(*c, channel);
            prop_assert!(!payload.is_empty(), "empty body frame");
            if frame_max != 0 {
                prop_assert!(payload.len() + 8 <= frame_max as usize);
            }
            reassembled.extend_from_slice(payload);
        }
        let chunk = if frame_max == 0 { usize::MAX } else { frame_max as usize - 8 };
        prop_assert_eq!(frames.len() - 2, body.len().div_ceil(chunk));
        prop_assert_eq!(&reassembled[..], &body[..]);
    }

    #[test]
    fn encode_deliver_is_byte_identical_to_encode_content(
        channel in any::<u16>(),
        consumer_tag in short_string(),
        delivery_tag in any::<u64>(),
        redelivered in any::<bool>(),
        exchange in short_string(),
        routing_key in short_string(),
        properties in properties(),
        body in body_bytes(2000),
        frame_max in prop_oneof![Just(0u32), 9u32..600, Just(131_072u32)],
    ) {
        let mut fast = BytesMut::new();
        encode_deliver(
            channel, consumer_tag.as_str(), delivery_tag, redelivered, exchange.as_str(),
            routing_key.as_str(), &properties, &body, frame_max, &mut fast,
        );
        let method = AMQPClass::Basic(basic::AMQPMethod::Deliver(basic::Deliver {
            consumer_tag, delivery_tag, redelivered, exchange, routing_key,
        }));
        let mut general = BytesMut::new();
        encode_content(channel, &method, &properties, &body, frame_max, &mut general);
        prop_assert_eq!(&fast[..], &general[..]);
    }
}

#[test]
fn encoders_append_without_disturbing_earlier_bytes() {
    let mut out = BytesMut::from(&b"prefix"[..]);
    let body = Bytes::from_static(b"payload");
    encode_deliver(
        1,
        "c",
        1,
        true,
        "",
        "q",
        &BasicProperties::default(),
        &body,
        4096,
        &mut out,
    );
    assert_eq!(&out[..6], b"prefix");
    let _ = out.split_to(6);
    let frames = decode_all(&mut out, 4096).unwrap();
    assert_eq!(frames.len(), 3);
    assert_eq!(
        frames[2],
        Frame::Body {
            channel: 1,
            payload: body
        }
    );
}

#[test]
fn headers_with_nested_tables_survive_encoding_inside_a_frame() {
    // Field tables are length-prefixed and patched after the fact; check that a
    // table nested at the deepest accepted level still lands at the right place.
    let headers = nested_table(stablemq_protocol::MAX_TABLE_DEPTH - 1);
    let properties = BasicProperties::default()
        .with_headers(headers)
        .with_priority(3);
    let frame = Frame::Header {
        channel: 9,
        class_id: 60,
        body_size: 1,
        properties: Arc::new(properties),
    };
    let mut buf = encode(&frame);
    assert_eq!(decode_frame(&mut buf, 0).unwrap(), Some(frame));
}

/// Surprises in amq-protocol the broker must know about, pinned so an upgrade
/// that changes them is noticed.
#[test]
fn amq_protocol_quirks() {
    // AMQPValue::ShortString is written with type tag '_', which no parser
    // (amq-protocol's or RabbitMQ's) accepts: never put one in a table.
    let mut table = FieldTable::default();
    table.insert("k".into(), AMQPValue::ShortString("v".into()));
    let properties = BasicProperties::default().with_headers(table);
    let mut buf = encode(&Frame::Header {
        channel: 1,
        class_id: 60,
        body_size: 0,
        properties: Arc::new(properties),
    });
    assert!(matches!(
        decode_frame(&mut buf, 0),
        Err(FrameError::BadContentHeader { .. })
    ));

    // ShortString::from panics past 255 octets; try_new is the checked way.
    assert!(ShortString::try_new("x".repeat(256)).is_err());
    assert!(std::panic::catch_unwind(|| ShortString::from("x".repeat(256).as_str())).is_err());
}
