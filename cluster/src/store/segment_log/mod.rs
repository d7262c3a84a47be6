//! The log of [`super::FjallStore`] as a directory of append-only segment
//! files (`<store dir>/segments/`, next to fjall's own folders), not in fjall.
//!
//! Why: in fjall every appended record cost a skiplist insert, a journal
//! item, a memtable flush and compactions, on the store thread and on fjall's
//! worker; and fjall's own fsyncs (flushes, compactions, dropping dead
//! tables) landed on top of the commit fsyncs (the S5 tail, see
//! `docs/clustering.md`). Here an append is one `pwrite` of one record, a
//! commit is one `fdatasync` of the current segment, and compaction unlinks
//! whole files.
//!
//! Files are named `<seq>.seg` (20 decimal digits), oldest first; the format
//! is in [`super::segment_record`]. Each segment's header holds the position
//! of the entry before its first one, so the log starts where the oldest
//! segment says. A segment is created at [`SEGMENT_BYTES`] (32 MiB), written
//! from its header on, and the next one is started when a record does not
//! fit, after the full one is synced: only the newest segment can have a
//! torn tail. Commits should overwrite blocks the filesystem has already
//! allocated, so a new segment is, by preference, a compacted file kept for
//! reuse (one at most, as `spare.seg.free`), else a file zero-filled ahead
//! of time (`prepared.seg.free`, see `prepare`), else a new file allocated
//! up front (`files::allocate`).
//!
//! Truncation writes a marker instead of rewriting anything: a crash can
//! never leave half a rewrite. The next segment is started right after it,
//! so that a segment's header always names the true predecessor of its first
//! entry, whatever was cut before.
//!
//! The in-memory index holds, per segment, each record's first and last
//! live index and where it lies: catch-up reads (`read_range`) read only the
//! records they need. It stays small because compaction keeps the log short.
//!
//! This module holds the log's index and its append, truncate and read
//! paths; `recovery` opens a log and replays it after a crash, `files`
//! creates, reuses, rolls over and deletes the segment files, and `prepare`
//! zero-fills the next one ahead of time.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use bytes::Bytes;

use super::StoreError;
use super::segment_record::{self as rec, Kind, RECORD_HEADER};
use crate::position::{Entry, LogPosition};

use files::io;
pub(super) use files::sync_dir;

mod files;
mod prepare;
mod recovery;

/// A segment's size on creation (a bigger record gets a bigger segment).
/// The log holds the current segment, the ones the base has not passed
/// yet, a spare and a prepared file: each is this long on disk, so this is
/// the log's fixed overhead, traded against a rollover (two fsyncs) per
/// segment.
pub(super) const SEGMENT_BYTES: u64 = 32 * 1024 * 1024;
const SUFFIX: &str = ".seg";
/// A compacted segment file kept to be reused as the next one; not a
/// segment name, so listing skips it.
const SPARE: &str = "spare.seg.free";

/// One record as the index knows it.
#[derive(Clone, Copy, Debug)]
struct Record {
    /// First index held.
    first: u64,
    /// Last live index (below the physical last one after a truncation).
    last: u64,
    /// Entries in the record as written.
    count: u32,
    /// Offset of the body in the file.
    body_at: u64,
    /// Bytes of the body.
    body: usize,
}

/// One segment file.
struct Segment {
    seq: u64,
    /// Drawn when the file was started; names its records (see
    /// `segment_record`).
    nonce: u64,
    path: PathBuf,
    file: File,
    /// The entry before this segment's first one.
    prev: LogPosition,
    /// Entries records, in order, with live entries only.
    records: Vec<Record>,
    /// The last live index it holds; `prev.index` while it holds none, and
    /// lowered by truncations.
    live_last: u64,
    /// Where the next record goes.
    end: u64,
    /// The file's size.
    cap: u64,
    /// Bytes from the start known to lie in written extents (see
    /// `SegmentLog::zero_ahead`); `u64::MAX` where the filesystem keeps no
    /// extent map.
    written: u64,
}

impl Segment {
    /// A segment whose header names `prev`, with no record indexed yet (a
    /// new one, or one about to be replayed).
    fn empty(seq: u64, nonce: u64, path: PathBuf, file: File, prev: LogPosition, cap: u64) -> Self {
        Segment {
            seq,
            nonce,
            path,
            file,
            prev,
            records: Vec::new(),
            live_last: prev.index,
            end: rec::SEGMENT_HEADER as u64,
            cap,
            written: 0,
        }
    }

    /// The last live index it holds (see `live_last`).
    fn last_index(&self) -> u64 {
        self.live_last
    }
}

/// The log on disk; see the module docs. The caller (the store) checks what
/// is appended; this only keeps it.
pub(super) struct SegmentLog {
    dir: PathBuf,
    /// Oldest first; never empty.
    segments: Vec<Segment>,
    last: LogPosition,
    /// The last compacted entry (kept by the store in fjall): entries up to
    /// it are dead, and its position is known without them.
    base: LogPosition,
    stable: u64,
    segment_bytes: u64,
    /// Reused to encode records.
    buf: Vec<u8>,
    /// Records for the current segment not written to it yet, from file
    /// offset `pending_at`: a commit's records (its entries and the stable
    /// marker) go down in one `pwrite`, at the sync. Reads of them come from
    /// here; dropping the log writes them (see `Drop`).
    pending: Vec<u8>,
    pending_at: u64,
    /// Written since the last fdatasync.
    dirty: bool,
    /// A compacted segment waits under [`SPARE`] to be reused.
    has_spare: bool,
    /// A zeroed file waits under [`prepare::PREPARED`] to be used.
    has_prepared: bool,
    /// The zero-fill under way, if any.
    preparer: Option<prepare::Preparer>,
}

impl SegmentLog {
    fn current(&self) -> &Segment {
        // Never empty (see the field docs).
        &self.segments[self.segments.len() - 1]
    }

    fn current_mut(&mut self) -> &mut Segment {
        let n = self.segments.len() - 1;
        &mut self.segments[n]
    }

    /// Rolls over unless a `len`-byte record fits the current segment.
    fn ensure_room(&mut self, len: u64) -> Result<(), StoreError> {
        if self.current().end + len > self.current().cap {
            self.roll_over(len)?;
        }
        Ok(())
    }

    /// Adds the record in `self.buf` at the end of the current segment
    /// (which has room for it), to be written with the next sync; returns
    /// where its body is.
    fn write_buf(&mut self) -> Result<u64, StoreError> {
        let len = self.buf.len() as u64;
        let n = self.segments.len() - 1;
        let seg = &mut self.segments[n];
        let at = seg.end;
        if self.pending.is_empty() {
            self.pending_at = at;
        }
        debug_assert_eq!(self.pending_at + self.pending.len() as u64, at);
        self.pending.extend_from_slice(&self.buf);
        seg.end = at + len;
        self.dirty = true;
        Ok(at + RECORD_HEADER as u64)
    }

    /// Writes the pending records to the current segment (not synced),
    /// into written extents only (see `zero_ahead`).
    fn write_pending(&mut self) -> Result<(), StoreError> {
        if !self.pending.is_empty() {
            self.zero_ahead(self.pending_at, self.pending_at + self.pending.len() as u64)?;
            let seg = self.current();
            seg.file
                .write_all_at(&self.pending, self.pending_at)
                .map_err(|e| io("writing", &seg.path, e))?;
            self.pending.clear();
        }
        Ok(())
    }

    fn write_marker(&mut self, kind: Kind, index: u64) -> Result<(), StoreError> {
        self.ensure_room(RECORD_HEADER as u64)?;
        self.buf.clear();
        let nonce = self.current().nonce;
        rec::encode_marker(&mut self.buf, nonce, kind, index);
        self.write_buf().map(|_| ())
    }

    /// Appends `entries` (already checked to continue the log), as records
    /// of at most [`rec::RECORD_BYTES_MAX`] payload bytes. Not durable until
    /// [`SegmentLog::sync`].
    pub(super) fn append(&mut self, entries: &[Entry]) -> Result<(), StoreError> {
        let mut rest = entries;
        while !rest.is_empty() {
            let (n, bytes) = rec::next_run(rest);
            let (run, tail) = rest.split_at(n);
            rest = tail;
            let body = bytes + n * rec::ENTRY_HEADER;
            self.ensure_room((RECORD_HEADER + body) as u64)?;
            self.buf.clear();
            let nonce = self.current().nonce;
            rec::encode_entries(&mut self.buf, nonce, run)?;
            let body_at = self.write_buf()?;
            let last = run[n - 1].pos;
            let seg = self.current_mut();
            seg.records.push(Record {
                first: run[0].pos.index,
                last: last.index,
                count: n as u32,
                body_at,
                body,
            });
            seg.live_last = last.index;
            self.last = last;
        }
        self.prepare_if_due();
        Ok(())
    }

    /// Records the stable index (durable with the next sync).
    pub(super) fn set_stable(&mut self, index: u64) -> Result<(), StoreError> {
        if index > self.stable {
            self.write_marker(Kind::Stable, index)?;
            self.stable = index;
        }
        Ok(())
    }

    /// fdatasync of the current segment, if anything was written to it.
    pub(super) fn sync(&mut self) -> Result<(), StoreError> {
        self.write_pending()?;
        if self.dirty {
            let seg = self.current();
            seg.file
                .sync_data()
                .map_err(|e| io("syncing", &seg.path, e))?;
            self.dirty = false;
        }
        Ok(())
    }

    /// Drops every entry after `index` (at or above the log's start), durably.
    pub(super) fn truncate_after(&mut self, index: u64) -> Result<(), StoreError> {
        if index >= self.last.index {
            return Ok(());
        }
        self.write_marker(Kind::Truncate, index)?;
        self.cut_after(index)?;
        // The next segment's header names the true predecessor of what
        // follows (see the module docs).
        self.roll_over(0)?;
        self.sync()
    }

    /// Drops entries after `index` from the index (see `truncate_after`).
    fn cut_after(&mut self, index: u64) -> Result<(), StoreError> {
        if index >= self.last.index {
            return Ok(());
        }
        if index < self.start().index {
            // No writer cuts below what the log holds: entries before its
            // start are stable and compacted (afl found a log whose
            // marker did, which then opened with its last before its start).
            return Err(StoreError::Corrupt(format!(
                "log cut after {index}, before its start {}",
                self.start()
            )));
        }
        let pos = self.position(index)?;
        for seg in &mut self.segments {
            seg.records.retain(|r| r.first <= index);
            if let Some(r) = seg.records.last_mut() {
                r.last = r.last.min(index);
            }
            seg.live_last = seg.live_last.min(index);
        }
        self.last = pos;
        Ok(())
    }

    /// Entries up to `base` are dead (the store moved its base there).
    pub(super) fn set_base(&mut self, base: LogPosition) {
        self.base = base;
    }

    pub(super) fn last(&self) -> LogPosition {
        self.last
    }

    /// The stable index the markers recorded.
    pub(super) fn stable(&self) -> u64 {
        self.stable
    }

    /// The position before the oldest entry held.
    pub(super) fn start(&self) -> LogPosition {
        self.segments[0].prev
    }

    /// The position of entry `index`, which the log must hold (or start after).
    pub(super) fn position(&self, index: u64) -> Result<LogPosition, StoreError> {
        if index == self.last.index {
            return Ok(self.last);
        }
        // Newest first: an older segment's header may name an entry a
        // truncation replaced since.
        for seg in self.segments.iter().rev() {
            if let Some(r) = seg
                .records
                .iter()
                .find(|r| r.first <= index && index <= r.last)
            {
                let mut found = None;
                let body = self.read_body(seg, r)?;
                rec::walk_entries(r.first, r.count, &body, |pos, _| {
                    if pos.index == index {
                        found = Some(pos);
                    }
                })?;
                return found
                    .ok_or_else(|| StoreError::Corrupt(format!("log entry {index} vanished")));
            }
            if seg.prev.index == index {
                return Ok(seg.prev);
            }
        }
        if index == self.base.index {
            // Compacted away with the files that held it.
            return Ok(self.base);
        }
        Err(StoreError::Corrupt(format!(
            "log entry {index} is not held (log {}..={})",
            self.start(),
            self.last
        )))
    }

    fn read_body(&self, seg: &Segment, r: &Record) -> Result<Bytes, StoreError> {
        if seg.seq == self.current().seq && !self.pending.is_empty() && r.body_at >= self.pending_at
        {
            // Not written yet (see `pending`).
            let from = (r.body_at - self.pending_at) as usize;
            return self
                .pending
                .get(from..from + r.body)
                .map(Bytes::copy_from_slice)
                .ok_or_else(|| {
                    StoreError::Corrupt(format!("record at {} beyond the log", r.body_at))
                });
        }
        let mut body = vec![0u8; r.body];
        seg.file
            .read_exact_at(&mut body, r.body_at)
            .map_err(|e| io("reading", &seg.path, e))?;
        Ok(Bytes::from(body))
    }

    /// The live entries with `from <= index <= to`, in order.
    pub(super) fn read_range(&self, from: u64, to: u64) -> Result<Vec<Entry>, StoreError> {
        let mut out = Vec::new();
        for seg in &self.segments {
            if seg.last_index() < from || seg.prev.index >= to {
                continue;
            }
            let at = seg.records.partition_point(|r| r.last < from);
            for r in &seg.records[at..] {
                if r.first > to {
                    break;
                }
                let body = self.read_body(seg, r)?;
                rec::decode_entries(r.first, r.count, &body, from, to.min(r.last), &mut out)?;
            }
        }
        Ok(out)
    }

    /// Files and bytes on disk, for tests.
    #[cfg(test)]
    pub(super) fn segment_count(&self) -> usize {
        self.segments.len()
    }
}

#[cfg(test)]
mod tests;

impl Drop for SegmentLog {
    /// A log dropped and opened again holds everything it was given, as the
    /// store promises (unsynced appends included); only a crash loses what
    /// was not synced.
    fn drop(&mut self) {
        if let Err(err) = self.write_pending() {
            tracing::warn!(error = %err, "writing the log's last records on close failed");
        }
    }
}
