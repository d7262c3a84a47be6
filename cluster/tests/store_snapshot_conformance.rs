//! Snapshot catch-up on both stores: serving the state from one frozen view
//! in chunks while the store goes on writing, and installing a peer's state
//! (keeping the log after it only where the log agrees with it). The same
//! tests run on `FjallStore` (a real temporary directory) and `MemoryStore`.

#![allow(
    clippy::unwrap_used,
    reason = "a test: an unwrap that fails is a failure at its line"
)]

use bytes::Bytes;
use stablemq_cluster::store::{MergedOp, StateBatch, StateSnapshot};
use stablemq_cluster::{Entry, EventStore, FjallStore, LogPosition, MemoryStore, StoreError};

trait Harness {
    fn store(&mut self) -> &mut dyn EventStore;
    fn restart(&mut self);
}

struct Memory(MemoryStore);

impl Harness for Memory {
    fn store(&mut self) -> &mut dyn EventStore {
        &mut self.0
    }
    fn restart(&mut self) {
        self.0.crash();
    }
}

struct Fjall {
    store: Option<FjallStore>,
    dir: tempfile::TempDir,
}

impl Harness for Fjall {
    fn store(&mut self) -> &mut dyn EventStore {
        self.store.as_mut().unwrap()
    }
    fn restart(&mut self) {
        drop(self.store.take());
        self.store = Some(FjallStore::open(self.dir.path()).unwrap());
    }
}

fn fjall() -> Fjall {
    let dir = tempfile::tempdir().unwrap();
    Fjall {
        store: Some(FjallStore::open(dir.path()).unwrap()),
        dir,
    }
}

fn entries(epoch: u64, indexes: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
    indexes
        .map(|i| Entry::new(epoch, i, format!("e{i}")))
        .collect()
}

fn b(s: &str) -> Bytes {
    Bytes::from(s.to_owned())
}

fn puts(state_index: u64, compact_through: u64, keys: &[(&str, &str)]) -> StateBatch {
    let mut batch = StateBatch::new(state_index);
    batch.compact_through = compact_through;
    for (k, v) in keys {
        batch.ops.insert(b(k), MergedOp::Put(b(v)));
    }
    batch
}

/// Every pair of a snapshot, read in chunks of about `max_bytes`.
fn read_all(snap: &dyn StateSnapshot, max_bytes: usize) -> (Vec<(Bytes, Bytes)>, usize) {
    let mut all: Vec<(Bytes, Bytes)> = Vec::new();
    let mut chunks = 0;
    loop {
        let after = all.last().map(|(k, _)| k.clone());
        let (pairs, done) = snap.chunk(after.as_deref(), max_bytes).unwrap();
        chunks += 1;
        assert!(
            done || !pairs.is_empty(),
            "a chunk that is not the last has pairs"
        );
        all.extend(pairs);
        if done {
            return (all, chunks);
        }
        assert!(chunks < 1000);
    }
}

fn a_snapshot_is_frozen_and_chunked(h: &mut dyn Harness) {
    let s = h.store();
    s.append(&entries(1, 1..=8)).unwrap();
    s.set_stable_index(8).unwrap();
    s.materialize(&puts(
        4,
        4,
        &[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")],
    ))
    .unwrap();
    let snap = s.state_snapshot().unwrap();
    assert_eq!(snap.base(), LogPosition::new(1, 4));
    // The store moves on; the snapshot does not.
    let mut later = puts(6, 6, &[("a", "changed"), ("e", "5")]);
    later.ops.insert(b("b"), MergedOp::Delete);
    s.materialize(&later).unwrap();
    let (pairs, chunks) = read_all(snap.as_ref(), 2);
    assert_eq!(
        pairs,
        vec![
            (b("a"), b("1")),
            (b("b"), b("2")),
            (b("c"), b("3")),
            (b("d"), b("4"))
        ]
    );
    assert!(chunks >= 2, "small chunks: {chunks}");
    let now = s.state_snapshot().unwrap();
    assert_eq!(now.base(), LogPosition::new(1, 6));
    let (pairs, _) = read_all(now.as_ref(), 1 << 20);
    assert_eq!(pairs.len(), 4);
}

fn installing_over_an_agreeing_log_keeps_its_suffix(h: &mut dyn Harness) {
    let s = h.store();
    s.append(&entries(1, 1..=3)).unwrap();
    s.append(&entries(2, 4..=9)).unwrap();
    s.set_stable_index(2).unwrap();
    s.install_state(LogPosition::new(2, 6), &[(b("k"), b("v"))])
        .unwrap();
    assert_eq!(s.log_base(), LogPosition::new(2, 6));
    assert_eq!(s.state_index(), 6);
    assert_eq!(s.stable_index(), 6);
    assert_eq!(s.last_position(), LogPosition::new(2, 9));
    assert!(matches!(s.read_from(5), Err(StoreError::Compacted { .. })));
    assert_eq!(s.read_from(7).unwrap(), entries(2, 7..=9));
    s.sync().unwrap();
    h.restart();
    let s = h.store();
    assert_eq!(s.log_base(), LogPosition::new(2, 6));
    assert_eq!(s.state_get(b"k").unwrap(), Some(b("v")));
    assert_eq!(s.read_from(7).unwrap(), entries(2, 7..=9));
}

fn installing_over_a_disagreeing_or_short_log_drops_it(h: &mut dyn Harness) {
    let s = h.store();
    s.append(&entries(1, 1..=5)).unwrap();
    // The stable entry 4 is of epoch 2: our 1:4 and all after it go.
    s.install_state(LogPosition::new(2, 4), &[(b("x"), b("1"))])
        .unwrap();
    assert_eq!(s.last_position(), LogPosition::new(2, 4));
    assert!(s.read_from(5).unwrap().is_empty());
    assert!(matches!(
        s.append(&entries(1, 5..=5)),
        Err(StoreError::OutOfOrder { .. })
    ));
    s.append(&entries(2, 5..=5)).unwrap();
    // A state beyond the log's end: the log restarts after it.
    s.install_state(LogPosition::new(3, 20), &[(b("y"), b("2"))])
        .unwrap();
    assert_eq!(s.last_position(), LogPosition::new(3, 20));
    assert_eq!(s.state_get(b"x").unwrap(), None, "the state is replaced");
    assert_eq!(s.state_get(b"y").unwrap(), Some(b("2")));
    // Not above the base: refused, nothing changed.
    assert!(matches!(
        s.install_state(LogPosition::new(3, 20), &[]),
        Err(StoreError::Misuse(_))
    ));
    s.sync().unwrap();
    h.restart();
    let s = h.store();
    assert_eq!(s.last_position(), LogPosition::new(3, 20));
    assert_eq!(s.stable_index(), 20);
    s.append(&entries(3, 21..=21)).unwrap();
}

fn a_crash_mid_install_keeps_the_old_state_whole(h: &mut dyn Harness) {
    let s = h.store();
    s.append(&entries(1, 1..=8)).unwrap();
    s.set_stable_index(8).unwrap();
    s.materialize(&puts(4, 4, &[("a", "1"), ("b", "2")]))
        .unwrap();
    s.sync().unwrap();
    let peer = LogPosition::new(1, 6);
    s.stage_state(peer, true, &[(b("x"), b("1"))]).unwrap();
    s.stage_state(peer, false, &[(b("y"), b("2"))]).unwrap();
    // Staging leaves the live state and the log alone.
    assert_eq!(s.state_get(b"a").unwrap(), Some(b("1")));
    assert_eq!(s.state_get(b"x").unwrap(), None);
    assert_eq!(s.log_base(), LogPosition::new(1, 4));
    assert_eq!(s.state_index(), 4);
    // A chunk of a snapshot that is not being staged is refused.
    assert!(matches!(
        s.stage_state(LogPosition::new(1, 7), false, &[(b("z"), b("3"))]),
        Err(StoreError::Misuse(_))
    ));
    // Make the staged chunks durable, then crash before the switch.
    s.sync().unwrap();
    h.restart();
    let s = h.store();
    assert_eq!(s.log_base(), LogPosition::new(1, 4));
    assert_eq!(s.state_index(), 4);
    assert_eq!(
        s.state_scan(b"").unwrap(),
        vec![(b("a"), b("1")), (b("b"), b("2"))],
        "the old state, whole, and nothing of the staged one"
    );
    assert_eq!(s.read_from(5).unwrap(), entries(1, 5..=8));
    assert_eq!(s.state_snapshot().unwrap().base(), LogPosition::new(1, 4));
    // Nothing staged survives the crash: there is nothing to switch in.
    assert!(matches!(s.install_staged(peer), Err(StoreError::Misuse(_))));
    // The transfer starts over; a first chunk drops what was staged before.
    s.stage_state(peer, true, &[(b("stale"), b("0"))]).unwrap();
    s.stage_state(peer, true, &[(b("x"), b("1"))]).unwrap();
    s.stage_state(peer, false, &[(b("y"), b("2"))]).unwrap();
    s.install_staged(peer).unwrap();
    let installed = vec![(b("x"), b("1")), (b("y"), b("2"))];
    assert_eq!(s.state_scan(b"").unwrap(), installed);
    assert_eq!(s.log_base(), peer);
    assert_eq!(s.read_from(7).unwrap(), entries(1, 7..=8));
    // Durable when it returns: a crash right after keeps it.
    h.restart();
    let s = h.store();
    assert_eq!(s.state_scan(b"").unwrap(), installed);
    assert_eq!(s.log_base(), peer);
    assert_eq!(s.state_index(), 6);
    assert_eq!(s.read_from(7).unwrap(), entries(1, 7..=8));
    // And the store goes on materializing into the installed state.
    s.materialize(&puts(8, 8, &[("w", "4")])).unwrap();
    s.sync().unwrap();
    h.restart();
    let s = h.store();
    assert_eq!(s.state_get(b"w").unwrap(), Some(b("4")));
    assert_eq!(s.state_get(b"x").unwrap(), Some(b("1")));
    assert_eq!(s.log_base(), LogPosition::new(1, 8));
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(#[test] fn $name() { super::$name(&mut super::Memory(super::MemoryStore::new())); })*
        }
        mod fjall {
            $(#[test] fn $name() { super::$name(&mut super::fjall()); })*
        }
    };
}

conformance!(
    a_snapshot_is_frozen_and_chunked,
    installing_over_an_agreeing_log_keeps_its_suffix,
    installing_over_a_disagreeing_or_short_log_drops_it,
    a_crash_mid_install_keeps_the_old_state_whole,
);
