//! The store thread of a [`super::LocalLog`]: group commit, deferred entries,
//! and the hand-off of committed entries to the state reducer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::pacing::Pacer;
use super::{BATCH_BYTES_MAX, BATCH_ENTRIES_MAX, Input};
use crate::position::Entry;
use crate::store::reducer_thread::ReducerThread;
use crate::store::{EventStore, StoreError};

/// Body of the store thread.
pub(super) fn run(
    mut store: Box<dyn EventStore>,
    reducer: Option<ReducerThread>,
    rx: mpsc::Receiver<Input>,
    defer_max_us: &AtomicU64,
    on_stable: impl Fn(u64),
    on_error: impl Fn(StoreError),
) -> Result<(), StoreError> {
    match commit_loop(store.as_mut(), reducer, &rx, defer_max_us, &on_stable) {
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

/// The entries of the next commit.
#[derive(Default)]
struct Batch {
    entries: Vec<Entry>,
    /// Their payload bytes.
    bytes: usize,
    /// Something waits for them: commit without waiting for more.
    commit: bool,
    /// `Close` came: this batch is the last.
    closing: bool,
}

impl Batch {
    fn push(&mut self, entry: Entry, commit: bool) {
        self.bytes += entry.payload.len();
        self.entries.push(entry);
        self.commit |= commit;
    }

    fn full(&self) -> bool {
        self.entries.len() >= BATCH_ENTRIES_MAX || self.bytes >= BATCH_BYTES_MAX
    }

    /// Nothing more goes into it: commit it now.
    fn ready(&self) -> bool {
        self.commit || self.closing || self.full()
    }
}

/// Group commit until `Close`; then the state of the last window, and a
/// final sync for the stable index.
fn commit_loop(
    store: &mut dyn EventStore,
    mut reducer: Option<ReducerThread>,
    rx: &mpsc::Receiver<Input>,
    defer_max_us: &AtomicU64,
    on_stable: &impl Fn(u64),
) -> Result<(), StoreError> {
    let mut batch = Batch::default();
    let mut durable = store.last_position().index;
    // A reduced batch was written since the last fsync.
    let mut state_unsynced = false;
    let mut pacer = Pacer::new();
    while !batch.closing {
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
        let (first, commit) = match first {
            Input::Entry { entry, commit } => (entry, commit),
            // Whatever it asked for was committed already.
            Input::Sync => continue,
            Input::Reduced => {
                if let Some(r) = reducer.as_mut() {
                    state_unsynced |= r.write_queued(store)?;
                }
                continue;
            }
            Input::Close => break,
        };
        batch.entries.clear();
        batch.bytes = 0;
        batch.commit = false;
        batch.push(first, commit);
        fill_batch(store, reducer.as_mut(), rx, &mut batch)?;
        if !batch.ready() {
            let defer = Duration::from_micros(defer_max_us.load(Ordering::Relaxed));
            wait_for_need(store, reducer.as_mut(), rx, &mut batch, defer)?;
        }
        if batch.commit && !batch.closing {
            wait_for_more(store, reducer.as_mut(), rx, &mut batch, &mut pacer)?;
        }
        pacer.started(Instant::now());
        durable = commit_batch(store, &batch.entries, batch.bytes, durable)?;
        state_unsynced = false;
        on_stable(durable);
        // After the ack: the state write rides on a later fsync, like the
        // stable index, and a crash before it only means reducing again.
        if let Some(r) = reducer.as_mut() {
            state_unsynced |= hand_off(store, r, &mut batch.entries, batch.bytes)?;
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

/// Add what is queued already to the batch, up to [`BATCH_ENTRIES_MAX`] and
/// [`BATCH_BYTES_MAX`].
fn fill_batch(
    store: &mut dyn EventStore,
    mut reducer: Option<&mut ReducerThread>,
    rx: &mpsc::Receiver<Input>,
    batch: &mut Batch,
) -> Result<(), StoreError> {
    while !batch.full() {
        match rx.try_recv() {
            Ok(input) => take_input(store, reducer.as_deref_mut(), batch, input)?,
            Err(_) => break,
        }
        if batch.closing {
            break;
        }
    }
    Ok(())
}

/// A batch of deferred entries only: wait, up to `defer`, for an entry or a
/// sync that needs a commit (adding what comes meanwhile), so a consumer's
/// ack rides on the fsync of the publish that follows it rather than making
/// that publish wait for an fsync of its own.
fn wait_for_need(
    store: &mut dyn EventStore,
    mut reducer: Option<&mut ReducerThread>,
    rx: &mpsc::Receiver<Input>,
    batch: &mut Batch,
    defer: Duration,
) -> Result<(), StoreError> {
    let deadline = Instant::now() + defer;
    while !batch.ready() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(input) => {
                take_input(store, reducer.as_deref_mut(), batch, input)?;
                fill_batch(store, reducer.as_deref_mut(), rx, batch)?;
            }
            // Waited long enough, or nobody is left to ask: commit.
            Err(_) => break,
        }
    }
    Ok(())
}

/// A batch something waits for: keep filling it while input keeps coming, as
/// long as the [`Pacer`] says waiting pays (see `pacing`).
fn wait_for_more(
    store: &mut dyn EventStore,
    mut reducer: Option<&mut ReducerThread>,
    rx: &mpsc::Receiver<Input>,
    batch: &mut Batch,
    pacer: &mut Pacer,
) -> Result<(), StoreError> {
    let before = batch.entries.len();
    let Some(until) = pacer.wait_until(Instant::now(), before) else {
        return Ok(());
    };
    while !batch.closing && !batch.full() {
        let wait = Pacer::next_wait(Instant::now(), until, batch.entries.len());
        if wait.is_zero() {
            break;
        }
        match rx.recv_timeout(wait) {
            Ok(input) => {
                take_input(store, reducer.as_deref_mut(), batch, input)?;
                fill_batch(store, reducer.as_deref_mut(), rx, batch)?;
            }
            // Quiet for a while, or nobody is left to send: commit.
            Err(_) => break,
        }
    }
    pacer.waited(batch.entries.len() - before);
    Ok(())
}

/// One input while a batch is open.
fn take_input(
    store: &mut dyn EventStore,
    reducer: Option<&mut ReducerThread>,
    batch: &mut Batch,
    input: Input,
) -> Result<(), StoreError> {
    match input {
        Input::Entry { entry, commit } => batch.push(entry, commit),
        // The entries it asks for came before it: they are in the batch.
        Input::Sync => batch.commit = true,
        // Written before this batch's commit, made durable by its fsync.
        Input::Reduced => {
            if let Some(r) = reducer {
                r.write_queued(store)?;
            }
        }
        Input::Close => batch.closing = true,
    }
    Ok(())
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
