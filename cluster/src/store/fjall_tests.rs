use super::records::tests::entries;
use super::*;

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

#[test]
fn gap_is_truncated_on_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = FjallStore::open(dir.path()).unwrap();
        // Three records: 1..=2, 3, 4..=5.
        store.append(&entries(1, 1..=2)).unwrap();
        store.append(&entries(1, 3..=3)).unwrap();
        store.append(&entries(1, 4..=5)).unwrap();
        store.sync().unwrap();
        // Punch a hole behind the store's back, as a lost write would.
        store.log.remove(records::record_key(3, 3)).unwrap();
        store.db.persist(PersistMode::SyncAll).unwrap();
    }
    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(store.last_position(), LogPosition::new(1, 2));
    assert_eq!(store.read_from(1).unwrap(), entries(1, 1..=2));
    assert!(store.log.get(records::record_key(4, 5)).unwrap().is_none());
}

#[test]
fn corrupt_entry_fails_open_or_read() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = FjallStore::open(dir.path()).unwrap();
        store.append(&entries(1, 1..=1)).unwrap();
        store.append(&entries(1, 2..=2)).unwrap();
        store.sync().unwrap();
        store
            .log
            .insert(records::record_key(2, 2), [1u8, 2, 3])
            .unwrap();
        store.db.persist(PersistMode::SyncAll).unwrap();
    }
    match FjallStore::open(dir.path()) {
        Err(StoreError::Corrupt(_)) => {}
        Ok(store) => assert!(matches!(store.read_from(1), Err(StoreError::Corrupt(_)))),
        Err(other) => panic!("expected Corrupt, got {other}"),
    }
}

/// A data dir written before records existed (one key per entry, the
/// index alone, valued epoch then payload) opens and reads as before,
/// and records appended after its entries read together with them.
#[test]
fn a_log_of_one_key_per_entry_still_opens_and_continues() {
    let dir = tempfile::tempdir().unwrap();
    let old = entries(2, 1..=3);
    {
        let store = FjallStore::open(dir.path()).unwrap();
        for entry in &old {
            let mut value = entry.pos.epoch.to_be_bytes().to_vec();
            value.extend_from_slice(&entry.payload);
            store
                .log
                .insert(entry.pos.index.to_be_bytes(), value)
                .unwrap();
        }
        store.db.persist(PersistMode::SyncAll).unwrap();
    }
    let mut store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(store.last_position(), LogPosition::new(2, 3));
    assert_eq!(store.read_from(1).unwrap(), old);
    store.append(&entries(3, 4..=6)).unwrap();
    store.sync().unwrap();
    let mut all = old.clone();
    all.extend(entries(3, 4..=6));
    assert_eq!(store.read_range(2, 5).unwrap(), all[1..5].to_vec());
    // A suffix cut through the record and across the old keys.
    store.truncate_after(2).unwrap();
    assert_eq!(store.last_position(), LogPosition::new(2, 2));
    drop(store);
    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(store.read_from(1).unwrap(), all[..2].to_vec());
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

/// The state keyspaces on disk, by name, sorted.
fn state_keyspaces(store: &FjallStore) -> Vec<String> {
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

#[test]
fn a_staged_state_is_its_own_keyspace_and_open_drops_every_stale_one() {
    let dir = tempfile::tempdir().unwrap();
    let base = LogPosition::new(1, 3);
    {
        let mut store = FjallStore::open(dir.path()).unwrap();
        store.append(&entries(1, 1..=5)).unwrap();
        store.set_stable_index(5).unwrap();
        store
            .stage_state(base, true, &[(Bytes::from("k"), Bytes::from("v"))])
            .unwrap();
        assert_eq!(state_keyspaces(&store), ["state", "state.1"]);
        store.sync().unwrap();
    }
    // Reopened mid-transfer: the staged keyspace goes, the live one stays.
    let mut store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(state_keyspaces(&store), ["state"]);
    store
        .stage_state(base, true, &[(Bytes::from("k"), Bytes::from("v"))])
        .unwrap();
    store.install_staged(base).unwrap();
    // The switch deletes the old state once the new one is durable.
    assert_eq!(state_keyspaces(&store), ["state.1"]);
    assert_eq!(store.state_get(b"k").unwrap(), Some(Bytes::from("v")));
    // A crash between the switch and the deletion leaves the old keyspace:
    // open drops it, as meta names the new one.
    let old = store.db.keyspace("state", state_options).unwrap();
    old.insert("old", "x").unwrap();
    store.sync().unwrap();
    store.db.persist(PersistMode::SyncAll).unwrap();
    drop(old);
    drop(store);
    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(state_keyspaces(&store), ["state.1"]);
    assert_eq!(store.state_get(b"k").unwrap(), Some(Bytes::from("v")));
    assert_eq!(store.log_base(), base);
}
