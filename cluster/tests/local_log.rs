//! LocalLog behaviour: group commit, the stable callback, recovery, shutdown,
//! and failure. No test measures time: where the interleaving matters, a gate in
//! the store makes it deterministic.

#![allow(
    clippy::unwrap_used,
    reason = "a test: an unwrap that fails is a failure at its line"
)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use bytes::Bytes;
use stablemq_cluster::{
    Entry, EventStore, FjallStore, LocalLog, LogPosition, MemoryStore, StoreError,
};

/// What a `ProbeStore` saw, shared with the test.
#[derive(Default)]
struct Probe {
    /// Entries covered by each sync that covered any (the group-commit batches).
    batches: Mutex<Vec<usize>>,
}

/// Wraps a store to observe syncs, hold the first batch's sync until released,
/// or fail a chosen sync.
struct ProbeStore {
    inner: Box<dyn EventStore>,
    probe: Arc<Probe>,
    /// Entries appended since the last sync.
    pending: usize,
    /// The first sync with entries waits here until the test sends or hangs up.
    gate: Option<mpsc::Receiver<()>>,
    /// Fail the n-th sync with entries (1-based).
    fail_batch: Option<usize>,
}

impl ProbeStore {
    fn new(inner: impl EventStore) -> (Self, Arc<Probe>) {
        let probe = Arc::new(Probe::default());
        let store = ProbeStore {
            inner: Box::new(inner),
            probe: probe.clone(),
            pending: 0,
            gate: None,
            fail_batch: None,
        };
        (store, probe)
    }
}

impl EventStore for ProbeStore {
    fn joined(&self) -> bool {
        self.inner.joined()
    }
    fn incarnation(&self) -> u64 {
        self.inner.incarnation()
    }
    fn set_joined(&mut self) -> Result<(), StoreError> {
        self.inner.set_joined()
    }
    fn append(&mut self, entries: &[Entry]) -> Result<(), StoreError> {
        self.inner.append(entries)?;
        self.pending += entries.len();
        Ok(())
    }
    fn sync(&mut self) -> Result<(), StoreError> {
        if self.pending > 0 {
            if let Some(gate) = self.gate.take() {
                let _ = gate.recv();
            }
            let mut batches = self.probe.batches.lock().unwrap();
            batches.push(self.pending);
            if self.fail_batch == Some(batches.len()) {
                return Err(StoreError::Io(std::io::Error::other(
                    "injected fsync failure",
                )));
            }
        }
        self.pending = 0;
        self.inner.sync()
    }
    fn last_position(&self) -> LogPosition {
        self.inner.last_position()
    }
    fn read_from(&self, from: u64) -> Result<Vec<Entry>, StoreError> {
        self.inner.read_from(from)
    }
    fn truncate_after(&mut self, index: u64) -> Result<(), StoreError> {
        self.inner.truncate_after(index)
    }
    fn promised_epoch(&self) -> u64 {
        self.inner.promised_epoch()
    }
    fn set_promised_epoch(&mut self, epoch: u64) -> Result<(), StoreError> {
        self.inner.set_promised_epoch(epoch)
    }
    fn stable_index(&self) -> u64 {
        self.inner.stable_index()
    }
    fn set_stable_index(&mut self, index: u64) -> Result<(), StoreError> {
        self.inner.set_stable_index(index)
    }
}

/// Records every `on_stable` call.
fn recorder() -> (Arc<Mutex<Vec<u64>>>, impl Fn(u64) + Send + 'static) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let sink = calls.clone();
    (calls, move |i| sink.lock().unwrap().push(i))
}

fn no_error(err: StoreError) {
    panic!("unexpected store error: {err}");
}

fn payload(i: u64) -> Bytes {
    Bytes::from(format!("event {i} ").repeat(8))
}

fn assert_strictly_increasing(calls: &[u64]) {
    assert!(
        calls.windows(2).all(|w| w[0] < w[1]),
        "on_stable not strictly increasing: {calls:?}"
    );
}

#[test]
fn group_commit_batches_a_backlog_into_few_fsyncs() {
    let (mut store, probe) = ProbeStore::new(MemoryStore::new());
    let (release, gate) = mpsc::channel();
    store.gate = Some(gate);
    let (calls, on_stable) = recorder();
    let (mut log, _) = LocalLog::open(Box::new(store), on_stable, no_error).unwrap();

    // The first batch's fsync is held until all 10,000 are queued, so everything
    // after it is already waiting when the thread drains the channel.
    for i in 1..=10_000 {
        assert_eq!(log.append(payload(i)).index, i);
    }
    release.send(()).unwrap();
    log.shutdown().unwrap();

    let batches = probe.batches.lock().unwrap().clone();
    assert_eq!(batches.iter().sum::<usize>(), 10_000);
    assert!(
        batches.len() <= 10,
        "10,000 entries took {} fsyncs: {batches:?}",
        batches.len()
    );
    let calls = calls.lock().unwrap();
    assert_eq!(calls.len(), batches.len(), "one on_stable per fsync");
    assert_eq!(calls.last(), Some(&10_000));
}

#[test]
fn on_stable_is_monotonic_and_reaches_the_last_index() {
    let dir = tempfile::tempdir().unwrap();
    let (calls, on_stable) = recorder();
    let store = FjallStore::open(dir.path()).unwrap();
    let (mut log, _) = LocalLog::open(Box::new(store), on_stable, no_error).unwrap();
    for i in 1..=3_000 {
        log.append(payload(i));
        if i % 500 == 0 {
            std::thread::yield_now();
        }
    }
    assert_eq!(log.last_appended(), 3_000);
    log.shutdown().unwrap();

    let calls = calls.lock().unwrap();
    assert_strictly_increasing(&calls);
    assert_eq!(calls.last(), Some(&3_000));
}

#[test]
fn idle_appends_are_each_committed_without_waiting_for_more() {
    // Batching must never wait for company: with nothing else queued, every
    // entry gets its own commit. Wait for each ack before the next append.
    let (acks_tx, acks) = mpsc::channel();
    let (mut log, _) = LocalLog::open(
        Box::new(MemoryStore::new()),
        move |i| acks_tx.send(i).unwrap(),
        no_error,
    )
    .unwrap();
    for i in 1..=20 {
        log.append(payload(i));
        assert_eq!(acks.recv_timeout(Duration::from_secs(60)), Ok(i));
    }
    log.shutdown().unwrap();
}

#[test]
fn deferred_entries_wait_for_an_entry_or_a_sync_that_needs_them() {
    // An entry nothing waits for (a consumer's ack) is not committed on its
    // own: it rides on the fsync of the next entry that something waits for,
    // or of a sync. The deferral bound is set far out, so only those commit.
    let (store, probe) = ProbeStore::new(MemoryStore::new());
    let (acks_tx, acks) = mpsc::channel();
    let (mut log, _) =
        LocalLog::open(Box::new(store), move |i| acks_tx.send(i).unwrap(), no_error).unwrap();
    log.set_defer_max(Duration::from_secs(600));

    log.append_deferred(payload(1));
    log.append_deferred(payload(2));
    assert_eq!(
        acks.recv_timeout(Duration::from_millis(300)),
        Err(mpsc::RecvTimeoutError::Timeout),
        "deferred entries committed with nothing waiting for them"
    );
    // An entry something waits for commits them with it, in one fsync.
    log.append(payload(3));
    assert_eq!(acks.recv_timeout(Duration::from_secs(60)), Ok(3));
    assert_eq!(*probe.batches.lock().unwrap(), vec![3]);

    // A sync commits what was deferred since; one up to an index a commit
    // was asked for already is not even sent.
    log.append_deferred(payload(4));
    log.append_deferred(payload(5));
    log.sync_to(3);
    assert_eq!(
        acks.recv_timeout(Duration::from_millis(300)),
        Err(mpsc::RecvTimeoutError::Timeout)
    );
    log.sync_to(4);
    assert_eq!(acks.recv_timeout(Duration::from_secs(60)), Ok(5));
    assert_eq!(*probe.batches.lock().unwrap(), vec![3, 2]);

    // An urgent entry after it commits on its own.
    log.sync_to(5);
    log.append(payload(6));
    assert_eq!(acks.recv_timeout(Duration::from_secs(60)), Ok(6));
    log.shutdown().unwrap();
    assert_eq!(*probe.batches.lock().unwrap(), vec![3, 2, 1]);
}

#[test]
fn a_deferred_entry_nothing_asks_for_commits_within_the_bound() {
    // Nobody syncs: the entry still becomes stable, at most the bound late
    // (the bound is what a crash may lose of what nobody waited for).
    let (acks_tx, acks) = mpsc::channel();
    let (mut log, _) = LocalLog::open(
        Box::new(MemoryStore::new()),
        move |i| acks_tx.send(i).unwrap(),
        no_error,
    )
    .unwrap();
    log.set_defer_max(Duration::from_millis(20));
    for i in 1..=5 {
        log.append_deferred(payload(i));
        assert_eq!(acks.recv_timeout(Duration::from_secs(60)), Ok(i));
    }
    // And shutdown commits a deferred entry at once, bound or not.
    log.set_defer_max(Duration::from_secs(600));
    log.append_deferred(payload(6));
    log.shutdown().unwrap();
    assert_eq!(acks.recv_timeout(Duration::from_secs(60)), Ok(6));
}

#[test]
fn recovery_returns_every_entry_and_starts_a_new_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        let store = FjallStore::open(dir.path()).unwrap();
        LocalLog::open(Box::new(store), |_| {}, no_error).unwrap()
    };

    let (mut log, recovered) = open();
    assert!(recovered.is_empty());
    assert_eq!(log.epoch(), 1);
    for i in 1..=1_000 {
        assert_eq!(log.append(payload(i)), LogPosition::new(1, i));
    }
    log.shutdown().unwrap();

    let (mut log, recovered) = open();
    assert_eq!(recovered.len(), 1_000);
    for (i, entry) in (1..).zip(&recovered) {
        assert_eq!(entry.pos, LogPosition::new(1, i));
        assert_eq!(entry.payload, payload(i));
    }
    assert_eq!(log.epoch(), 2, "a restart is a new epoch");
    assert_eq!(log.last_appended(), 1_000);
    assert_eq!(log.append(payload(1_001)), LogPosition::new(2, 1_001));
    log.shutdown().unwrap();

    let (log, recovered) = open();
    assert_eq!(recovered.len(), 1_001);
    assert_eq!(recovered.last().unwrap().pos, LogPosition::new(2, 1_001));
    assert_eq!(log.epoch(), 3);
    log.shutdown().unwrap();
}

#[test]
fn shutdown_flushes_everything_appended() {
    let dir = tempfile::tempdir().unwrap();
    let (calls, on_stable) = recorder();
    let store = FjallStore::open(dir.path()).unwrap();
    let (mut log, _) = LocalLog::open(Box::new(store), on_stable, no_error).unwrap();
    for i in 1..=5_000 {
        log.append(payload(i));
    }
    // No waiting for acks: shutdown itself must drain and commit the queue.
    log.shutdown().unwrap();
    assert_eq!(calls.lock().unwrap().last(), Some(&5_000));

    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(store.last_position(), LogPosition::new(1, 5_000));
    assert_eq!(
        store.stable_index(),
        5_000,
        "clean shutdown persists the stable index"
    );
    assert_eq!(store.read_from(4_999).unwrap()[1].payload, payload(5_000));
}

#[test]
fn fsync_failure_reports_once_and_never_acks_again() {
    let (mut store, _probe) = ProbeStore::new(MemoryStore::new());
    store.fail_batch = Some(2);
    let (acks_tx, acks) = mpsc::channel();
    let errors = Arc::new(AtomicUsize::new(0));
    let seen = errors.clone();
    let (mut log, _) = LocalLog::open(
        Box::new(store),
        move |i| acks_tx.send(i).unwrap(),
        move |err| {
            assert!(matches!(err, StoreError::Io(_)), "{err}");
            seen.fetch_add(1, Ordering::SeqCst);
        },
    )
    .unwrap();

    log.append(payload(1));
    assert_eq!(acks.recv_timeout(Duration::from_secs(60)), Ok(1));
    log.append(payload(2)); // its fsync fails
    log.append(payload(3)); // appended after the failure: dropped
    let result = log.shutdown();

    assert!(matches!(result, Err(StoreError::Stopped(_))), "{result:?}");
    assert_eq!(errors.load(Ordering::SeqCst), 1);
    // The callback was moved into the dead thread, so the channel is closed and
    // holds every ack that was ever sent: none after 1.
    assert_eq!(acks.try_iter().collect::<Vec<_>>(), Vec::<u64>::new());
}

#[test]
fn open_after_a_higher_promise_starts_above_it() {
    // A promised epoch above every entry still yields a fresh, higher epoch.
    let mut store = MemoryStore::new();
    store.append(&[Entry::new(1, 1, "a")]).unwrap();
    store.set_promised_epoch(7).unwrap();
    let (mut log, recovered) = LocalLog::open(Box::new(store), |_| {}, no_error).unwrap();
    assert_eq!(recovered, vec![Entry::new(1, 1, "a")]);
    assert_eq!(log.append(Bytes::from_static(b"b")), LogPosition::new(8, 2));
    log.shutdown().unwrap();
}

/// Payloads `k=v` put a key, `-k` deletes it.
struct KvReducer;

impl stablemq_cluster::store::Reducer for KvReducer {
    fn restore(
        &mut self,
        _: &dyn stablemq_cluster::store::StateRead,
    ) -> Result<(), stablemq_cluster::store::ReduceError> {
        Ok(())
    }
    fn reduce(
        &mut self,
        entry: &Entry,
        out: &mut Vec<stablemq_cluster::store::StateOp>,
    ) -> Result<(), stablemq_cluster::store::ReduceError> {
        use stablemq_cluster::store::StateOp;
        let text = String::from_utf8_lossy(&entry.payload).into_owned();
        match text.split_once('=') {
            Some((k, v)) => out.push(StateOp::Put {
                key: Bytes::from(k.to_owned()),
                value: Bytes::from(v.to_owned()),
            }),
            None => out.push(StateOp::Delete {
                key: Bytes::from(text.trim_start_matches('-').to_owned()),
            }),
        }
        Ok(())
    }
    fn flush(
        &mut self,
        _: &mut Vec<stablemq_cluster::store::StateOp>,
    ) -> Result<(), stablemq_cluster::store::ReduceError> {
        Ok(())
    }
}

#[test]
fn with_state_a_restart_starts_from_the_state_and_the_log_is_compacted() {
    let dir = tempfile::tempdir().unwrap();
    // A store written without state first (as before this feature): the first
    // open with a reducer reduces the whole log.
    let store = FjallStore::open(dir.path()).unwrap();
    let (mut log, _) = LocalLog::open(Box::new(store), |_| {}, no_error).unwrap();
    log.append(Bytes::from_static(b"a=1"));
    log.append(Bytes::from_static(b"b=2"));
    log.shutdown().unwrap();

    let open = || {
        let store = FjallStore::open(dir.path()).unwrap();
        LocalLog::open_with_state(Box::new(store), Box::new(KvReducer), 3, |_| {}, no_error)
            .unwrap()
    };
    let (mut log, recovered) = open();
    assert_eq!(recovered.state_index, 2);
    assert!(recovered.suffix.is_empty());
    assert_eq!(recovered.state.len(), 2);
    for i in 0..200u32 {
        log.append(Bytes::from(format!("k{}={i}", i % 10)));
        log.append(Bytes::from(format!("-k{}", (i + 5) % 10)));
    }
    log.append(Bytes::from_static(b"-a"));
    let last = log.last_appended();
    log.shutdown().unwrap();

    let (log, recovered) = open();
    assert_eq!(recovered.state_index, last);
    let keys: Vec<_> = recovered.state.keys().cloned().collect();
    // The last 10 rounds: i%10 put, (i+5)%10 deleted; i = 195..199 put k5..k9
    // after the deletes of k0..k4 at i=195..199.
    let expected: Vec<Bytes> = ["b", "k5", "k6", "k7", "k8", "k9"]
        .iter()
        .map(|k| Bytes::from(k.to_string()))
        .collect();
    assert_eq!(keys, expected);
    assert_eq!(recovered.state.get(&b"k9"[..]), Some(&Bytes::from("199")));
    log.shutdown().unwrap();
    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(store.log_base().index, last - 3, "retention of 3 entries");
    assert!(store.read_from(1).is_err());
    assert_eq!(store.read_from(last - 2).unwrap().len(), 3);
    // Without its reducer, a store with state is refused, not misread.
    assert!(matches!(
        LocalLog::open(Box::new(store), |_| {}, no_error),
        Err(StoreError::Misuse(_))
    ));
}
