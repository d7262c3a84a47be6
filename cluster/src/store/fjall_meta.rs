//! [`super::FjallStore`]'s `meta` keyspace (the store's identity, the
//! log base) and the one-time move of a log kept in fjall into segment
//! files.

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::fjall::{
    INCARNATION_KEY, JOINED_KEY, LOG_BASE_KEY, LOG_KEYSPACE, MIGRATING_DIR, SEGMENTS_DIR,
};
use super::fjall_log as records;
use super::segment_log::{self, SEGMENT_BYTES, SegmentLog};
use super::{StoreError, check_append_as};
use crate::position::LogPosition;

pub(super) fn encode_position(pos: LogPosition) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&pos.epoch.to_be_bytes());
    out[8..].copy_from_slice(&pos.index.to_be_bytes());
    out
}

/// The log base from `meta`; `(0,0)` when the log was never compacted.
pub(super) fn read_base(meta: &Keyspace) -> Result<LogPosition, StoreError> {
    let Some(value) = meta.get(LOG_BASE_KEY)? else {
        return Ok(LogPosition::ZERO);
    };
    let bytes: [u8; 16] = value.as_ref().try_into().map_err(|_| {
        StoreError::Corrupt(format!(
            "meta log_base has {} bytes, expected 16",
            value.len()
        ))
    })?;
    let (epoch, index) = bytes.split_at(8);
    let word = |b: &[u8]| b.try_into().map(u64::from_be_bytes);
    match (word(epoch), word(index)) {
        (Ok(epoch), Ok(index)) => Ok(LogPosition::new(epoch, index)),
        _ => Err(StoreError::Corrupt("meta log_base".into())),
    }
}

/// The store's identity (joined, incarnation), written durably at the first
/// open. A disk without one is either new or predates the flag: if it holds
/// anything (`holds_data`) it was part of a cluster, so it counts as joined
/// with incarnation 0 (the upgrade path); if it holds nothing it has promised
/// and acked nothing, so it is as good as new and must join. That is also
/// why the identity need not be in the same write as the keyspaces' creation:
/// a crash between the two leaves a disk that holds nothing and no identity,
/// which the next open treats as new, exactly as it would have been.
pub(super) fn open_identity(
    db: &Database,
    meta: &Keyspace,
    holds_data: bool,
) -> Result<(bool, u64), StoreError> {
    if meta.get(JOINED_KEY)?.is_some() {
        let joined = match read_meta(meta, JOINED_KEY)? {
            0 => false,
            1 => true,
            other => return Err(StoreError::Corrupt(format!("meta joined = {other}"))),
        };
        return Ok((joined, read_meta(meta, INCARNATION_KEY)?));
    }
    let (joined, incarnation) = if holds_data {
        (true, 0)
    } else {
        (false, super::new_incarnation(0))
    };
    let mut write = db.batch();
    write.insert(meta, JOINED_KEY, u64::from(joined).to_be_bytes());
    write.insert(meta, INCARNATION_KEY, incarnation.to_be_bytes());
    write.commit()?;
    db.persist(PersistMode::SyncAll)?;
    Ok((joined, incarnation))
}

/// A missing meta key means "never set" (0); any other length is corruption.
pub(super) fn read_meta(meta: &Keyspace, key: &[u8]) -> Result<u64, StoreError> {
    let Some(value) = meta.get(key)? else {
        return Ok(0);
    };
    let bytes: [u8; 8] = value.as_ref().try_into().map_err(|_| {
        StoreError::Corrupt(format!(
            "meta {:?} has {} bytes, expected 8",
            String::from_utf8_lossy(key),
            value.len()
        ))
    })?;
    Ok(u64::from_be_bytes(bytes))
}

/// Moves a log kept in fjall (a store written before segments existed) into
/// `segments/`, once: its entries after `base` (up to the first hole a crash
/// may have left) are written into `segments.migrating/`, synced, and the
/// directory renamed into place; then the `log` keyspace is deleted. A crash
/// before the rename starts over; after it, only the deletion is left.
pub(super) fn migrate(db: &Database, dir: &Path, base: LogPosition) -> Result<(), StoreError> {
    let tmp = dir.join(MIGRATING_DIR);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    if !db.keyspace_exists(LOG_KEYSPACE) {
        return Ok(());
    }
    let old = db.keyspace(LOG_KEYSPACE, KeyspaceCreateOptions::default)?;
    let segments = dir.join(SEGMENTS_DIR);
    if !segments.exists() {
        let (last, gap_at) = records::contiguous_end(&old, base.index)?;
        if let Some(found) = gap_at {
            tracing::warn!(
                expected = last + 1,
                found,
                "event log has a gap after a crash; dropping every entry after index {last}"
            );
        }
        let mut log = SegmentLog::open(&tmp, base, SEGMENT_BYTES)?;
        let mut from = base.index + 1;
        while from <= last {
            let to = last.min(from + 4095);
            let entries = records::read_entries(&old, from, to)?;
            if entries.len() as u64 != to - from + 1 {
                return Err(StoreError::Corrupt(format!(
                    "old log entries {from}..={to}: {} found",
                    entries.len()
                )));
            }
            check_append_as(log.last(), 0, u64::MAX, &entries)?;
            log.append(&entries)?;
            from = to + 1;
        }
        log.sync()?;
        drop(log);
        std::fs::rename(&tmp, &segments)?;
        segment_log::sync_dir(dir)?;
        tracing::info!(
            entries = last - base.index,
            "moved the event log from fjall into segment files"
        );
    }
    db.delete_keyspace(old)?;
    db.persist(PersistMode::SyncAll)?;
    Ok(())
}
