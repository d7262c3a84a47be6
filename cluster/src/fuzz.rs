//! Entry points for the coverage-guided fuzzer (`fuzz/`, `scripts/fuzz.sh`)
//! and for the corpus replay tests (`cluster/tests/fuzz_corpus.rs`): the
//! same function runs under afl and under `cargo test`, so every input the
//! fuzzer keeps, and every crash it found, is replayed by the test command.
//!
//! Not an API: hidden from the docs, and free to change with the targets.

use bytes::BytesMut;

use crate::wire::{self, Envelope, MAX_FRAME_DEFAULT, WireError};

pub use crate::store::fuzz::segment_log;

/// Frames decoded from one stream at most.
const MAX_FRAMES: usize = 1024;

/// Feeds `data` to the node-to-node frame decoder as a connection's byte
/// stream and checks what must hold for any input:
/// - no panic, and a bad frame is a [`WireError`];
/// - the format decodes one way: a decoded frame re-encodes to exactly the
///   bytes it was decoded from (for a frame to both services, by
///   [`wire::encode_for_both`]), and [`wire::decode`] agrees with
///   [`wire::decode_copies`];
/// - bytes split in two reads decode as they do in one.
///
/// The first octet chooses the split point and a small or the default
/// frame cap.
pub fn wire(data: &[u8]) {
    let Some((&split, stream)) = data.split_first() else {
        return;
    };
    let max = if split & 1 == 0 {
        MAX_FRAME_DEFAULT
    } else {
        4096
    };
    let whole = decode_all(stream, stream.len(), max);
    let cut = (usize::from(split) * 4).min(stream.len());
    assert_eq!(
        whole,
        decode_all(stream, cut, max),
        "a split read changed a result"
    );

    let mut single = BytesMut::from(stream);
    for (env, copy, raw) in &whole.0 {
        let mut again = BytesMut::new();
        let encoded = match copy {
            None => wire::encode(env, &mut again, max),
            Some(broker) => {
                assert_eq!(broker.msg, env.msg, "the two copies differ");
                wire::encode_for_both(env, &mut again, max)
            }
        };
        assert_eq!(encoded, Ok(()), "{env:?} decoded but does not encode");
        assert_eq!(&again[..], &raw[..], "{env:?} re-encodes to other bytes");
        assert_eq!(
            wire::decode(&mut single, max).as_ref(),
            Ok(&Some(env.clone()))
        );
    }
}

/// Decoded envelopes (with the broker's copy and the frame's bytes) and the
/// error that ended the stream, when the stream arrives in two reads, the
/// first of `cut` octets.
type Outcome = (
    Vec<(Envelope, Option<Envelope>, Vec<u8>)>,
    Option<WireError>,
);

fn decode_all(stream: &[u8], cut: usize, max: usize) -> Outcome {
    let mut buf = BytesMut::from(&stream[..cut]);
    let mut rest = Some(&stream[cut..]);
    let mut out: Outcome = (Vec::new(), None);
    while out.0.len() < MAX_FRAMES {
        let before = buf.clone();
        match wire::decode_copies(&mut buf, max) {
            Ok(Some((env, copy))) => {
                let raw = before[..before.len() - buf.len()].to_vec();
                out.0.push((env, copy, raw));
            }
            Ok(None) => match rest.take() {
                Some(more) => buf.extend_from_slice(more),
                None => break,
            },
            Err(e) => {
                out.1 = Some(e);
                break;
            }
        }
    }
    out
}
