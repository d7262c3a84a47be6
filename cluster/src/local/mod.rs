//! The single-node log: one master, one local store, quorum of one.
//!
//! fjall is synchronous and an fsync takes milliseconds, so the store lives on a
//! dedicated thread and the caller only ever pushes onto a channel. The thread
//! group-commits: it blocks for the first pending entry, drains whatever else is
//! already queued, appends the batch, fsyncs once, and reports the new durable
//! index. The batch size is therefore set by the load (an fsync's worth of
//! arrivals): an idle system commits each entry something waits for at once,
//! a busy one amortises one fsync over many entries. A wanted batch waits for
//! more only while input keeps coming and waiting has been seen to bring it
//! (`pacing`): a client writing one publish at a time with many in flight.
//!
//! An entry nothing waits for yet may be appended deferred
//! ([`LocalLog::append_deferred`]): a batch of only such entries waits, up to
//! [`LocalLog::DEFER_MAX`], for an entry or a [`LocalLog::sync_to`] that needs it, and is
//! then committed with it. A consumer's ack has no reply; committed on its
//! own, it made the publish that arrived during its fsync wait a second one
//! (a publisher at confirm window 1 met 1.6 fsyncs per message). The caller
//! says what something waits for: the master, at the end of each pass
//! (`src/server/master_task`).
//!
//! With one store the durable index is the stable index. The cluster issue
//! replaces the single store with a quorum of local and remote stores; `append`
//! and `on_stable` keep their meaning.
//!
//! With a materialized state, reducing runs on a thread of its own (the
//! reducer thread), never between two group commits: the store thread hands
//! it a window of stable entries, goes on committing, and writes the batch
//! the reducer sends back (usually small: most publishes meet their ack in
//! the window) between two commits. The commit latency, and with it the
//! confirm latency, then no longer carries the reduction.

mod commit;
mod pacing;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::position::{Entry, LogPosition};
use crate::store::reducer_thread::ReducerThread;
use crate::store::{EventStore, Materializer, Reducer, StateRead, StoreError};

/// Upper bound of one group commit, so a backlog never turns into one unbounded
/// batch (memory, and the latency of the first entry in it).
const BATCH_ENTRIES_MAX: usize = 8192;
/// Same bound in payload bytes.
const BATCH_BYTES_MAX: usize = 16 * 1024 * 1024;

/// The single-node log; see the module docs.
pub struct LocalLog {
    /// Unbounded so `append` never blocks on disk. The broker bounds what is in
    /// flight (unconfirmed publishes), which bounds this queue.
    tx: mpsc::Sender<Input>,
    /// Joined by `shutdown`, to hand back the thread's final result.
    thread: Option<JoinHandle<Result<(), StoreError>>>,
    /// Index the next `append` gets; assigned here, not on the store thread, so
    /// the caller learns its position synchronously.
    next_index: u64,
    /// Epoch of this run: above every epoch the store has seen, so an index
    /// reused after a crash lost an unsynced tail never repeats a position (I3).
    epoch: u64,
    /// The highest index a commit was asked for (by [`LocalLog::append`] or
    /// [`LocalLog::sync_to`]): entries above it were appended deferred.
    asked: u64,
    /// [`LocalLog::DEFER_MAX`] in microseconds, shared with the store thread.
    defer_max_us: Arc<AtomicU64>,
}

impl LocalLog {
    /// How long a batch of deferred entries alone waits for an entry or a
    /// [`LocalLog::sync_to`] that needs it, unless [`LocalLog::set_defer_max`] says otherwise: the
    /// most a crash can lose of what nobody waited for (a consumer's ack, a
    /// publish without confirms), and the most an answer can wait for a
    /// deferred entry the caller forgot to sync.
    pub const DEFER_MAX: Duration = Duration::from_millis(2);

    /// Open: reads every entry for recovery (returned in order, as the stable
    /// log), then starts the store thread.
    ///
    /// Everything recovered counts as stable: with a quorum of one, being on the
    /// one disk is the definition. (An entry synced just before a crash, whose
    /// confirm was never sent, is kept; that is allowed, losing a confirmed one is
    /// not.) `on_stable` is not called for recovered entries; its first call is
    /// above the last recovered index.
    ///
    /// `on_stable(index)` is called from the store thread each time the stable
    /// index advances (strictly increasing). On an unrecoverable store error the
    /// thread calls `on_error(err)` once and stops: nothing after it is acked, and
    /// nothing is ever acked that is not on disk.
    pub fn open(
        store: Box<dyn EventStore>,
        on_stable: impl Fn(u64) + Send + 'static,
        on_error: impl Fn(StoreError) + Send + 'static,
    ) -> Result<(LocalLog, Vec<Entry>), StoreError> {
        if store.state_index() > 0 {
            return Err(StoreError::Misuse(
                "this store holds a materialized state: open it with its reducer".into(),
            ));
        }
        let (log, recovered) = Self::start(store, None, on_stable, on_error, None)?;
        Ok((log, recovered.suffix))
    }

    /// Open with a materialized state: the store thread reduces every entry
    /// once it is stable ([`Materializer`]) and deletes log entries more than
    /// `retention` behind the state, so the disk holds the live state plus a
    /// bounded log instead of every event ever written.
    ///
    /// At open, whatever the state does not cover yet (a crash lost the
    /// unsynced state write, or the store was kept without state before) is
    /// reduced first, so the returned [`RecoveredLog`] is the whole state plus the
    /// stable entries after it (usually none). Same callbacks as [`LocalLog::open`].
    pub fn open_with_state(
        store: Box<dyn EventStore>,
        reducer: Box<dyn Reducer>,
        retention: u64,
        on_stable: impl Fn(u64) + Send + 'static,
        on_error: impl Fn(StoreError) + Send + 'static,
    ) -> Result<(LocalLog, RecoveredLog), StoreError> {
        Self::open_with_state_reader(store, reducer, retention, on_stable, on_error, None)
    }

    /// [`LocalLog::open_with_state`], but with `read_state` the state is
    /// handed to it before the store thread starts instead of being collected
    /// into [`RecoveredLog::state`] (which stays empty): a caller that rebuilds
    /// from it a page at a time ([`StateRead::scan_prefix_page`]) never holds
    /// the whole state in memory, which a backlog longer than RAM needs.
    pub fn open_with_state_reader(
        mut store: Box<dyn EventStore>,
        reducer: Box<dyn Reducer>,
        retention: u64,
        on_stable: impl Fn(u64) + Send + 'static,
        on_error: impl Fn(StoreError) + Send + 'static,
        read_state: Option<StateReader<'_>>,
    ) -> Result<(LocalLog, RecoveredLog), StoreError> {
        let mut materializer = Materializer::open(reducer, retention, store.as_ref())?;
        // Everything on the one disk is stable (see `open`).
        let last = store.last_position().index;
        store.set_stable_index(last)?;
        materializer.advance(store.as_mut(), &[])?;
        store.sync()?;
        Self::start(store, Some(materializer), on_stable, on_error, read_state)
    }

    fn start(
        mut store: Box<dyn EventStore>,
        materializer: Option<Materializer>,
        on_stable: impl Fn(u64) + Send + 'static,
        on_error: impl Fn(StoreError) + Send + 'static,
        read_state: Option<StateReader<'_>>,
    ) -> Result<(LocalLog, RecoveredLog), StoreError> {
        let state_index = store.state_index();
        let state: BTreeMap<Bytes, Bytes> = match read_state {
            Some(read) => {
                read(&crate::store::StoreState(store.as_ref()))?;
                BTreeMap::new()
            }
            None => store.state_scan(b"")?.into_iter().collect(),
        };
        let base = store.log_base();
        let recovered = store.read_from(state_index.max(base.index) + 1)?;
        let last = store.last_position();
        let recovered_last = recovered.last().map_or(last, |e| e.pos);
        let expected = last.index - state_index.max(base.index);
        if recovered_last != last || recovered.len() as u64 != expected {
            return Err(StoreError::Corrupt(format!(
                "recovered {} entries ending at {recovered_last}, store says it ends at {last}",
                recovered.len()
            )));
        }

        // A new epoch per run. Promised durably before the first append.
        let epoch = store.promised_epoch().max(last.epoch) + 1;
        store.set_promised_epoch(epoch)?;
        store.set_stable_index(last.index)?;
        store.sync()?;

        let (tx, rx) = mpsc::channel();
        let defer_max_us = Arc::new(AtomicU64::new(LocalLog::DEFER_MAX.as_micros() as u64));
        let defer = defer_max_us.clone();
        let reducer = match materializer {
            Some(m) => {
                let wake = tx.clone();
                Some(ReducerThread::start(
                    m,
                    "stablemq-reduce",
                    true,
                    move || wake.send(Input::Reduced).is_ok(),
                )?)
            }
            None => None,
        };
        let thread = std::thread::Builder::new()
            .name("stablemq-store".into())
            .spawn(move || commit::run(store, reducer, rx, &defer, on_stable, on_error))?;

        tracing::info!(
            epoch,
            state_index,
            state_keys = state.len(),
            recovered = recovered.len(),
            "event log open (single node)"
        );
        let log = LocalLog {
            tx,
            thread: Some(thread),
            next_index: last.index + 1,
            epoch,
            asked: last.index,
            defer_max_us,
        };
        Ok((
            log,
            RecoveredLog {
                state_index,
                state,
                suffix: recovered,
            },
        ))
    }

    /// Assign the next index and hand the payload to the store thread. Never
    /// blocks on disk. After the store thread has stopped on an error the entry
    /// is dropped: it will never become stable, which `on_error` already said.
    pub fn append(&mut self, payload: bytes::Bytes) -> LogPosition {
        let pos = self.send_entry(payload, true);
        self.asked = pos.index;
        pos
    }

    /// [`LocalLog::append`] an entry nothing waits for yet: its commit may
    /// wait, up to [`LocalLog::DEFER_MAX`], for a later entry or [`LocalLog::sync_to`]
    /// that needs it (see the module docs).
    pub fn append_deferred(&mut self, payload: bytes::Bytes) -> LogPosition {
        self.send_entry(payload, false)
    }

    /// Something waits for the entries up to `index`: commit them now, with
    /// whatever else is queued. Sends nothing when a commit up to there was
    /// asked for already.
    pub fn sync_to(&mut self, index: u64) {
        if index <= self.asked {
            return;
        }
        self.asked = self.last_appended();
        if self.tx.send(Input::Sync).is_err() {
            tracing::trace!("store thread stopped; sync dropped");
        }
    }

    /// Change [`LocalLog::DEFER_MAX`] for this log (tests, and a caller that wants a
    /// crash to lose less of what nobody waited for).
    pub fn set_defer_max(&self, max: Duration) {
        let us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
        self.defer_max_us.store(us, Ordering::Relaxed);
    }

    fn send_entry(&mut self, payload: bytes::Bytes, commit: bool) -> LogPosition {
        let pos = LogPosition::new(self.epoch, self.next_index);
        self.next_index += 1;
        let entry = Entry { pos, payload };
        if self.tx.send(Input::Entry { entry, commit }).is_err() {
            tracing::trace!(%pos, "store thread stopped; entry dropped");
        }
        pos
    }

    /// Index of the last appended (not necessarily stable) entry.
    pub fn last_appended(&self) -> u64 {
        self.next_index - 1
    }

    /// The epoch every entry of this run carries.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Flush: block until everything appended is durable (and reported through
    /// `on_stable`), then stop the thread. Used on SIGTERM.
    ///
    /// Dropping a `LocalLog` without calling this still flushes, but in the
    /// background, with nobody waiting for it.
    pub fn shutdown(mut self) -> Result<(), StoreError> {
        // `Close` is the stop signal (the reducer thread holds a sender too,
        // so the channel never disconnects by itself): the thread commits
        // what is queued before it, writes the state, and exits.
        let _ = self.tx.send(Input::Close);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(StoreError::Stopped("store thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for LocalLog {
    /// Without `shutdown`, the store thread still flushes and stops, in the
    /// background.
    fn drop(&mut self) {
        let _ = self.tx.send(Input::Close);
    }
}

/// What the store thread receives.
enum Input {
    /// An entry to commit; `commit`: something waits for it, so its batch is
    /// committed at once (else it may wait, see [`LocalLog::DEFER_MAX`]).
    Entry { entry: Entry, commit: bool },
    /// Something waits for every entry sent before: commit them now.
    Sync,
    /// The reducer thread queued a batch (see [`ReducerThread`]): a wake-up
    /// only, the batch itself is in the bounded channel.
    Reduced,
    /// Commit what came before, then stop.
    Close,
}

/// What a restarted single node starts from: the state, then the suffix.
#[derive(Debug, Default)]
pub struct RecoveredLog {
    /// The state covers the log up to here.
    pub state_index: u64,
    /// The materialized state, every key (empty without a reducer, and when
    /// it was handed to a reader at open instead).
    pub state: BTreeMap<Bytes, Bytes>,
    /// The stable entries after `state_index`, in order, to apply on top.
    pub suffix: Vec<Entry>,
}

/// Rebuilds something from the state at open; see
/// [`LocalLog::open_with_state_reader`].
pub type StateReader<'a> = &'a mut dyn FnMut(&dyn StateRead) -> Result<(), StoreError>;
