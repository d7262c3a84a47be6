//! The reducer thread both store threads use: the single-node log
//! ([`crate::LocalLog`]) and a replicated store's follower
//! ([`super::follow`]).
//!
//! Reducing stable entries into the state costs decoding and merging; done
//! between two group commits it delayed every confirm behind it. So the store
//! thread hands windows of stable entries to this thread, goes on committing,
//! and writes the (usually small) batches that come back in front of a later
//! commit, whose fsync makes them durable.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::{EventStore, Materializer, StateBatch, StoreError};
use crate::position::Entry;

/// Stable entries held back from the state before they are reduced (unless
/// the log goes idle first). The longer the window, the more publishes meet
/// their ack inside it and cancel out, so their bodies are written once (to
/// the log) instead of twice; the cost is this much payload held in memory
/// (up to three windows: one being reduced, one queued, one filling), plus
/// the reduced batch and fjall's copy of it while it is written, plus the
/// memtables it lands in (a batch bigger than a memtable makes one of its
/// own). 8 MiB is still about 130 ms of a 60k msg/s publish-and-consume load,
/// several times a message's life when consumers keep up; 32 MiB cost about
/// 200 MiB of peak RSS while a 5 GB backlog filled (S6).
pub(crate) const WINDOW_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Same bound in entries.
pub(crate) const WINDOW_ENTRIES_MAX: usize = 16384;
/// Merged ops in one reduced batch at most. A window is bounded in bytes,
/// but one small ack entry can remove a hundred messages, so a window of
/// acks made a million deletions in one batch: hundreds of MiB at once in
/// the batch, fjall's copy of it and the memtable (S6's drain).
const REDUCED_OPS_MAX: usize = 32 * 1024;
/// Reduced batches queued for the store thread at most; the reducer waits
/// beyond that, so a store slower than the reducer holds the reducer back.
const REDUCED_QUEUED_MAX: usize = 2;

/// One reduced batch, and whether it is the last of its window.
type Reduced = (Result<StateBatch, StoreError>, bool);

/// See the module docs. Windows are reduced in order, in batches of at most
/// [`REDUCED_OPS_MAX`] ops.
pub(crate) struct ReducerThread {
    /// Bounded to one queued window: a reducer slower than the commits holds
    /// the store thread back rather than let windows pile up in memory.
    tx: mpsc::SyncSender<Vec<Entry>>,
    reduced: mpsc::Receiver<Reduced>,
    thread: JoinHandle<Materializer>,
    /// Windows handed over whose last batch has not been written yet.
    outstanding: usize,
    /// Whether a batch's `compact_through` is kept. A replicated store's node
    /// decides compaction itself (`DiskOp::Compact`), so its follower drops
    /// it; the single-node log lets the materializer decide.
    compacts: bool,
}

impl ReducerThread {
    /// Start reducing with `m`. `wake` runs after each batch is queued (the
    /// single-node log wakes its store thread with it); false stops the
    /// thread.
    pub(crate) fn start(
        mut m: Materializer,
        name: &str,
        compacts: bool,
        wake: impl Fn() -> bool + Send + 'static,
    ) -> Result<ReducerThread, StoreError> {
        let (tx, rx) = mpsc::sync_channel::<Vec<Entry>>(1);
        let (reduced_tx, reduced) = mpsc::sync_channel::<Reduced>(REDUCED_QUEUED_MAX);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while let Ok(window) = rx.recv() {
                    let mut rest = &window[..];
                    while !rest.is_empty() {
                        let (batch, taken) = match m.reduce_bounded(rest, REDUCED_OPS_MAX) {
                            Ok((batch, taken)) => (Ok(batch), taken),
                            Err(e) => (Err(e), rest.len()),
                        };
                        let failed = batch.is_err();
                        rest = &rest[taken.min(rest.len())..];
                        if reduced_tx.send((batch, rest.is_empty())).is_err() || !wake() || failed {
                            return m;
                        }
                    }
                    // The payloads are freed here, off the commit thread.
                    drop(window);
                }
                m
            })?;
        Ok(ReducerThread {
            tx,
            reduced,
            thread,
            outstanding: 0,
            compacts,
        })
    }

    /// Windows handed over and not fully written back yet.
    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Hand a window over. While the reducer has one queued already, this
    /// writes the batches it sends back (the reducer may be waiting for room
    /// for them) until the window fits. Returns whether it wrote any.
    pub(crate) fn hand_over(
        &mut self,
        store: &mut dyn EventStore,
        window: Vec<Entry>,
    ) -> Result<bool, StoreError> {
        if window.is_empty() {
            return Ok(false);
        }
        let mut full = window;
        let mut wrote = false;
        loop {
            match self.tx.try_send(full) {
                Ok(()) => break,
                Err(mpsc::TrySendError::Full(back)) => {
                    full = back;
                    match self.reduced.recv_timeout(Duration::from_millis(5)) {
                        Ok(r) => {
                            self.write(store, r)?;
                            wrote = true;
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => return Err(stopped()),
                    }
                }
                Err(mpsc::TrySendError::Disconnected(_)) => return Err(stopped()),
            }
        }
        self.outstanding += 1;
        Ok(wrote)
    }

    /// Write the batches queued now; whether there were any.
    pub(crate) fn write_queued(&mut self, store: &mut dyn EventStore) -> Result<bool, StoreError> {
        let mut wrote = false;
        while let Ok(r) = self.reduced.try_recv() {
            self.write(store, r)?;
            wrote = true;
        }
        Ok(wrote)
    }

    /// Wait for the next batch and write it.
    pub(crate) fn write_next(&mut self, store: &mut dyn EventStore) -> Result<(), StoreError> {
        match self.reduced.recv() {
            Ok(r) => self.write(store, r),
            Err(_) => Err(stopped()),
        }
    }

    fn write(
        &mut self,
        store: &mut dyn EventStore,
        (batch, last): Reduced,
    ) -> Result<(), StoreError> {
        let mut batch = batch?;
        if last {
            self.outstanding = self.outstanding.saturating_sub(1);
        }
        if !self.compacts {
            batch.compact_through = 0;
        }
        store.materialize(&batch)
    }

    /// Stop, discarding what was not written yet, and hand the materializer
    /// back.
    pub(crate) fn stop(self) -> Result<Materializer, StoreError> {
        drop(self.tx);
        // Unblocks a reducer waiting for room; ends when it exits.
        while self.reduced.recv().is_ok() {}
        self.thread
            .join()
            .map_err(|_| StoreError::Stopped("the reducer thread panicked".into()))
    }
}

fn stopped() -> StoreError {
    StoreError::Stopped("the reducer thread stopped".into())
}
