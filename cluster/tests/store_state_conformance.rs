//! The materialized state and log compaction, against both stores: the same
//! tests run on `FjallStore` (a real temporary directory) and `MemoryStore`,
//! plus a model-based property test in which the memory store is the model.
//!
//! "Restart" is drop-and-reopen for fjall and `crash()` for memory; only what
//! a sync made durable is asserted after one.

#![allow(
    clippy::unwrap_used,
    reason = "a test: an unwrap that fails is a failure at its line"
)]

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;
use stablemq_cluster::store::{
    Materializer, MergedOp, ReduceError, Reducer, StateBatch, StateOp, StateRead,
};
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

impl Fjall {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path()).unwrap();
        Fjall {
            store: Some(store),
            dir,
        }
    }
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

fn entries(epoch: u64, indexes: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
    indexes
        .map(|i| Entry::new(epoch, i, format!("payload-{epoch}-{i}")))
        .collect()
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn all_state(s: &dyn EventStore) -> Vec<(Bytes, Bytes)> {
    s.state_scan(b"").unwrap()
}

fn batch(state_index: u64, compact_through: u64, ops: Vec<StateOp>) -> StateBatch {
    let mut batch = StateBatch::new(state_index);
    for op in ops {
        batch.push(op);
    }
    batch.compact_through = compact_through;
    batch
}

fn put(k: &str, v: &str) -> StateOp {
    StateOp::Put {
        key: b(k),
        value: b(v),
    }
}

fn del(k: &str) -> StateOp {
    StateOp::Delete { key: b(k) }
}

fn del_prefix(p: &str) -> StateOp {
    StateOp::DeletePrefix { prefix: b(p) }
}

fn state_is_written_and_survives_restart(h: &mut dyn Harness) {
    let s = h.store();
    assert_eq!(s.state_index(), 0);
    assert_eq!(s.log_base(), LogPosition::ZERO);
    s.append(&entries(1, 1..=5)).unwrap();
    s.set_stable_index(4).unwrap();
    s.materialize(&batch(
        3,
        0,
        vec![put("q/a/1", "x"), put("q/a/2", "y"), put("q/b/1", "z")],
    ))
    .unwrap();
    s.sync().unwrap();
    h.restart();
    let s = h.store();
    assert_eq!(s.state_index(), 3);
    assert_eq!(s.state_get(b"q/a/2").unwrap(), Some(b("y")));
    assert_eq!(s.state_get(b"nope").unwrap(), None);
    assert_eq!(
        s.state_scan(b"q/a/").unwrap(),
        vec![(b("q/a/1"), b("x")), (b("q/a/2"), b("y"))]
    );
    // Nothing compacted: the whole log is still there.
    assert_eq!(s.read_from(1).unwrap(), entries(1, 1..=5));
}

fn merged_ops_act_on_the_state_before_the_batch(h: &mut dyn Harness) {
    let s = h.store();
    s.append(&entries(1, 1..=3)).unwrap();
    s.set_stable_index(3).unwrap();
    s.materialize(&batch(
        1,
        0,
        vec![
            put("k", "old"),
            put("p/1", "a"),
            put("p/2", "b"),
            put("z", "1"),
        ],
    ))
    .unwrap();
    // Put then delete of a key that existed before: it must go.
    // Prefix deletion removes older keys; a later put under it survives.
    let second = batch(
        2,
        0,
        vec![
            put("k", "new"),
            del("k"),
            put("fresh", "1"),
            del("fresh"),
            del_prefix("p/"),
            put("p/3", "c"),
        ],
    );
    assert_eq!(second.ops.get(&b("fresh")), Some(&MergedOp::PutThenDelete));
    s.materialize(&second).unwrap();
    assert_eq!(
        all_state(s),
        vec![(b("p/3"), b("c")), (b("z"), b("1"))],
        "state as reads see it before any sync"
    );
    s.sync().unwrap();
    h.restart();
    assert_eq!(
        all_state(h.store()),
        vec![(b("p/3"), b("c")), (b("z"), b("1"))]
    );
}

fn unsynced_state_is_lost_whole_or_kept_whole(h: &mut dyn Harness) {
    let s = h.store();
    s.append(&entries(1, 1..=4)).unwrap();
    s.set_stable_index(4).unwrap();
    s.materialize(&batch(2, 0, vec![put("a", "1")])).unwrap();
    s.sync().unwrap();
    s.materialize(&batch(4, 3, vec![del("a"), put("b", "2")]))
        .unwrap();
    h.restart();
    let s = h.store();
    match s.state_index() {
        2 => {
            assert_eq!(all_state(s), vec![(b("a"), b("1"))]);
            assert_eq!(s.log_base(), LogPosition::ZERO);
            assert_eq!(s.read_from(1).unwrap(), entries(1, 1..=4));
        }
        4 => {
            assert_eq!(all_state(s), vec![(b("b"), b("2"))]);
            assert_eq!(s.log_base(), LogPosition::new(1, 3));
        }
        other => panic!("state index {other} is neither batch"),
    }
}

fn compaction_moves_the_log_base(h: &mut dyn Harness) {
    let s = h.store();
    let mut all = entries(1, 1..=4);
    all.extend(entries(2, 5..=10));
    s.append(&all).unwrap();
    s.set_stable_index(9).unwrap();
    s.materialize(&batch(8, 6, vec![put("s", "8")])).unwrap();
    assert_eq!(s.log_base(), LogPosition::new(2, 6));
    assert_eq!(s.last_position(), LogPosition::new(2, 10));
    for from in [0, 1, 6] {
        let err = s.read_from(from).unwrap_err();
        assert!(
            matches!(err, StoreError::Compacted { base } if base == LogPosition::new(2, 6)),
            "{err}"
        );
    }
    assert!(matches!(
        s.read_range(3, 8),
        Err(StoreError::Compacted { .. })
    ));
    assert_eq!(s.read_from(7).unwrap(), all[6..]);
    assert_eq!(s.read_range(7, 8).unwrap(), all[6..8]);
    // Stable entries stay final, compacted or not.
    assert!(matches!(s.truncate_after(5), Err(StoreError::Misuse(_))));
    s.sync().unwrap();
    h.restart();
    let s = h.store();
    assert_eq!(s.log_base(), LogPosition::new(2, 6));
    assert_eq!(s.state_index(), 8);
    assert_eq!(s.read_from(7).unwrap(), all[6..]);
    assert_eq!(s.last_position(), LogPosition::new(2, 10));
    s.append(&entries(3, 11..=11)).unwrap();
    assert_eq!(s.last_position(), LogPosition::new(3, 11));
}

fn compacting_everything_keeps_the_position(h: &mut dyn Harness) {
    let s = h.store();
    s.append(&entries(4, 1..=5)).unwrap();
    s.set_stable_index(5).unwrap();
    s.materialize(&batch(5, 5, vec![put("all", "5")])).unwrap();
    assert_eq!(s.last_position(), LogPosition::new(4, 5));
    assert!(s.read_range(6, 9).unwrap().is_empty());
    s.sync().unwrap();
    h.restart();
    let s = h.store();
    assert_eq!(s.last_position(), LogPosition::new(4, 5));
    assert_eq!(s.log_base(), LogPosition::new(4, 5));
    assert!(s.read_from(6).unwrap().is_empty());
    // The log goes on from the base, log matching and all.
    assert!(matches!(
        s.append(&entries(4, 7..=7)),
        Err(StoreError::OutOfOrder { .. })
    ));
    s.append(&entries(5, 6..=6)).unwrap();
    assert_eq!(s.read_from(6).unwrap(), entries(5, 6..=6));
}

fn materialize_refuses_what_is_not_stable_or_goes_back(h: &mut dyn Harness) {
    let s = h.store();
    s.append(&entries(1, 1..=6)).unwrap();
    s.set_stable_index(4).unwrap();
    let refused = |r: Result<(), StoreError>| matches!(r, Err(StoreError::Misuse(_)));
    assert!(refused(s.materialize(&batch(5, 0, vec![put("a", "1")]))));
    assert!(refused(s.materialize(&batch(3, 4, vec![]))));
    s.materialize(&batch(3, 2, vec![])).unwrap();
    assert!(refused(s.materialize(&batch(2, 0, vec![]))));
    // Nothing refused changed anything.
    assert_eq!(s.state_index(), 3);
    assert!(all_state(s).is_empty());
    assert_eq!(s.log_base(), LogPosition::new(1, 2));
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(#[test] fn $name() { super::$name(&mut super::Memory(super::MemoryStore::new())); })*
        }
        mod fjall {
            $(#[test] fn $name() { super::$name(&mut super::Fjall::new()); })*
        }
    };
}

conformance!(
    state_is_written_and_survives_restart,
    merged_ops_act_on_the_state_before_the_batch,
    unsynced_state_is_lost_whole_or_kept_whole,
    compaction_moves_the_log_base,
    compacting_everything_keeps_the_position,
    materialize_refuses_what_is_not_stable_or_goes_back,
);

/// A reducer over test payloads `put k v`, `del k` and `delp p`, keeping a
/// count of the entries it has seen in the state (its own memory, restored).
#[derive(Default)]
struct TextReducer {
    seen: u64,
    dirty: bool,
}

impl Reducer for TextReducer {
    fn restore(&mut self, state: &dyn StateRead) -> Result<(), ReduceError> {
        let seen = state
            .get(b"#seen")
            .map_err(|e| ReduceError(e.to_string()))?;
        self.seen = match seen {
            Some(v) => std::str::from_utf8(&v)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| ReduceError("bad #seen".into()))?,
            None => 0,
        };
        Ok(())
    }

    fn reduce(&mut self, entry: &Entry, out: &mut Vec<StateOp>) -> Result<(), ReduceError> {
        self.seen += 1;
        self.dirty = true;
        let text = std::str::from_utf8(&entry.payload).map_err(|e| ReduceError(e.to_string()))?;
        let words: Vec<&str> = text.split(' ').collect();
        match words.as_slice() {
            ["put", k, v] => out.push(put(k, v)),
            ["del", k] => out.push(del(k)),
            ["delp", p] => out.push(del_prefix(p)),
            _ => return Err(ReduceError(format!("bad payload {text:?}"))),
        }
        Ok(())
    }

    fn flush(&mut self, out: &mut Vec<StateOp>) -> Result<(), ReduceError> {
        if std::mem::take(&mut self.dirty) {
            out.push(StateOp::Put {
                key: b("#seen"),
                value: Bytes::from(self.seen.to_string()),
            });
        }
        Ok(())
    }
}

fn text_op() -> impl Strategy<Value = String> {
    let key = prop_oneof![Just("a"), Just("a/1"), Just("a/2"), Just("b/1"), Just("b")];
    prop_oneof![
        3 => (key.clone(), 0..9u8).prop_map(|(k, v)| format!("put {k} {v}")),
        2 => key.clone().prop_map(|k| format!("del {k}")),
        1 => prop_oneof![Just("a/"), Just("b"), Just("a")].prop_map(|p| format!("delp {p}")),
    ]
}

/// Steps of the property test: append a batch (which then becomes stable and
/// is materialized), or restart.
#[derive(Debug, Clone)]
enum Step {
    Batch(Vec<String>),
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => proptest::collection::vec(text_op(), 1..6).prop_map(Step::Batch),
        1 => Just(Step::Restart),
    ]
}

fn run_steps(h: &mut dyn Harness, steps: &[Step], retention: u64) -> BTreeMap<Bytes, Bytes> {
    let open = |h: &mut dyn Harness| {
        Materializer::open(Box::new(TextReducer::default()), retention, h.store()).unwrap()
    };
    let mut m = open(h);
    let mut model: BTreeMap<Bytes, Bytes> = BTreeMap::new();
    let mut seen = 0u64;
    for step in steps {
        match step {
            Step::Batch(texts) => {
                let s = h.store();
                let first = s.last_position().index + 1;
                let batch: Vec<Entry> = texts
                    .iter()
                    .enumerate()
                    .map(|(i, t)| Entry::new(1, first + i as u64, t.clone()))
                    .collect();
                s.append(&batch).unwrap();
                s.sync().unwrap();
                s.set_stable_index(s.last_position().index).unwrap();
                m.advance(s, &batch).unwrap();
                for t in texts {
                    let words: Vec<&str> = t.split(' ').collect();
                    match words.as_slice() {
                        ["put", k, v] => {
                            model.insert(b(k), b(v));
                        }
                        ["del", k] => {
                            model.remove(&b(k));
                        }
                        ["delp", p] => model.retain(|k, _| !k.starts_with(p.as_bytes())),
                        _ => unreachable!(),
                    }
                    seen += 1;
                }
                model.insert(b("#seen"), Bytes::from(seen.to_string()));
                let s = h.store();
                assert_eq!(s.state_index(), s.last_position().index);
                assert!(s.log_base().index <= s.state_index().saturating_sub(retention));
            }
            Step::Restart => {
                h.store().sync().unwrap();
                h.restart();
                m = open(h);
            }
        }
        assert_eq!(
            all_state(h.store()).into_iter().collect::<BTreeMap<_, _>>(),
            model
        );
    }
    model
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The state the materializer writes equals the ops applied one by one,
    /// whatever the batch boundaries and restarts, on both stores; the log
    /// keeps exactly the retention window behind the state.
    #[test]
    fn materialized_state_equals_sequential_application(
        steps in proptest::collection::vec(step(), 1..24),
        retention in 0..4u64,
    ) {
        let mem = run_steps(&mut Memory(MemoryStore::new()), &steps, retention);
        let mut fjall = Fjall::new();
        let disk = run_steps(&mut fjall, &steps, retention);
        prop_assert_eq!(&mem, &disk);
        let s = fjall.store();
        let expected_base = s.state_index().saturating_sub(retention);
        if expected_base > 0 {
            prop_assert_eq!(s.log_base().index, expected_base);
            prop_assert!(s.read_from(expected_base).is_err());
        }
        prop_assert_eq!(
            s.read_from(expected_base + 1).unwrap().len() as u64,
            s.last_position().index - expected_base
        );
    }
}

/// A window reduced in bounded batches ends in the same state as reduced in
/// one, each batch stays within its bound (plus what its last entry and the
/// reducer's flush add), and the batches cover the window in order.
#[test]
fn bounded_reduction_splits_a_window_and_keeps_the_state() {
    let texts: Vec<String> = (0..40u64)
        .map(|i| match i % 4 {
            3 => format!("del k{}", i - 2),
            _ => format!("put k{i} v{i}"),
        })
        .collect();
    let window: Vec<Entry> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| Entry::new(1, 1 + i as u64, t.clone()))
        .collect();
    let run = |max_ops: usize| {
        let mut store = MemoryStore::new();
        store.append(&window).unwrap();
        store.sync().unwrap();
        store.set_stable_index(window.len() as u64).unwrap();
        let mut m = Materializer::open(Box::new(TextReducer::default()), 0, &store).unwrap();
        let mut rest = &window[..];
        let mut batches = 0;
        while !rest.is_empty() {
            let (batch, taken) = m.reduce_bounded(rest, max_ops).unwrap();
            assert!(taken >= 1 && taken <= rest.len());
            assert_eq!(batch.state_index, rest[taken - 1].pos.index);
            // One entry makes one op here, the flush one more.
            assert!(
                batch.ops.len() <= max_ops.saturating_add(1),
                "{} ops",
                batch.ops.len()
            );
            store.materialize(&batch).unwrap();
            rest = &rest[taken..];
            batches += 1;
        }
        assert_eq!(store.state_index(), window.len() as u64);
        (all_state(&store), batches)
    };
    let (whole, one) = run(usize::MAX);
    assert_eq!(one, 1);
    let (split, many) = run(5);
    // 30 distinct keys are put, at most 5 (plus #seen) per batch.
    assert!(many >= 6, "{many} batches");
    assert_eq!(split, whole);
}
