//! [`super::FjallStore`]'s state: one keyspace per generation (a snapshot
//! install switches to a new one) *and per tag*, the first byte of a key,
//! which a reducer uses to say what kind of record a key names; their
//! options, the one-time split of a state kept in a single keyspace, the
//! removal of stale ones, and the frozen view a snapshot transfer reads.
//!
//! Why a keyspace per tag. An LSM tree moves a flushed table down a level
//! without rewriting it ("trivial move") only while the tables' key ranges
//! do not overlap. A broker appends messages under ascending ids, which
//! would never overlap, but each reduced batch also rewrites a few small
//! keys of other tags (the highest message id, a publisher's sequence), so
//! in one keyspace every flushed table spanned from the first new message to
//! those keys and overlapped all the others: each one was merged and
//! rewritten at every level it went through. Measured on 300,000 stream
//! publishes of 1 KB (2026-12-06): fjall's worker wrote 845–887 MB (flush
//! and compactions), against 328 MB (the flush alone) with the messages in a
//! keyspace of their own, and the publish rate rose from 84,000–112,000 to
//! 121,000–158,000 msg/s. A tag's keyspace is made when its first key is
//! written, so a reducer with five tags costs five small keyspaces.
//!
//! Tables still overlapped where several runs of ascending keys shared a
//! tag: four streams published one after the other made fjall's worker
//! write 11, 75, 104 and 55 MB for 200,000 entries each, at 121,000 down
//! to 88,000 msg/s. So the keys of a sequence tag
//! ([`super::state::SEQUENCE_TAG_MIN`]) get a keyspace per sequence
//! (`fjall_spaces`), which also makes deleting a stream dropping a
//! keyspace rather than writing a tombstone per entry.
//!
//! Keys sort by their first bytes first, so reading the keyspaces one after
//! the other in key order reads the state in key order, as one keyspace did.

use std::ops::Bound;

use bytes::Bytes;
use fjall::config::{CompressionPolicy, PartitioningPolicy};
use fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::StoreError;
use super::fjall::{MEMTABLE_BYTES_MAX, STATE_KEYSPACE};
pub(super) use super::fjall_spaces::StateSpaces;
use crate::position::LogPosition;

/// Where a copied state is written before it is committed: 8 MiB per batch,
/// as much as one memtable.
const COPY_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// The single keyspace that held a whole state of `generation` before the
/// state was split by tag: the first one kept the name stores had before
/// snapshots were staged.
pub(super) fn unsplit_keyspace_name(generation: u64) -> String {
    if generation == 0 {
        STATE_KEYSPACE.to_owned()
    } else {
        format!("{STATE_KEYSPACE}.{generation}")
    }
}

/// Calls `each` with the state's pairs whose key starts with `prefix` and
/// sorts after `after` (from the prefix's first when `None`), in key order,
/// as `snapshot` sees them; `each` returns false to stop. `spaces` are the
/// keyspaces by space key (`fjall_spaces`), in key order: every key of a
/// space starts with its space key, and no space key is a prefix of
/// another's, so the spaces hold consecutive runs of the key order.
pub(super) fn walk(
    snapshot: &fjall::Snapshot,
    spaces: &[(Bytes, Keyspace)],
    prefix: &[u8],
    after: Option<&[u8]>,
    mut each: impl FnMut(Bytes, Bytes) -> bool,
) -> Result<(), StoreError> {
    use fjall::Readable;
    // Where the walk starts: after `after`, unless that is before the prefix.
    let (start, lower): (&[u8], Bound<&[u8]>) = match after {
        Some(a) if a >= prefix => (a, Bound::Excluded(a)),
        _ => (prefix, Bound::Included(prefix)),
    };
    for (space_key, space) in spaces {
        let space_key: &[u8] = space_key;
        // Only spaces whose keys can start with the prefix.
        if !space_key.starts_with(prefix) && !prefix.starts_with(space_key) {
            continue;
        }
        // A space whose keys start with the start's first bytes begins at
        // the start; one that sorts before it holds nothing after it; one
        // after it, nothing before it.
        let from = if start.starts_with(space_key) {
            lower
        } else if space_key < start {
            continue;
        } else {
            Bound::Unbounded
        };
        for guard in snapshot.range::<&[u8], _>(space, (from, Bound::Unbounded)) {
            let (key, value) = guard.into_inner()?;
            if !key.starts_with(prefix) {
                break;
            }
            if !each(Bytes::copy_from_slice(&key), Bytes::copy_from_slice(&value)) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// A frozen view of a [`FjallStore`]'s state (a fjall snapshot, which keeps
/// the versions it sees from being compacted away until it is dropped).
pub(super) struct FjallSnapshot {
    pub(super) snapshot: fjall::Snapshot,
    /// The state's keyspaces when the snapshot was taken, by space key.
    pub(super) spaces: Vec<(Bytes, Keyspace)>,
    pub(super) base: LogPosition,
}

impl super::StateSnapshot for FjallSnapshot {
    fn base(&self) -> LogPosition {
        self.base
    }

    fn chunk(
        &self,
        after: Option<&[u8]>,
        max_bytes: usize,
    ) -> Result<(Vec<(Bytes, Bytes)>, bool), StoreError> {
        let mut out = Vec::new();
        let (mut size, mut done) = (0, true);
        walk(&self.snapshot, &self.spaces, &[], after, |key, value| {
            if !out.is_empty() && size >= max_bytes {
                done = false;
                return false;
            }
            size += key.len() + value.len();
            out.push((key, value));
            true
        })?;
        Ok((out, done))
    }
}

/// A state keyspace's options: memtables bounded like the log's; data
/// blocks compressed (lz4) at every level, not only from the third on
/// (fjall's default), because a table that is moved down without being
/// rewritten keeps the form its flush gave it: without it a 1 KB stream
/// publish's entries stayed uncompressed for good, a 600 MB stream took
/// 772 MB of disk instead of 173 (compressible bodies), and a 1,000,000-
/// message backlog filled at 132,000 msg/s instead of 168,000–171,000,
/// while incompressible bodies cost fjall's worker 0.4 µs more per 1 KB
/// entry (2026-12-06); and the block index partitioned at every level, not
/// only at fjall's default (the last). A table writer keeps each data block's last key until its index
/// is written, and a key longer than 20 bytes (every message key: tag,
/// vhost, queue, id) is a view into the whole decompressed block compaction
/// read it from. A full index holds those blocks for a whole output table:
/// with compressible bodies that was 280 MiB of a 3M-message fill's peak
/// (heaptrack, S6). A partition goes to disk every few KiB.
///
/// Not fjall's key-value separation (values of 1 KiB and more in blob
/// files), tried twice with a single state keyspace: it halved what a 1 KB
/// stream publish wrote and sped it by 20-30% up to 1 GB, but filling a
/// 5 GB backlog took fjall's workers 62 s of CPU instead of 34 and ran 26%
/// slower (docs/streams.md, "Storage writes").
pub(super) fn state_options() -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default()
        .max_memtable_size(MEMTABLE_BYTES_MAX)
        .index_block_partitioning_policy(PartitioningPolicy::all(true))
        .data_block_compression_policy(CompressionPolicy::all(CompressionType::Lz4))
}

/// Splits a state kept in one keyspace (`generation`'s, written before
/// 2026-12-06) by tag into the next generation, once: the pairs are copied,
/// then one durable write in `meta` names the new generation as split
/// (`set_split`), and only then is the old keyspace deleted. A crash
/// before that write leaves the old state named in `meta`, and the next
/// open starts the copy over.
pub(super) fn split_unsplit_state(
    db: &Database,
    meta: &Keyspace,
    generation: u64,
    set_split: impl FnOnce(&mut fjall::OwnedWriteBatch, u64),
) -> Result<StateSpaces, StoreError> {
    let old = db.keyspace(&unsplit_keyspace_name(generation), state_options)?;
    let next = generation + 1;
    // What a copy a crash cut short left behind.
    StateSpaces::open(db, meta, next)?.delete(db)?;
    let mut state = StateSpaces::empty(next, meta);
    let (mut write, mut size, mut pairs) = (db.batch(), 0, 0u64);
    for guard in old.iter() {
        let (key, value) = guard.into_inner()?;
        let space = state.make(db, &key, &mut write)?;
        size += key.len() + value.len();
        pairs += 1;
        write.insert(&space, key, value);
        if size >= COPY_BATCH_BYTES {
            std::mem::replace(&mut write, db.batch()).commit()?;
            state.rotate_full()?;
            size = 0;
        }
    }
    set_split(&mut write, next);
    write.commit()?;
    db.persist(PersistMode::SyncAll)?;
    db.delete_keyspace(old)?;
    tracing::info!(pairs, "split the store's state into a keyspace per key tag");
    Ok(state)
}

/// Deletes every state keyspace that is not `live`'s: a staged state a
/// crash (or a close) interrupted, an old state whose deletion a crash
/// interrupted, or an unsplit state already split.
pub(super) fn drop_stale_states(db: &Database, live: &StateSpaces) -> Result<(), StoreError> {
    let prefix = format!("{STATE_KEYSPACE}.");
    for name in db.list_keyspace_names() {
        let name: &str = name.as_ref();
        if !live.owns(name) && (name == STATE_KEYSPACE || name.starts_with(&prefix)) {
            tracing::info!(
                keyspace = name,
                "dropping a stale state (a snapshot install a crash interrupted)"
            );
            let stale = db.keyspace(name, state_options)?;
            db.delete_keyspace(stale)?;
        }
    }
    live.drop_stale_names()
}
