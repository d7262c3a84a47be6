//! The store runner carries out compaction and snapshot catch-up on real
//! fjall stores: `Compact` materializes through the reducer and moves the log
//! base, `ReadSnapshot` serves the state, `StageSnapshot` and `InstallSnapshot` put it on a
//! second store, and both restart with the base they had.

#![allow(
    clippy::unwrap_used,
    reason = "a test: an unwrap that fails is a failure at its line"
)]

use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use stablemq_cluster::replication::{DiskOp, Endpoint, SnapshotRead, StoreInput};
use stablemq_cluster::store::{DiskRunner, ReduceError, Reducer, StateOp, StateRead};
use stablemq_cluster::{Entry, FjallStore, LogPosition};

/// Each payload `k=v` sets key `k`.
struct KvReducer;

impl Reducer for KvReducer {
    fn restore(&mut self, _state: &dyn StateRead) -> Result<(), ReduceError> {
        Ok(())
    }
    fn reduce(&mut self, entry: &Entry, out: &mut Vec<StateOp>) -> Result<(), ReduceError> {
        let text = std::str::from_utf8(&entry.payload).map_err(|e| ReduceError(e.to_string()))?;
        let (k, v) = text
            .split_once('=')
            .ok_or_else(|| ReduceError(format!("bad payload {text}")))?;
        out.push(StateOp::Put {
            key: Bytes::from(k.to_owned()),
            value: Bytes::from(v.to_owned()),
        });
        Ok(())
    }
    fn flush(&mut self, _out: &mut Vec<StateOp>) -> Result<(), ReduceError> {
        Ok(())
    }
}

fn start(dir: &std::path::Path) -> (DiskRunner, mpsc::Receiver<StoreInput>, LogPosition) {
    let (tx, rx) = mpsc::channel();
    let store = FjallStore::open(dir).unwrap();
    let (runner, recovered) =
        DiskRunner::start_with(Box::new(store), Some(Box::new(KvReducer)), move |input| {
            let _ = tx.send(input);
        })
        .unwrap();
    (runner, rx, recovered.runs.base())
}

fn next(rx: &mpsc::Receiver<StoreInput>) -> StoreInput {
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

#[test]
fn compaction_and_snapshot_install_through_the_runner() {
    let a_dir = tempfile::tempdir().unwrap();
    let (a, a_rx, base) = start(a_dir.path());
    assert_eq!(base, LogPosition::ZERO);
    let entries: Vec<Entry> = (1..=6)
        .map(|i| Entry::new(1, i, format!("k{}={i}", i % 3)))
        .collect();
    a.persist(vec![
        DiskOp::Promise(1),
        DiskOp::Append {
            writer_epoch: 1,
            entries: entries.clone(),
        },
        DiskOp::Stable(5),
    ]);
    assert_eq!(next(&a_rx), StoreInput::Persisted);
    a.persist(vec![DiskOp::Compact(LogPosition::new(1, 4))]);
    assert_eq!(next(&a_rx), StoreInput::Persisted);
    let peer = Endpoint::store(2);
    a.read_snapshot(SnapshotRead {
        reply_to: peer,
        base: LogPosition::ZERO,
        after: None,
    });
    let StoreInput::SnapshotDone {
        reply_to,
        base,
        after,
        pairs,
        done,
    } = next(&a_rx)
    else {
        panic!("expected a snapshot chunk");
    };
    assert_eq!(
        (reply_to, base, after, done),
        (peer, LogPosition::new(1, 4), None, true)
    );
    // Entries 1..=4 reduced: k1=4 (4 % 3 = 1), k2=2, k0=3.
    let kv = |k: &str, v: &str| (Bytes::from(k.to_owned()), Bytes::from(v.to_owned()));
    assert_eq!(pairs, vec![kv("k0", "3"), kv("k1", "4"), kv("k2", "2")]);
    a.shutdown();
    let (a, _a_rx, base) = start(a_dir.path());
    assert_eq!(base, LogPosition::new(1, 4), "the base survives a restart");
    a.shutdown();

    // A second store, behind with a divergent tail, installs it.
    let b_dir = tempfile::tempdir().unwrap();
    let (b, b_rx, _) = start(b_dir.path());
    b.persist(vec![
        DiskOp::Promise(1),
        DiskOp::Append {
            writer_epoch: 1,
            entries: vec![Entry::new(1, 1, "k1=1"), Entry::new(1, 2, "k9=x")],
        },
        // In two chunks, staged beside the live state, then switched in.
        DiskOp::StageSnapshot {
            base: LogPosition::new(1, 4),
            first: true,
            pairs: pairs[..1].to_vec(),
        },
        DiskOp::StageSnapshot {
            base: LogPosition::new(1, 4),
            first: false,
            pairs: pairs[1..].to_vec(),
        },
        DiskOp::InstallSnapshot {
            base: LogPosition::new(1, 4),
        },
        DiskOp::Append {
            writer_epoch: 1,
            entries: entries[4..].to_vec(),
        },
        DiskOp::Stable(6),
    ]);
    assert_eq!(next(&b_rx), StoreInput::Persisted);
    // As the node does: compact only up to the stable index already on disk.
    b.persist(vec![DiskOp::Compact(LogPosition::new(1, 5))]);
    assert_eq!(next(&b_rx), StoreInput::Persisted);
    b.read_snapshot(SnapshotRead {
        reply_to: peer,
        base: LogPosition::ZERO,
        after: None,
    });
    let StoreInput::SnapshotDone { base, pairs, .. } = next(&b_rx) else {
        panic!("expected a snapshot chunk");
    };
    assert_eq!(base, LogPosition::new(1, 5));
    assert_eq!(pairs, vec![kv("k0", "3"), kv("k1", "4"), kv("k2", "5")]);
    b.shutdown();
    let (b, _b_rx, base) = start(b_dir.path());
    assert_eq!(base, LogPosition::new(1, 5));
    b.shutdown();
}

/// The first snapshot chunk `runner` serves now.
fn snapshot(runner: &DiskRunner, rx: &mpsc::Receiver<StoreInput>) -> (LogPosition, Vec<String>) {
    runner.read_snapshot(SnapshotRead {
        reply_to: Endpoint::store(2),
        base: LogPosition::ZERO,
        after: None,
    });
    let StoreInput::SnapshotDone { base, pairs, .. } = next(rx) else {
        panic!("expected a snapshot chunk");
    };
    let pairs = pairs
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                String::from_utf8_lossy(k),
                String::from_utf8_lossy(v)
            )
        })
        .collect();
    (base, pairs)
}

#[test]
fn entries_appended_before_a_restart_are_read_back_and_an_idle_store_catches_its_state_up() {
    let dir = tempfile::tempdir().unwrap();
    let (a, a_rx, _) = start(dir.path());
    let entries: Vec<Entry> = (1..=6)
        .map(|i| Entry::new(1, i, format!("k{i}={i}")))
        .collect();
    a.persist(vec![
        DiskOp::Promise(1),
        DiskOp::Append {
            writer_epoch: 1,
            entries,
        },
        DiskOp::Stable(3),
    ]);
    assert_eq!(next(&a_rx), StoreInput::Persisted);
    // Stopped before anything was reduced: the state is empty on disk, and
    // after the restart none of the entries is in the runner's memory.
    a.shutdown();
    let (a, a_rx, base) = start(dir.path());
    assert_eq!(base, LogPosition::ZERO);
    a.persist(vec![DiskOp::Stable(6)]);
    assert_eq!(next(&a_rx), StoreInput::Persisted);
    a.persist(vec![DiskOp::Compact(LogPosition::new(1, 5))]);
    assert_eq!(next(&a_rx), StoreInput::Persisted);
    let (base, pairs) = snapshot(&a, &a_rx);
    assert_eq!(base, LogPosition::new(1, 5));
    assert_eq!(pairs, ["k1=1", "k2=2", "k3=3", "k4=4", "k5=5"]);
    // Entry 6 is stable but its window is not full: an idle store hands it
    // over anyway (after about 100 ms).
    let mut last = (base, pairs);
    for _ in 0..200 {
        if last.0 == LogPosition::new(1, 6) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        last = snapshot(&a, &a_rx);
    }
    assert_eq!(last.0, LogPosition::new(1, 6), "the state never caught up");
    assert_eq!(last.1.last().map(String::as_str), Some("k6=6"));
    a.shutdown();
    // The log base stays where Compact put it; the state is ahead of it.
    let (a, a_rx, base) = start(dir.path());
    assert_eq!(base, LogPosition::new(1, 5));
    assert_eq!(snapshot(&a, &a_rx).0, LogPosition::new(1, 6));
    a.shutdown();
}

#[test]
fn a_compaction_right_after_a_restart_waits_for_the_state_to_catch_up() {
    // A store restarted with its stable index ahead of its state (the reduced
    // batches ride on later commits, so a SIGKILL leaves the state behind):
    // the node's first Persist may ask to compact through an index the
    // state does not cover yet, before any commit has fed the follower.
    let dir = tempfile::tempdir().unwrap();
    let (a, a_rx, _) = start(dir.path());
    let entries: Vec<Entry> = (1..=6)
        .map(|i| Entry::new(1, i, format!("k{i}={i}")))
        .collect();
    a.persist(vec![
        DiskOp::Promise(1),
        DiskOp::Append {
            writer_epoch: 1,
            entries,
        },
        DiskOp::Stable(5),
    ]);
    assert_eq!(next(&a_rx), StoreInput::Persisted);
    a.shutdown();
    let (a, a_rx, base) = start(dir.path());
    assert_eq!(base, LogPosition::ZERO);
    a.persist(vec![DiskOp::Compact(LogPosition::new(1, 4))]);
    assert_eq!(next(&a_rx), StoreInput::Persisted, "the store failed");
    let (base, pairs) = snapshot(&a, &a_rx);
    assert!(base.index >= 4, "the state {base} is behind the base");
    assert_eq!(&pairs[..4], ["k1=1", "k2=2", "k3=3", "k4=4"]);
    a.shutdown();
    let (a, _a_rx, base) = start(dir.path());
    assert_eq!(base, LogPosition::new(1, 4), "the base survives a restart");
    a.shutdown();
}
