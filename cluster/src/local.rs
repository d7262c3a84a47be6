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
//!
//! With a materialized state, reducing runs on a thread of its own (the
//! reducer thread), never between two group commits: the store thread hands
//! it a window of stable entries, goes on committing, and writes the batch
//! the reducer sends back (usually small: most publishes meet their ack in
//! the window) between two commits. The commit latency, and with it the
//! confirm latency, then no longer carries the reduction.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
            .spawn(move || run(store, reducer, rx, on_stable, on_error))?;

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
        if self.tx.send(Input::Entry(Entry { pos, payload })).is_err() {
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
    /// An entry to commit.
    Entry(Entry),
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

/// Body of the store thread.
fn run(
    mut store: Box<dyn EventStore>,
    reducer: Option<ReducerThread>,
    rx: mpsc::Receiver<Input>,
    on_stable: impl Fn(u64),
    on_error: impl Fn(StoreError),
) -> Result<(), StoreError> {
    match commit_loop(store.as_mut(), reducer, &rx, &on_stable) {
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

/// A log with nothing to commit for this long hands its window over even
/// though it is not full, so the state (and the log's compaction) catches up
/// when traffic stops. Not a commit timer: commits never wait.
const STATE_IDLE: Duration = Duration::from_millis(100);

/// A commit step slower than this is logged: every confirm, delivery and
/// answer of the node waits for it (I1), so a client sees it as a stall.
const SLOW_STEP: Duration = Duration::from_secs(1);

/// Log a commit step that took longer than [`SLOW_STEP`].
fn note_slow(step: &str, began: Instant, entries: usize, bytes: usize) {
    let took = began.elapsed();
    if took >= SLOW_STEP {
        tracing::warn!(
            step,
            took_ms = took.as_millis() as u64,
            entries,
            bytes,
            "slow event store commit: stability waits for it"
        );
    }
}

/// Group commit until `Close`; then the state of the last window, and a
/// final sync for the stable index.
fn commit_loop(
    store: &mut dyn EventStore,
    mut reducer: Option<ReducerThread>,
    rx: &mpsc::Receiver<Input>,
    on_stable: &impl Fn(u64),
) -> Result<(), StoreError> {
    let mut batch: Vec<Entry> = Vec::new();
    let mut durable = store.last_position().index;
    let mut closing = false;
    // A reduced batch was written since the last fsync.
    let mut state_unsynced = false;
    while !closing {
        let first = match rx.try_recv() {
            Ok(input) => input,
            Err(mpsc::TryRecvError::Disconnected) => break,
            Err(mpsc::TryRecvError::Empty) => {
                match wait_idle(store, reducer.as_mut(), rx, &mut state_unsynced)? {
                    Idle::Input(input) => input,
                    Idle::WindowEnded => continue,
                    Idle::Disconnected => break,
                }
            }
        };
        let first = match first {
            Input::Entry(entry) => entry,
            Input::Reduced => {
                if let Some(r) = reducer.as_mut() {
                    state_unsynced |= r.write_queued(store)?;
                }
                continue;
            }
            Input::Close => break,
        };
        let (batch_bytes, last) = fill_batch(store, reducer.as_mut(), rx, &mut batch, first)?;
        closing = last;
        durable = commit_batch(store, &batch, batch_bytes, durable)?;
        state_unsynced = false;
        on_stable(durable);
        // After the ack: the state write rides on a later fsync, like the
        // stable index, and a crash before it only means reducing again.
        if let Some(r) = reducer.as_mut() {
            state_unsynced |= hand_off(store, r, &mut batch, batch_bytes)?;
        }
    }
    if let Some(r) = reducer {
        close_reducer(store, r)?;
    }
    // Closed: make the last stable index (and state) durable too, so a clean
    // shutdown leaves meta equal to the log.
    store.sync()
}

/// What waiting for the store thread's next input brought.
enum Idle {
    /// An input.
    Input(Input),
    /// Nothing for [`STATE_IDLE`]: the reducer's window was handed over.
    WindowEnded,
    /// Every sender is gone.
    Disconnected,
}

/// Wait for the next input with none queued: first make the state written
/// since the last fsync durable, then, with a reducer window open, hand it
/// over if nothing comes within [`STATE_IDLE`].
fn wait_idle(
    store: &mut dyn EventStore,
    reducer: Option<&mut ReducerThread>,
    rx: &mpsc::Receiver<Input>,
    state_unsynced: &mut bool,
) -> Result<Idle, StoreError> {
    if std::mem::take(state_unsynced) {
        // Idle: make the state durable now, so the log's space
        // is reclaimed without waiting for more traffic.
        store.sync()?;
    }
    Ok(match reducer {
        // Idle with a window: hand it over if nothing comes soon.
        Some(r) if r.window_open() => match rx.recv_timeout(STATE_IDLE) {
            Ok(input) => Idle::Input(input),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                *state_unsynced |= r.end_window(store)?;
                Idle::WindowEnded
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Idle::Disconnected,
        },
        _ => match rx.recv() {
            Ok(input) => Idle::Input(input),
            Err(_) => Idle::Disconnected,
        },
    })
}

/// Start a new batch with `first` and add what is queued already, up to
/// [`BATCH_ENTRIES_MAX`] and [`BATCH_BYTES_MAX`]. Returns the batch's payload
/// bytes, and whether `Close` came (the batch is then the last).
fn fill_batch(
    store: &mut dyn EventStore,
    mut reducer: Option<&mut ReducerThread>,
    rx: &mpsc::Receiver<Input>,
    batch: &mut Vec<Entry>,
    first: Entry,
) -> Result<(usize, bool), StoreError> {
    batch.clear();
    let mut batch_bytes = first.payload.len();
    batch.push(first);
    while batch.len() < BATCH_ENTRIES_MAX && batch_bytes < BATCH_BYTES_MAX {
        match rx.try_recv() {
            Ok(Input::Entry(entry)) => {
                batch_bytes += entry.payload.len();
                batch.push(entry);
            }
            // Written before this batch's commit, made durable by its fsync.
            Ok(Input::Reduced) => {
                if let Some(r) = reducer.as_mut() {
                    r.write_queued(store)?;
                }
            }
            Ok(Input::Close) => return Ok((batch_bytes, true)),
            Err(_) => break,
        }
    }
    Ok((batch_bytes, false))
}

/// Append the batch and fsync once; record the new durable index (also the
/// stable one) and return it.
fn commit_batch(
    store: &mut dyn EventStore,
    batch: &[Entry],
    batch_bytes: usize,
    durable: u64,
) -> Result<u64, StoreError> {
    let began = Instant::now();
    store.append(batch)?;
    store.sync()?;
    note_slow("append and fsync", began, batch.len(), batch_bytes);
    let synced = store.last_position().index;
    assert!(synced > durable, "a sync must advance the durable index");
    // Lazy: written now, made durable by the next batch's fsync. Recovery
    // treats the whole surviving log as stable anyway.
    store.set_stable_index(synced)?;
    Ok(synced)
}

/// Move the committed batch's entries on to the reducer (emptying `batch`);
/// returns whether a reduced batch was written.
fn hand_off(
    store: &mut dyn EventStore,
    r: &mut ReducerThread,
    batch: &mut Vec<Entry>,
    batch_bytes: usize,
) -> Result<bool, StoreError> {
    let batch_len = batch.len();
    let mut written = false;
    // The entries move on: a clone of a payload made from a boxed
    // slice (`Event::encode`'s) would allocate its shared header, one
    // allocation per entry.
    let began = Instant::now();
    for e in batch.drain(..) {
        written |= r.push(store, e)?;
    }
    // A reducer behind its queue holds up the next batch's fsync.
    note_slow(
        "hand-off to the state reducer",
        began,
        batch_len,
        batch_bytes,
    );
    Ok(written)
}

/// At close: hand over the reducer's last window, write every batch it still
/// owes, and stop it.
fn close_reducer(store: &mut dyn EventStore, mut r: ReducerThread) -> Result<(), StoreError> {
    r.end_window(store)?;
    // Nothing but reduced batches can come now: the log is closed.
    while r.outstanding() > 0 {
        r.write_next(store)?;
    }
    r.stop()?;
    Ok(())
}
