//! Property tests of the node-to-node codec: every message variant round-trips,
//! frames split anywhere reassemble, and no input makes the decoder panic.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use stablemq_cluster::replication::{
    Append, Endpoint, Message, RejectReason, Service, SnapshotChunk,
};
use stablemq_cluster::wire::{self, Envelope, MAX_FRAME_DEFAULT, WireError};
use stablemq_cluster::{Entry, LogPosition};

fn pos() -> impl Strategy<Value = LogPosition> {
    (any::<u64>(), any::<u64>()).prop_map(|(e, i)| LogPosition::new(e, i))
}

fn entries() -> impl Strategy<Value = Vec<Entry>> {
    // Arbitrary positions: the codec carries them; ordering is the engine's job.
    let entry = (pos(), proptest::collection::vec(any::<u8>(), 0..64)).prop_map(|(pos, p)| Entry {
        pos,
        payload: Bytes::from(p),
    });
    proptest::collection::vec(entry, 0..8)
}

fn key() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
}

fn opt_key() -> impl Strategy<Value = Option<Bytes>> {
    proptest::option::of(key())
}

fn pairs() -> impl Strategy<Value = Vec<(Bytes, Bytes)>> {
    proptest::collection::vec((key(), key()), 0..6)
}

fn endpoint() -> impl Strategy<Value = Endpoint> {
    (any::<u64>(), any::<bool>()).prop_map(|(node, store)| Endpoint {
        node,
        service: if store {
            Service::Store
        } else {
            Service::Broker
        },
    })
}

fn message() -> impl Strategy<Value = Message> {
    let u = any::<u64>;
    prop_oneof![
        (u(), pos(), entries(), u(), u()).prop_map(|(epoch, prev, entries, stable, floor)| {
            Message::Append(Append {
                epoch,
                prev,
                entries,
                stable,
                floor,
            })
        }),
        (u(), u(), u()).prop_map(|(epoch, from, to)| Message::CatchUp { epoch, from, to }),
        (u(), entries()).prop_map(|(epoch, entries)| Message::StableEntries { epoch, entries }),
        (u(), pos(), u()).prop_map(|(epoch, last, incarnation)| Message::AppendAck {
            epoch,
            last,
            incarnation
        }),
        u().prop_map(|incarnation| Message::JoinProbe { incarnation }),
        (u(), pos(), u()).prop_map(|(promised, last, stable)| Message::JoinInfo {
            promised,
            last,
            stable
        }),
        u().prop_map(|epoch| Message::AppendReject {
            epoch,
            reason: RejectReason::Fenced
        }),
        (u(), pos(), u(), u()).prop_map(|(epoch, prev, hint, incarnation)| {
            Message::AppendReject {
                epoch,
                reason: RejectReason::Mismatch {
                    prev,
                    hint,
                    incarnation,
                },
            }
        }),
        (u(), u()).prop_map(|(epoch, nonce)| Message::Fence { epoch, nonce }),
        (u(), pos(), u()).prop_map(|(epoch, last, stable)| Message::Promise {
            epoch,
            last,
            stable
        }),
        u().prop_map(|promised| Message::FenceRefused { promised }),
        (u(), u(), u()).prop_map(|(epoch, from, to)| Message::Fetch { epoch, from, to }),
        (u(), entries()).prop_map(|(epoch, entries)| Message::Entries { epoch, entries }),
        (pos(), opt_key(), pairs(), any::<bool>()).prop_map(|(base, after, pairs, done)| {
            Message::SnapshotChunk(SnapshotChunk {
                base,
                after,
                pairs,
                done,
            })
        }),
        (pos(), opt_key()).prop_map(|(base, after)| Message::SnapshotRequest { base, after }),
        u().prop_map(|epoch| Message::PreVote { epoch }),
        (u(), any::<bool>(), u()).prop_map(|(epoch, granted, promised)| {
            Message::PreVoteReply {
                epoch,
                granted,
                promised,
            }
        }),
    ]
}

fn envelope() -> impl Strategy<Value = Envelope> {
    (endpoint(), endpoint(), message()).prop_map(|(from, to, msg)| Envelope { from, to, msg })
}

fn encode(env: &Envelope) -> BytesMut {
    let mut out = BytesMut::new();
    wire::encode(env, &mut out, MAX_FRAME_DEFAULT).expect("a test envelope fits a frame");
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_message_round_trips(env in envelope()) {
        let mut buf = encode(&env);
        let got = wire::decode(&mut buf, MAX_FRAME_DEFAULT).unwrap();
        prop_assert_eq!(got, Some(env));
        prop_assert!(buf.is_empty());
    }

    /// A stream of frames cut into arbitrary reads decodes to the same messages.
    #[test]
    fn frames_reassemble_across_any_split(
        envs in proptest::collection::vec(envelope(), 1..6),
        cuts in proptest::collection::vec(1usize..64, 0..32),
    ) {
        let mut stream = BytesMut::new();
        for env in &envs {
            stream.extend_from_slice(&encode(env));
        }
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut cuts = cuts.into_iter();
        while !stream.is_empty() {
            let n = cuts.next().unwrap_or(usize::MAX).min(stream.len());
            buf.extend_from_slice(&stream.split_to(n));
            while let Some(env) = wire::decode(&mut buf, MAX_FRAME_DEFAULT).unwrap() {
                got.push(env);
            }
        }
        prop_assert_eq!(got, envs);
    }

    /// Arbitrary bytes: an error, "need more", or a message; never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut buf = BytesMut::from(&bytes[..]);
        while let Ok(Some(_)) = wire::decode(&mut buf, 1 << 16) {}
        let _ = wire::decode_frame(Bytes::from(bytes));
    }

    /// Valid frames with bytes flipped or cut short: still never a panic, and a
    /// cut frame is never mistaken for a whole one.
    #[test]
    fn damaged_frames_never_panic(
        env in envelope(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let whole = encode(&env);
        let mut damaged = whole.clone();
        for (at, byte) in flips {
            let i = at.index(damaged.len());
            damaged[i] = byte;
        }
        let _ = wire::decode(&mut damaged, MAX_FRAME_DEFAULT);

        // Keep the length prefix but drop bytes from the body: Truncated, never Ok.
        let keep = 4 + cut.index(whole.len() - 4);
        let body = whole.clone().split_off(4).freeze();
        let short = body.slice(..keep - 4);
        prop_assert!(wire::decode_frame(short).is_err());
    }
}

#[test]
fn empty_and_short_inputs() {
    assert_eq!(
        wire::decode(&mut BytesMut::new(), MAX_FRAME_DEFAULT),
        Ok(None)
    );
    assert_eq!(
        wire::decode_frame(Bytes::new()),
        Err(WireError::Truncated("version"))
    );
    // A zero-length frame has no version byte.
    let mut zero = BytesMut::from(&[0u8, 0, 0, 0][..]);
    assert!(wire::decode(&mut zero, MAX_FRAME_DEFAULT).is_err());
}
