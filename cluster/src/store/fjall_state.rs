//! [`super::FjallStore`]'s state keyspaces: one per generation (a snapshot
//! install switches to a new one), their options, the removal of stale ones,
//! and the frozen view a snapshot transfer reads.

use bytes::Bytes;
use fjall::config::PartitioningPolicy;
use fjall::{Database, Keyspace, KeyspaceCreateOptions};

use super::StoreError;
use super::fjall::{MEMTABLE_BYTES_MAX, STATE_KEYSPACE};
use crate::position::LogPosition;

/// A frozen view of a [`FjallStore`]'s state (a fjall snapshot, which keeps
/// the versions it sees from being compacted away until it is dropped).
pub(super) struct FjallSnapshot {
    pub(super) snapshot: fjall::Snapshot,
    pub(super) state: Keyspace,
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
        use fjall::Readable;
        use std::ops::Bound;
        let lower: Bound<&[u8]> = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut out = Vec::new();
        let mut size = 0;
        for guard in self
            .snapshot
            .range::<&[u8], _>(&self.state, (lower, Bound::Unbounded))
        {
            if !out.is_empty() && size >= max_bytes {
                return Ok((out, false));
            }
            let (key, value) = guard.into_inner()?;
            size += key.len() + value.len();
            out.push((Bytes::copy_from_slice(&key), Bytes::copy_from_slice(&value)));
        }
        Ok((out, true))
    }
}

/// The keyspace holding the state of `generation`: the first one keeps
/// the name stores had before snapshots were staged.
pub(super) fn state_keyspace_name(generation: u64) -> String {
    if generation == 0 {
        STATE_KEYSPACE.to_owned()
    } else {
        format!("{STATE_KEYSPACE}.{generation}")
    }
}

/// The state keyspace's options: memtables bounded like the log's, and the
/// block index partitioned at every level, not only at fjall's default (the
/// last). A table writer keeps each data block's last key until its index
/// is written, and a key longer than 20 bytes (every message key: tag,
/// vhost, queue, id) is a view into the whole decompressed block compaction
/// read it from. A full index holds those blocks for a whole output table:
/// with compressible bodies that was 280 MiB of a 3M-message fill's peak
/// (heaptrack, S6). A partition goes to disk every few KiB.
///
/// Not fjall's key-value separation (values of 1 KiB and more in blob
/// files), tried twice: it halves what a 1 KB stream publish writes and
/// speeds it by 20-30% up to 1 GB, but filling a 5 GB backlog took fjall's
/// workers 62 s of CPU instead of 34 and ran 26% slower (docs/streams.md,
/// "Storage writes").
pub(super) fn state_options() -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default()
        .max_memtable_size(MEMTABLE_BYTES_MAX)
        .index_block_partitioning_policy(PartitioningPolicy::all(true))
}

/// Deletes every state keyspace but `live`: a staged state a crash (or a
/// close) interrupted, or an old state whose deletion a crash interrupted.
pub(super) fn drop_stale_states(db: &Database, live: &str) -> Result<(), StoreError> {
    let prefix = format!("{STATE_KEYSPACE}.");
    for name in db.list_keyspace_names() {
        let name: &str = name.as_ref();
        if name != live && (name == STATE_KEYSPACE || name.starts_with(&prefix)) {
            tracing::info!(
                keyspace = name,
                "dropping a stale state (a snapshot install a crash interrupted)"
            );
            let stale = db.keyspace(name, state_options)?;
            db.delete_keyspace(stale)?;
        }
    }
    Ok(())
}
