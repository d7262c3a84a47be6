//! A replicated store's state, followed off the store thread.
//!
//! The store thread ([`super::DiskRunner`]) group-commits whatever its node
//! sends. It used to build the state only when the node asked it to compact
//! (`DiskOp::Compact`): it read the compacted range back from the log, reduced
//! it in chunks of 1024 entries and wrote the result, all between two fsyncs.
//! Under a publish-and-consume load that was about two thirds of the store
//! thread's time (profiled on S3): every chunk ended long before the acks of
//! its publishes, so each message body was written into the state, then
//! deleted again one chunk later, on top of being read back and decoded.
//!
//! Now, as in the single-node log ([`crate::LocalLog`]), the entries a store
//! appends are kept in memory (shared `Bytes`) until they are stable, then go
//! in windows of up to 8 MiB (sent in parts as they fill) to a reducer thread
//! of their own. Most publishes
//! meet their ack inside a window and cancel out; the small batch that comes
//! back is written by the store thread in front of its next commit, whose
//! fsync makes it durable. `DiskOp::Compact` then only moves the log base:
//! with the default retention (65536) the state is far ahead of it already;
//! with a short one the store thread waits for the reducer to get there.
//!
//! An entry the follower does not hold in memory when it becomes stable
//! (appended before a restart, or dropped to bound memory while it waited)
//! is read back from the log, so the windows stay contiguous whatever
//! happened.

use std::collections::VecDeque;
use std::time::Duration;

use super::reducer_thread::{ReducerThread, WINDOW_ENTRIES_MAX};
use super::{EventStore, Materializer, StoreError};
use crate::position::Entry;

/// The reducer thread's name.
const REDUCER_NAME: &str = "stablemq-store-reduce";

/// Appended entries kept in memory while they wait to become stable; beyond
/// this the oldest are dropped and read back from the log later (a store
/// whose master stopped advancing the stable index must not grow without
/// bound).
const PENDING_ENTRIES_MAX: usize = 2 * WINDOW_ENTRIES_MAX;
/// Entries read back from the log per read.
const READ_BACK_CHUNK: u64 = 4096;
/// How long an idle store thread waits before handing over a partial window.
pub(super) const IDLE: Duration = Duration::from_millis(100);
/// A window this old is handed over even if the store never goes idle
/// (e.g. a steady trickle, or reads): the state, and with it the log's
/// compaction, must not wait for a window to fill. Long enough that a busy
/// store's windows fill first (16384 entries take 0.8 s at 20k msg/s).
const WINDOW_AGE_MAX: Duration = Duration::from_secs(1);

/// Follows the stable log into the state; see the module docs.
pub(super) struct StateFollower {
    reducer: Option<ReducerThread>,
    /// Appended entries not yet handed on, in index order.
    pending: VecDeque<Entry>,
    /// The index the next stable entry handed to the reducer must have.
    next: u64,
}

impl StateFollower {
    /// Follow `store` from its state index on. `m` must be open on it.
    pub(super) fn start(
        m: Materializer,
        store: &dyn EventStore,
    ) -> Result<StateFollower, StoreError> {
        Ok(StateFollower {
            reducer: Some(ReducerThread::start(m, REDUCER_NAME, false, || true)?),
            pending: VecDeque::new(),
            next: store.state_index() + 1,
        })
    }

    /// Entries were appended (in order, after the log's end).
    pub(super) fn appended(&mut self, entries: &[Entry]) {
        self.pending.extend(entries.iter().cloned());
        while self.pending.len() > PENDING_ENTRIES_MAX {
            self.pending.pop_front();
        }
    }

    /// The log lost every entry above `index`.
    pub(super) fn truncated(&mut self, index: u64) {
        while self.pending.back().is_some_and(|e| e.pos.index > index) {
            self.pending.pop_back();
        }
    }

    /// Write the reduced batches queued now (they ride on the next fsync);
    /// whether there were any.
    pub(super) fn write_queued(&mut self, store: &mut dyn EventStore) -> Result<bool, StoreError> {
        let Some(r) = self.reducer.as_mut() else {
            return Ok(false);
        };
        r.write_queued(store)
    }

    /// Hand the window over if it waited [`WINDOW_AGE_MAX`], and write
    /// (and, with `sync`, make durable) what the reducer sent back: called
    /// between jobs, so a store that never goes idle still catches up.
    pub(super) fn tend(
        &mut self,
        store: &mut dyn EventStore,
        sync: bool,
    ) -> Result<(), StoreError> {
        if self
            .reducer
            .as_ref()
            .and_then(ReducerThread::window_since)
            .is_some_and(|at| at.elapsed() >= WINDOW_AGE_MAX)
        {
            self.hand_over(store)?;
        }
        if sync && self.write_queued(store)? {
            store.sync()?;
        }
        Ok(())
    }

    /// Whether a partial window or a reduction is waiting.
    pub(super) fn busy(&self) -> bool {
        self.reducer
            .as_ref()
            .is_some_and(|r| r.window_open() || r.outstanding() > 0)
    }

    /// Move what became stable into the window, handing full windows over.
    /// Called after each commit (the store's stable index is then set).
    pub(super) fn follow(&mut self, store: &mut dyn EventStore) -> Result<(), StoreError> {
        let stable = store.stable_index();
        while self.next <= stable {
            while self
                .pending
                .front()
                .is_some_and(|e| e.pos.index < self.next)
            {
                self.pending.pop_front();
            }
            match self.pending.front() {
                Some(e) if e.pos.index == self.next => {
                    if let Some(e) = self.pending.pop_front() {
                        self.push(store, e)?;
                    }
                }
                front => {
                    // Not in memory: read it back (up to what memory holds).
                    let gap_end = front.map_or(stable, |e| e.pos.index - 1).min(stable);
                    let to = gap_end.min(self.next + READ_BACK_CHUNK - 1);
                    let read = store.read_range(self.next, to)?;
                    if read.is_empty() {
                        return Err(StoreError::Corrupt(format!(
                            "stable entry {} missing from the log",
                            self.next
                        )));
                    }
                    for e in read {
                        self.push(store, e)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn push(&mut self, store: &mut dyn EventStore, e: Entry) -> Result<(), StoreError> {
        self.next = e.pos.index + 1;
        if let Some(r) = self.reducer.as_mut() {
            r.push(store, e)?;
        }
        Ok(())
    }

    /// End the window: the reducer finishes its batch. While its queue is
    /// full, write the batches it sends back until the rest fits.
    pub(super) fn hand_over(&mut self, store: &mut dyn EventStore) -> Result<(), StoreError> {
        if let Some(r) = self.reducer.as_mut() {
            r.end_window(store)?;
        }
        Ok(())
    }

    /// Bring the state up to at least `index` (stable on disk), waiting for
    /// the reducer if it is behind:
    /// the log may lose only what the state holds. Only entries up to
    /// `index` are handed over early; with the default retention the state
    /// is far ahead already and this returns at once.
    pub(super) fn catch_up_to(
        &mut self,
        store: &mut dyn EventStore,
        index: u64,
    ) -> Result<(), StoreError> {
        if store.state_index() >= index {
            return Ok(());
        }
        // Right after a restart nothing has fed the window yet (that happens
        // after each commit), while the stable index on disk may be ahead of
        // the state: pull the stable entries in first, read back from the log.
        self.follow(store)?;
        let r = self.reducer.as_mut().ok_or_else(stopped)?;
        r.end_window_through(store, index)?;
        while store.state_index() < index {
            if r.outstanding() == 0 {
                return Err(StoreError::Misuse(format!(
                    "compacting through {index}, but the state stops at {}",
                    store.state_index()
                )));
            }
            r.write_next(store)?;
        }
        Ok(())
    }

    /// The state is about to be replaced (a snapshot from a peer): stop the
    /// reducer and drop every window, so nothing reduced before lands on
    /// the new state. Returns the materializer, to reopen on the new state
    /// and pass to [`StateFollower::restart`].
    pub(super) fn stop(&mut self) -> Result<Option<Materializer>, StoreError> {
        self.reducer.take().map(ReducerThread::stop).transpose()
    }

    /// Follow the store again after [`StateFollower::stop`] and the install:
    /// from its (new) state index, keeping only appended entries the log
    /// still holds.
    pub(super) fn restart(
        &mut self,
        m: Materializer,
        store: &dyn EventStore,
    ) -> Result<(), StoreError> {
        self.next = store.state_index() + 1;
        self.truncated(store.last_position().index);
        self.reducer = Some(ReducerThread::start(m, REDUCER_NAME, false, || true)?);
        Ok(())
    }

    /// Stop for good (the store is closing).
    pub(super) fn shutdown(mut self) {
        if let Err(err) = self.stop() {
            tracing::warn!(error = %err, "stopping the store reducer failed");
        }
    }
}

fn stopped() -> StoreError {
    StoreError::Stopped("the store reducer thread stopped".into())
}
