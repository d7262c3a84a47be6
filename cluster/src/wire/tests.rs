use bytes::{BufMut, BytesMut};

use super::encode::put_endpoint;
use super::*;
use crate::position::{Entry, LogPosition};

fn env(msg: Message) -> Envelope {
    Envelope {
        from: Endpoint::broker(4),
        to: Endpoint::store(1),
        msg,
    }
}

#[test]
fn layout_is_pinned() {
    let mut out = BytesMut::new();
    encode(
        &env(Message::FenceRefused { promised: 7 }),
        &mut out,
        MAX_FRAME_DEFAULT,
    )
    .unwrap();
    let mut expected = vec![0, 0, 0, 28, WIRE_VERSION];
    expected.extend_from_slice(&4u64.to_be_bytes());
    expected.push(SERVICE_BROKER);
    expected.extend_from_slice(&1u64.to_be_bytes());
    expected.push(SERVICE_STORE);
    expected.push(TAG_FENCE_REFUSED);
    expected.extend_from_slice(&7u64.to_be_bytes());
    assert_eq!(&out[..], &expected[..]);
}

#[test]
fn a_frame_for_both_services_decodes_to_one_copy_each() {
    let e = env(Message::FenceRefused { promised: 7 });
    let mut out = BytesMut::new();
    encode_for_both(&e, &mut out, MAX_FRAME_DEFAULT).unwrap();
    // Only the receiver's service byte differs from a frame to the store.
    let mut single = BytesMut::new();
    encode(&e, &mut single, MAX_FRAME_DEFAULT).unwrap();
    assert_eq!(out.len(), single.len());
    assert_eq!(out[4 + 1 + 9 + 8], SERVICE_BOTH);
    let broker = Envelope {
        to: Endpoint::broker(1),
        ..e.clone()
    };
    assert_eq!(
        decode_copies(&mut out.clone(), MAX_FRAME_DEFAULT),
        Ok(Some((e.clone(), Some(broker))))
    );
    assert_eq!(decode(&mut out, MAX_FRAME_DEFAULT), Ok(Some(e)));
    // "Both" is no sender, and no other service byte is anything.
    for (at, tag) in [(4 + 1 + 8, SERVICE_BOTH), (4 + 1 + 9 + 8, 3)] {
        let mut bad = single.clone();
        bad[at] = tag;
        assert_eq!(
            decode(&mut bad, MAX_FRAME_DEFAULT),
            Err(WireError::UnknownTag {
                what: "service",
                tag
            })
        );
    }
}

#[test]
fn payloads_are_slices_of_the_read_buffer() {
    let msg = Message::Entries {
        epoch: 3,
        entries: vec![Entry::new(3, 1, "hello"), Entry::new(3, 2, "world")],
    };
    let mut buf = BytesMut::new();
    encode(&env(msg.clone()), &mut buf, MAX_FRAME_DEFAULT).unwrap();
    let range = buf.as_ptr_range();
    let got = decode(&mut buf, MAX_FRAME_DEFAULT).unwrap().unwrap();
    assert_eq!(got.msg, msg);
    let Message::Entries { entries, .. } = got.msg else {
        unreachable!()
    };
    for entry in entries {
        assert!(
            range.contains(&entry.payload.as_ptr()),
            "payload was copied"
        );
    }
    assert!(buf.is_empty());
}

#[test]
fn oversized_frames_are_refused_both_ways() {
    let msg = Message::Entries {
        epoch: 1,
        entries: vec![Entry::new(1, 1, vec![0u8; 100])],
    };
    let mut out = BytesMut::from(&b"keep"[..]);
    let err = encode(&env(msg), &mut out, 64).unwrap_err();
    assert!(matches!(err, WireError::FrameTooLarge { max: 64, .. }));
    assert_eq!(
        &out[..],
        b"keep",
        "a failed encode leaves the buffer as it was"
    );

    let mut buf = BytesMut::from(&[0x7f, 0xff, 0xff, 0xff, WIRE_VERSION][..]);
    assert!(matches!(
        decode(&mut buf, MAX_FRAME_DEFAULT),
        Err(WireError::FrameTooLarge { .. })
    ));
}

#[test]
fn a_lying_entry_count_does_not_allocate() {
    let mut frame = BytesMut::new();
    frame.put_u8(WIRE_VERSION);
    put_endpoint(&mut frame, Endpoint::store(1));
    put_endpoint(&mut frame, Endpoint::broker(2));
    frame.put_u8(TAG_ENTRIES);
    frame.put_u64(1);
    frame.put_u32(u32::MAX);
    assert_eq!(
        decode_frame(frame.freeze()),
        Err(WireError::Truncated("entries"))
    );
}

#[test]
fn other_versions_and_trailing_bytes_are_refused() {
    let mut buf = BytesMut::new();
    encode(
        &env(Message::Fence { epoch: 1, nonce: 2 }),
        &mut buf,
        MAX_FRAME_DEFAULT,
    )
    .unwrap();
    let mut wrong = buf.clone();
    wrong[LEN_BYTES] = WIRE_VERSION + 1;
    assert_eq!(
        decode(&mut wrong, MAX_FRAME_DEFAULT),
        Err(WireError::Version {
            got: WIRE_VERSION + 1
        })
    );
    let mut frame = buf.split_off(LEN_BYTES);
    frame.put_u8(0);
    assert_eq!(
        decode_frame(frame.freeze()),
        Err(WireError::TrailingBytes(1))
    );
}

#[test]
fn partial_frames_wait_for_more() {
    let mut whole = BytesMut::new();
    encode(
        &env(Message::AppendAck {
            epoch: 2,
            last: LogPosition::new(2, 9),
            incarnation: 0,
        }),
        &mut whole,
        MAX_FRAME_DEFAULT,
    )
    .unwrap();
    for cut in 0..whole.len() {
        let mut part = BytesMut::from(&whole[..cut]);
        assert_eq!(decode(&mut part, MAX_FRAME_DEFAULT), Ok(None));
        assert_eq!(part.len(), cut, "nothing consumed");
    }
}
