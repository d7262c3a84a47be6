//! The event store on disk: the log in segment files, the rest in fjall.
//!
//! Layout of a store directory:
//! - `segments/`: the log, in append-only segment files (see
//!   [`super::segment_log`]), with the stable index as markers in it.
//! - fjall's own folders, one `Database` with these keyspaces:
//!   - `meta`: the promised epoch, the state index, the stable index as of
//!     the last snapshot install (the markers in the log hold the newer
//!     ones), big-endian `u64` each; the log base (the last compacted
//!     entry) as epoch then index; the store's identity: `joined` (0 or 1)
//!     and `incarnation`, written once when the disk is created (see
//!     [`FjallStore::open`]).
//!   - `state.<n>.<tag>`: the materialized state, keys and values as the
//!     broker's reducer chose them (see [`super::Materializer`]), in one
//!     keyspace per tag (a key's first byte, in hex: see
//!     [`super::fjall_state`] for why) and one per sequence
//!     (`state.<n>.<tag>.<m>`, its name in `meta/seq.<n>.<m>`: see
//!     [`super::fjall_spaces`]), `n` being `meta/state_gen`, which a
//!     snapshot install from a peer moves on (see
//!     [`FjallStore::install_staged`]). A store written before 2026-12-06
//!     kept the state in one keyspace, `state` (or `state.<n>`); the first
//!     open splits it (`meta/state_split` says it was).
//! - A store written before segments existed has its log in a keyspace
//!   `log` (see [`super::fjall_log`]): the first open moves it into
//!   `segments/` (see [`super::fjall_meta::migrate`]).
//!
//! A peer's state (snapshot catch-up) arrives in chunks, each written as it
//! comes into new keyspaces (`state.<n+1>.<tag>`) beside the live ones, so the
//! store never holds a whole state in memory. When the last chunk is in,
//! one atomic, durable write names it in `meta/state_gen` together with the
//! new log base and state index; only then are the old keyspaces deleted.
//! `open` deletes every state keyspace that `meta` does not name: a crash
//! mid-transfer leaves the old state and log whole, and the half-staged one
//! is never seen. A log that does not continue the installed base is reset
//! after that write; a crash in between is finished by `open`.
//!
//! A materialized batch (state ops, state index and the new log base) is one
//! atomic fjall batch, so the state and the base always agree. Entries at or
//! below the base are dead the moment the base is written (reads refuse
//! them); whole segment files below the durable base are deleted.
//!
//! Durability. A commit (`sync`) is one `fdatasync` of the current segment:
//! the entries and the stable index. fjall's journal is only handed to the
//! OS then (`PersistMode::Buffer`), not fsynced, because nothing in the state
//! needs to survive a power loss on its own: the state is a function of the
//! log, and the log keeps every entry above the *durable* log base. After a
//! crash the state may be older (fjall recovers a prefix of its batches),
//! and the store's reducer re-derives it from the log above the state index
//! it finds. So fjall's journal is fsynced only where something must be
//! durable: the promise and `joined` (durable on return, with the log), a
//! snapshot install (it replaces what the log held), and before whole
//! segments below the base are deleted (the base they are deleted under must
//! survive). fjall still fsyncs its own flushes and compactions, but of the
//! state only, which under a publish-and-consume load is small.
//!
//! Why the state never runs ahead of the durable log: the runner records a
//! stable index only after the fsync that covered its entries, and the
//! state only covers stable entries; so whatever fjall wrote (even a flush
//! that reached the disk before the segment's next fsync) refers to synced
//! entries.

use std::path::Path;
use std::time::Instant;

use bytes::Bytes;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::fjall_meta::{encode_position, migrate, open_identity, read_base, read_meta};
use super::fjall_state::{
    FjallSnapshot, StateSpaces, drop_stale_states, split_unsplit_state, unsplit_keyspace_name, walk,
};
use super::segment_log::{SEGMENT_BYTES, SegmentLog};
use super::state::check_materialize;
use super::{
    EventStore, MergedOp, StateBatch, StoreError, check_append, check_append_as, check_promise,
    check_read, check_stable, check_truncate,
};
use crate::metrics as m;
use crate::position::{Entry, LogPosition};

/// The journal holds every write until the memtables it covers are flushed,
/// so it, not the live data, dominates the disk of a busy store whose
/// messages are consumed quickly: cap it at fjall's minimum (512 MiB by
/// default), which forces flushes of the memtables holding it up.
const JOURNAL_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Smaller than fjall's 64 MiB default so that flushes, and with them the
/// journal's reclamation, come sooner. A publish and its ack's deletion that
/// meet in one memtable flush as a tombstone only. It is also what bounds the
/// store's RAM: fjall holds up to four sealed memtables per keyspace waiting
/// for their flush (then it stalls writers), so the log and the state can
/// take 2 x 5 x this much while a backlog fills faster than the disk takes it.
/// fjall's database-wide `max_write_buffer_size` is not enforced (3.1).
pub(super) const MEMTABLE_BYTES_MAX: u64 = 8 * 1024 * 1024;
/// fjall's background threads (flushes and compactions). fjall's default is
/// one per core up to 4, but with more than one, worker 0 never compacts: it
/// hands every `Compact` message it receives back to the shared queue and
/// takes the next one, so while another worker flushes or compacts, worker 0
/// spins on that one message. Profiled at a fixed 10k msg/s on the 3-node
/// cluster (2 cores), that spin was over a third of the fjall workers' time
/// and about 9% of all three processes' CPU, taken from the commit and
/// broker threads at random moments. One worker does the same flushes and
/// compactions one after the other, without the spin (in S2, 2.3M worker
/// ticks for 100k messages had been 6k of the server's 40k instructions per
/// message); see `StateSpaces::rotate_full` (`fjall_spaces`) for what
/// that did to the memtables.
const WORKER_THREADS: usize = 1;
/// fjall's block cache (32 MiB by default). The store reads little: the
/// state at boot (once, in order) and point checks of keys a batch put and
/// deleted, which bloom filters answer; the broker reads paged messages from
/// its own files.
const BLOCK_CACHE_BYTES: u64 = 8 * 1024 * 1024;
pub(super) const LOG_KEYSPACE: &str = "log";
const META_KEYSPACE: &str = "meta";
pub(super) const STATE_KEYSPACE: &str = "state";
const PROMISED_EPOCH_KEY: &[u8] = b"promised_epoch";
const STABLE_INDEX_KEY: &[u8] = b"stable_index";
const STATE_INDEX_KEY: &[u8] = b"state_index";
pub(super) const LOG_BASE_KEY: &[u8] = b"log_base";
const STATE_GEN_KEY: &[u8] = b"state_gen";
/// 1 once the state is kept in a keyspace per tag (`fjall_state`).
const STATE_SPLIT_KEY: &[u8] = b"state_split";
pub(super) const JOINED_KEY: &[u8] = b"joined";
pub(super) const INCARNATION_KEY: &[u8] = b"incarnation";

/// The log's directory inside the store's.
pub(super) const SEGMENTS_DIR: &str = "segments";
/// Where [`migrate`] builds the segments of a log that was in fjall.
pub(super) const MIGRATING_DIR: &str = "segments.migrating";

/// An [`EventStore`] on a local disk: the log in segment files, the state
/// and meta in fjall.
pub struct FjallStore {
    /// Kept to persist (fsync) the shared journal and to build atomic batches.
    db: Database,
    /// The log itself.
    log: SegmentLog,
    /// Promised epoch and stable index.
    meta: Keyspace,
    /// Materialized result of stable events (live messages, definitions), so disk
    /// use follows the live backlog once old log entries are deleted; its
    /// generation is `meta/state_gen`.
    state: StateSpaces,
    /// A peer's state being received, and its base; see the module docs.
    staging: Option<(LogPosition, StateSpaces)>,
    /// The highest state generation created since open.
    staging_gen_used: u64,
    /// Cached copy of `meta/state_index`.
    state_index: u64,
    /// Cached copy of `meta/log_base`: the last compacted entry.
    base: LogPosition,
    /// The base as of the last fsync of fjall's journal: segments wholly
    /// below it may be deleted.
    durable_base: u64,
    /// Cached so `last_position` and `check_append` never touch the disk.
    last: LogPosition,
    /// Cached copy of `meta/promised_epoch`.
    promised_epoch: u64,
    /// Cached copy of `meta/joined`.
    joined: bool,
    /// Cached copy of `meta/incarnation`.
    incarnation: u64,
    /// Cached copy of `meta/stable_index` (possibly not yet synced).
    stable_index: u64,
    /// Entries appended since the last fsync: the group-commit batch size metric,
    /// and lets `sync` skip an fsync that would cover nothing.
    unsynced_entries: u64,
    /// Something (an entry or the stable index) was written since the last fsync.
    dirty: bool,
    /// fjall was written since its journal was last handed to the OS.
    fjall_dirty: bool,
}

impl FjallStore {
    /// Open (or create) the store in `dir`, recovering to a contiguous prefix.
    ///
    /// A gap in the log can only come from a crash that lost part of what was
    /// never synced; the entries after the gap were never acked either, so they
    /// are dropped (with a warning) rather than served with a hole in them.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let db = Database::builder(dir)
            .manual_journal_persist(true)
            .max_journaling_size(JOURNAL_BYTES_MAX)
            .cache_size(BLOCK_CACHE_BYTES)
            .worker_threads(WORKER_THREADS)
            // fjall compresses journal values of 4 KiB and more with lz4
            // by default: every log record (see `fjall_log`), for a
            // journal that lives until the next flush. In S2 that was
            // 2.7k instructions per message, with the encoder's table
            // zeroed for each record.
            .journal_compression(fjall::CompressionType::None)
            .open()?;
        let meta = db.keyspace(META_KEYSPACE, KeyspaceCreateOptions::default)?;
        // The live state (see the module docs).
        let state = open_state(&db, &meta)?;
        drop_stale_states(&db, &state)?;
        let state_gen = state.generation();

        let promised_epoch = read_meta(&meta, PROMISED_EPOCH_KEY)?;
        let state_index = read_meta(&meta, STATE_INDEX_KEY)?;
        let base = read_base(&meta)?;

        migrate(&db, dir, base)?;
        let mut log = SegmentLog::open(&dir.join(SEGMENTS_DIR), base, SEGMENT_BYTES)?;
        if base.index > 0 && log.start().index > base.index {
            return Err(StoreError::Corrupt(format!(
                "the log starts after {}, but the state covers only up to the base {base}",
                log.start()
            )));
        }
        if base.index > 0 && !super::keeps_suffix(held_at(&log, base.index)?, base) {
            // A snapshot install whose log did not hold its base: fjall has
            // the new base, the crash came before the log was reset.
            tracing::warn!(%base, "the event log does not continue the installed state; resetting it");
            log.reset(base)?;
        }
        let last = log.last();
        let stable_index = read_meta(&meta, STABLE_INDEX_KEY)?
            .max(log.stable())
            .max(state_index)
            .max(base.index);
        if stable_index > last.index || state_index > last.index {
            // Synced data went missing: this is not a torn tail, it is loss.
            return Err(StoreError::Corrupt(format!(
                "stable index {stable_index}, state index {state_index}, but the log ends at {last}"
            )));
        }

        let (joined, incarnation) = open_identity(
            &db,
            &meta,
            promised_epoch > 0 || last.index > 0 || stable_index > 0 || state_index > 0,
        )?;

        let mut store = FjallStore {
            db,
            log,
            meta,
            state,
            staging: None,
            staging_gen_used: state_gen,
            state_index,
            base,
            durable_base: base.index,
            last,
            promised_epoch,
            joined,
            incarnation,
            stable_index,
            unsynced_entries: 0,
            dirty: false,
            fjall_dirty: false,
        };
        // Segments a crash kept from being deleted.
        store.log.drop_through(store.durable_base)?;
        Ok(store)
    }

    /// Writes already-checked entries as one atomic batch (not yet durable).
    fn write_entries(&mut self, entries: &[Entry]) -> Result<(), StoreError> {
        let Some(last) = entries.last() else {
            return Ok(());
        };
        self.log.append(entries)?;
        self.last = last.pos;
        self.unsynced_entries += entries.len() as u64;
        self.dirty = true;
        Ok(())
    }

    /// The live state's keyspaces, in key order, for a walk.
    fn live_spaces(&self) -> Vec<(Bytes, Keyspace)> {
        self.state.list()
    }

    /// Makes everything durable: the log (one fdatasync, measured) and, if
    /// `fjall_too`, fjall's journal (see the module docs for when).
    fn persist(&mut self, fjall_too: bool) -> Result<(), StoreError> {
        let started = Instant::now();
        self.log.sync()?;
        metrics::histogram!(m::FSYNC_SECONDS).record(started.elapsed().as_secs_f64());
        metrics::counter!(m::FSYNCS_TOTAL).increment(1);
        if fjall_too {
            self.db.persist(PersistMode::SyncAll)?;
            self.durable_base = self.base.index;
            self.fjall_dirty = false;
        } else if self.fjall_dirty {
            self.db.persist(PersistMode::Buffer)?;
            self.fjall_dirty = false;
        }
        self.dirty = false;
        self.unsynced_entries = 0;
        if self.log.reclaimable(self.base.index) {
            // Segments wholly below the base go, under a durable base.
            if self.durable_base < self.base.index {
                self.db.persist(PersistMode::SyncAll)?;
                self.durable_base = self.base.index;
            }
            self.log.drop_through(self.durable_base)?;
        }
        Ok(())
    }
}

impl Drop for FjallStore {
    /// Hands fjall's journal to the OS: a store dropped and opened again
    /// finds everything it was given (unsynced writes included).
    fn drop(&mut self) {
        if let Err(err) = self.db.persist(PersistMode::Buffer) {
            tracing::warn!(error = %err, "flushing the store's journal on close failed");
        }
    }
}

impl EventStore for FjallStore {
    fn append(&mut self, entries: &[Entry]) -> Result<(), StoreError> {
        check_append(self.last, self.promised_epoch, entries)?;
        self.write_entries(entries)
    }

    fn append_as(&mut self, writer_epoch: u64, entries: &[Entry]) -> Result<(), StoreError> {
        check_append_as(self.last, self.promised_epoch, writer_epoch, entries)?;
        self.write_entries(entries)
    }

    fn read_range(&self, from: u64, to: u64) -> Result<Vec<Entry>, StoreError> {
        let from = from.max(1);
        if to < from {
            return Ok(Vec::new());
        }
        check_read(self.base, from)?;
        let entries = self.log.read_range(from, to)?;
        for (i, entry) in entries.iter().enumerate() {
            let expected = from + i as u64;
            if entry.pos.index != expected {
                return Err(StoreError::Corrupt(format!(
                    "log entry {} where {expected} was expected",
                    entry.pos.index
                )));
            }
        }
        Ok(entries)
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        if !self.dirty {
            return Ok(());
        }
        let batch_entries = self.unsynced_entries;
        self.persist(false)?;
        metrics::histogram!(m::FSYNC_BATCH_MESSAGES).record(batch_entries as f64);
        Ok(())
    }

    fn last_position(&self) -> LogPosition {
        self.last
    }

    fn read_from(&self, from: u64) -> Result<Vec<Entry>, StoreError> {
        check_read(self.base, from)?;
        let from = from.max(1);
        let entries = self.log.read_range(from, u64::MAX)?;
        let mut prev = LogPosition::new(0, from - 1);
        for entry in &entries {
            // `open` removed any gap, so one now means the disk changed under us.
            if entry.pos.index != prev.index + 1 || entry.pos.epoch < prev.epoch {
                return Err(StoreError::Corrupt(format!(
                    "log entry {} follows {prev}",
                    entry.pos
                )));
            }
            prev = entry.pos;
        }
        Ok(entries)
    }

    fn truncate_after(&mut self, index: u64) -> Result<(), StoreError> {
        if !check_truncate(self.stable_index, self.last, index)? {
            return Ok(());
        }
        // Durable before it returns, with everything written before it.
        self.log.truncate_after(index)?;
        self.persist(false)?;
        self.last = self.log.last();
        Ok(())
    }

    fn joined(&self) -> bool {
        self.joined
    }

    fn incarnation(&self) -> u64 {
        self.incarnation
    }

    fn set_joined(&mut self) -> Result<(), StoreError> {
        if !self.joined {
            self.meta.insert(JOINED_KEY, 1u64.to_be_bytes())?;
            self.persist(true)?;
            self.joined = true;
        }
        Ok(())
    }

    fn promised_epoch(&self) -> u64 {
        self.promised_epoch
    }

    fn set_promised_epoch(&mut self, epoch: u64) -> Result<(), StoreError> {
        if check_promise(self.promised_epoch, epoch)? {
            self.meta.insert(PROMISED_EPOCH_KEY, epoch.to_be_bytes())?;
            self.persist(true)?;
            self.promised_epoch = epoch;
        }
        Ok(())
    }

    fn stable_index(&self) -> u64 {
        self.stable_index
    }

    fn set_stable_index(&mut self, index: u64) -> Result<(), StoreError> {
        if check_stable(self.stable_index, self.last, index)? {
            // A marker in the log; the next fsync makes it durable.
            self.log.set_stable(index)?;
            self.stable_index = index;
            self.dirty = true;
        }
        Ok(())
    }

    fn state_index(&self) -> u64 {
        self.state_index
    }

    fn log_base(&self) -> LogPosition {
        self.base
    }

    fn materialize(&mut self, batch: &StateBatch) -> Result<(), StoreError> {
        check_materialize(self.state_index, self.stable_index, batch)?;
        let mut write = self.db.batch();
        for prefix in &batch.delete_prefixes {
            self.state.delete_prefix(prefix, &mut write)?;
        }
        for (key, op) in &batch.ops {
            if !matches!(op, MergedOp::Put(_)) && self.state.of_key(key).is_none() {
                // Nothing to delete where no keyspace was ever made.
                continue;
            }
            let space = self.state.make(&self.db, key, &mut write)?;
            match op {
                // The key is copied, not handed over: a reducer cuts every
                // publish's key from shared 16 KiB chunks, most of them for
                // publishes consumed within the batch (never written), and
                // fjall keeps a `Bytes` it is given as it is, so one written
                // key kept its whole chunk alive until the memtable's flush,
                // which counts only the key's own bytes (docs/reliability.md).
                // A value is handed over: its chunk holds written values only.
                MergedOp::Put(value) => write.insert(&space, key.as_ref(), value.clone()),
                MergedOp::Delete => write.remove(&space, key.as_ref()),
                // Put and deleted within the batch: write nothing unless an
                // older value must go (a point read, bloom-filtered when absent).
                MergedOp::PutThenDelete => {
                    if space.contains_key(key)? {
                        write.remove(&space, key.as_ref());
                    }
                }
            }
        }
        write.insert(&self.meta, STATE_INDEX_KEY, batch.state_index.to_be_bytes());
        let mut base = self.base;
        if batch.compact_through > base.index {
            // Moving the base is the whole deletion (see the module docs).
            base = self.log.position(batch.compact_through)?;
            write.insert(&self.meta, LOG_BASE_KEY, encode_position(base));
        }
        write.commit()?;
        self.state.rotate_full()?;
        if self.state.has_dead() {
            // A sequence deleted whole: its keyspace goes once the batch
            // that says so is durable (rare: a stream's deletion).
            self.db.persist(PersistMode::SyncAll)?;
            self.state.drop_dead(&self.db)?;
        }
        self.state_index = batch.state_index;
        self.base = base;
        self.log.set_base(base);
        self.dirty = true;
        self.fjall_dirty = true;
        Ok(())
    }

    fn state_get(&self, key: &[u8]) -> Result<Option<Bytes>, StoreError> {
        let Some(space) = self.state.of_key(key) else {
            return Ok(None);
        };
        Ok(space.get(key)?.map(|v| Bytes::copy_from_slice(&v)))
    }

    fn state_scan(&self, prefix: &[u8]) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        self.state_scan_page(prefix, None, usize::MAX)
    }

    fn state_scan_page(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let spaces = self.live_spaces();
        walk(&self.db.snapshot(), &spaces, prefix, after, |key, value| {
            out.push((key, value));
            out.len() < limit
        })?;
        Ok(out)
    }

    fn state_snapshot(&self) -> Result<Box<dyn super::StateSnapshot>, StoreError> {
        // One fjall snapshot covers the state and the log: the base read now
        // and the pairs read later, chunk by chunk, are of the same moment.
        let base = if self.state_index == self.base.index {
            self.base
        } else {
            self.log.position(self.state_index)?
        };
        Ok(Box::new(FjallSnapshot {
            snapshot: self.db.snapshot(),
            spaces: self.live_spaces(),
            base,
        }))
    }

    fn stage_state(
        &mut self,
        base: LogPosition,
        first: bool,
        pairs: &[(Bytes, Bytes)],
    ) -> Result<(), StoreError> {
        self.stage_chunk(base, first, pairs)
    }

    fn install_staged(&mut self, base: LogPosition) -> Result<(), StoreError> {
        self.install_chunks(base)
    }
}

/// The live state named in `meta`, split by tag first if it was kept in one
/// keyspace (see `fjall_state`); a fresh store starts split.
fn open_state(db: &Database, meta: &Keyspace) -> Result<StateSpaces, StoreError> {
    let generation = read_meta(meta, STATE_GEN_KEY)?;
    if read_meta(meta, STATE_SPLIT_KEY)? == 1 {
        return StateSpaces::open(db, meta, generation);
    }
    let unsplit = unsplit_keyspace_name(generation);
    if db.keyspace_exists(&unsplit) {
        return split_unsplit_state(db, meta, generation, |write, next| {
            write.insert(meta, STATE_GEN_KEY, next.to_be_bytes());
            write.insert(meta, STATE_SPLIT_KEY, 1u64.to_be_bytes());
        });
    }
    if generation > 0 {
        return Err(StoreError::Corrupt(format!(
            "meta names the state keyspace {unsplit:?}, which does not exist"
        )));
    }
    // A new store: split from the start (durable with the store's identity,
    // before anything is materialized).
    meta.insert(STATE_SPLIT_KEY, 1u64.to_be_bytes())?;
    db.persist(PersistMode::SyncAll)?;
    Ok(StateSpaces::empty(0, meta))
}

/// The position the log holds at `index`, if it holds one there.
fn held_at(log: &SegmentLog, index: u64) -> Result<Option<LogPosition>, StoreError> {
    if index > log.last().index || index < log.start().index {
        return Ok(None);
    }
    log.position(index).map(Some)
}

#[path = "fjall_install.rs"]
mod install;

#[cfg(test)]
#[path = "fjall_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "fjall_spaces_tests.rs"]
mod spaces_tests;
