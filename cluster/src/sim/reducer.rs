//! The simulator's reducer: what the payloads "mean", so stores can
//! materialize a state and the checkers can replay it.
//!
//! Oracle payloads are of three kinds:
//!
//! - `p<n>` sets key `k<n mod 16>` to the payload and, for every fifth `n`,
//!   deletes another key, so states have overwrites and deletions (a state
//!   that only grew would hide a reducer applied twice or out of order).
//! - `s<n>` appends the payload to the one stream, at its next offset, as the
//!   broker's replicated state numbers a stream's `Published` events in log
//!   order: key `stream/off/<offset>` (zero-padded, so key order is offset
//!   order) is set to the payload and `stream/next` moves up by one.
//!   The appends are one deduplicating publisher's (the stream protocol's
//!   publisher reference), `n` its publishing id: an `s<n>` with `n` at or
//!   below `stream/seq` is a resend of a stored one and changes nothing;
//!   otherwise `stream/seq` becomes `n` in the same entry, as the broker
//!   logs a publisher's sequence in its entry's own `Published` event.
//! - `u<n>` and `q<n>` are the design that logs the sequence apart (the bug
//!   [`super::StreamBug::SequenceApart`] plants): `u<n>` appends as `s<n>`
//!   does but leaves `stream/seq` alone, and `q<n>`, logged after it, moves
//!   `stream/seq` up to `n`.
//! - `t<k>.<n>` is a retention cut (the broker's logged `StreamTruncated`):
//!   `stream/first` moves forward by `k` (never past `stream/next`) and the
//!   entries below it are deleted. A relative cut, so one applied twice shows.
//!
//! `stream/first` and `stream/next` are decimal; absent, they are 0. Epoch
//! markers (empty payloads) and anything else change nothing.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::position::Entry;

/// A materialized state: key → value, in key order.
pub type State = BTreeMap<Bytes, Bytes>;

/// Key of the stream's first offset still held.
pub const STREAM_FIRST: &[u8] = b"stream/first";
/// Key of the offset the next stream append gets.
pub const STREAM_NEXT: &[u8] = b"stream/next";
/// Prefix of the stream's entry keys.
pub const STREAM_OFF: &[u8] = b"stream/off/";
/// Key of the publisher's sequence: the highest publishing id stored.
pub const STREAM_SEQ: &[u8] = b"stream/seq";

/// What a payload does to the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `p<n>`: set a key (and maybe delete another).
    Set(u64),
    /// `s<n>`: a stream append with publishing id `n`, which moves the
    /// sequence.
    Append(u64),
    /// `u<n>`: a stream append that leaves the sequence to a `q<n>`.
    AppendApart(u64),
    /// `q<n>`: the publisher's sequence, logged apart from its append.
    Sequence(u64),
    /// `t<k>.<n>`: a retention cut of `k` offsets.
    Cut(u64),
    /// Anything else (epoch markers): no change.
    Other,
}

/// The kind of `payload`.
pub fn kind(payload: &[u8]) -> Kind {
    let Ok(text) = std::str::from_utf8(payload) else {
        return Kind::Other;
    };
    let number = |s: &str| s.parse::<u64>().ok();
    if let Some(n) = text.strip_prefix('p').and_then(number) {
        return Kind::Set(n);
    }
    if let Some(n) = text.strip_prefix('s').and_then(number) {
        return Kind::Append(n);
    }
    if let Some(n) = text.strip_prefix('u').and_then(number) {
        return Kind::AppendApart(n);
    }
    if let Some(n) = text.strip_prefix('q').and_then(number) {
        return Kind::Sequence(n);
    }
    let cut = text
        .strip_prefix('t')
        .and_then(|rest| rest.split_once('.'))
        .and_then(|(k, n)| Some((number(k)?, number(n)?)));
    match cut {
        Some((k, _)) => Kind::Cut(k),
        None => Kind::Other,
    }
}

/// Whether `kind` appends to the stream.
pub fn is_append(kind: Kind) -> bool {
    matches!(kind, Kind::Append(_) | Kind::AppendApart(_))
}

/// The key of stream offset `offset`.
pub fn offset_key(offset: u64) -> Bytes {
    // By hand, not `format!`: every stream append makes several of these,
    // on every node and in every replay, and the sim runs on 2 cores.
    let mut key = [b'0'; STREAM_OFF.len() + 20];
    key[..STREAM_OFF.len()].copy_from_slice(STREAM_OFF);
    write_digits(&mut key[STREAM_OFF.len()..], offset);
    Bytes::copy_from_slice(&key)
}

/// `value` in decimal, right-aligned in `out` (which holds enough digits:
/// 20 hold any u64).
fn write_digits(out: &mut [u8], mut value: u64) {
    for digit in out.iter_mut().rev() {
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// The offset of a stream entry key, if `key` is one.
pub fn parse_offset_key(key: &[u8]) -> Option<u64> {
    let digits = key.strip_prefix(STREAM_OFF)?;
    if digits.len() != 20 {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The decimal at `key` (0 if absent), or `Err` with what is there instead.
pub fn read_u64(state: &State, key: &[u8]) -> Result<u64, Bytes> {
    match state.get(key) {
        None => Ok(0),
        Some(v) => std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| v.clone()),
    }
}

/// The stream's `(first, next)` offsets; an unreadable value counts as 0
/// (the I6 checker reports it).
pub fn stream_bounds(state: &State) -> (u64, u64) {
    let get = |key| read_u64(state, key).unwrap_or(0);
    (get(STREAM_FIRST), get(STREAM_NEXT))
}

/// The keys `p<n>` sets: `k<n mod 16>`, two digits.
const KEYS: [&[u8]; 16] = [
    b"k00", b"k01", b"k02", b"k03", b"k04", b"k05", b"k06", b"k07", b"k08", b"k09", b"k10", b"k11",
    b"k12", b"k13", b"k14", b"k15",
];

/// Apply one stable entry to `state`.
pub fn reduce(state: &mut State, entry: &Entry) {
    match kind(&entry.payload) {
        Kind::Set(n) => {
            state.insert(
                Bytes::from_static(KEYS[(n % 16) as usize]),
                entry.payload.clone(),
            );
            if n % 5 == 0 {
                state.remove(KEYS[((n + 7) % 16) as usize]);
            }
        }
        Kind::Append(n) | Kind::AppendApart(n) => {
            let seq = read_u64(state, STREAM_SEQ).unwrap_or(0);
            if n <= seq {
                return; // a resend of a stored id: deduplicated
            }
            let next = read_u64(state, STREAM_NEXT).unwrap_or(0);
            state.insert(offset_key(next), entry.payload.clone());
            set_u64(state, STREAM_NEXT, next + 1);
            if matches!(kind(&entry.payload), Kind::Append(_)) {
                set_u64(state, STREAM_SEQ, n);
            }
        }
        Kind::Sequence(n) => {
            if n > read_u64(state, STREAM_SEQ).unwrap_or(0) {
                set_u64(state, STREAM_SEQ, n);
            }
        }
        Kind::Cut(k) => {
            let (first, next) = stream_bounds(state);
            let to = first.saturating_add(k).min(next);
            for offset in first..to {
                state.remove(&offset_key(offset));
            }
            if to != first {
                set_u64(state, STREAM_FIRST, to);
            }
        }
        Kind::Other => {}
    }
}

/// Set `key` to the decimal `value`.
pub fn set_u64(state: &mut State, key: &'static [u8], value: u64) {
    let mut digits = [b'0'; 20];
    write_digits(&mut digits, value);
    let start = digits.iter().position(|&d| d != b'0').unwrap_or(19);
    state.insert(
        Bytes::from_static(key),
        Bytes::copy_from_slice(&digits[start..]),
    );
}

/// The state of a log prefix, replayed from nothing; cached so that checks
/// at increasing indexes replay each entry once, with a copy of the state
/// every `EVERY` entries, so a check below the cache (a lagging
/// node's base) replays from the copy below it rather than from nothing.
/// Sound because the stable history only grows.
#[derive(Debug, Default)]
pub struct Replay {
    index: u64,
    state: State,
    /// The state at indexes `EVERY`, `2 * EVERY`, ...
    copies: Vec<State>,
}

impl Replay {
    /// Entries between two copies of the state.
    const EVERY: u64 = 128;

    /// The state after entries `1..=index`, read through `entry_at`; `None`
    /// if an entry is missing.
    pub fn state_at(
        &mut self,
        index: u64,
        entry_at: impl Fn(u64) -> Option<Entry>,
    ) -> Option<&State> {
        if index < self.index {
            let copy = usize::try_from(index / Self::EVERY).unwrap_or(usize::MAX);
            (self.index, self.state) = match copy.checked_sub(1).and_then(|i| self.copies.get(i)) {
                Some(state) => (copy as u64 * Self::EVERY, state.clone()),
                None => (0, State::new()),
            };
        }
        while self.index < index {
            let entry = entry_at(self.index + 1)?;
            reduce(&mut self.state, &entry);
            self.index += 1;
            if self.index.is_multiple_of(Self::EVERY)
                && self.copies.len() as u64 * Self::EVERY < self.index
            {
                self.copies.push(self.state.clone());
            }
        }
        Some(&self.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_below_its_cache_restarts_from_a_copy() {
        let log: Vec<Entry> = (1..=400)
            .map(|i| Entry::new(1, i, format!("{}{i}", ["p", "s", "t3."][i as usize % 3])))
            .collect();
        let entry_at = |i: u64| log.get(i as usize - 1).cloned();
        let mut cached = Replay::default();
        for index in [390, 130, 300, 5, 256, 128, 0, 400] {
            let fresh = Replay::default().state_at(index, entry_at).cloned();
            assert_eq!(cached.state_at(index, entry_at).cloned(), fresh, "{index}");
        }
    }

    #[test]
    fn a_resend_at_or_below_the_sequence_is_not_stored_again() {
        let mut state = State::new();
        for (i, p) in ["s1", "s2", "s2", "s1", "s3"].iter().enumerate() {
            reduce(&mut state, &Entry::new(1, i as u64 + 1, *p));
        }
        assert_eq!(stream_bounds(&state), (0, 3));
        assert_eq!(read_u64(&state, STREAM_SEQ), Ok(3));
        // Logged apart, the sequence lags its appends: a resend between
        // them is stored twice.
        let mut state = State::new();
        for (i, p) in ["u1", "u2", "u2", "q2", "u2"].iter().enumerate() {
            reduce(&mut state, &Entry::new(1, i as u64 + 1, *p));
        }
        assert_eq!(stream_bounds(&state), (0, 3));
        assert_eq!(state.get(&offset_key(2)), Some(&Bytes::from("u2")));
    }

    #[test]
    fn appends_get_consecutive_offsets_and_cuts_move_the_first() {
        let mut state = State::new();
        for (i, p) in ["s1", "p1", "s2", "s3", "t2.1", "s4", "t9.2"]
            .iter()
            .enumerate()
        {
            reduce(&mut state, &Entry::new(1, i as u64 + 1, *p));
            if i == 4 {
                assert_eq!(stream_bounds(&state), (2, 3));
                assert_eq!(state.get(&offset_key(2)), Some(&Bytes::from("s3")));
                assert!(!state.contains_key(&offset_key(1)));
            }
        }
        // The second cut stops at the head: nothing is left, nothing reused.
        assert_eq!(stream_bounds(&state), (4, 4));
        assert_eq!(parse_offset_key(&offset_key(17)), Some(17));
        assert_eq!(
            offset_key(1234),
            Bytes::from(format!("stream/off/{:020}", 1234))
        );
        set_u64(&mut state, STREAM_NEXT, 0);
        assert_eq!(read_u64(&state, STREAM_NEXT), Ok(0));
        set_u64(&mut state, STREAM_NEXT, 907);
        assert_eq!(state.get(STREAM_NEXT), Some(&Bytes::from("907")));
        assert_eq!(kind(b"t3"), Kind::Other);
        assert_eq!(state.get(b"k01".as_slice()), Some(&Bytes::from("p1")));
    }
}
