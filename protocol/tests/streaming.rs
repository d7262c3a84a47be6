//! Partial input, arbitrary read boundaries, frame_max, and zero-copy bodies.

#![allow(
    clippy::unwrap_used,
    reason = "a test: an unwrap that fails is a failure at its line"
)]

mod common;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use common::*;
use proptest::prelude::*;
use stablemq_protocol::methods::basic;
use stablemq_protocol::{
    AMQPClass, BasicProperties, Frame, FrameError, decode_frame, encode_content,
};

/// Feeds `wire` to the decoder `step` octets at a time, as a socket might, and
/// checks the decoder contract at every call.
fn decode_in_steps(wire: &[u8], step: usize, frame_max: u32) -> Vec<Frame> {
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for piece in wire.chunks(step) {
        buf.extend_from_slice(piece);
        loop {
            let before = buf.clone();
            match decode_frame(&mut buf, frame_max).unwrap() {
                Some(frame) => {
                    // Exactly the frame's octets were consumed.
                    let again = encode(&frame);
                    assert_eq!(&before[..again.len()], &again[..]);
                    assert_eq!(&before[again.len()..], &buf[..]);
                    frames.push(frame);
                }
                None => {
                    assert_eq!(
                        buf, before,
                        "incomplete input must leave the buffer untouched"
                    );
                    break;
                }
            }
        }
    }
    assert!(buf.is_empty(), "{} octets left over", buf.len());
    frames
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn one_octet_at_a_time_gives_the_same_frames(frames in prop::collection::vec(frame(), 1..8)) {
        let mut wire = BytesMut::new();
        for frame in &frames {
            wire.extend_from_slice(&encode(frame));
        }
        prop_assert_eq!(decode_in_steps(&wire, 1, 0), frames.clone());
        prop_assert_eq!(decode_in_steps(&wire, 7, 0), frames.clone());
        prop_assert_eq!(decode_in_steps(&wire, wire.len(), 0), frames);
    }

    #[test]
    fn every_strict_prefix_of_a_frame_is_incomplete(frame in frame()) {
        let wire = encode(&frame);
        for len in 0..wire.len() {
            let mut buf = BytesMut::from(&wire[..len]);
            prop_assert_eq!(decode_frame(&mut buf, 0), Ok(None), "prefix of {} octets", len);
            prop_assert_eq!(buf.len(), len);
        }
    }

    #[test]
    fn frame_max_is_enforced_from_the_header_alone(
        frame_type in prop_oneof![Just(1u8), Just(2), Just(3), Just(8), any::<u8>()],
        channel in any::<u16>(),
        size in prop_oneof![0u32..10_000, any::<u32>()],
        frame_max in prop_oneof![Just(0u32), 4096u32..10_000, any::<u32>()],
    ) {
        let mut buf = BytesMut::new();
        buf.put_u8(frame_type);
        buf.put_u16(channel);
        buf.put_u32(size);
        let result = decode_frame(&mut buf, frame_max);
        if frame_max != 0 && u64::from(size) + 8 > u64::from(frame_max) {
            prop_assert_eq!(result, Err(FrameError::TooLarge { frame_type, channel, size, frame_max }));
        } else {
            prop_assert_eq!(result, Ok(None));
        }
        prop_assert_eq!(buf.len(), 7);
    }

    #[test]
    fn content_encoded_for_a_frame_max_decodes_under_it(
        body in body_bytes(20_000),
        frame_max in 4096u32..9000,
    ) {
        let method = AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
            exchange: "".into(), routing_key: "q".into(), mandatory: false, immediate: false,
        }));
        let mut wire = BytesMut::new();
        encode_content(1, &method, &BasicProperties::default(), &body, frame_max, &mut wire);
        let frames = decode_in_steps(&wire, 1000, frame_max);
        let mut reassembled = BytesMut::new();
        for frame in &frames[2..] {
            if let Frame::Body { payload, .. } = frame {
                reassembled.extend_from_slice(payload);
            }
        }
        prop_assert_eq!(&reassembled[..], &body[..]);
    }
}

#[test]
fn a_frame_exactly_at_frame_max_is_accepted_and_one_more_octet_is_not() {
    let frame_max = 4096;
    let at_limit = Frame::Body {
        channel: 1,
        payload: Bytes::from(vec![1; frame_max as usize - 8]),
    };
    let mut buf = encode(&at_limit);
    assert_eq!(buf.len(), frame_max as usize);
    assert_eq!(decode_frame(&mut buf, frame_max), Ok(Some(at_limit)));

    let over = Frame::Body {
        channel: 1,
        payload: Bytes::from(vec![1; frame_max as usize - 7]),
    };
    let mut buf = encode(&over);
    buf.truncate(7); // the payload has not arrived yet
    let err = decode_frame(&mut buf, frame_max).unwrap_err();
    assert_eq!(
        err,
        FrameError::TooLarge {
            frame_type: 3,
            channel: 1,
            size: 4089,
            frame_max
        }
    );
    assert_eq!(err.reply_code(), 501);
    assert_eq!(
        err.reply_text(),
        "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,4089,4088}"
    );
}

#[test]
fn body_payload_is_a_slice_of_the_read_buffer() {
    let payload = Bytes::from(vec![42u8; 1000]);
    let mut buf = BytesMut::with_capacity(4096);
    buf.extend_from_slice(&encode(&Frame::Heartbeat { channel: 0 }));
    buf.extend_from_slice(&encode(&Frame::Body {
        channel: 2,
        payload: payload.clone(),
    }));
    let region = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();

    assert_eq!(
        decode_frame(&mut buf, 0),
        Ok(Some(Frame::Heartbeat { channel: 0 }))
    );
    let Some(Frame::Body {
        channel: 2,
        payload: got,
    }) = decode_frame(&mut buf, 0).unwrap()
    else {
        panic!("expected a body frame");
    };
    assert_eq!(got, payload);
    let start = got.as_ptr() as usize;
    assert!(
        region.contains(&start) && region.contains(&(start + got.len() - 1)),
        "body was copied"
    );
}

#[test]
fn decoding_continues_after_a_body_is_split_off() {
    // The broker keeps reading into the same BytesMut after handing out a body.
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&encode(&Frame::Body {
        channel: 1,
        payload: Bytes::from_static(b"abc"),
    }));
    let first = decode_frame(&mut buf, 0).unwrap().unwrap();
    buf.extend_from_slice(&encode(&Frame::Body {
        channel: 1,
        payload: Bytes::from_static(b"def"),
    }));
    let second = decode_frame(&mut buf, 0).unwrap().unwrap();
    assert_eq!(
        first,
        Frame::Body {
            channel: 1,
            payload: Bytes::from_static(b"abc")
        }
    );
    assert_eq!(
        second,
        Frame::Body {
            channel: 1,
            payload: Bytes::from_static(b"def")
        }
    );
    assert!(!buf.has_remaining());
}
