//! Receiving a store's materialized state in chunks.
//!
//! Stores compact their logs: entries up to the log base live only in the
//! materialized `state`. A slave, candidate or store that needs entries at or
//! below a store's base gets that state instead, as `SnapshotChunk`s, and
//! continues from `base.index + 1` with entries. Slaves, candidates and
//! stores all receive it the same way, so the bookkeeping lives here.
//!
//! A snapshot is read from one consistent view of the store's state (the
//! store pins it while a transfer is under way). Each chunk names the snapshot
//! (`base`) and the key it continues after, so duplicates, reordering and a
//! store that started a new snapshot (a first chunk, `after: None`) are all
//! recognized: the receiver takes only the chunk that continues exactly what
//! it holds, and restarts on a first chunk.
//!
//! The receiver keeps no pairs: each chunk it takes goes straight to its
//! caller, which writes it somewhere (a store stages it on disk, see
//! `EventStore::stage_state`; a broker collects it). Only the last key is
//! kept, to recognize the chunk that continues it.

use bytes::Bytes;

use crate::position::LogPosition;

use super::messages::{Endpoint, Message, SnapshotChunk};

/// A snapshot being received.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SnapshotRx {
    /// The store sending it.
    source: Endpoint,
    /// The last entry the state covers.
    base: LogPosition,
    /// The last key received.
    after: Option<Bytes>,
    /// Requests resent since the last chunk arrived. A source that stays
    /// silent (it crashed, or is cut off) is given up after
    /// [`RESENDS_MAX`], so the receiver asks another node: waiting on it
    /// forever left a store unable to ack a new master's marker, and with
    /// a third store down no master was ever elected.
    unanswered: u32,
}

/// Resends without an answer after which a transfer is abandoned.
const RESENDS_MAX: u32 = 3;

/// What one chunk did.
#[derive(Debug, PartialEq)]
pub(crate) enum ChunkOutcome {
    /// Not the chunk we wait for (a duplicate, a late one, or a snapshot no
    /// newer than what we hold).
    Ignored,
    /// Taken: `pairs` continue the state of the log up to `base`.
    Taken {
        /// The last entry the state covers.
        base: LogPosition,
        /// These pairs start the snapshot: whatever an earlier transfer
        /// delivered is void.
        first: bool,
        /// This chunk's pairs, in key order, after every earlier one's.
        pairs: Vec<(Bytes, Bytes)>,
        /// The request for the next chunk; `None`: this was the last one and
        /// the state is complete.
        next: Option<(Endpoint, Message)>,
    },
}

impl SnapshotRx {
    /// The request for the next chunk, for resending after a loss.
    pub(crate) fn request(&self) -> (Endpoint, Message) {
        (
            self.source,
            Message::SnapshotRequest {
                base: self.base,
                after: self.after.clone(),
            },
        )
    }

    /// The store sending the snapshot.
    pub(crate) fn source(&self) -> Endpoint {
        self.source
    }

    /// The request for the next chunk again, after a period without an
    /// answer; `None` once [`RESENDS_MAX`] resends went unanswered: the
    /// caller drops the transfer and asks elsewhere.
    pub(crate) fn resend(&mut self) -> Option<(Endpoint, Message)> {
        if self.unanswered >= RESENDS_MAX {
            return None;
        }
        self.unanswered += 1;
        Some(self.request())
    }

    /// Fold a chunk from `from` into `rx`. A snapshot whose base is at or
    /// below `have` (the index the receiver already holds as stable) is of no
    /// use and ignored.
    pub(crate) fn on_chunk(
        rx: &mut Option<SnapshotRx>,
        from: Endpoint,
        have: u64,
        chunk: SnapshotChunk,
    ) -> ChunkOutcome {
        let SnapshotChunk {
            base,
            after,
            pairs,
            done,
        } = chunk;
        if base.index <= have {
            return ChunkOutcome::Ignored;
        }
        let first = after.is_none();
        match after {
            None => {
                // A first chunk: a new transfer, or the store restarted it.
                *rx = Some(SnapshotRx {
                    source: from,
                    base,
                    after: None,
                    unanswered: 0,
                });
            }
            Some(key) => {
                let continues = rx.as_ref().is_some_and(|r| {
                    r.source == from && r.base == base && r.after.as_ref() == Some(&key)
                });
                if !continues {
                    return ChunkOutcome::Ignored;
                }
            }
        }
        let Some(r) = rx.as_mut() else {
            return ChunkOutcome::Ignored;
        };
        r.unanswered = 0;
        if let Some((last, _)) = pairs.last() {
            r.after = Some(last.clone());
        }
        let next = if done {
            *rx = None;
            None
        } else {
            Some(r.request())
        };
        ChunkOutcome::Taken {
            base,
            first,
            pairs,
            next,
        }
    }
}

#[cfg(test)]
mod tests {
    /// A chunk of the snapshot at `base`.
    fn chunk(
        base: LogPosition,
        after: Option<Bytes>,
        pairs: Vec<(Bytes, Bytes)>,
        done: bool,
    ) -> SnapshotChunk {
        SnapshotChunk {
            base,
            after,
            pairs,
            done,
        }
    }

    use super::*;

    fn kv(k: &str) -> (Bytes, Bytes) {
        (Bytes::from(k.to_owned()), Bytes::from("v"))
    }

    #[test]
    fn chunks_assemble_in_order_and_restart_on_a_first_chunk() {
        let s = Endpoint::store(1);
        let base = LogPosition::new(2, 40);
        let mut rx = None;
        let out = SnapshotRx::on_chunk(&mut rx, s, 0, chunk(base, None, vec![kv("a")], false));
        assert_eq!(
            out,
            ChunkOutcome::Taken {
                base,
                first: true,
                pairs: vec![kv("a")],
                next: Some((
                    s,
                    Message::SnapshotRequest {
                        base,
                        after: Some(Bytes::from("a"))
                    }
                ))
            }
        );
        // A duplicate of the first chunk restarts; a chunk after the wrong
        // key is ignored.
        let wrong = SnapshotRx::on_chunk(
            &mut rx,
            s,
            0,
            chunk(base, Some(Bytes::from("zz")), vec![kv("zzz")], true),
        );
        assert_eq!(wrong, ChunkOutcome::Ignored);
        let out = SnapshotRx::on_chunk(
            &mut rx,
            s,
            0,
            chunk(base, Some(Bytes::from("a")), vec![kv("b"), kv("c")], true),
        );
        assert_eq!(
            out,
            ChunkOutcome::Taken {
                base,
                first: false,
                pairs: vec![kv("b"), kv("c")],
                next: None
            }
        );
        assert!(rx.is_none());
        // Not newer than what we hold: ignored.
        let old = SnapshotRx::on_chunk(&mut rx, s, 40, chunk(base, None, vec![], true));
        assert_eq!(old, ChunkOutcome::Ignored);
    }

    #[test]
    fn a_silent_source_is_given_up_after_a_few_resends() {
        let s = Endpoint::store(1);
        let base = LogPosition::new(2, 40);
        let mut rx = None;
        SnapshotRx::on_chunk(&mut rx, s, 0, chunk(base, None, vec![kv("a")], false));
        let r = rx.as_mut().expect("transfer under way");
        let again = Message::SnapshotRequest {
            base,
            after: Some(Bytes::from("a")),
        };
        for _ in 0..RESENDS_MAX {
            assert_eq!(r.resend(), Some((s, again.clone())));
        }
        assert_eq!(r.resend(), None, "the source is silent: ask elsewhere");
        // A chunk arriving in time resets the count.
        let mut rx = None;
        SnapshotRx::on_chunk(&mut rx, s, 0, chunk(base, None, vec![kv("a")], false));
        let r = rx.as_mut().expect("transfer under way");
        r.resend();
        r.resend();
        SnapshotRx::on_chunk(
            &mut rx,
            s,
            0,
            chunk(base, Some(Bytes::from("a")), vec![kv("b")], false),
        );
        let r = rx.as_mut().expect("transfer under way");
        for _ in 0..RESENDS_MAX {
            assert!(r.resend().is_some());
        }
    }
}
