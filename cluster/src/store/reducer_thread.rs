//! The reducer thread both store threads use: the single-node log
//! ([`crate::LocalLog`]) and a replicated store's follower
//! ([`super::follow`]).
//!
//! Reducing stable entries into the state costs decoding and merging; done
//! between two group commits it delayed every confirm behind it. So the store
//! thread hands windows of stable entries to this thread, goes on committing,
//! and writes the (usually small) batches that come back in front of a later
//! commit, whose fsync makes them durable.
//!
//! A window goes over in parts, as it fills, and the thread reduces each part
//! when it comes; only the end of the window ends the batch (publishes still
//! cancel against acks across the whole window). Handed over whole, an 8 MiB
//! window was 5–10 ms of reducing at once, on every node of a co-located
//! cluster at the same moment: the stalls behind S5's p99 at 10k msg/s
//! (profiled: the reducers' bursts lined up with the slow messages). In
//! parts, the same work comes in slices of well under a millisecond.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{EventStore, Materializer, StateBatch, StoreError};
use crate::position::Entry;

/// Stable entries held back from the state before they are reduced (unless
/// the log goes idle first). The longer the window, the more publishes meet
/// their ack inside it and cancel out, so their bodies are written once (to
/// the log) instead of twice; the cost is this much payload held in memory
/// (the window's surviving copies in the reducer, its parts queued, the part
/// filling), plus the reduced batch and fjall's copy of it while it is
/// written, plus the memtables it lands in (a batch bigger than a memtable
/// makes one of its own). 8 MiB is still about 130 ms of a 60k msg/s
/// publish-and-consume load, several times a message's life when consumers
/// keep up; 32 MiB cost about 200 MiB of peak RSS while a 5 GB backlog filled
/// (S6).
pub(crate) const WINDOW_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Same bound in entries.
pub(crate) const WINDOW_ENTRIES_MAX: usize = 16384;
/// A window goes to the reducer in parts of this many payload bytes (see the
/// module docs): at 10k msg/s of 1 KB, one part every ~25 ms, reduced in a
/// fraction of a millisecond.
const PART_BYTES_MAX: usize = 256 * 1024;
/// Same bound in entries (acks are small).
const PART_ENTRIES_MAX: usize = 512;
/// Parts queued for the reducer at most; the store thread waits beyond that
/// (writing what the reducer sends back), so a slow reducer holds commits
/// back rather than let parts pile up in memory.
const PARTS_QUEUED_MAX: usize = 8;
/// Merged ops in one reduced batch at most. A window is bounded in bytes,
/// but one small ack entry can remove a hundred messages, so a window of
/// acks made a million deletions in one batch: hundreds of MiB at once in
/// the batch, fjall's copy of it and the memtable (S6's drain).
const REDUCED_OPS_MAX: usize = 32 * 1024;
/// Reduced batches queued for the store thread at most; the reducer waits
/// beyond that, so a store slower than the reducer holds the reducer back.
const REDUCED_QUEUED_MAX: usize = 2;

/// One reduced batch (`None`: the window ended with nothing left to write),
/// and whether it is the last of its window.
type Reduced = (Result<Option<StateBatch>, StoreError>, bool);

/// Consecutive stable entries of one window; `last` ends the window.
struct Part {
    entries: Vec<Entry>,
    last: bool,
}

/// See the module docs. Windows are reduced in order, in batches of at most
/// about [`REDUCED_OPS_MAX`] ops.
pub(crate) struct ReducerThread {
    tx: mpsc::SyncSender<Part>,
    reduced: mpsc::Receiver<Reduced>,
    thread: JoinHandle<Materializer>,
    /// Windows ended whose last batch has not been written yet.
    outstanding: usize,
    /// Whether a batch's `compact_through` is kept. A replicated store's node
    /// decides compaction itself (`DiskOp::Compact`), so its follower drops
    /// it; the single-node log lets the materializer decide.
    compacts: bool,
    /// The open window's entries not sent yet, in index order.
    unsent: Vec<Entry>,
    unsent_bytes: usize,
    /// The open window so far, parts sent included.
    window_entries: usize,
    window_bytes: usize,
    /// When the open window's first entry came.
    window_since: Option<Instant>,
    /// Parts of the open window were sent.
    sent_part: bool,
}

impl ReducerThread {
    /// Start reducing with `m`. `wake` runs after each batch is queued (the
    /// single-node log wakes its store thread with it); false stops the
    /// thread.
    pub(crate) fn start(
        m: Materializer,
        name: &str,
        compacts: bool,
        wake: impl Fn() -> bool + Send + 'static,
    ) -> Result<ReducerThread, StoreError> {
        let (tx, rx) = mpsc::sync_channel::<Part>(PARTS_QUEUED_MAX);
        let (reduced_tx, reduced) = mpsc::sync_channel::<Reduced>(REDUCED_QUEUED_MAX);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || reduce_parts(m, &rx, &reduced_tx, wake))?;
        Ok(ReducerThread {
            tx,
            reduced,
            thread,
            outstanding: 0,
            compacts,
            unsent: Vec::new(),
            unsent_bytes: 0,
            window_entries: 0,
            window_bytes: 0,
            window_since: None,
            sent_part: false,
        })
    }

    /// Windows ended and not fully written back yet.
    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Whether a window is open (entries pushed since it last ended).
    pub(crate) fn window_open(&self) -> bool {
        self.sent_part || !self.unsent.is_empty()
    }

    /// When the open window began.
    pub(crate) fn window_since(&self) -> Option<Instant> {
        self.window_since
    }

    /// Add the next stable entry to the open window: a full part goes to the
    /// reducer, a full window ends. Returns whether reduced batches were
    /// written meanwhile (see [`ReducerThread::end_window`]).
    pub(crate) fn push(
        &mut self,
        store: &mut dyn EventStore,
        e: Entry,
    ) -> Result<bool, StoreError> {
        self.window_since.get_or_insert_with(Instant::now);
        let len = e.payload.len();
        self.window_entries += 1;
        self.window_bytes += len;
        self.unsent_bytes += len;
        self.unsent.push(e);
        if self.window_bytes >= WINDOW_BYTES_MAX || self.window_entries >= WINDOW_ENTRIES_MAX {
            return self.end_window(store);
        }
        if self.unsent_bytes >= PART_BYTES_MAX || self.unsent.len() >= PART_ENTRIES_MAX {
            self.unsent_bytes = 0;
            let part = std::mem::take(&mut self.unsent);
            self.sent_part = true;
            return self.send(
                store,
                Part {
                    entries: part,
                    last: false,
                },
            );
        }
        Ok(false)
    }

    /// End the open window, if any: the reducer finishes its batch. While
    /// the reducer's queue is full, this writes the batches it sends back
    /// (the reducer may be waiting for room for them) until the part fits.
    /// Returns whether it wrote any.
    pub(crate) fn end_window(&mut self, store: &mut dyn EventStore) -> Result<bool, StoreError> {
        if !self.window_open() {
            return Ok(false);
        }
        let part = Part {
            entries: std::mem::take(&mut self.unsent),
            last: true,
        };
        self.unsent_bytes = 0;
        self.window_entries = 0;
        self.window_bytes = 0;
        self.window_since = None;
        self.sent_part = false;
        let wrote = self.send(store, part)?;
        self.outstanding += 1;
        Ok(wrote)
    }

    /// End the open window after the entries up to `index` (or where its
    /// sent parts end, if that is further); the later entries open the
    /// next window. Returns whether reduced batches were written meanwhile.
    pub(crate) fn end_window_through(
        &mut self,
        store: &mut dyn EventStore,
        index: u64,
    ) -> Result<bool, StoreError> {
        let k = self.unsent.partition_point(|e| e.pos.index <= index);
        if k == 0 && !self.sent_part {
            return Ok(false);
        }
        let rest = self.unsent.split_off(k);
        let mut wrote = self.end_window(store)?;
        for e in rest {
            wrote |= self.push(store, e)?;
        }
        Ok(wrote)
    }

    fn send(&mut self, store: &mut dyn EventStore, part: Part) -> Result<bool, StoreError> {
        let mut part = part;
        let mut wrote = false;
        loop {
            match self.tx.try_send(part) {
                Ok(()) => return Ok(wrote),
                Err(mpsc::TrySendError::Full(back)) => {
                    part = back;
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
        let batch = batch?;
        if last {
            self.outstanding = self.outstanding.saturating_sub(1);
        }
        let Some(mut batch) = batch else {
            return Ok(());
        };
        if !self.compacts {
            batch.compact_through = 0;
        }
        store.materialize(&batch)
    }

    /// Stop, discarding what was not written yet (the open window too), and
    /// hand the materializer back.
    pub(crate) fn stop(self) -> Result<Materializer, StoreError> {
        drop(self.tx);
        // Unblocks a reducer waiting for room; ends when it exits.
        while self.reduced.recv().is_ok() {}
        self.thread
            .join()
            .map_err(|_| StoreError::Stopped("the reducer thread panicked".into()))
    }
}

/// The reducer thread's loop: reduce each part into the open batch; a batch
/// ends at its window's end, or early once it holds [`REDUCED_OPS_MAX`] ops
/// and more entries follow.
fn reduce_parts(
    mut m: Materializer,
    rx: &mpsc::Receiver<Part>,
    reduced: &mpsc::SyncSender<Reduced>,
    wake: impl Fn() -> bool,
) -> Materializer {
    let send = |r: Reduced| reduced.send(r).is_ok() && wake();
    let mut open: Option<StateBatch> = None;
    while let Ok(part) = rx.recv() {
        let mut rest = &part.entries[..];
        while !rest.is_empty() {
            if let Some(full) = open.take_if(|b| b.ops.len() >= REDUCED_OPS_MAX)
                && !send((m.finish(full).map(Some), false))
            {
                return m;
            }
            let batch = open.get_or_insert_with(|| m.begin());
            match m.reduce_into(batch, rest, REDUCED_OPS_MAX) {
                Ok(taken) => rest = &rest[taken.clamp(1, rest.len())..],
                Err(e) => {
                    send((Err(e), true));
                    return m;
                }
            }
        }
        if part.last {
            let batch = open.take().map(|b| m.finish(b)).transpose();
            let failed = batch.is_err();
            if !send((batch, true)) || failed {
                return m;
            }
        }
        // The payloads are freed here, off the commit thread.
        drop(part);
    }
    m
}

fn stopped() -> StoreError {
    StoreError::Stopped("the reducer thread stopped".into())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::store::{MemoryStore, ReduceError, Reducer, StateOp, StateRead};

    /// Payload `put k` adds key k, `del k` removes it, `many n` puts 20000
    /// keys `mn/..`; `flush` counts the
    /// batches it ended under `#flushes` (it never restores: fresh stores).
    #[derive(Default)]
    struct CountingReducer {
        flushes: u64,
    }

    impl Reducer for CountingReducer {
        fn restore(&mut self, _: &dyn StateRead) -> Result<(), ReduceError> {
            Ok(())
        }

        fn reduce(&mut self, entry: &Entry, out: &mut Vec<StateOp>) -> Result<(), ReduceError> {
            let text =
                std::str::from_utf8(&entry.payload).map_err(|e| ReduceError(e.to_string()))?;
            if let Some(n) = text.strip_prefix("many ") {
                for i in 0..20_000 {
                    out.push(StateOp::Put {
                        key: Bytes::from(format!("m{n}/{i}")),
                        value: Bytes::from_static(b"v"),
                    });
                }
                return Ok(());
            }
            let key = Bytes::copy_from_slice(&text.as_bytes()[4..]);
            out.push(match &text[..4] {
                "put " => StateOp::Put {
                    key,
                    value: Bytes::from_static(b"v"),
                },
                _ => StateOp::Delete { key },
            });
            Ok(())
        }

        fn flush(&mut self, out: &mut Vec<StateOp>) -> Result<(), ReduceError> {
            self.flushes += 1;
            out.push(StateOp::Put {
                key: Bytes::from_static(b"#flushes"),
                value: Bytes::from(self.flushes.to_string()),
            });
            Ok(())
        }
    }

    /// A store holding `texts` as stable entries 1.., and a reducer thread
    /// on it.
    fn setup(texts: &[String]) -> (MemoryStore, ReducerThread, Vec<Entry>) {
        let entries: Vec<Entry> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| Entry::new(1, 1 + i as u64, t.clone()))
            .collect();
        let mut store = MemoryStore::new();
        store.append(&entries).unwrap();
        store.sync().unwrap();
        store.set_stable_index(entries.len() as u64).unwrap();
        let m = Materializer::open(Box::new(CountingReducer::default()), 0, &store).unwrap();
        let r = ReducerThread::start(m, "test-reducer", false, || true).unwrap();
        (store, r, entries)
    }

    fn drain(store: &mut MemoryStore, r: &mut ReducerThread) {
        while r.outstanding() > 0 {
            r.write_next(store).unwrap();
        }
    }

    fn state(store: &MemoryStore) -> Vec<(Bytes, Bytes)> {
        store.state_scan(b"").unwrap()
    }

    #[test]
    fn a_window_sent_in_parts_is_one_batch_and_cancels_across_its_parts() {
        // Puts in the first part, their deletions several parts later.
        let n = 3 * PART_ENTRIES_MAX;
        let mut texts: Vec<String> = (0..n).map(|i| format!("put k{i}")).collect();
        texts.extend((0..n - 1).map(|i| format!("del k{i}")));
        let (mut store, mut r, entries) = setup(&texts);
        for e in entries.iter().cloned() {
            r.push(&mut store, e).unwrap();
        }
        assert!(r.window_open());
        // Parts went over, but nothing ends before the window does.
        assert_eq!(r.outstanding(), 0);
        assert!(!r.write_queued(&mut store).unwrap());
        assert_eq!(store.state_index(), 0);

        r.end_window(&mut store).unwrap();
        assert!(!r.window_open());
        drain(&mut store, &mut r);
        assert_eq!(store.state_index(), entries.len() as u64);
        let last = format!("k{}", n - 1);
        assert_eq!(
            state(&store),
            vec![
                (Bytes::from_static(b"#flushes"), Bytes::from_static(b"1")),
                (Bytes::from(last), Bytes::from_static(b"v")),
            ]
        );
        r.stop().unwrap();
    }

    #[test]
    fn ending_a_window_through_an_index_covers_the_parts_sent_past_it() {
        let n = PART_ENTRIES_MAX + 10;
        let texts: Vec<String> = (0..n).map(|i| format!("put k{i}")).collect();
        let (mut store, mut r, entries) = setup(&texts);
        for e in entries.iter().cloned() {
            r.push(&mut store, e).unwrap();
        }
        // The first part (up to PART_ENTRIES_MAX) went over; 10 wait.
        r.end_window_through(&mut store, 3).unwrap();
        drain(&mut store, &mut r);
        assert_eq!(store.state_index(), PART_ENTRIES_MAX as u64);
        // The rest opened the next window.
        assert!(r.window_open());
        r.end_window_through(&mut store, n as u64).unwrap();
        drain(&mut store, &mut r);
        assert_eq!(store.state_index(), n as u64);
        assert_eq!(state(&store).len(), n + 1);
        // Nothing to end: no batch, nothing outstanding.
        assert!(!r.end_window(&mut store).unwrap());
        assert_eq!(r.outstanding(), 0);
        r.stop().unwrap();
    }

    #[test]
    fn a_window_of_many_ops_comes_back_in_bounded_batches() {
        // Each entry puts 20000 keys: a batch ends once it holds
        // REDUCED_OPS_MAX ops, that is after every second entry.
        const { assert!(2 * 20_000 >= REDUCED_OPS_MAX && 20_000 < REDUCED_OPS_MAX) };
        let texts: Vec<String> = (0..5).map(|i| format!("many {i}")).collect();
        let (mut store, mut r, entries) = setup(&texts);
        for e in entries.iter().cloned() {
            r.push(&mut store, e).unwrap();
        }
        r.end_window(&mut store).unwrap();
        drain(&mut store, &mut r);
        assert_eq!(store.state_index(), 5);
        let all = state(&store);
        assert_eq!(all.len(), 5 * 20_000 + 1);
        let flushes = all.iter().find(|(k, _)| &k[..] == b"#flushes");
        assert_eq!(
            flushes.map(|(_, v)| v.clone()),
            Some(Bytes::from_static(b"3"))
        );
        r.stop().unwrap();
    }
}
