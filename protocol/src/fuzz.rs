//! Entry points for the coverage-guided fuzzer (`fuzz/`, `scripts/fuzz.sh`)
//! and for the corpus replay tests (`protocol/tests/fuzz_corpus.rs`): the
//! same function runs under afl and under `cargo test`, so every input the
//! fuzzer keeps, and every crash it found, is replayed by the test command.
//!
//! Not an API: hidden from the docs, and free to change with the fuzz targets.

use bytes::{BufMut, BytesMut};

use crate::{Decoder, Frame, decode_frame, encode_frame};

/// Frames decoded from one stream at most, so an input of many tiny frames
/// stays fast.
const MAX_FRAMES: usize = 4096;

/// Feeds `data` to the frame decoder as a connection's byte stream and checks
/// what must hold for any input:
/// - no panic, and every error is a [`crate::FrameError`] with a reply code;
/// - the [`Decoder`] (properties memo) and [`decode_frame`] decode the same
///   frames and stop at the same error;
/// - bytes split in two reads decode as they do in one (streaming);
/// - a decoded frame re-encodes to bytes that decode and re-encode to the
///   same bytes.
///
/// The first two octets choose the `frame_max` (0: none) and the split point.
pub fn frames(data: &[u8]) {
    let Some((&[limit, split], stream)) = data.split_first_chunk::<2>() else {
        return;
    };
    let frame_max = match limit % 4 {
        0 => 0,
        1 => 4096,
        2 => 131_072,
        _ => 4096 + u32::from(split) * 16,
    };
    let whole = decode_all(stream, frame_max, true);
    let plain = decode_all(stream, frame_max, false);
    assert_eq!(
        (&whole.1, &whole.2),
        (&plain.1, &plain.2),
        "the properties memo changed a result"
    );

    let cut = usize::from(split).min(stream.len());
    let streamed = decode_streamed(stream, cut, frame_max);
    assert_eq!(
        (&whole.1, &whole.2),
        (&streamed.1, &streamed.2),
        "a split read changed a result"
    );

    for frame in &whole.0 {
        round_trip(frame);
    }
}

/// The frames of a stream (re-encoded, so values compare by their bytes,
/// which also makes a NaN equal to itself) and the error that ended it.
type Outcome = (Vec<Frame>, Vec<Vec<u8>>, Option<(u16, String)>);

fn decode_all(stream: &[u8], frame_max: u32, memo: bool) -> Outcome {
    let mut buf = BytesMut::from(stream);
    let mut decoder = Decoder::default();
    let mut out: Outcome = (Vec::new(), Vec::new(), None);
    while out.0.len() < MAX_FRAMES {
        let got = if memo {
            decoder.decode(&mut buf, frame_max)
        } else {
            decode_frame(&mut buf, frame_max)
        };
        match got {
            Ok(Some(frame)) => push(&mut out, frame),
            Ok(None) => break,
            Err(e) => {
                // What the connection reads of an error to close with it.
                let _ = (e.class_method(), e.channel());
                out.2 = Some((e.reply_code(), e.reply_text()));
                break;
            }
        }
    }
    out
}

fn push(out: &mut Outcome, frame: Frame) {
    let mut bytes = BytesMut::new();
    encode_frame(&frame, &mut bytes);
    out.1.push(bytes.to_vec());
    out.0.push(frame);
}

/// As [`decode_all`] with a memo, but the stream arrives in two reads, the
/// first of `cut` octets.
fn decode_streamed(stream: &[u8], cut: usize, frame_max: u32) -> Outcome {
    let mut buf = BytesMut::from(&stream[..cut]);
    let mut rest = Some(&stream[cut..]);
    let mut decoder = Decoder::default();
    let mut out: Outcome = (Vec::new(), Vec::new(), None);
    while out.0.len() < MAX_FRAMES {
        match decoder.decode(&mut buf, frame_max) {
            Ok(Some(frame)) => push(&mut out, frame),
            Ok(None) => match rest.take() {
                Some(more) => buf.put_slice(more),
                None => break,
            },
            Err(e) => {
                out.2 = Some((e.reply_code(), e.reply_text()));
                break;
            }
        }
    }
    out
}

/// Encode, decode, encode again: the two encodings must be equal, and the
/// decode must take the whole frame.
fn round_trip(frame: &Frame) {
    let mut first = BytesMut::new();
    encode_frame(frame, &mut first);
    let bytes = first.clone();
    let again = match decode_frame(&mut first, 0) {
        Ok(Some(f)) => f,
        other => panic!("{frame:?} encoded to {bytes:?}, which decodes as {other:?}"),
    };
    assert!(first.is_empty(), "{frame:?} re-encoded with trailing bytes");
    let mut second = BytesMut::new();
    encode_frame(&again, &mut second);
    assert_eq!(bytes, second, "{frame:?} does not re-encode the same");
}
