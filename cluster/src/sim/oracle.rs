//! The client oracle: submits payloads to whoever is master and records which
//! ones a master reported stable (confirmed). Pending payloads of a master that
//! crashed or stepped down are dropped: their fate is unknown to the client,
//! which is allowed (it would republish); only confirmed ones must survive.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::position::{Entry, LogPosition};

use super::check::{Incarnation, Violation};

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
}

impl Oracle {
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

    /// `who` crashed or stepped down: its pending payloads have an unknown fate.
    pub fn abandon(&mut self, who: Incarnation) {
        self.pending.remove(&who);
    }
}
