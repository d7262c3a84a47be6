//! I6, stream offsets: a stream entry at offset N is the same entry on every
//! node. Offsets are a pure function of the stable log prefix (appends are
//! numbered in log order, retention is a logged cut), so across failovers,
//! restarts and snapshot restores:
//!
//! - every materialized stream (a store's state, a broker's applied state),
//!   whenever it is observed, agrees with one global offset → payload map:
//!   once any node holds offset N = P, no node holds N = Q ≠ P, nor P at an
//!   offset other than N; and it is well formed (entries exactly at
//!   `first..next`, each a stream append);
//! - at the end, the final master's stream holds every confirmed append at
//!   the offset the stable log gives it, unless a logged cut removed it, and
//!   its `first` and `next` are those of the stable log replayed.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;

use crate::position::LogPosition;
use crate::replication::NodeId;
use crate::sim::reducer::{
    STREAM_FIRST, STREAM_NEXT, STREAM_OFF, State, is_append, kind, offset_key, parse_offset_key,
    read_u64,
};

use super::{Incarnation, Violation};

/// Whose materialized stream is observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// A store's state (on its disk).
    Store(NodeId),
    /// A broker incarnation's applied state.
    Broker(Incarnation),
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::Store(id) => write!(f, "store {id}"),
            Who::Broker((id, inc)) => write!(f, "broker {id} (life {inc})"),
        }
    }
}

/// Every offset any node has held, and which payload it held there.
#[derive(Debug, Default)]
pub struct Offsets {
    /// Offset → payload, and who held it first.
    by_offset: BTreeMap<u64, (Bytes, Who)>,
    /// Payload → its offset (payloads are unique).
    by_payload: BTreeMap<Bytes, u64>,
}

impl Offsets {
    /// How many offsets were seen.
    pub fn len(&self) -> usize {
        self.by_offset.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.by_offset.is_empty()
    }

    /// `who` holds `payload` at `offset`.
    fn observe(&mut self, who: Who, offset: u64, payload: &Bytes) -> Result<(), Violation> {
        if let Some((known, first)) = self.by_offset.get(&offset) {
            if known != payload {
                return Err(Violation::new(
                    "I6",
                    format!("{who} holds {payload:?} at offset {offset}, {first} held {known:?}"),
                ));
            }
            return Ok(());
        }
        if let Some(other) = self.by_payload.get(payload) {
            return Err(Violation::new(
                "I6",
                format!("{who} holds {payload:?} at offset {offset}, it was at offset {other}"),
            ));
        }
        self.by_offset.insert(offset, (payload.clone(), who));
        self.by_payload.insert(payload.clone(), offset);
        Ok(())
    }

    /// `who`'s whole stream, as `state` holds it now: well formed and in
    /// agreement with every offset seen before.
    pub fn check_state(&mut self, who: Who, state: &State) -> Result<(), Violation> {
        let (first, next) = bounds(who, state)?;
        let mut expected = first;
        for (key, payload) in stream_entries(state) {
            let Some(offset) = parse_offset_key(key) else {
                return Err(Violation::new(
                    "I6",
                    format!("{who} holds a malformed stream key {key:?}"),
                ));
            };
            self.observe(who, offset, payload)?;
            if offset != expected || offset >= next {
                return Err(Violation::new(
                    "I6",
                    format!(
                        "{who} holds offset {offset} in a stream of [{first}, {next}) \
                         (expected {expected} next)"
                    ),
                ));
            }
            if !is_append(kind(payload)) {
                return Err(Violation::new(
                    "I6",
                    format!("{who} holds {payload:?}, not a stream append, at offset {offset}"),
                ));
            }
            expected += 1;
        }
        if expected != next {
            return Err(Violation::new(
                "I6",
                format!("{who}: stream of [{first}, {next}) ends at {expected}"),
            ));
        }
        Ok(())
    }

    /// `who`'s state after it applied entries on a stream whose next offset
    /// was `from`: the offsets those entries added (`from` up to the new
    /// next, but for those cut since) are there and agree with every offset
    /// seen before.
    pub fn check_new(&mut self, who: Who, state: &State, from: u64) -> Result<(), Violation> {
        let (first, next) = bounds(who, state)?;
        for offset in from.max(first)..next {
            let Some(payload) = state.get(&offset_key(offset)) else {
                return Err(Violation::new(
                    "I6",
                    format!("{who}: stream of [{first}, {next}) lacks offset {offset}"),
                ));
            };
            self.observe(who, offset, payload)?;
        }
        Ok(())
    }
}

/// The stream's `(first, next)`, readable and in order.
fn bounds(who: Who, state: &State) -> Result<(u64, u64), Violation> {
    let read = |key: &[u8]| {
        read_u64(state, key).map_err(|v| {
            Violation::new(
                "I6",
                format!("{who} holds {v:?} at {:?}", String::from_utf8_lossy(key)),
            )
        })
    };
    let (first, next) = (read(STREAM_FIRST)?, read(STREAM_NEXT)?);
    if first > next {
        return Err(Violation::new(
            "I6",
            format!("{who}: stream first offset {first} beyond its next {next}"),
        ));
    }
    Ok((first, next))
}

/// The stream's entry keys and payloads, in offset order.
fn stream_entries(state: &State) -> impl Iterator<Item = (&Bytes, &Bytes)> {
    state
        .range(Bytes::from_static(STREAM_OFF)..)
        .take_while(|(k, _)| k.starts_with(STREAM_OFF))
}

/// Payload → offset of a stream.
fn offsets_of(state: &State) -> BTreeMap<&Bytes, u64> {
    stream_entries(state)
        .filter_map(|(k, v)| Some((v, parse_offset_key(k)?)))
        .collect()
}

/// After the final recovery: the final master `who`, which applied up to
/// `applied`, holds in `state` every confirmed stream append at the offset
/// the stable log gives it (`expected`, the stable history replayed up to
/// `applied`), or, if a logged cut removed it there, does not hold it; and
/// its stream has the replayed one's bounds. Returns how many confirmed
/// appends it holds.
pub fn check_final(
    who: Who,
    state: &State,
    applied: u64,
    expected: &State,
    confirmed: &[(LogPosition, Bytes)],
) -> Result<u64, Violation> {
    let (want, have) = (offsets_of(expected), offsets_of(state));
    let mut held = 0;
    for (pos, payload) in confirmed {
        if !is_append(kind(payload)) {
            continue;
        }
        if pos.index > applied {
            return Err(Violation::new(
                "I6",
                format!(
                    "confirmed {payload:?} at {pos}: the final master {who} applied only {applied}"
                ),
            ));
        }
        match (want.get(payload), have.get(payload)) {
            (Some(o), Some(h)) if o == h => held += 1,
            (None, None) => {}
            (Some(o), h) => {
                return Err(Violation::new(
                    "I6",
                    format!(
                        "confirmed {payload:?} at {pos} is at offset {o} in the stable log \
                         replayed; the final master {who} has it at {h:?}"
                    ),
                ));
            }
            (None, Some(h)) => {
                return Err(Violation::new(
                    "I6",
                    format!(
                        "confirmed {payload:?} at {pos} was cut by a logged retention cut; \
                         the final master {who} still has it at offset {h}"
                    ),
                ));
            }
        }
    }
    let (bounds_want, bounds_have) = (bounds(who, expected)?, bounds(who, state)?);
    if bounds_want != bounds_have {
        return Err(Violation::new(
            "I6",
            format!(
                "the final master {who} has the stream at {bounds_have:?} (first, next), \
                 the stable log replayed gives {bounds_want:?}"
            ),
        ));
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::position::Entry;
    use crate::sim::reducer::reduce;

    fn state_of(payloads: &[&str]) -> State {
        let mut state = State::new();
        for (i, p) in payloads.iter().enumerate() {
            reduce(&mut state, &Entry::new(1, i as u64 + 1, p.to_string()));
        }
        state
    }

    #[test]
    fn an_offset_held_with_two_payloads_is_caught() {
        let mut offsets = Offsets::default();
        let a = state_of(&["s1", "s2", "t1.1"]);
        offsets.check_state(Who::Store(1), &a).unwrap();
        // Another node numbered from the wrong base: s3 at offset 1.
        let b = state_of(&["s1", "t1.1", "s3"]);
        let err = offsets.check_state(Who::Broker((2, 0)), &b).unwrap_err();
        assert!(err.detail.contains("offset 1"), "{err}");
        // The same payload at two offsets.
        let mut offsets = Offsets::default();
        offsets.check_state(Who::Store(1), &a).unwrap();
        let c = state_of(&["s2"]);
        assert!(offsets.check_new(Who::Store(2), &c, 0).is_err());
    }

    #[test]
    fn a_malformed_stream_is_caught() {
        let mut offsets = Offsets::default();
        let mut s = state_of(&["s1", "s2"]);
        s.remove(&offset_key(0));
        assert!(offsets.check_state(Who::Store(1), &s).is_err());
        let mut s = state_of(&["s1"]);
        s.insert(Bytes::from_static(STREAM_NEXT), Bytes::from("x"));
        assert!(offsets.check_state(Who::Store(1), &s).is_err());
    }

    #[test]
    fn the_final_master_must_hold_what_no_cut_removed() {
        let log = ["s1", "s2", "t1.1", "s3"];
        let expected = state_of(&log);
        let confirmed: Vec<_> = log
            .iter()
            .enumerate()
            .map(|(i, p)| (LogPosition::new(1, i as u64 + 1), Bytes::from(*p)))
            .collect();
        let who = Who::Broker((1, 1));
        assert_eq!(check_final(who, &expected, 4, &expected, &confirmed), Ok(2));
        // A cut applied twice drops s2, which no logged cut removed.
        let twice = state_of(&["s1", "s2", "t1.1", "t1.2", "s3"]);
        assert!(check_final(who, &twice, 4, &expected, &confirmed).is_err());
        // A confirmed append the final master has not applied.
        assert!(check_final(who, &expected, 3, &expected, &confirmed).is_err());
    }
}
