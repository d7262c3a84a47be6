//! [`FjallStore`]'s state layout: a keyspace per tag and per sequence, read
//! as one state in key order; the split of a state kept in one keyspace.

use super::super::fjall_log::tests::entries;
use super::super::fjall_state::state_options;
use super::tests::{state_keyspaces, store_with_state, transfer};
use super::*;

/// Every pair of `store`'s state, read a page of `page` pairs at a time.
fn paged(store: &FjallStore, prefix: &[u8], page: usize) -> Vec<(Bytes, Bytes)> {
    let (mut out, mut after) = (Vec::new(), None::<Bytes>);
    loop {
        let got = store
            .state_scan_page(prefix, after.as_deref(), page)
            .unwrap();
        let Some((last, _)) = got.last() else {
            return out;
        };
        after = Some(last.clone());
        out.extend(got);
    }
}

fn pairs(list: &[(&str, &str)]) -> Vec<(Bytes, Bytes)> {
    list.iter()
        .map(|(k, v)| (Bytes::from(k.to_string()), Bytes::from(v.to_string())))
        .collect()
}

/// Each tag (a key's first byte) has a keyspace of its own, and every read
/// (a point, a prefix, pages across tags, a snapshot in chunks) sees the
/// state in key order as one keyspace would; a delete by prefix reaches
/// every keyspace the prefix covers.
#[test]
fn the_state_is_a_keyspace_per_tag_read_in_key_order() {
    let dir = tempfile::tempdir().unwrap();
    let all = [
        ("d1", "def"),
        ("m\x00a1", "a1"),
        ("m\x00a2", "a2"),
        ("m\x00b1", "b1"),
        ("t1", "t"),
        ("x", "max"),
    ];
    let mut store = store_with_state(dir.path(), &all);
    assert_eq!(
        state_keyspaces(&store),
        ["state.0.64", "state.0.6d", "state.0.74", "state.0.78"]
    );
    assert_eq!(store.state_get(b"x").unwrap(), Some(Bytes::from("max")));
    assert_eq!(store.state_get(b"y").unwrap(), None);
    assert_eq!(store.state_get(b"").unwrap(), None);
    assert_eq!(store.state_scan(b"").unwrap(), pairs(&all));
    assert_eq!(store.state_scan(b"m\x00a").unwrap(), pairs(&all[1..3]));
    for page in 1..=4 {
        assert_eq!(paged(&store, b"", page), pairs(&all), "pages of {page}");
        assert_eq!(
            paged(&store, b"m", page),
            pairs(&all[1..4]),
            "pages of {page}"
        );
    }
    // An `after` before the prefix starts at the prefix.
    assert_eq!(
        store.state_scan_page(b"m\x00b", Some(b"d"), 10).unwrap(),
        pairs(&all[3..4])
    );
    // A snapshot in chunks of one pair and of many.
    let snapshot = store.state_snapshot().unwrap();
    for max_bytes in [1, 10, 1 << 20] {
        let (mut got, mut after) = (Vec::new(), None::<Bytes>);
        loop {
            let (chunk, done) = snapshot.chunk(after.as_deref(), max_bytes).unwrap();
            after = chunk.last().map(|(k, _)| k.clone()).or(after);
            got.extend(chunk);
            if done {
                break;
            }
        }
        assert_eq!(got, pairs(&all), "chunks of {max_bytes} bytes");
    }
    // Deletes by prefix, written after the snapshot, which still sees all.
    store.append(&entries(1, 2..=3)).unwrap();
    store.sync().unwrap();
    store.set_stable_index(3).unwrap();
    let mut batch = StateBatch::new(2);
    batch.delete_prefixes.push(Bytes::from("m\x00a"));
    store.materialize(&batch).unwrap();
    assert_eq!(store.state_scan(b"m").unwrap(), pairs(&all[3..4]));
    let mut batch = StateBatch::new(3);
    batch.delete_prefixes.push(Bytes::new());
    store.materialize(&batch).unwrap();
    assert_eq!(store.state_scan(b"").unwrap(), Vec::new());
    let (chunk, done) = snapshot.chunk(None, 1 << 20).unwrap();
    assert!(done);
    assert_eq!(chunk, pairs(&all));
    // An empty key has no tag and no keyspace to go to.
    let mut batch = StateBatch::new(3);
    batch
        .ops
        .insert(Bytes::new(), MergedOp::Put(Bytes::from("v")));
    assert!(matches!(
        store.materialize(&batch),
        Err(StoreError::Misuse(_))
    ));
}

/// Turns `dir`'s store back into the layout of a store written before
/// 2026-12-06: its whole state in the keyspace `state`, no `state_split`.
fn unsplit(dir: &std::path::Path) {
    let db = fjall::Database::builder(dir).open().unwrap();
    let meta = db
        .keyspace("meta", fjall::KeyspaceCreateOptions::default)
        .unwrap();
    let old = db.keyspace("state", state_options).unwrap();
    let names: Vec<String> = db
        .list_keyspace_names()
        .iter()
        .map(|n| {
            let n: &str = n.as_ref();
            n.to_owned()
        })
        .filter(|n| n.starts_with("state.0."))
        .collect();
    for name in names {
        let space = db.keyspace(&name, state_options).unwrap();
        for guard in space.iter() {
            let (key, value) = guard.into_inner().unwrap();
            old.insert(key, value).unwrap();
        }
        db.delete_keyspace(space).unwrap();
    }
    meta.remove(super::STATE_SPLIT_KEY).unwrap();
    db.persist(PersistMode::SyncAll).unwrap();
}

/// A store whose state is in one keyspace (written before the split) is
/// split by its first open, into the next generation; a split a crash cut
/// short (the copy half made, `meta` not yet switched) is made again.
#[test]
fn a_state_kept_in_one_keyspace_is_split_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let all = [("d1", "def"), ("m1", "one"), ("m2", "two"), ("x", "max")];
    drop(store_with_state(dir.path(), &all));
    unsplit(dir.path());
    {
        // A copy a crash cut short: a keyspace of the next generation,
        // holding a pair the old state does not have.
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let half = db.keyspace("state.1.6d", state_options).unwrap();
        half.insert("m9", "stale").unwrap();
        db.persist(PersistMode::SyncAll).unwrap();
    }
    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(
        state_keyspaces(&store),
        ["state.1.64", "state.1.6d", "state.1.78"]
    );
    assert_eq!(store.state_scan(b"").unwrap(), pairs(&all));
    assert_eq!(store.state_index(), 1);
    drop(store);
    // Split once: the next open finds the same generation and state.
    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(
        state_keyspaces(&store),
        ["state.1.64", "state.1.6d", "state.1.78"]
    );
    assert_eq!(store.state_scan(b"").unwrap(), pairs(&all));
}

/// The key of entry `position` of sequence `name` (tag 0xf3).
fn seq_key(name: &str, position: u64) -> Bytes {
    let mut key = vec![0xf3];
    key.extend_from_slice(name.as_bytes());
    key.extend_from_slice(&position.to_be_bytes());
    Bytes::from(key)
}

/// Materializes one batch of `ops` and `delete_prefixes` at the next index.
fn materialize_next(store: &mut FjallStore, ops: &[(Bytes, MergedOp)], delete_prefixes: &[&[u8]]) {
    let index = store.state_index() + 1;
    store.append(&entries(1, index..=index)).unwrap();
    store.sync().unwrap();
    store.set_stable_index(index).unwrap();
    let mut batch = StateBatch::new(index);
    for (key, op) in ops {
        batch.ops.insert(key.clone(), op.clone());
    }
    for prefix in delete_prefixes {
        batch.delete_prefixes.push(Bytes::copy_from_slice(prefix));
    }
    store.materialize(&batch).unwrap();
    store.sync().unwrap();
}

/// Each sequence (keys of a tag from 0x80 on, less their last 8 bytes) has
/// a keyspace of its own, named in `meta`; reads see one state in key
/// order; a delete by a prefix that covers a sequence drops its keyspace
/// and its name, and a deletion a crash interrupted (the name gone, the
/// keyspace not yet) is finished by the next open.
#[test]
fn each_sequence_is_a_keyspace_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store_with_state(dir.path(), &[("m1", "classic"), ("x", "max")]);
    let put = |key: Bytes| (key.clone(), MergedOp::Put(key));
    let ops: Vec<_> = ["b", "a", "c"]
        .iter()
        .flat_map(|name| (1..=3).map(move |p| seq_key(name, p)))
        .map(put)
        .collect();
    materialize_next(&mut store, &ops, &[]);
    assert_eq!(
        state_keyspaces(&store),
        [
            "state.0.6d",
            "state.0.78",
            "state.0.f3.1",
            "state.0.f3.2",
            "state.0.f3.3"
        ]
    );
    let mut want: Vec<(Bytes, Bytes)> = ops.iter().map(|(k, _)| (k.clone(), k.clone())).collect();
    want.sort();
    let all = store.state_scan(b"").unwrap();
    assert_eq!(all[..2], pairs(&[("m1", "classic"), ("x", "max")])[..]);
    assert_eq!(all[2..], want[..]);
    for page in [1, 2, 4] {
        assert_eq!(paged(&store, b"", page), all, "pages of {page}");
        assert_eq!(paged(&store, &[0xf3], page), want, "pages of {page}");
    }
    assert_eq!(store.state_scan(b"\xf3b").unwrap(), want[3..6]);
    assert_eq!(
        store.state_get(&seq_key("c", 2)).unwrap(),
        Some(seq_key("c", 2))
    );
    let snapshot = store.state_snapshot().unwrap();
    // Entry 1 of `a` goes, then all of `b`; a key too short for a
    // sequence is refused.
    materialize_next(
        &mut store,
        &[(seq_key("a", 1), MergedOp::Delete)],
        &[b"\xf3b"],
    );
    assert_eq!(
        state_keyspaces(&store),
        ["state.0.6d", "state.0.78", "state.0.f3.1", "state.0.f3.3"]
    );
    assert_eq!(
        store.state_scan(&[0xf3]).unwrap(),
        [&want[1..3], &want[6..]].concat()
    );
    let mut batch = StateBatch::new(store.state_index());
    batch.ops.insert(
        Bytes::from_static(b"\xf3short"),
        MergedOp::Put(Bytes::new()),
    );
    assert!(matches!(
        store.materialize(&batch),
        Err(StoreError::Misuse(_))
    ));
    // The snapshot taken before still reads everything.
    let (chunk, done) = snapshot.chunk(None, 1 << 20).unwrap();
    assert!(done);
    assert_eq!(chunk, all);
    drop(snapshot);

    // A stream declared again: a new keyspace under the same name.
    materialize_next(&mut store, &[put(seq_key("b", 7))], &[]);
    assert_eq!(
        store.state_scan(b"\xf3b").unwrap(),
        [(seq_key("b", 7), seq_key("b", 7))]
    );
    drop(store);
    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(
        state_keyspaces(&store),
        [
            "state.0.6d",
            "state.0.78",
            "state.0.f3.1",
            "state.0.f3.3",
            "state.0.f3.4"
        ]
    );
    assert_eq!(
        store.state_scan(b"\xf3b").unwrap(),
        [(seq_key("b", 7), seq_key("b", 7))]
    );
    // A deletion cut short: the name left `meta`, the keyspace stayed.
    store.meta.remove("seq.0.1").unwrap();
    store.db.persist(PersistMode::SyncAll).unwrap();
    drop(store);
    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(
        state_keyspaces(&store),
        ["state.0.6d", "state.0.78", "state.0.f3.3", "state.0.f3.4"]
    );
    assert!(store.state_scan(b"\xf3a").unwrap().is_empty());
}

/// A snapshot transfer carries sequences like any pairs; the receiving
/// store files them under sequences of its own, and after the install
/// `meta` names only the new generation's.
#[test]
fn sequences_go_through_a_snapshot_transfer() {
    let (from, to) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut source = store_with_state(from.path(), &[("d1", "def")]);
    let ops: Vec<_> = (1..=50)
        .map(|p| {
            (
                seq_key(if p % 2 == 0 { "even" } else { "odd" }, p),
                MergedOp::Put(Bytes::from(vec![7u8; 100])),
            )
        })
        .collect();
    materialize_next(&mut source, &ops, &[]);
    let mut target = store_with_state(to.path(), &[("t", "old")]);
    materialize_next(
        &mut target,
        &[(seq_key("old", 1), MergedOp::Put(Bytes::from("x")))],
        &[],
    );
    let snapshot = source.state_snapshot().unwrap();
    transfer(&*snapshot, &mut target, 512);
    assert_eq!(
        target.state_scan(b"").unwrap(),
        source.state_scan(b"").unwrap()
    );
    drop(target);
    let target = FjallStore::open(to.path()).unwrap();
    assert_eq!(
        target.state_scan(b"").unwrap(),
        source.state_scan(b"").unwrap()
    );
    assert_eq!(
        state_keyspaces(&target),
        ["state.1.64", "state.1.f3.1", "state.1.f3.2"]
    );
    let names: Vec<Bytes> = target
        .meta
        .prefix("seq.")
        .map(|g| Bytes::copy_from_slice(&g.key().unwrap()))
        .collect();
    assert_eq!(names, [Bytes::from("seq.1.1"), Bytes::from("seq.1.2")]);
}

/// Many sequences, none filling a memtable: fjall would flush none of them
/// (it caps its journal only when it flushes), so the store seals the
/// largest once the unsealed ones hold more than two memtables' worth
/// together, and what they hold stays bounded however many there are.
#[test]
fn memtables_of_many_small_sequences_are_sealed_together() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store_with_state(dir.path(), &[("x", "max")]);
    let cap = 2 * super::MEMTABLE_BYTES_MAX;
    let body = Bytes::from(vec![5u8; 64 * 1024]);
    let mut peak = 0;
    for round in 0..4u64 {
        let ops: Vec<_> = (0..200)
            .flat_map(|s| (0..4).map(move |p| (s, round * 4 + p)))
            .map(|(s, p)| (seq_key(&format!("s{s:03}"), p), MergedOp::Put(body.clone())))
            .collect();
        materialize_next(&mut store, &ops, &[]);
        peak = peak.max(store.state.active_bytes());
    }
    // 200 sequences of 1 MiB each: 200 MiB written, far more than the cap.
    assert!(peak <= cap, "unsealed memtables held {peak} bytes");
    assert_eq!(
        paged(&store, b"\xf3s199", 100).len(),
        16,
        "every entry of the last sequence is still read"
    );
}
