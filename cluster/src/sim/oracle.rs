//! The client oracle: submits payloads to whoever is master and records which
//! ones a master reported stable (confirmed). Pending payloads of a master that
//! crashed or stepped down have an unknown fate: the client drops the others
//! (it may; only confirmed ones must survive) but sends its stream appends
//! again, as a deduplicating stream publisher does, and the broker must store
//! each once (I6 sees a payload at two offsets otherwise).

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use crate::position::{Entry, LogPosition};

use super::check::{Incarnation, Violation};

/// Resends per client burst at most.
const RESEND_MAX: usize = 8;

/// What the client has submitted and had confirmed.
#[derive(Debug, Default)]
pub struct Oracle {
    /// Payloads made so far; picks the kind of the next one.
    next: u64,
    /// Counters of each kind (`p`, `s`, `t`), making every payload unique,
    /// so a misplaced one is recognizable.
    counts: [u64; 3],
    /// Submitted to a master incarnation, not yet confirmed, in position order.
    pending: BTreeMap<Incarnation, Vec<(LogPosition, Bytes)>>,
    /// Confirmed payloads with the position they were confirmed at.
    pub confirmed: Vec<(LogPosition, Bytes)>,
    /// Stream appends (and their sequences) of a master that crashed or
    /// stepped down, unconfirmed: sent again before anything new.
    resend: VecDeque<Bytes>,
    /// Appends are `u<n>` with the sequence `q<n>` logged apart
    /// ([`super::StreamBug::SequenceApart`]) instead of `s<n>`.
    sequence_apart: bool,
}

impl Oracle {
    /// A client whose stream appends log their sequence apart (the planted
    /// bug), or with the append (the design).
    pub fn new(sequence_apart: bool) -> Oracle {
        Oracle {
            sequence_apart,
            ..Oracle::default()
        }
    }

    /// What to submit next: resends first (up to [`RESEND_MAX`]), then `fresh` new payloads
    /// (with the sequence apart, the burst's appends are followed by one
    /// sequence); and how many of them are resends.
    pub fn next_batch(&mut self, fresh: u64) -> (Vec<Bytes>, u64) {
        // A few at a time, as a client's window allows: a master that got
        // hundreds in one burst after every failover could not keep up.
        let n = self.resend.len().min(RESEND_MAX);
        let mut out: Vec<Bytes> = self.resend.drain(..n).collect();
        let resent = out.len() as u64;
        // With the sequence apart, as the bridge once logged it: the
        // burst's appends, then one sequence for the highest of them.
        let mut sequence = None;
        for _ in 0..fresh {
            let p = self.payload();
            match (self.sequence_apart, p.strip_prefix(b"s")) {
                (true, Some(n)) => {
                    out.push(Bytes::from([b"u".as_slice(), n].concat()));
                    sequence = Some(Bytes::from([b"q".as_slice(), n].concat()));
                }
                _ => out.push(p),
            }
        }
        out.extend(sequence);
        (out, resent)
    }

    /// A fresh unique payload (kinds in `sim/reducer.rs`): of every 16,
    /// 6 are stream appends `s<n>`, 1 a retention cut `t<k>.<n>` and the
    /// rest `p<n>`, numbered per kind so the `p<n>` run as they always did.
    /// A cut takes 1 to 5 offsets, and every eighth 32: about as many as
    /// are appended, so the stream grows, shrinks and is now and then cut
    /// to its head.
    pub fn payload(&mut self) -> Bytes {
        self.next += 1;
        let kind = match self.next % 16 {
            1 | 4 | 6 | 9 | 12 | 14 => 1,
            11 => 2,
            _ => 0,
        };
        self.counts[kind] += 1;
        let n = self.counts[kind];
        Bytes::from(match kind {
            1 => format!("s{n}"),
            2 => format!("t{}.{n}", if n.is_multiple_of(8) { 32 } else { 1 + n % 5 }),
            _ => format!("p{n}"),
        })
    }

    /// `payload` was appended by `who` at `pos`.
    pub fn submitted(&mut self, who: Incarnation, pos: LogPosition, payload: Bytes) {
        self.pending.entry(who).or_default().push((pos, payload));
    }

    /// `who` reported everything up to `stable` stable: confirm its pending
    /// payloads there, checking each sits where the append said it would.
    pub fn on_stable(
        &mut self,
        who: Incarnation,
        stable: u64,
        entry_at: impl Fn(u64) -> Option<Entry>,
    ) -> Result<(), Violation> {
        let Some(pending) = self.pending.get_mut(&who) else {
            return Ok(());
        };
        let done = pending.partition_point(|(pos, _)| pos.index <= stable);
        for (pos, payload) in pending.drain(..done) {
            match entry_at(pos.index) {
                Some(e) if e.pos == pos && e.payload == payload => {
                    self.confirmed.push((pos, payload))
                }
                other => {
                    return Err(Violation::new(
                        "I1",
                        format!(
                            "node {who:?} confirmed {payload:?} at {pos} but holds {:?} there",
                            other.map(|e| e.pos)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `who` crashed or stepped down: its pending payloads have an unknown
    /// fate; its stream appends and sequences are sent again.
    pub fn abandon(&mut self, who: Incarnation) {
        for (_, p) in self.pending.remove(&who).unwrap_or_default() {
            if matches!(p.first(), Some(b's' | b'u' | b'q')) {
                self.resend.push_back(p);
            }
        }
    }
}
