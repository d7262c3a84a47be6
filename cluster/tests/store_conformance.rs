//! One suite, two stores: every test here runs against `FjallStore` on a real
//! temporary directory and against `MemoryStore`, so the simulator's store cannot
//! drift from the disk store's semantics.
//!
//! "Restart" means drop-and-reopen for fjall and `crash()` for memory: both keep
//! exactly what was made durable, which is all the tests assert after one.

#![allow(
    clippy::unwrap_used,
    reason = "a test: an unwrap that fails is a failure at its line"
)]

use bytes::Bytes;
use proptest::prelude::*;
use stablemq_cluster::{Entry, EventStore, FjallStore, LogPosition, MemoryStore, StoreError};

/// A store plus the means to restart it.
trait Harness {
    fn store(&mut self) -> &mut dyn EventStore;
    /// Restart, keeping (at least) everything made durable.
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
    // Declared before `dir` so the database closes before the directory goes.
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

fn read_all(store: &dyn EventStore) -> Vec<Entry> {
    store.read_from(1).unwrap()
}

fn empty_store_is_at_zero(h: &mut dyn Harness) {
    let s = h.store();
    assert_eq!(s.last_position(), LogPosition::ZERO);
    assert!(s.read_from(0).unwrap().is_empty());
    assert!(s.read_from(1).unwrap().is_empty());
    assert_eq!(s.promised_epoch(), 0);
    assert_eq!(s.stable_index(), 0);
    s.sync().unwrap();
    s.append(&[]).unwrap();
    assert_eq!(s.last_position(), LogPosition::ZERO);
}

fn append_then_read(h: &mut dyn Harness) {
    let s = h.store();
    s.append(&entries(1, 1..=3)).unwrap();
    s.append(&entries(1, 4..=4)).unwrap();
    s.append(&entries(2, 5..=10)).unwrap();
    assert_eq!(s.last_position(), LogPosition::new(2, 10));
    let mut all = entries(1, 1..=4);
    all.extend(entries(2, 5..=10));
    assert_eq!(s.read_from(1).unwrap(), all);
    assert_eq!(s.read_from(0).unwrap(), all);
    assert_eq!(s.read_from(5).unwrap(), all[4..]);
    assert_eq!(s.read_from(10).unwrap(), all[9..]);
    assert!(s.read_from(11).unwrap().is_empty());
    assert!(s.read_from(u64::MAX).unwrap().is_empty());
}

fn payload_bytes_are_kept_exactly(h: &mut dyn Harness) {
    let big: Vec<u8> = (0..1_048_576u32).map(|i| (i % 251) as u8).collect();
    let payloads = [
        Bytes::new(),
        Bytes::from_static(&[0, 255, 0, 10, 13]),
        Bytes::from(big),
    ];
    let batch: Vec<Entry> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| Entry {
            pos: LogPosition::new(1, i as u64 + 1),
            payload: p.clone(),
        })
        .collect();
    h.store().append(&batch).unwrap();
    h.store().sync().unwrap();
    h.restart();
    assert_eq!(read_all(h.store()), batch);
}

fn rejected_append_changes_nothing(h: &mut dyn Harness) {
    let s = h.store();
    s.append(&entries(2, 1..=3)).unwrap();
    let before = read_all(s);
    let gap = [Entry::new(2, 5, "x")];
    let repeat = [Entry::new(2, 3, "x")];
    let epoch_back = [Entry::new(1, 4, "x")];
    let bad_tail = [Entry::new(2, 4, "ok"), Entry::new(2, 6, "gap")];
    for bad in [&gap[..], &repeat, &epoch_back, &bad_tail] {
        let err = s.append(bad).unwrap_err();
        assert!(matches!(err, StoreError::OutOfOrder { .. }), "{err}");
        assert_eq!(read_all(s), before);
        assert_eq!(s.last_position(), LogPosition::new(2, 3));
    }
}

fn promised_epoch_fences_appends(h: &mut dyn Harness) {
    let s = h.store();
    s.set_promised_epoch(3).unwrap();
    assert_eq!(s.promised_epoch(), 3);
    let err = s.append(&entries(2, 1..=1)).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Fenced {
                promised: 3,
                got: 2
            }
        ),
        "{err}"
    );
    assert_eq!(s.last_position(), LogPosition::ZERO);
    s.append(&entries(3, 1..=1)).unwrap();
    // A later epoch than promised is accepted: the writer won an election this
    // store did not vote in.
    s.append(&entries(4, 2..=2)).unwrap();
    assert_eq!(s.last_position(), LogPosition::new(4, 2));
}

fn promised_epoch_never_goes_back_and_survives_restart(h: &mut dyn Harness) {
    h.store().set_promised_epoch(5).unwrap();
    h.store().set_promised_epoch(5).unwrap();
    let err = h.store().set_promised_epoch(4).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Fenced {
                promised: 5,
                got: 4
            }
        ),
        "{err}"
    );
    // Durable before return: no sync needed.
    h.restart();
    assert_eq!(h.store().promised_epoch(), 5);
}

fn stable_index_rules_and_persistence(h: &mut dyn Harness) {
    let s = h.store();
    s.append(&entries(1, 1..=5)).unwrap();
    s.set_stable_index(3).unwrap();
    assert_eq!(s.stable_index(), 3);
    s.set_stable_index(2).unwrap();
    assert_eq!(s.stable_index(), 3, "stable index never goes back");
    let err = s.set_stable_index(6).unwrap_err();
    assert!(matches!(err, StoreError::Misuse(_)), "{err}");
    assert_eq!(s.stable_index(), 3);
    s.sync().unwrap();
    h.restart();
    assert_eq!(h.store().stable_index(), 3);
    assert_eq!(read_all(h.store()), entries(1, 1..=5));
}

fn truncate_after_drops_the_suffix(h: &mut dyn Harness) {
    let s = h.store();
    s.append(&entries(1, 1..=10)).unwrap();
    s.truncate_after(20).unwrap();
    s.truncate_after(10).unwrap();
    assert_eq!(s.last_position(), LogPosition::new(1, 10));
    s.truncate_after(6).unwrap();
    assert_eq!(s.last_position(), LogPosition::new(1, 6));
    assert_eq!(read_all(s), entries(1, 1..=6));
    // The conflicting suffix is replaced by a later epoch's entries.
    s.append(&entries(2, 7..=8)).unwrap();
    assert_eq!(s.last_position(), LogPosition::new(2, 8));
    s.sync().unwrap();
    h.restart();
    let mut expected = entries(1, 1..=6);
    expected.extend(entries(2, 7..=8));
    assert_eq!(read_all(h.store()), expected);
}

fn truncate_is_durable_without_sync(h: &mut dyn Harness) {
    h.store().append(&entries(1, 1..=4)).unwrap();
    h.store().sync().unwrap();
    h.store().truncate_after(2).unwrap();
    h.restart();
    assert_eq!(read_all(h.store()), entries(1, 1..=2));
}

fn truncate_to_empty_and_restart(h: &mut dyn Harness) {
    h.store().append(&entries(1, 1..=3)).unwrap();
    h.store().truncate_after(0).unwrap();
    assert_eq!(h.store().last_position(), LogPosition::ZERO);
    h.store().append(&entries(2, 1..=1)).unwrap();
    h.store().sync().unwrap();
    h.restart();
    assert_eq!(read_all(h.store()), entries(2, 1..=1));
}

fn truncate_below_stable_is_refused(h: &mut dyn Harness) {
    let s = h.store();
    s.append(&entries(1, 1..=5)).unwrap();
    s.set_stable_index(4).unwrap();
    let err = s.truncate_after(3).unwrap_err();
    assert!(matches!(err, StoreError::Misuse(_)), "{err}");
    assert_eq!(s.last_position(), LogPosition::new(1, 5));
    s.truncate_after(4).unwrap();
    assert_eq!(s.last_position(), LogPosition::new(1, 4));
}

fn synced_entries_survive_restart(h: &mut dyn Harness) {
    for batch in 0..20u64 {
        h.store()
            .append(&entries(1, batch * 50 + 1..=batch * 50 + 50))
            .unwrap();
        h.store().sync().unwrap();
    }
    h.restart();
    assert_eq!(h.store().last_position(), LogPosition::new(1, 1000));
    assert_eq!(read_all(h.store()), entries(1, 1..=1000));
    // And the log continues where it left off.
    h.store().append(&entries(1, 1001..=1001)).unwrap();
}

fn append_as_checks_the_writer_epoch_not_the_entries(h: &mut dyn Harness) {
    let s = h.store();
    s.append(&entries(1, 1..=2)).unwrap();
    s.set_promised_epoch(3).unwrap();
    // The epoch-3 master re-replicates adopted epoch-1 entries, then its marker.
    let mut adopted = entries(1, 3..=4);
    adopted.extend(entries(3, 5..=5));
    s.append_as(3, &adopted).unwrap();
    assert_eq!(s.last_position(), LogPosition::new(3, 5));
    // `append` refuses the same kind of batch: it checks each entry's epoch.
    assert!(matches!(
        s.append(&entries(1, 6..=6)),
        Err(StoreError::Fenced {
            promised: 3,
            got: 1
        })
    ));
    // A deposed writer is fenced, even with entries of a new-looking epoch.
    let err = s.append_as(2, &entries(3, 6..=6)).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Fenced {
                promised: 3,
                got: 2
            }
        ),
        "{err}"
    );
    // An entry newer than its writer, a gap, or an epoch going back: refused.
    for (writer, bad) in [
        (3, entries(4, 6..=6)),
        (3, entries(3, 7..=7)),
        (3, entries(2, 6..=6)),
    ] {
        let err = s.append_as(writer, &bad).unwrap_err();
        assert!(matches!(err, StoreError::OutOfOrder { .. }), "{err}");
    }
    assert_eq!(s.last_position(), LogPosition::new(3, 5));
    // A writer above the promise: a master elected without this store's vote.
    s.append_as(5, &entries(4, 6..=6)).unwrap();
    s.append_as(5, &[]).unwrap();
    s.sync().unwrap();
    h.restart();
    let mut expected = entries(1, 1..=4);
    expected.extend(entries(3, 5..=5));
    expected.extend(entries(4, 6..=6));
    assert_eq!(read_all(h.store()), expected);
    assert_eq!(h.store().promised_epoch(), 3);
}

fn read_range_is_clamped_to_the_log(h: &mut dyn Harness) {
    let s = h.store();
    let mut all = entries(1, 1..=4);
    all.extend(entries(2, 5..=10));
    s.append(&all).unwrap();
    assert_eq!(s.read_range(3, 5).unwrap(), all[2..5]);
    assert_eq!(s.read_range(0, 2).unwrap(), all[..2]);
    assert_eq!(s.read_range(8, u64::MAX).unwrap(), all[7..]);
    assert_eq!(s.read_range(1, 10).unwrap(), all);
    assert!(s.read_range(11, 20).unwrap().is_empty());
    assert!(s.read_range(5, 4).unwrap().is_empty());
    assert!(s.read_range(0, 0).unwrap().is_empty());
    assert!(s.read_range(u64::MAX, u64::MAX).unwrap().is_empty());
}

/// A new disk has not joined and has an incarnation (never 0, the value of
/// a disk that predates incarnations); entries, a promise and the stable
/// index do not make it joined; `set_joined` does, durably, and nothing
/// changes its incarnation. A second new disk has a higher incarnation.
fn a_new_store_joins_only_when_told_and_durably(h: &mut dyn Harness) {
    let s = h.store();
    assert!(!s.joined());
    let incarnation = s.incarnation();
    assert!(incarnation > 0);
    s.set_promised_epoch(2).unwrap();
    s.append(&entries(2, 1..=2)).unwrap();
    s.sync().unwrap();
    s.set_stable_index(2).unwrap();
    s.sync().unwrap();
    h.restart();
    assert!(
        !h.store().joined(),
        "data alone does not make a new disk joined"
    );
    h.store().set_joined().unwrap();
    h.restart();
    let s = h.store();
    assert!(s.joined());
    assert_eq!(s.incarnation(), incarnation);
    s.set_joined().unwrap();
    assert!(s.joined());
    assert!(MemoryStore::new().incarnation() > incarnation);
    assert!(Fjall::new().store().incarnation() > incarnation);
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
    empty_store_is_at_zero,
    append_then_read,
    payload_bytes_are_kept_exactly,
    rejected_append_changes_nothing,
    promised_epoch_fences_appends,
    promised_epoch_never_goes_back_and_survives_restart,
    stable_index_rules_and_persistence,
    truncate_after_drops_the_suffix,
    truncate_is_durable_without_sync,
    truncate_to_empty_and_restart,
    truncate_below_stable_is_refused,
    synced_entries_survive_restart,
    append_as_checks_the_writer_epoch_not_the_entries,
    read_range_is_clamped_to_the_log,
    a_new_store_joins_only_when_told_and_durably,
);

/// fjall only: a clean drop (no explicit sync) keeps everything, because the
/// broker's orderly shutdown relies on it for the lazily written stable index.
#[test]
fn fjall_reopen_after_drop_keeps_unsynced_writes() {
    let mut h = Fjall::new();
    h.store().append(&entries(1, 1..=7)).unwrap();
    h.store().set_stable_index(7).unwrap();
    h.restart();
    assert_eq!(read_all(h.store()), entries(1, 1..=7));
    assert_eq!(h.store().stable_index(), 7);
}

#[derive(Debug, Clone)]
enum Op {
    /// `skew` shifts the first index off the correct one (0 = correct).
    Append {
        count: u64,
        epoch: u64,
        skew: i8,
    },
    /// The replicated store's write: checked against `writer`, not the entries.
    AppendAs {
        count: u64,
        epoch: u64,
        writer: u64,
        skew: i8,
    },
    Sync,
    Truncate(u64),
    Promise(u64),
    Stable(u64),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..4u64, 0..5u64, prop_oneof![4 => Just(0i8), 1 => -1..=1i8])
            .prop_map(|(count, epoch, skew)| Op::Append { count, epoch, skew }),
        3 => (0..4u64, 0..5u64, 0..6u64, prop_oneof![4 => Just(0i8), 1 => -1..=1i8])
            .prop_map(|(count, epoch, writer, skew)| Op::AppendAs { count, epoch, writer, skew }),
        2 => Just(Op::Sync),
        1 => (0..16u64).prop_map(Op::Truncate),
        1 => (0..6u64).prop_map(Op::Promise),
        1 => (0..16u64).prop_map(Op::Stable),
        1 => Just(Op::Restart),
    ]
}

/// Applies `op`; returns the error variant's name so two stores can be compared.
fn apply(h: &mut dyn Harness, op: &Op) -> Result<(), String> {
    let name = |e: StoreError| {
        format!("{e:?}")
            .split(['(', ' '])
            .next()
            .unwrap_or("")
            .to_owned()
    };
    let s = h.store();
    match op {
        Op::Append { count, epoch, skew } => {
            let first = s
                .last_position()
                .index
                .saturating_add_signed(i64::from(*skew))
                + 1;
            let batch: Vec<Entry> = (first..first + count)
                .map(|i| Entry::new(*epoch, i, format!("{epoch}/{i}")))
                .collect();
            s.append(&batch).map_err(name)
        }
        Op::AppendAs {
            count,
            epoch,
            writer,
            skew,
        } => {
            let first = s
                .last_position()
                .index
                .saturating_add_signed(i64::from(*skew))
                + 1;
            let batch: Vec<Entry> = (first..first + count)
                .map(|i| Entry::new(*epoch, i, format!("{epoch}/{i}")))
                .collect();
            s.append_as(*writer, &batch).map_err(name)
        }
        Op::Sync => s.sync().map_err(name),
        Op::Truncate(i) => s.truncate_after(*i).map_err(name),
        Op::Promise(e) => s.set_promised_epoch(*e).map_err(name),
        Op::Stable(i) => s.set_stable_index(*i).map_err(name),
        Op::Restart => {
            // Sync first: memory's crash() drops unsynced writes while fjall's
            // clean drop keeps them; only durable state is comparable.
            s.sync().map_err(name)?;
            h.restart();
            Ok(())
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Model-based: MemoryStore is the model; FjallStore must agree on every
    /// result and every observation, through restarts.
    #[test]
    fn fjall_behaves_like_memory(ops in proptest::collection::vec(op(), 1..40)) {
        let mut model = Memory(MemoryStore::new());
        let mut real = Fjall::new();
        for op in &ops {
            let expected = apply(&mut model, op);
            let got = apply(&mut real, op);
            prop_assert_eq!(&got, &expected, "op {:?}", op);
            let (m, r) = (model.store(), real.store());
            prop_assert_eq!(r.last_position(), m.last_position());
            prop_assert_eq!(r.promised_epoch(), m.promised_epoch());
            prop_assert_eq!(r.stable_index(), m.stable_index());
        }
        prop_assert_eq!(read_all(real.store()), read_all(model.store()));
    }
}
