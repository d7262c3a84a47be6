//! The single-node log: one master, one local store, quorum of one.
//!
//! fjall is synchronous and an fsync takes milliseconds, so the store lives on a
//! dedicated thread and the caller only ever pushes onto a channel. The thread
//! group-commits: it blocks for the first pending entry, drains whatever else is
//! already queued, appends the batch, fsyncs once, and reports the new durable
//! index. The batch size is therefore set by the load (an fsync's worth of
//! arrivals), never by a sleep: an idle system commits each entry at once, a busy
//! one amortises one fsync over many entries.
//!
//! With one store the durable index is the stable index. The cluster issue
//! replaces the single store with a quorum of local and remote stores; `append`
//! and `on_stable` keep their meaning.

use std::sync::mpsc;
use std::thread::JoinHandle;

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::position::{Entry, LogPosition};
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
    tx: mpsc::Sender<Entry>,
    /// Joined by `shutdown`, to hand back the thread's final result.
    thread: JoinHandle<Result<(), StoreError>>,
    /// Index the next `append` gets; assigned here, not on the store thread, so
    /// the caller learns its position synchronously.
    next_index: u64,
    /// Epoch of this run: above every epoch the store has seen, so an index
    /// reused after a crash lost an unsynced tail never repeats a position (I3).
    epoch: u64,
}

impl LocalLog {
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
        let thread = std::thread::Builder::new()
            .name("stablemq-store".into())
            .spawn(move || run(store, materializer, rx, on_stable, on_error))?;

        tracing::info!(
            epoch,
            state_index,
            state_keys = state.len(),
            recovered = recovered.len(),
            "event log open (single node)"
        );
        let log = LocalLog {
            tx,
            thread,
            next_index: last.index + 1,
            epoch,
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
        let pos = LogPosition::new(self.epoch, self.next_index);
        self.next_index += 1;
        if self.tx.send(Entry { pos, payload }).is_err() {
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
    pub fn shutdown(self) -> Result<(), StoreError> {
        // Closing the channel is the stop signal: the thread drains what is
        // queued, commits it, and exits when `recv` reports the disconnect.
        drop(self.tx);
        match self.thread.join() {
            Ok(result) => result,
            Err(_) => Err(StoreError::Stopped("store thread panicked".into())),
        }
    }
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

/// Body of the store thread.
fn run(
    mut store: Box<dyn EventStore>,
    mut materializer: Option<Materializer>,
    rx: mpsc::Receiver<Entry>,
    on_stable: impl Fn(u64),
    on_error: impl Fn(StoreError),
) -> Result<(), StoreError> {
    match commit_loop(store.as_mut(), materializer.as_mut(), &rx, &on_stable) {
        Ok(()) => Ok(()),
        Err(err) => {
            // Stop receiving at once, so later appends fail fast instead of piling
            // up behind a store that will never ack again.
            drop(rx);
            let description = err.to_string();
            tracing::error!(error = %description, "event store failed; log stopped");
            on_error(err);
            Err(StoreError::Stopped(description))
        }
    }
}

/// Stable entries held back from the state before it is written (unless the
/// log goes idle first). The longer the window, the more publishes meet their
/// ack inside it and cancel out, so their bodies are written once (to the log)
/// instead of twice; the cost is this much payload held in memory.
const STATE_WINDOW_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Same bound in entries.
const STATE_WINDOW_ENTRIES_MAX: usize = 65536;

/// Group commit until the channel closes; then a final sync for the stable index.
fn commit_loop(
    store: &mut dyn EventStore,
    mut materializer: Option<&mut Materializer>,
    rx: &mpsc::Receiver<Entry>,
    on_stable: &impl Fn(u64),
) -> Result<(), StoreError> {
    let mut batch: Vec<Entry> = Vec::new();
    let mut durable = store.last_position().index;
    // Stable entries not reduced into the state yet (payloads are shared
    // `Bytes`, not copies).
    let mut window: Vec<Entry> = Vec::new();
    let mut window_bytes = 0usize;
    loop {
        let first = match rx.try_recv() {
            Ok(entry) => entry,
            Err(mpsc::TryRecvError::Disconnected) => break,
            Err(mpsc::TryRecvError::Empty) => {
                // Idle: a good moment to bring the state up to date.
                if let Some(m) = materializer.as_deref_mut()
                    && !window.is_empty()
                {
                    m.advance(store, &window)?;
                    window.clear();
                    window_bytes = 0;
                }
                match rx.recv() {
                    Ok(entry) => entry,
                    Err(_) => break,
                }
            }
        };
        batch.clear();
        let mut batch_bytes = first.payload.len();
        batch.push(first);
        while batch.len() < BATCH_ENTRIES_MAX && batch_bytes < BATCH_BYTES_MAX {
            match rx.try_recv() {
                Ok(entry) => {
                    batch_bytes += entry.payload.len();
                    batch.push(entry);
                }
                Err(_) => break,
            }
        }

        store.append(&batch)?;
        store.sync()?;
        let synced = store.last_position().index;
        assert!(synced > durable, "a sync must advance the durable index");
        durable = synced;
        // Lazy: written now, made durable by the next batch's fsync. Recovery
        // treats the whole surviving log as stable anyway.
        store.set_stable_index(durable)?;
        on_stable(durable);
        // After the ack: the state write rides on a later fsync, like the
        // stable index, and a crash before it only means reducing again.
        if let Some(m) = materializer.as_deref_mut() {
            window.extend(batch.iter().cloned());
            window_bytes += batch_bytes;
            if window_bytes >= STATE_WINDOW_BYTES_MAX || window.len() >= STATE_WINDOW_ENTRIES_MAX {
                m.advance(store, &window)?;
                window.clear();
                window_bytes = 0;
            }
        }
    }
    if let Some(m) = materializer
        && !window.is_empty()
    {
        m.advance(store, &window)?;
    }
    // Channel closed: make the last stable index (and state) durable too, so
    // a clean shutdown leaves meta equal to the log.
    store.sync()
}
