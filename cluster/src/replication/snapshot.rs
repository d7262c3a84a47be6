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

use bytes::Bytes;

use crate::position::LogPosition;

use super::messages::{Endpoint, Message};

/// A snapshot being received.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SnapshotRx {
    /// The store sending it.
    source: Endpoint,
    /// The last entry the state covers.
    base: LogPosition,
    /// The last key received.
    after: Option<Bytes>,
    /// Every pair so far, in key order.
    pairs: Vec<(Bytes, Bytes)>,
}

/// What one chunk did.
#[derive(Debug, PartialEq)]
pub(crate) enum ChunkOutcome {
    /// Not the chunk we wait for (a duplicate, a late one, or a snapshot no
    /// newer than what we hold).
    Ignored,
    /// Taken; ask the source for the next chunk with this message.
    More(Endpoint, Message),
    /// The last chunk: install `pairs` as the state of the log up to `base`.
    Done {
        /// The last entry the state covers.
        base: LogPosition,
        /// The whole state.
        pairs: Vec<(Bytes, Bytes)>,
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

    /// Fold a chunk from `from` into `rx`. A snapshot whose base is at or
    /// below `have` (the index the receiver already holds as stable) is of no
    /// use and ignored.
    pub(crate) fn on_chunk(
        rx: &mut Option<SnapshotRx>,
        from: Endpoint,
        have: u64,
        base: LogPosition,
        after: Option<Bytes>,
        pairs: Vec<(Bytes, Bytes)>,
        done: bool,
    ) -> ChunkOutcome {
        if base.index <= have {
            return ChunkOutcome::Ignored;
        }
        match after {
            None => {
                // A first chunk: a new transfer, or the store restarted it.
                *rx = Some(SnapshotRx {
                    source: from,
                    base,
                    after: None,
                    pairs: Vec::new(),
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
        if let Some((last, _)) = pairs.last() {
            r.after = Some(last.clone());
        }
        r.pairs.extend(pairs);
        if done {
            let Some(r) = rx.take() else {
                return ChunkOutcome::Ignored;
            };
            return ChunkOutcome::Done {
                base: r.base,
                pairs: r.pairs,
            };
        }
        let (to, msg) = r.request();
        ChunkOutcome::More(to, msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(k: &str) -> (Bytes, Bytes) {
        (Bytes::from(k.to_owned()), Bytes::from("v"))
    }

    #[test]
    fn chunks_assemble_in_order_and_restart_on_a_first_chunk() {
        let s = Endpoint::store(1);
        let base = LogPosition::new(2, 40);
        let mut rx = None;
        let out = SnapshotRx::on_chunk(&mut rx, s, 0, base, None, vec![kv("a")], false);
        assert_eq!(
            out,
            ChunkOutcome::More(
                s,
                Message::SnapshotRequest {
                    base,
                    after: Some(Bytes::from("a"))
                }
            )
        );
        // A duplicate of the first chunk restarts; a chunk after the wrong
        // key is ignored.
        let wrong = SnapshotRx::on_chunk(
            &mut rx,
            s,
            0,
            base,
            Some(Bytes::from("zz")),
            vec![kv("zzz")],
            true,
        );
        assert_eq!(wrong, ChunkOutcome::Ignored);
        let out = SnapshotRx::on_chunk(
            &mut rx,
            s,
            0,
            base,
            Some(Bytes::from("a")),
            vec![kv("b"), kv("c")],
            true,
        );
        assert_eq!(
            out,
            ChunkOutcome::Done {
                base,
                pairs: vec![kv("a"), kv("b"), kv("c")]
            }
        );
        assert!(rx.is_none());
        // Not newer than what we hold: ignored.
        let old = SnapshotRx::on_chunk(&mut rx, s, 40, base, None, vec![], true);
        assert_eq!(old, ChunkOutcome::Ignored);
    }
}
