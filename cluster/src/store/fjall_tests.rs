use super::super::fjall_log as records;
use super::super::fjall_meta::encode_position;
use super::super::fjall_state::state_options;
use super::*;
use records::tests::entries;

#[test]
fn a_new_disk_is_not_joined_and_joining_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let incarnation = {
        let mut store = FjallStore::open(dir.path()).unwrap();
        assert!(!store.joined());
        assert!(store.incarnation() > 0);
        store.set_joined().unwrap();
        store.incarnation()
    };
    let store = FjallStore::open(dir.path()).unwrap();
    assert!(store.joined());
    assert_eq!(store.incarnation(), incarnation);
    drop(store);
    // The disk is lost: a new one in its place has a newer incarnation.
    std::fs::remove_dir_all(dir.path()).unwrap();
    let store = FjallStore::open(dir.path()).unwrap();
    assert!(!store.joined());
    assert!(store.incarnation() > incarnation);
}

#[test]
fn a_disk_that_predates_the_flag_is_joined_if_it_holds_data() {
    let forget_identity = |store: &FjallStore| {
        store.meta.remove(JOINED_KEY).unwrap();
        store.meta.remove(INCARNATION_KEY).unwrap();
        store.db.persist(PersistMode::SyncAll).unwrap();
    };
    // Holding entries: joined, incarnation 0.
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = FjallStore::open(dir.path()).unwrap();
        store.append(&[Entry::new(1, 1, "x")]).unwrap();
        store.sync().unwrap();
        forget_identity(&store);
    }
    let store = FjallStore::open(dir.path()).unwrap();
    assert!(store.joined());
    assert_eq!(store.incarnation(), 0);
    drop(store);
    // Only a promise: joined too.
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = FjallStore::open(dir.path()).unwrap();
        store.set_promised_epoch(2).unwrap();
        forget_identity(&store);
    }
    assert!(FjallStore::open(dir.path()).unwrap().joined());
    // Holding nothing: as good as new, it must join.
    let dir = tempfile::tempdir().unwrap();
    {
        let store = FjallStore::open(dir.path()).unwrap();
        forget_identity(&store);
    }
    let store = FjallStore::open(dir.path()).unwrap();
    assert!(!store.joined());
    assert!(store.incarnation() > 0);
}

/// Writes `entries` into a fjall `log` keyspace as a store written before
/// segments existed did: records, or one key per entry (index alone, valued
/// epoch then payload) when `one_key_each`.
fn write_old_log(dir: &Path, entries: &[Entry], one_key_each: bool) {
    let db = Database::builder(dir).open().unwrap();
    let log = db
        .keyspace(LOG_KEYSPACE, KeyspaceCreateOptions::default)
        .unwrap();
    if one_key_each {
        for entry in entries {
            let mut value = entry.pos.epoch.to_be_bytes().to_vec();
            value.extend_from_slice(&entry.payload);
            log.insert(entry.pos.index.to_be_bytes(), value).unwrap();
        }
    } else {
        for run in entries.chunks(2) {
            let mut batch = db.batch();
            records::write_records(&mut batch, &log, run).unwrap();
            batch.commit().unwrap();
        }
    }
    db.persist(PersistMode::SyncAll).unwrap();
}

/// A data dir whose log is in fjall (both old layouts: one key per entry,
/// then records) opens with its log moved into segments, the `log`
/// keyspace gone, and goes on from there across restarts.
#[test]
fn a_log_in_fjall_is_moved_into_segments_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let old = entries(2, 1..=3);
    let newer = entries(3, 4..=7);
    write_old_log(dir.path(), &old, true);
    write_old_log(dir.path(), &newer, false);
    let mut all = old.clone();
    all.extend(newer);
    let mut store = FjallStore::open(dir.path()).unwrap();
    assert!(!store.db.keyspace_exists(LOG_KEYSPACE));
    assert!(dir.path().join(SEGMENTS_DIR).is_dir());
    assert!(store.joined());
    assert_eq!(store.last_position(), LogPosition::new(3, 7));
    assert_eq!(store.read_from(1).unwrap(), all);
    store.append(&entries(3, 8..=9)).unwrap();
    store.sync().unwrap();
    store.truncate_after(2).unwrap();
    drop(store);
    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(store.read_from(1).unwrap(), all[..2].to_vec());
}

/// A hole in an old fjall log (a crash lost part of an unsynced batch):
/// only the run before it is moved.
#[test]
fn a_gap_in_an_old_log_is_cut_when_it_is_moved() {
    let dir = tempfile::tempdir().unwrap();
    let mut written = entries(1, 1..=2);
    written.extend(entries(1, 4..=5));
    write_old_log(dir.path(), &written, false);
    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(store.last_position(), LogPosition::new(1, 2));
    assert_eq!(store.read_from(1).unwrap(), entries(1, 1..=2));
}

/// A crash during the move (the segments half built) starts it over.
#[test]
fn a_move_cut_short_by_a_crash_starts_over() {
    let dir = tempfile::tempdir().unwrap();
    write_old_log(dir.path(), &entries(1, 1..=4), false);
    let tmp = dir.path().join(MIGRATING_DIR);
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::write(tmp.join("00000000000000000001.seg"), b"half").unwrap();
    let store = FjallStore::open(dir.path()).unwrap();
    assert!(!tmp.exists());
    assert_eq!(store.read_from(1).unwrap(), entries(1, 1..=4));
}

/// A damaged record the store synced long ago (in a segment that newer
/// ones follow) is corruption, not a torn tail: the store refuses to open.
#[test]
fn a_damaged_synced_record_fails_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = FjallStore::open(dir.path()).unwrap();
        store.append(&entries(1, 1..=2)).unwrap();
        store.sync().unwrap();
        store.set_stable_index(1).unwrap();
        // A truncation starts a new segment.
        store.truncate_after(1).unwrap();
        store.append(&entries(1, 2..=3)).unwrap();
        store.sync().unwrap();
    }
    let first = dir
        .path()
        .join(SEGMENTS_DIR)
        .join("00000000000000000001.seg");
    let mut bytes = std::fs::read(&first).unwrap();
    // A bit of the first record's first payload.
    bytes[super::super::segment_record::SEGMENT_HEADER + 32 + 12] ^= 1;
    std::fs::write(&first, bytes).unwrap();
    assert!(matches!(
        FjallStore::open(dir.path()),
        Err(StoreError::Corrupt(_))
    ));
}

/// Truncating inside a record keeps its head, across a restart.
#[test]
fn truncating_inside_a_record_keeps_its_head() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = FjallStore::open(dir.path()).unwrap();
        store.append(&entries(1, 1..=6)).unwrap();
        store.sync().unwrap();
        store.truncate_after(3).unwrap();
        assert_eq!(store.last_position(), LogPosition::new(1, 3));
        store.set_promised_epoch(2).unwrap();
        store.append(&entries(2, 4..=5)).unwrap();
        store.sync().unwrap();
    }
    let store = FjallStore::open(dir.path()).unwrap();
    let mut expected = entries(1, 1..=3);
    expected.extend(entries(2, 4..=5));
    assert_eq!(store.read_from(1).unwrap(), expected);
    assert_eq!(store.read_range(3, 4).unwrap(), expected[2..4].to_vec());
}

/// A snapshot install persists the new base, then resets a log that does
/// not continue it; a crash in between is finished by the next open.
#[test]
fn an_install_cut_short_before_the_log_reset_is_finished_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let base = LogPosition::new(2, 3);
    {
        let mut store = FjallStore::open(dir.path()).unwrap();
        store.append(&entries(1, 1..=5)).unwrap();
        store.sync().unwrap();
        // What `install_state` writes to fjall before it resets the log.
        store
            .meta
            .insert(LOG_BASE_KEY, encode_position(base))
            .unwrap();
        store
            .meta
            .insert(STATE_INDEX_KEY, base.index.to_be_bytes())
            .unwrap();
        store.db.persist(PersistMode::SyncAll).unwrap();
    }
    let mut store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(store.log_base(), base);
    assert_eq!(store.last_position(), base);
    assert_eq!(store.stable_index(), 3);
    store.append(&entries(2, 4..=4)).unwrap();
    store.sync().unwrap();
    drop(store);
    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(store.read_from(4).unwrap(), entries(2, 4..=4));
}

/// The state keyspaces on disk, by name, sorted.
pub(super) fn state_keyspaces(store: &FjallStore) -> Vec<String> {
    let mut names: Vec<String> = store
        .db
        .list_keyspace_names()
        .iter()
        .map(|n| {
            let n: &str = n.as_ref();
            n.to_owned()
        })
        .filter(|n| n.starts_with(STATE_KEYSPACE))
        .collect();
    names.sort();
    names
}

/// Materializes `pairs` (state index 1) into a store holding one entry.
pub(super) fn store_with_state(dir: &std::path::Path, pairs: &[(&str, &str)]) -> FjallStore {
    let mut store = FjallStore::open(dir).unwrap();
    store.append(&entries(1, 1..=1)).unwrap();
    store.sync().unwrap();
    store.set_stable_index(1).unwrap();
    let mut batch = StateBatch::new(1);
    for (key, value) in pairs {
        batch.ops.insert(
            Bytes::from(key.to_string()),
            MergedOp::Put(Bytes::from(value.to_string())),
        );
    }
    store.materialize(&batch).unwrap();
    store.sync().unwrap();
    store
}

#[test]
fn a_staged_state_is_its_own_keyspace_and_open_drops_every_stale_one() {
    let dir = tempfile::tempdir().unwrap();
    let base = LogPosition::new(1, 3);
    {
        let mut store = store_with_state(dir.path(), &[("k", "old")]);
        store.append(&entries(1, 2..=5)).unwrap();
        store.set_stable_index(5).unwrap();
        store
            .stage_state(base, true, &[(Bytes::from("k"), Bytes::from("v"))])
            .unwrap();
        assert_eq!(state_keyspaces(&store), ["state.0.6b", "state.1.6b"]);
        store.sync().unwrap();
    }
    // Reopened mid-transfer: the staged keyspace goes, the live one stays.
    let mut store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(state_keyspaces(&store), ["state.0.6b"]);
    assert_eq!(store.state_get(b"k").unwrap(), Some(Bytes::from("old")));
    store
        .stage_state(base, true, &[(Bytes::from("k"), Bytes::from("v"))])
        .unwrap();
    store.install_staged(base).unwrap();
    // The switch deletes the old state once the new one is durable.
    assert_eq!(state_keyspaces(&store), ["state.1.6b"]);
    assert_eq!(store.state_get(b"k").unwrap(), Some(Bytes::from("v")));
    // A crash between the switch and the deletion leaves the old keyspace:
    // open drops it, as meta names the new one.
    let old = store.db.keyspace("state.0.6f", state_options).unwrap();
    old.insert("old", "x").unwrap();
    store.sync().unwrap();
    store.db.persist(PersistMode::SyncAll).unwrap();
    drop(old);
    drop(store);
    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(state_keyspaces(&store), ["state.1.6b"]);
    assert_eq!(store.state_get(b"k").unwrap(), Some(Bytes::from("v")));
    assert_eq!(store.state_get(b"old").unwrap(), None);
    assert_eq!(store.log_base(), base);
}

/// A written key is fjall's own copy: a reducer cuts keys from shared
/// chunks, most of them for entries never written, and a memtable holding a
/// slice kept its whole chunk alive until its flush (the cluster soak's heap
/// growth, docs/reliability.md). A value is kept as given: its chunk holds
/// written values only.
#[test]
fn materialized_keys_do_not_hold_the_reducers_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = FjallStore::open(dir.path()).unwrap();
    store.append(&entries(1, 1..=2)).unwrap();
    store.sync().unwrap();
    store.set_stable_index(2).unwrap();
    let keys = Bytes::from(vec![7u8; 16 * 1024]);
    let key = keys.slice(0..16);
    let mut batch = StateBatch::new(2);
    batch
        .ops
        .insert(key.clone(), MergedOp::Put(Bytes::from(vec![9u8; 1024])));
    store.materialize(&batch).unwrap();
    drop((batch, key));
    assert!(keys.is_unique(), "the memtable still holds the key chunk");
    assert_eq!(
        store.state_get(&[7u8; 16]).unwrap().as_deref(),
        Some(&[9u8; 1024][..])
    );
}

/// Bodies of 1 KiB and more, flushed to the state's tables: a snapshot
/// transfer in chunks reads them back whole, an install writes them to the
/// new state, and both survive a reopen; deleting some leaves the others
/// readable.
#[test]
fn flushed_bodies_survive_a_snapshot_transfer_an_install_and_a_reopen() {
    let body = |i: u32| Bytes::from(vec![(i % 251) as u8; 1024 + i as usize]);
    let key = |i: u32| Bytes::from(format!("m{i:05}"));
    let (from, to) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut source = FjallStore::open(from.path()).unwrap();
    source.append(&entries(1, 1..=3)).unwrap();
    source.sync().unwrap();
    source.set_stable_index(3).unwrap();
    let mut batch = StateBatch::new(3);
    for i in 0..300 {
        batch.ops.insert(key(i), MergedOp::Put(body(i)));
    }
    batch
        .ops
        .insert(Bytes::from("small"), MergedOp::Put(Bytes::from("v")));
    source.materialize(&batch).unwrap();
    source.sync().unwrap();
    let messages = |store: &FjallStore| store.state.of_key(b"m").unwrap().clone();
    messages(&source).rotate_memtable_and_wait().unwrap();
    assert!(
        messages(&source).table_count() > 0,
        "the flush wrote a table"
    );
    // The transfer, in chunks of about 64 KiB, as a slave's store gets it.
    let snapshot = source.state_snapshot().unwrap();
    let base = snapshot.base();
    let mut target = FjallStore::open(to.path()).unwrap();
    transfer(&*snapshot, &mut target, 64 * 1024);
    drop(snapshot);
    messages(&target).rotate_memtable_and_wait().unwrap();
    assert!(messages(&target).table_count() > 0);
    // Deletes in the source, then both reopened.
    let mut deletes = StateBatch::new(3);
    for i in 0..150 {
        deletes.ops.insert(key(i), MergedOp::Delete);
    }
    source.materialize(&deletes).unwrap();
    source.sync().unwrap();
    drop((source, target));
    let (source, target) = (
        FjallStore::open(from.path()).unwrap(),
        FjallStore::open(to.path()).unwrap(),
    );
    for i in 0..300 {
        assert_eq!(target.state_get(&key(i)).unwrap(), Some(body(i)), "{i}");
        let kept = (i >= 150).then(|| body(i));
        assert_eq!(source.state_get(&key(i)).unwrap(), kept, "{i}");
    }
    assert_eq!(target.state_get(b"small").unwrap(), Some(Bytes::from("v")));
    assert_eq!(target.log_base(), base);
}

/// `snapshot` staged into `target` in chunks of about `chunk_bytes`, as a
/// slave's store gets it, then installed.
pub(super) fn transfer(
    snapshot: &dyn crate::store::StateSnapshot,
    target: &mut FjallStore,
    chunk_bytes: usize,
) {
    let base = snapshot.base();
    let (mut after, mut first) = (None::<Bytes>, true);
    loop {
        let (pairs, done) = snapshot.chunk(after.as_deref(), chunk_bytes).unwrap();
        target.stage_state(base, first, &pairs).unwrap();
        first = false;
        after = pairs.last().map(|(k, _)| k.clone());
        if done {
            break;
        }
    }
    target.install_staged(base).unwrap();
}
