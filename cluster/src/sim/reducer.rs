//! The simulator's reducer: what the payloads "mean", so stores can
//! materialize a state and the checkers can replay it.
//!
//! Oracle payloads are `p<n>`. Entry `p<n>` sets key `k<n mod 16>` to the
//! payload and, for every fifth `n`, deletes another key, so states have
//! overwrites and deletions (a state that only grew would hide a reducer
//! applied twice or out of order). Epoch markers (empty payloads) change
//! nothing.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::position::Entry;

/// A materialized state: key → value, in key order.
pub type State = BTreeMap<Bytes, Bytes>;

/// Apply one stable entry to `state`.
pub fn reduce(state: &mut State, entry: &Entry) {
    let Some(n) = std::str::from_utf8(&entry.payload)
        .ok()
        .and_then(|p| p.strip_prefix('p'))
        .and_then(|n| n.parse::<u64>().ok())
    else {
        return;
    };
    state.insert(
        Bytes::from(format!("k{:02}", n % 16)),
        entry.payload.clone(),
    );
    if n % 5 == 0 {
        state.remove(format!("k{:02}", (n + 7) % 16).as_bytes());
    }
}

/// The state of a log prefix, replayed from nothing; cached so that checks
/// at increasing indexes replay each entry once.
#[derive(Debug, Default)]
pub struct Replay {
    index: u64,
    state: State,
}

impl Replay {
    /// The state after entries `1..=index`, read through `entry_at`; `None`
    /// if an entry is missing.
    pub fn state_at(
        &mut self,
        index: u64,
        entry_at: impl Fn(u64) -> Option<Entry>,
    ) -> Option<&State> {
        if index < self.index {
            *self = Replay::default();
        }
        while self.index < index {
            let entry = entry_at(self.index + 1)?;
            reduce(&mut self.state, &entry);
            self.index += 1;
        }
        Some(&self.state)
    }
}
