//! What the brokers materialize, and the I6 stream checks on every node.
//!
//! Each broker incarnation folds what the engine hands it (`Apply`, a
//! master's own stable prefix, `Restore`) into a state with the simulator's
//! reducer, as the real broker's replicated state is built from the events
//! it applies; a store's state is on its disk. The I6 checker reads both
//! whenever they change: the offsets a batch added, or the whole stream
//! after a snapshot restore or install, a restart, every 250 ms and at the
//! end.

use bytes::Bytes;

use crate::position::Entry;
use crate::replication::NodeId;

use super::check::i6_stream_offsets::{self as i6, Who};
use super::check::{Incarnation, Violation};
use super::reducer::{self, Kind, STREAM_FIRST, STREAM_NEXT, State};
use super::world::World;

/// A bug planted in how brokers materialize the stream, for the tests that
/// show the I6 checker catches it ([`super::SimParams::stream_bug`]); no
/// other run sets one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamBug {
    /// A snapshot restore renumbers the stream's entries from offset 0 (by
    /// their place in the snapshot, forgetting the retention cuts before
    /// it): numbering from the wrong base.
    RebaseAfterRestore,
    /// Every retention cut is applied twice.
    CutTwice,
    /// The publisher's sequence is logged apart from its append, after it
    /// (`u<n>` then `q<n>`, see `reducer`): a failover between the two lets
    /// the client's resend store the append again.
    SequenceApart,
}

/// Apply `entries` to a broker's state.
pub fn apply(state: &mut State, entries: &[Entry], bug: Option<StreamBug>) {
    for entry in entries {
        reducer::reduce(state, entry);
        if bug == Some(StreamBug::CutTwice) && matches!(reducer::kind(&entry.payload), Kind::Cut(_))
        {
            reducer::reduce(state, entry);
        }
    }
}

/// A broker's state replaced by a snapshot's `pairs`.
pub fn restore(pairs: &[(Bytes, Bytes)], bug: Option<StreamBug>) -> State {
    let mut state: State = pairs.iter().cloned().collect();
    if bug == Some(StreamBug::RebaseAfterRestore) {
        let entries: Vec<(Bytes, Bytes)> = state
            .iter()
            .filter(|(k, _)| reducer::parse_offset_key(k).is_some())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (key, _) in &entries {
            state.remove(key);
        }
        for (offset, (_, payload)) in (0u64..).zip(&entries) {
            state.insert(reducer::offset_key(offset), payload.clone());
        }
        reducer::set_u64(&mut state, STREAM_FIRST, 0);
        reducer::set_u64(&mut state, STREAM_NEXT, entries.len() as u64);
    }
    state
}

impl World {
    /// Broker incarnation `who` applied `entries` (already checked by I4).
    pub(super) fn app_apply(
        &mut self,
        who: Incarnation,
        entries: &[Entry],
    ) -> Result<(), Violation> {
        if entries.is_empty() {
            return Ok(());
        }
        let state = self.apps.entry(who).or_default();
        let (_, from) = reducer::stream_bounds(state);
        apply(state, entries, self.params.stream_bug);
        self.offsets.check_new(Who::Broker(who), state, from)
    }

    /// Broker incarnation `who` restored a snapshot (already checked by I4).
    pub(super) fn app_restore(
        &mut self,
        who: Incarnation,
        pairs: &[(Bytes, Bytes)],
    ) -> Result<(), Violation> {
        let state = restore(pairs, self.params.stream_bug);
        self.offsets.check_state(Who::Broker(who), &state)?;
        self.apps.insert(who, state);
        Ok(())
    }

    /// The whole stream on `node`'s disk, if it has one.
    pub(super) fn check_disk_stream(&mut self, node: NodeId) -> Result<(), Violation> {
        match self.nodes.get(&node).and_then(|n| n.disk.as_ref()) {
            Some(disk) => self
                .offsets
                .check_state(Who::Store(node), &disk.current().state),
            None => Ok(()),
        }
    }

    /// The whole stream of every store and every live broker.
    pub(super) fn check_streams(&mut self) -> Result<(), Violation> {
        for (&id, n) in &self.nodes {
            if let Some(disk) = n.disk.as_ref() {
                self.offsets
                    .check_state(Who::Store(id), &disk.current().state)?;
            }
        }
        for (&who, state) in &self.apps {
            self.offsets.check_state(Who::Broker(who), state)?;
        }
        Ok(())
    }

    /// After the final recovery: the final master `who`, having applied up
    /// to `applied`, holds every confirmed stream append no logged cut
    /// removed, at its offset in the stable log replayed.
    pub(super) fn final_stream_check(
        &mut self,
        who: Incarnation,
        applied: u64,
    ) -> Result<(), Violation> {
        let empty = State::new();
        let state = self.apps.get(&who).unwrap_or(&empty);
        let history = &self.history;
        let Some(expected) = self.replay.state_at(applied, |i| history.get(i).cloned()) else {
            return Err(Violation::new(
                "I6",
                format!("the final master applied {applied}, beyond the stable history"),
            ));
        };
        let held = i6::check_final(
            Who::Broker(who),
            state,
            applied,
            expected,
            &self.oracle.confirmed,
        )?;
        self.stats.stream_offsets = self.offsets.len() as u64;
        self.stats.stream_first = reducer::stream_bounds(state).0;
        self.stats.stream_held = held;
        Ok(())
    }
}
