//! Carries out a [`StoreNode`](crate::replication::StoreNode)'s disk commands on
//! a real [`EventStore`], on a dedicated thread.
//!
//! The store blocks on fsync, so, as with [`crate::LocalLog`], one thread owns the
//! store and everything else talks to it over a channel. The node emits one
//! `Persist(ops)` at a time and queues whatever arrives meanwhile into the next
//! one, so group commit is already done by the node: the runner applies a
//! batch's ops in order, fsyncs once, and reports `Persisted`. The batch size
//! follows the load. With commit pacing the node may also hold its next
//! batch for a commit window (at most `Config::commit_interval_us` after
//! the last Persist started); this thread times that wait
//! ([`DiskRunner::commit_window`]), since tokio's timers tick in whole
//! milliseconds.
//!
//! Two ops are durable on their own ([`EventStore::set_promised_epoch`],
//! [`EventStore::truncate_after`]), so a batch that raises the promise or cuts a
//! conflicting suffix costs one more fsync. Both happen only around a takeover,
//! and keeping them eager means a crash can never leave entries of a new epoch
//! on disk under an older promise.
//!
//! `Stable(i)` is recorded *after* the batch's fsync and rides on the next one:
//! the stable index on disk then never exceeds the durable log, whatever order
//! the log's segment file and fjall's journal reach the disk in
//! (`FjallStore::open` refuses a stable index beyond the log as corruption). A stable index that lags after a crash is
//! harmless: it is a hint, and stability itself lives on a quorum.
//!
//! Any store error is final: the runner reports `DiskFailed` once and stops,
//! because after a failed fsync nothing the disk says about durability can be
//! trusted (see [`StoreError`]).

use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::replication::{DiskOp, EpochRuns, ReadRequest, SnapshotRead, StoreInput};

use super::follow::{IDLE, StateFollower};
use super::{EventStore, Materializer, Reducer, StateBatch, StateSnapshot, StoreError};

/// Most bytes of state pairs in one snapshot chunk (well under the wire's
/// frame limit).
const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;
/// Snapshots kept open for transfers under way; the oldest goes first.
const PINNED_SNAPSHOTS_MAX: usize = 4;

/// Entries read per call while rebuilding the epoch runs at start, so recovery
/// never holds the whole log in memory at once.
const RECOVERY_CHUNK: u64 = 4096;

/// What a store holds when it starts: the arguments of
/// [`StoreNode::new`](crate::replication::StoreNode::new).
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveredStore {
    /// The promised epoch.
    pub promised: u64,
    /// The stable index recorded.
    pub stable: u64,
    /// The epoch of every index of the log.
    pub runs: EpochRuns,
    /// Whether the store joined (see `EventStore::joined`).
    pub joined: bool,
    /// The disk's incarnation.
    pub incarnation: u64,
}

enum Job {
    Persist(Vec<DiskOp>),
    Read(ReadRequest),
    ReadSnapshot(SnapshotRead),
    /// Report `CommitWindow` at this instant (commit pacing).
    Window(std::time::Instant),
}

/// The thread that owns a store; see the module docs.
pub struct DiskRunner {
    /// Closing it (drop) stops the thread after the job it is on.
    tx: mpsc::Sender<Job>,
    thread: JoinHandle<()>,
}

impl DiskRunner {
    /// Read the store's state (for `StoreNode::new`) and start the thread.
    ///
    /// `on_done` is called from the runner thread with `Persisted`, `ReadDone`
    /// or (once, last) `DiskFailed`; it must not block for long (send it to a
    /// channel).
    pub fn start(
        store: Box<dyn EventStore>,
        on_done: impl Fn(StoreInput) + Send + 'static,
    ) -> Result<(DiskRunner, RecoveredStore), StoreError> {
        Self::start_with(store, None, on_done)
    }

    /// [`DiskRunner::start`] with a reducer, which `DiskOp::Compact` needs
    /// (the node emits it only when the cluster config turns compaction on).
    pub fn start_with(
        mut store: Box<dyn EventStore>,
        reducer: Option<Box<dyn Reducer>>,
        on_done: impl Fn(StoreInput) + Send + 'static,
    ) -> Result<(DiskRunner, RecoveredStore), StoreError> {
        let recovered = recover(store.as_mut())?;
        // The reducer's own compaction is never used: the node decides it.
        let follower = reducer
            .map(|r| {
                let m = Materializer::open(r, u64::MAX, store.as_ref())?;
                StateFollower::start(m, store.as_ref())
            })
            .transpose()?;
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("stablemq-store-node".into())
            .spawn(move || run(store, follower, rx, on_done))?;
        Ok((DiskRunner { tx, thread }, recovered))
    }

    /// Apply `ops` in order, fsync, then report `Persisted`.
    pub fn persist(&self, ops: Vec<DiskOp>) {
        // A send error means the thread stopped on a failure it already reported.
        let _ = self.tx.send(Job::Persist(ops));
    }

    /// Read `req.from..=req.to`, then report `ReadDone`.
    pub fn read(&self, req: ReadRequest) {
        let _ = self.tx.send(Job::Read(req));
    }

    /// Read a chunk of the state (a pinned snapshot), then report
    /// `SnapshotDone`.
    pub fn read_snapshot(&self, req: SnapshotRead) {
        let _ = self.tx.send(Job::ReadSnapshot(req));
    }

    /// Report `CommitWindow` at `at`, after the jobs queued before. The
    /// wait is on this thread, not a runtime timer: tokio's timers tick in
    /// whole milliseconds, which would add up to a millisecond to every
    /// paced commit.
    pub fn commit_window(&self, at: std::time::Instant) {
        let _ = self.tx.send(Job::Window(at));
    }

    /// Finish the queued jobs, then stop and close the store. Blocks: call it
    /// from a thread that may (not from an async task). Dropping the runner
    /// stops it too, in the background.
    pub fn shutdown(self) {
        drop(self.tx);
        if self.thread.join().is_err() {
            tracing::error!("store runner thread panicked");
        }
    }
}

fn recover(store: &mut dyn EventStore) -> Result<RecoveredStore, StoreError> {
    // Entries up to the base live in the state: peers that need them get a
    // snapshot of it.
    let base = store.log_base();
    let last = store.last_position();
    let mut runs = EpochRuns::from_base(base, []);
    let mut next = base.index + 1;
    while next <= last.index {
        let to = next.saturating_add(RECOVERY_CHUNK - 1).min(last.index);
        let chunk = store.read_range(next, to)?;
        for entry in &chunk {
            if entry.pos.index != next || entry.pos.epoch < runs.last().epoch {
                return Err(StoreError::Corrupt(format!(
                    "entry {} where index {next} was expected",
                    entry.pos
                )));
            }
            runs.push(entry.pos);
            next += 1;
        }
        if chunk.is_empty() {
            return Err(StoreError::Corrupt(format!(
                "log ends at {last} but index {next} is missing"
            )));
        }
    }
    Ok(RecoveredStore {
        promised: store.promised_epoch(),
        stable: store.stable_index().min(last.index).max(base.index),
        runs,
        joined: store.joined(),
        incarnation: store.incarnation(),
    })
}

fn run(
    mut store: Box<dyn EventStore>,
    mut follower: Option<StateFollower>,
    rx: mpsc::Receiver<Job>,
    on_done: impl Fn(StoreInput),
) {
    let mut pinned: Vec<Box<dyn StateSnapshot>> = Vec::new();
    loop {
        let job = if follower.as_ref().is_some_and(StateFollower::busy) {
            match rx.recv_timeout(IDLE) {
                Ok(job) => job,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    // Idle with a partial window or a reduction under way:
                    // catch the state up now rather than with the next commit.
                    if let Some(f) = follower.as_mut()
                        && let Err(err) = idle(store.as_mut(), f)
                    {
                        tracing::error!(error = %err, "event store failed; store node stops answering");
                        on_done(StoreInput::DiskFailed);
                        return;
                    }
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        } else {
            match rx.recv() {
                Ok(job) => job,
                Err(_) => break,
            }
        };
        // A Persist writes the reduced batches itself, in front of its fsync.
        let sync_state = !matches!(job, Job::Persist(_));
        let result = match job {
            Job::Persist(ops) => match follower.as_mut() {
                Some(f) => persist_following(store.as_mut(), f, &ops),
                None => persist(store.as_mut(), &ops),
            }
            .map(|()| StoreInput::Persisted),
            Job::Read(req) => store
                .read_range(req.from, req.to)
                .map(|entries| StoreInput::ReadDone { req, entries }),
            Job::ReadSnapshot(req) => read_snapshot(store.as_ref(), &mut pinned, req),
            // Only a wait: nothing to write, nothing for the reducer to tend.
            Job::Window(at) => {
                std::thread::sleep(at.saturating_duration_since(std::time::Instant::now()));
                on_done(StoreInput::CommitWindow);
                continue;
            }
        };
        let result = match (result, follower.as_mut()) {
            (Ok(input), Some(f)) => f.tend(store.as_mut(), sync_state).map(|()| input),
            (result, _) => result,
        };
        match result {
            Ok(input) => on_done(input),
            Err(err) => {
                tracing::error!(error = %err, "event store failed; store node stops answering");
                on_done(StoreInput::DiskFailed);
                return;
            }
        }
    }
    if let Some(f) = follower {
        f.shutdown();
    }
    // Closed: make the lazily recorded stable index durable on the way out.
    if let Err(err) = store.sync() {
        tracing::warn!(error = %err, "final sync of the event store failed");
    }
}

/// Nothing to commit for a while: hand over the partial window, write what
/// the reducer sent back, and make it durable.
fn idle(store: &mut dyn EventStore, f: &mut StateFollower) -> Result<(), StoreError> {
    f.hand_over(store)?;
    if f.write_queued(store)? {
        store.sync()?;
    }
    Ok(())
}

/// One chunk of a snapshot: of the pinned one the requester continues, or
/// the first of a new one of the state as it is now.
fn read_snapshot(
    store: &dyn EventStore,
    pinned: &mut Vec<Box<dyn StateSnapshot>>,
    req: SnapshotRead,
) -> Result<StoreInput, StoreError> {
    let found = match &req.after {
        Some(_) => pinned.iter().position(|s| s.base() == req.base),
        None => None,
    };
    let (at, after) = match found {
        Some(at) => (at, req.after),
        None => {
            if pinned.len() >= PINNED_SNAPSHOTS_MAX {
                pinned.remove(0);
            }
            pinned.push(store.state_snapshot()?);
            (pinned.len() - 1, None)
        }
    };
    let snapshot = &pinned[at];
    let (pairs, done) = snapshot.chunk(after.as_deref(), SNAPSHOT_CHUNK_BYTES)?;
    let base = snapshot.base();
    if done {
        pinned.remove(at);
    }
    Ok(StoreInput::SnapshotDone {
        reply_to: req.reply_to,
        base,
        after,
        pairs,
        done,
    })
}

/// One Persist on a store without a state: the ops in order, one fsync,
/// then the stable index (lazily).
pub(crate) fn persist(store: &mut dyn EventStore, ops: &[DiskOp]) -> Result<(), StoreError> {
    let mut stable = None;
    for op in ops {
        match op {
            DiskOp::Compact(_) => {
                return Err(StoreError::Misuse(
                    "compaction needs a reducer (DiskRunner::start_with)".into(),
                ));
            }
            DiskOp::StageSnapshot { base, first, pairs } => {
                store.stage_state(*base, *first, pairs)?
            }
            DiskOp::InstallSnapshot { base } => store.install_staged(*base)?,
            DiskOp::Promise(epoch) => store.set_promised_epoch(*epoch)?,
            DiskOp::TruncateAfter(index) => store.truncate_after(*index)?,
            DiskOp::Append {
                writer_epoch,
                entries,
            } => store.append_as(*writer_epoch, entries)?,
            DiskOp::Stable(index) => stable = stable.max(Some(*index)),
            DiskOp::Joined => store.set_joined()?,
        }
    }
    store.sync()?;
    if let Some(index) = stable {
        // After the fsync (see the module docs). The node never sends a stable
        // index beyond its log; clamp anyway rather than fail the store.
        store.set_stable_index(index.min(store.last_position().index))?;
    }
    Ok(())
}

/// [`persist`] for a store whose state a [`StateFollower`] builds: reduced
/// batches are written first (this fsync makes them durable), `Compact`
/// moves the log base once the state is there (see `follow.rs`), and the
/// entries the Persist made stable go to the follower after the fsync.
fn persist_following(
    store: &mut dyn EventStore,
    follower: &mut StateFollower,
    ops: &[DiskOp],
) -> Result<(), StoreError> {
    follower.write_queued(store)?;
    let mut stable = None;
    for op in ops {
        match op {
            DiskOp::Compact(pos) => {
                follower.catch_up_to(store, pos.index)?;
                if pos.index > store.log_base().index {
                    let mut batch = StateBatch::new(store.state_index());
                    batch.compact_through = pos.index;
                    store.materialize(&batch)?;
                }
                if store.log_base() != *pos {
                    return Err(StoreError::Corrupt(format!(
                        "compacted through {pos}, but the log base is {}",
                        store.log_base()
                    )));
                }
            }
            // Staging leaves the live state alone: the follower goes on.
            DiskOp::StageSnapshot { base, first, pairs } => {
                store.stage_state(*base, *first, pairs)?
            }
            DiskOp::InstallSnapshot { base } => {
                let mut m = follower.stop()?.ok_or_else(|| {
                    StoreError::Misuse("the store reducer was stopped already".into())
                })?;
                store.install_staged(*base)?;
                m.reopen(store)?;
                follower.restart(m, store)?;
            }
            DiskOp::Promise(epoch) => store.set_promised_epoch(*epoch)?,
            DiskOp::TruncateAfter(index) => {
                store.truncate_after(*index)?;
                follower.truncated(*index);
            }
            DiskOp::Append {
                writer_epoch,
                entries,
            } => {
                store.append_as(*writer_epoch, entries)?;
                follower.appended(entries);
            }
            DiskOp::Stable(index) => stable = stable.max(Some(*index)),
            DiskOp::Joined => store.set_joined()?,
        }
    }
    store.sync()?;
    if let Some(index) = stable {
        store.set_stable_index(index.min(store.last_position().index))?;
    }
    follower.follow(store)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::position::{Entry, LogPosition};
    use crate::replication::Endpoint;
    use crate::store::MemoryStore;

    #[test]
    fn persist_applies_ops_in_order_and_adopted_entries_pass() {
        let mut store = MemoryStore::new();
        let ops = [
            DiskOp::Promise(3),
            DiskOp::Append {
                writer_epoch: 3,
                entries: vec![Entry::new(1, 1, "adopted"), Entry::new(3, 2, "")],
            },
            DiskOp::Stable(2),
        ];
        persist(&mut store, &ops).unwrap();
        assert_eq!(store.last_position(), LogPosition::new(3, 2));
        assert_eq!(store.stable_index(), 2);
        // The stable index rides on the next fsync; the entries are durable now.
        store.crash();
        assert_eq!(store.last_position(), LogPosition::new(3, 2));
        assert_eq!(store.promised_epoch(), 3);
    }

    #[test]
    fn runner_reports_results_then_failure_once() {
        let (tx, rx) = mpsc::channel();
        let mut store = MemoryStore::new();
        store.append(&[Entry::new(1, 1, "a")]).unwrap();
        store.set_promised_epoch(2).unwrap();
        let (runner, recovered) = DiskRunner::start(Box::new(store), move |input| {
            let _ = tx.send(input);
        })
        .unwrap();
        assert_eq!(recovered.promised, 2);
        assert_eq!(recovered.runs.last(), LogPosition::new(1, 1));

        runner.persist(vec![DiskOp::Append {
            writer_epoch: 2,
            entries: vec![Entry::new(2, 2, "b")],
        }]);
        let req = ReadRequest {
            from: 1,
            to: 9,
            reply_to: Endpoint::broker(7),
            epoch: 2,
            stable_only: false,
        };
        runner.read(req.clone());
        // A deposed writer: the disk refuses, which is fatal for the node.
        runner.persist(vec![DiskOp::Append {
            writer_epoch: 1,
            entries: vec![Entry::new(1, 3, "c")],
        }]);
        runner.persist(vec![DiskOp::Stable(1)]);
        assert_eq!(rx.recv().unwrap(), StoreInput::Persisted);
        assert_eq!(
            rx.recv().unwrap(),
            StoreInput::ReadDone {
                req,
                entries: vec![Entry::new(1, 1, "a"), Entry::new(2, 2, "b")]
            }
        );
        assert_eq!(rx.recv().unwrap(), StoreInput::DiskFailed);
        runner.shutdown();
        assert!(rx.recv().is_err(), "nothing after DiskFailed");
    }
}
