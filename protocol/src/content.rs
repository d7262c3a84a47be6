//! Content: the header frame (class, weight, body size, properties) and the body
//! frames that follow a content-bearing method (basic.publish, basic.deliver,
//! basic.get-ok, basic.return).
//!
//! Written by hand rather than through amq-protocol's `AMQPFrame`, whose body is a
//! `Vec<u8>`: a message body is read once into the connection's buffer and then
//! shared as `Bytes` by every queue it is routed to.

use amq_protocol::protocol::basic::{gen_properties, parse_properties};
use bytes::{BufMut, Bytes, BytesMut};
use nom::{Parser, combinator::all_consuming};
use std::sync::Arc;

use crate::error::{FrameError, Snippet};
use crate::frame::{
    FRAME_BODY, FRAME_HEADER, FRAME_METHOD, FRAME_OVERHEAD, Frame, encode_method, put_frame,
    write_with,
};
use crate::{AMQPClass, BasicProperties, FRAME_END, nesting};

/// class-id (2) + weight (2) + body-size (8) + property-flags (2): the shortest
/// header payload (RabbitMQ's `analyze_frame/2` pattern needs the first 12).
const HEADER_MIN_LEN: usize = 14;

/// basic.deliver's class and method id.
const BASIC_CLASS: u16 = 60;
const BASIC_DELIVER: u16 = 60;

/// The last content header's property octets and their decoded value (see
/// [`crate::Decoder`]).
#[derive(Debug, Default)]
pub(crate) struct PropertiesMemo {
    raw: Vec<u8>,
    decoded: Option<Arc<BasicProperties>>,
}

/// Property sections longer than this are not remembered: repeated ones are
/// short (a delivery mode, a content type), and the memo's buffer stays small.
const MEMO_MAX: usize = 512;

pub(crate) fn decode_header(
    channel: u16,
    payload: &[u8],
    memo: Option<&mut PropertiesMemo>,
) -> Result<Frame, FrameError> {
    if payload.len() < HEADER_MIN_LEN {
        let payload = Snippet::of(payload);
        return Err(FrameError::BadPayloadLength {
            frame_type: FRAME_HEADER,
            channel,
            payload,
        });
    }
    let class_id = u16::from_be_bytes([payload[0], payload[1]]);
    let weight = u16::from_be_bytes([payload[2], payload[3]]);
    let mut size = [0; 8];
    size.copy_from_slice(&payload[4..12]);
    let body_size = u64::from_be_bytes(size);
    let props = &payload[12..];

    // RabbitMQ checks the weight before it ever looks at the properties.
    if weight != 0 {
        return Err(FrameError::NonZeroWeight {
            channel,
            class_id,
            weight,
        });
    }
    let header = |properties| Frame::Header {
        channel,
        class_id,
        body_size,
        properties,
    };
    let memo = memo.filter(|_| props.len() <= MEMO_MAX);
    if let Some(memo) = &memo
        && let Some(known) = &memo.decoded
        && memo.raw == props
    {
        return Ok(header(Arc::clone(known)));
    }
    if !nesting::properties_ok(props) {
        return Err(FrameError::TooDeeplyNested {
            channel,
            frame_type: FRAME_HEADER,
            class_id,
            method_id: 0,
        });
    }
    // Only class basic carries content. A header naming another class is still
    // read as basic properties; the channel rejects the class mismatch (505).
    match all_consuming(parse_properties).parse(props) {
        Ok((_, properties)) => {
            let properties = Arc::new(properties);
            if let Some(memo) = memo {
                memo.raw.clear();
                memo.raw.extend_from_slice(props);
                memo.decoded = Some(Arc::clone(&properties));
            }
            Ok(header(properties))
        }
        Err(_) => Err(FrameError::BadContentHeader {
            channel,
            class_id,
            properties: Snippet::of(props),
        }),
    }
}

pub(crate) fn encode_header(
    channel: u16,
    class_id: u16,
    body_size: u64,
    properties: &BasicProperties,
    out: &mut BytesMut,
) {
    put_frame(FRAME_HEADER, channel, out, |out| {
        out.put_u16(class_id);
        out.put_u16(0); // weight, always 0
        out.put_u64(body_size);
        write_with(out, gen_properties(properties));
    });
}

pub(crate) fn encode_body(channel: u16, payload: &[u8], out: &mut BytesMut) {
    let size = u32::try_from(payload.len()).expect("body frame payload exceeds 4 GiB");
    out.reserve(payload.len() + FRAME_OVERHEAD);
    out.put_u8(FRAME_BODY);
    out.put_u16(channel);
    out.put_u32(size);
    out.extend_from_slice(payload);
    out.put_u8(FRAME_END);
}

/// Largest body-frame payload for a connection's `frame_max` (0 = unlimited).
///
/// # Panics
/// If `frame_max` is 1..=8: no payload would fit, and splitting would never end.
/// A negotiated `frame_max` is never that small.
fn body_chunk_max(frame_max: u32) -> usize {
    if frame_max == 0 {
        return u32::MAX as usize;
    }
    assert!(
        frame_max as usize > FRAME_OVERHEAD,
        "frame_max {frame_max} leaves no room for a body payload"
    );
    frame_max as usize - FRAME_OVERHEAD
}

/// The header frame and the body frames of one message. No body frame for an
/// empty body: the spec forbids empty body frames and clients expect none.
fn encode_content_frames(
    channel: u16,
    class_id: u16,
    properties: &BasicProperties,
    body: &Bytes,
    frame_max: u32,
    out: &mut BytesMut,
) {
    let chunk_max = body_chunk_max(frame_max);
    let frames = body.len().div_ceil(chunk_max);
    out.reserve(body.len() + frames * FRAME_OVERHEAD);
    encode_header(channel, class_id, body.len() as u64, properties, out);
    for chunk in body.chunks(chunk_max) {
        encode_body(channel, chunk, out);
    }
}

/// Encode a method followed by its content (header frame + body frames split so
/// that no frame exceeds `frame_max`; zero body frames for an empty body). Used for
/// basic.deliver / basic.get-ok / basic.return and by publishers.
///
/// The header frame is not split (the protocol cannot split it): properties too
/// large for `frame_max` produce an oversized header frame, as in RabbitMQ.
///
/// # Panics
/// If `frame_max` is between 1 and 8.
pub fn encode_content(
    channel: u16,
    method: &AMQPClass,
    properties: &BasicProperties,
    body: &Bytes,
    frame_max: u32,
    out: &mut BytesMut,
) {
    encode_method(channel, method, out);
    encode_content_frames(
        channel,
        method.get_amqp_class_id(),
        properties,
        body,
        frame_max,
        out,
    );
}

/// basic.deliver + content, byte-for-byte what [`encode_content`] writes for the
/// equivalent `AMQPClass`, without building one: delivery is the hot path and an
/// `AMQPClass` would cost three `String` allocations per message.
///
/// # Panics
/// If `consumer_tag`, `exchange` or `routing_key` is longer than 255 octets (they
/// are `shortstr`s; the broker got them as `ShortString`s), or if `frame_max` is
/// between 1 and 8.
#[allow(clippy::too_many_arguments)] // mirrors basic.deliver's fields one to one
pub fn encode_deliver(
    channel: u16,
    consumer_tag: &str,
    delivery_tag: u64,
    redelivered: bool,
    exchange: &str,
    routing_key: &str,
    properties: &BasicProperties,
    body: &Bytes,
    frame_max: u32,
    out: &mut BytesMut,
) {
    let strings = [consumer_tag, exchange, routing_key];
    for s in strings {
        assert!(
            s.len() <= usize::from(u8::MAX),
            "shortstr of {} octets in basic.deliver",
            s.len()
        );
    }
    // ids (4) + three length-prefixed strings + delivery-tag (8) + flag octet (1)
    let size = 4 + strings.iter().map(|s| 1 + s.len()).sum::<usize>() + 8 + 1;
    out.reserve(size + FRAME_OVERHEAD);
    out.put_u8(FRAME_METHOD);
    out.put_u16(channel);
    out.put_u32(size as u32); // at most 4 + 3 * 256 + 9
    out.put_u16(BASIC_CLASS);
    out.put_u16(BASIC_DELIVER);
    put_short_str(consumer_tag, out);
    out.put_u64(delivery_tag);
    out.put_u8(u8::from(redelivered));
    put_short_str(exchange, out);
    put_short_str(routing_key, out);
    out.put_u8(FRAME_END);
    encode_content_frames(channel, BASIC_CLASS, properties, body, frame_max, out);
}

fn put_short_str(s: &str, out: &mut BytesMut) {
    out.put_u8(s.len() as u8); // length checked by the caller
    out.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FRAME_HEADER_LEN;
    use crate::{Decoder, decode_frame, encode_frame};

    #[test]
    fn empty_body_gets_a_header_and_no_body_frame() {
        let mut out = BytesMut::new();
        encode_content_frames(
            1,
            60,
            &BasicProperties::default(),
            &Bytes::new(),
            4096,
            &mut out,
        );
        // header only: 7 + (2 + 2 + 8 + 2) + 1
        assert_eq!(
            &out[..],
            &[
                2, 0, 1, 0, 0, 0, 14, 0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xCE
            ]
        );
    }

    #[test]
    fn bodies_split_exactly_at_frame_max() {
        let frame_max = 4096u32;
        let chunk = frame_max as usize - 8;
        for len in [1, chunk - 1, chunk, chunk + 1, 3 * chunk] {
            let body = Bytes::from(vec![7u8; len]);
            let mut out = BytesMut::new();
            encode_content_frames(
                1,
                60,
                &BasicProperties::default(),
                &body,
                frame_max,
                &mut out,
            );
            let mut sizes = Vec::new();
            while let Some(frame) = decode_frame(&mut out, frame_max).unwrap() {
                if let Frame::Body { payload, .. } = frame {
                    sizes.push(payload.len());
                }
            }
            let expected: Vec<usize> = (0..len.div_ceil(chunk))
                .map(|i| chunk.min(len - i * chunk))
                .collect();
            assert_eq!(sizes, expected, "body of {len}");
        }
    }

    #[test]
    #[should_panic(expected = "leaves no room")]
    fn frame_max_of_eight_is_refused() {
        let mut out = BytesMut::new();
        encode_content_frames(
            1,
            60,
            &BasicProperties::default(),
            &Bytes::from_static(b"x"),
            8,
            &mut out,
        );
    }

    #[test]
    fn header_weight_must_be_zero() {
        let payload = [0, 60, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let err = decode_header(5, &payload, None).unwrap_err();
        assert_eq!(
            err,
            FrameError::NonZeroWeight {
                channel: 5,
                class_id: 60,
                weight: 1
            }
        );
        assert_eq!(err.reply_code(), 505);
    }

    #[test]
    fn trailing_octets_after_properties_are_rejected() {
        let payload = [0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
        let err = decode_header(1, &payload, None).unwrap_err();
        assert!(
            matches!(err, FrameError::BadContentHeader { class_id: 60, .. }),
            "{err:?}"
        );
    }
    #[test]
    fn a_decoder_shares_repeated_properties_and_decodes_new_ones() {
        let header = |props: BasicProperties| {
            let mut out = BytesMut::new();
            encode_frame(
                &Frame::Header {
                    channel: 1,
                    class_id: 60,
                    body_size: 3,
                    properties: Arc::new(props),
                },
                &mut out,
            );
            out
        };
        let persistent = BasicProperties::default().with_delivery_mode(2);
        let typed = persistent.clone().with_content_type("text/plain".into());
        let mut decoder = Decoder::default();
        let mut props = |wire: BytesMut| {
            let mut wire = wire;
            match decoder.decode(&mut wire, 0) {
                Ok(Some(Frame::Header { properties, .. })) => properties,
                other => panic!("header decoded as {other:?}"),
            }
        };
        let first = props(header(persistent.clone()));
        let again = props(header(persistent.clone()));
        assert!(Arc::ptr_eq(&first, &again), "same octets decoded again");
        let other = props(header(typed.clone()));
        assert_eq!(*other, typed);
        assert!(!Arc::ptr_eq(&first, &other));
        let back = props(header(persistent.clone()));
        assert_eq!(*back, persistent);
        assert!(Arc::ptr_eq(&back, &props(header(persistent))));
        // A stateless decode never shares.
        let mut wire = header(typed);
        let Ok(Some(Frame::Header { properties, .. })) = decode_frame(&mut wire, 0) else {
            panic!("header did not decode");
        };
        assert!(!Arc::ptr_eq(&properties, &other));
    }

    #[test]
    fn a_decoder_still_refuses_what_it_remembered_in_another_header() {
        // The memo covers the property octets only: a later header with the
        // same properties but a nonzero weight is still refused.
        let mut good = BytesMut::new();
        let props = Arc::new(BasicProperties::default().with_delivery_mode(2));
        let frame = Frame::Header {
            channel: 1,
            class_id: 60,
            body_size: 3,
            properties: props,
        };
        encode_frame(&frame, &mut good);
        let mut weighted = good.clone();
        weighted[FRAME_HEADER_LEN + 3] = 1;
        let mut decoder = Decoder::default();
        assert_eq!(decoder.decode(&mut good, 0), Ok(Some(frame)));
        assert!(matches!(
            decoder.decode(&mut weighted, 0),
            Err(FrameError::NonZeroWeight { weight: 1, .. })
        ));
    }
}
