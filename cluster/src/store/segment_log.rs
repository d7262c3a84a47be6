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
//! segment says. A segment is created at [`SEGMENT_BYTES`] (32 MiB, sparse, with
//! `set_len`), written from its header on, and the next one is started when
//! a record does not fit, after the full one is synced: only the newest
//! segment can have a torn tail. A compacted file is kept (one at most, as
//! `spare.seg.free`) and reused as the next segment, so that commits mostly
//! overwrite blocks the filesystem has already allocated.
//!
//! Crash recovery ([`SegmentLog::open`]) replays every record: entries must
//! continue the log, a `Truncate` marker cuts it, a `Stable` marker records
//! the stable index. The first record that does not check out in the newest
//! segment is a torn tail (never synced): it and everything after it are
//! cut, and the file is zeroed from there. Anywhere else it is corruption,
//! and the store refuses to open.
//!
//! Truncation writes a marker instead of rewriting anything: a crash can
//! never leave half a rewrite. The next segment is started right after it,
//! so that a segment's header always names the true predecessor of its first
//! entry, whatever was cut before.
//!
//! The in-memory index holds, per segment, each record's first and last
//! live index and where it lies: catch-up reads (`read_range`) read only the
//! records they need. It stays small because compaction keeps the log short.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::StoreError;
use super::segment_record::{self as rec, Kind, RECORD_HEADER, Scanned};
use crate::position::{Entry, LogPosition};

/// A segment's size on creation (a bigger record gets a bigger segment).
/// The log holds the current segment, the ones the base has not passed
/// yet, and a spare: each is this long on disk (sparse until written), so
/// this is the log's fixed overhead, traded against a rollover (two fsyncs)
/// per segment.
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
}

impl Segment {
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
    /// Written since the last fdatasync.
    dirty: bool,
    /// A compacted segment waits under [`SPARE`] to be reused.
    has_spare: bool,
}

fn io(what: &str, path: &Path, err: std::io::Error) -> StoreError {
    StoreError::Io(std::io::Error::new(
        err.kind(),
        format!("{what} {}: {err}", path.display()),
    ))
}

/// fsync a directory, so that files created, renamed or removed in it stay so.
pub(super) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("syncing directory", dir, e))
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}{SUFFIX}"))
}

/// The sequence numbers of the segments in `dir`, oldest first.
fn list(dir: &Path) -> Result<Vec<u64>, StoreError> {
    let mut seqs = Vec::new();
    for dirent in std::fs::read_dir(dir).map_err(|e| io("listing", dir, e))? {
        let dirent = dirent.map_err(|e| io("listing", dir, e))?;
        let name = dirent.file_name();
        let Some(seq) = name
            .to_str()
            .and_then(|n| n.strip_suffix(SUFFIX))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        seqs.push(seq);
    }
    seqs.sort_unstable();
    Ok(seqs)
}

impl SegmentLog {
    /// Open the log in `dir`, creating it (starting after `start`) if there
    /// is none; see the module docs for what recovery does.
    pub(super) fn open(
        dir: &Path,
        base: LogPosition,
        segment_bytes: u64,
    ) -> Result<SegmentLog, StoreError> {
        let start = base;
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
            if let Some(parent) = dir.parent() {
                sync_dir(parent)?;
            }
        }
        let mut log = SegmentLog {
            dir: dir.to_path_buf(),
            segments: Vec::new(),
            last: start,
            base,
            stable: 0,
            segment_bytes,
            buf: Vec::new(),
            dirty: false,
            has_spare: false,
        };
        let mut seqs = list(dir)?;
        if let Some(&seq) = seqs.last()
            && log.unfinished(seq)?
        {
            seqs.pop();
        }
        let spare = dir.join(SPARE);
        let Some(&newest) = seqs.last() else {
            // A spare without segments (a crash in `reset`) might hold
            // records of segment 1 itself: never reuse it for a new log.
            if spare.exists() {
                std::fs::remove_file(&spare).map_err(|e| io("removing", &spare, e))?;
            }
            log.create_segment(1, start, 0)?;
            return Ok(log);
        };
        log.has_spare = spare.exists();
        for seq in seqs {
            log.replay(seq, seq == newest)?;
        }
        Ok(log)
    }

    /// Whether segment `seq` (the newest) is one whose creation a crash
    /// cut short: its header never made it to the disk (a created segment
    /// is synced before anything is written to it, and the one before it
    /// was synced before it was created). Such a file holds nothing and is
    /// removed.
    fn unfinished(&self, seq: u64) -> Result<bool, StoreError> {
        let path = segment_path(&self.dir, seq);
        let file = File::open(&path).map_err(|e| io("opening", &path, e))?;
        let mut header = [0u8; rec::SEGMENT_HEADER];
        let read = read_at(&file, &mut header, 0).map_err(|e| io("reading", &path, e))?;
        if rec::decode_segment_header(seq, &header[..read]).is_ok() {
            return Ok(false);
        }
        if header[..read].iter().any(|&b| b != 0) && read == rec::SEGMENT_HEADER {
            // A whole header that does not check out: damage, not a crash.
            return Ok(false);
        }
        tracing::warn!(
            segment = seq,
            "removing a log segment whose creation a crash cut short"
        );
        std::fs::remove_file(&path).map_err(|e| io("removing", &path, e))?;
        sync_dir(&self.dir)?;
        Ok(true)
    }

    /// Reads segment `seq` into the index (see the module docs).
    fn replay(&mut self, seq: u64, newest: bool) -> Result<(), StoreError> {
        let path = segment_path(&self.dir, seq);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| io("opening", &path, e))?;
        let cap = file.metadata().map_err(|e| io("reading", &path, e))?.len();
        let mut header = [0u8; rec::SEGMENT_HEADER];
        let read = read_at(&file, &mut header, 0).map_err(|e| io("reading", &path, e))?;
        let (prev, nonce) = rec::decode_segment_header(seq, &header[..read])?;
        if let Some(before) = self.segments.last() {
            if prev != self.last || seq <= before.seq {
                return Err(StoreError::Corrupt(format!(
                    "log segment {seq} follows {}, but the log before it ends at {}",
                    prev, self.last
                )));
            }
        } else {
            self.last = prev;
        }
        self.segments.push(Segment {
            seq,
            nonce,
            path: path.clone(),
            file,
            prev,
            records: Vec::new(),
            live_last: prev.index,
            end: rec::SEGMENT_HEADER as u64,
            cap,
        });
        let mut head = [0u8; RECORD_HEADER];
        loop {
            let at = self.current().end;
            let room = cap.saturating_sub(at);
            let n = read_at(&self.current().file, &mut head, at)
                .map_err(|e| io("reading", &path, e))?;
            let torn = match rec::scan_head(nonce, &head[..n], room) {
                Scanned::End => break,
                Scanned::Torn(why) => why,
                Scanned::Record(h) => {
                    let body_at = at + RECORD_HEADER as u64;
                    let mut body = vec![0u8; h.body];
                    self.current()
                        .file
                        .read_exact_at(&mut body, body_at)
                        .map_err(|e| io("reading", &path, e))?;
                    if rec::check_body(nonce, &head, &body) {
                        self.apply(h, body_at, Bytes::from(body))?;
                        self.current_mut().end = body_at + h.body as u64;
                        continue;
                    }
                    "CRC mismatch".to_string()
                }
            };
            if !newest {
                return Err(StoreError::Corrupt(format!(
                    "log segment {seq} at byte {at}: {torn}, and newer segments follow"
                )));
            }
            tracing::warn!(
                segment = seq,
                at,
                reason = %torn,
                "torn tail in the event log after a crash; cutting it (never synced)"
            );
            let file = &self.current().file;
            file.set_len(at)
                .and_then(|()| file.set_len(cap))
                .and_then(|()| file.sync_data())
                .map_err(|e| io("cutting", &path, e))?;
            break;
        }
        Ok(())
    }

    /// Applies one replayed record to the index.
    fn apply(&mut self, h: rec::Head, body_at: u64, body: Bytes) -> Result<(), StoreError> {
        match h.kind {
            Kind::Stable => self.stable = self.stable.max(h.index),
            Kind::Truncate => self.cut_after(h.index)?,
            Kind::Entries => {
                if h.index != self.last.index + 1 || h.count == 0 {
                    return Err(StoreError::Corrupt(format!(
                        "log record of {} entries from {} after {}",
                        h.count, h.index, self.last
                    )));
                }
                let mut last = self.last;
                let mut ordered = true;
                rec::walk_entries(h.index, h.count, &body, |pos, _| {
                    ordered &= pos.epoch >= last.epoch;
                    last = pos;
                })?;
                if !ordered {
                    return Err(StoreError::Corrupt(format!(
                        "log record from {}: epochs go back",
                        h.index
                    )));
                }
                let seg = self.current_mut();
                seg.records.push(Record {
                    first: h.index,
                    last: last.index,
                    count: h.count,
                    body_at,
                    body: h.body,
                });
                seg.live_last = last.index;
                self.last = last;
            }
        }
        Ok(())
    }

    fn current(&self) -> &Segment {
        // Never empty (see the field docs).
        &self.segments[self.segments.len() - 1]
    }

    fn current_mut(&mut self) -> &mut Segment {
        let n = self.segments.len() - 1;
        &mut self.segments[n]
    }

    /// Creates segment `seq` after `prev`, durably, as the current one.
    fn create_segment(&mut self, seq: u64, prev: LogPosition, room: u64) -> Result<(), StoreError> {
        let path = segment_path(&self.dir, seq);
        let cap = self.segment_bytes.max(rec::SEGMENT_HEADER as u64 + room);
        // Never 0: a header of zeros is the end of a segment.
        let nonce = rand::random::<u64>() | 1;
        let header = rec::encode_segment_header(seq, nonce, prev);
        let file = match self.take_spare(cap, &header, &path)? {
            Some(file) => file,
            None => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(|e| io("creating", &path, e))?;
                file.write_all_at(&header, 0)
                    .and_then(|()| file.set_len(cap))
                    .and_then(|()| file.sync_all())
                    .map_err(|e| io("creating", &path, e))?;
                file
            }
        };
        sync_dir(&self.dir)?;
        self.segments.push(Segment {
            seq,
            nonce,
            path,
            file,
            prev,
            records: Vec::new(),
            live_last: prev.index,
            end: rec::SEGMENT_HEADER as u64,
            cap,
        });
        self.last = prev;
        Ok(())
    }

    /// The spare file (a compacted segment kept for reuse) as the segment
    /// at `path`, if there is one of size `cap`: its new header is written
    /// and synced under the spare's name, then it is renamed, so a file named
    /// as a segment always has a whole header. What the file held before
    /// reads as the end of the segment (each record carries its segment's
    /// nonce).
    /// Why reuse: overwriting blocks a file already has makes an
    /// `fdatasync` flush data only; writing into a new (sparse) file also
    /// allocates blocks, a metadata change that costs a filesystem journal
    /// commit on every commit fsync, shared by every store on the disk.
    fn take_spare(
        &mut self,
        cap: u64,
        header: &[u8],
        path: &Path,
    ) -> Result<Option<File>, StoreError> {
        if !self.has_spare {
            return Ok(None);
        }
        self.has_spare = false;
        let spare = self.dir.join(SPARE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&spare)
            .map_err(|e| io("opening", &spare, e))?;
        let len = file.metadata().map_err(|e| io("reading", &spare, e))?.len();
        if len != cap {
            drop(file);
            std::fs::remove_file(&spare).map_err(|e| io("removing", &spare, e))?;
            return Ok(None);
        }
        file.write_all_at(header, 0)
            .and_then(|()| file.sync_data())
            .map_err(|e| io("reusing", &spare, e))?;
        std::fs::rename(&spare, path).map_err(|e| io("reusing", &spare, e))?;
        Ok(Some(file))
    }

    /// Syncs the current segment and starts the next one after the log's
    /// end, carrying the stable index over, with room for a `room`-byte
    /// record after that.
    fn roll_over(&mut self, room: u64) -> Result<(), StoreError> {
        self.sync()?;
        let seq = self.current().seq + 1;
        self.create_segment(seq, self.last, room + RECORD_HEADER as u64)?;
        if self.stable > 0 {
            self.write_marker(Kind::Stable, self.stable)?;
        }
        Ok(())
    }

    /// Rolls over unless a `len`-byte record fits the current segment.
    fn ensure_room(&mut self, len: u64) -> Result<(), StoreError> {
        if self.current().end + len > self.current().cap {
            self.roll_over(len)?;
        }
        Ok(())
    }

    /// Writes the record in `self.buf` at the end of the current segment
    /// (which has room for it); returns where its body is.
    fn write_buf(&mut self) -> Result<u64, StoreError> {
        let len = self.buf.len() as u64;
        let n = self.segments.len() - 1;
        let seg = &mut self.segments[n];
        let at = seg.end;
        seg.file
            .write_all_at(&self.buf, at)
            .map_err(|e| io("writing", &seg.path, e))?;
        seg.end = at + len;
        self.dirty = true;
        Ok(at + RECORD_HEADER as u64)
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

    /// Replaces the whole log with an empty one starting after `start`
    /// (a snapshot install whose log did not hold its base), durably.
    pub(super) fn reset(&mut self, start: LogPosition) -> Result<(), StoreError> {
        let next = self.current().seq + 1;
        // Oldest first, each durably: what a crash leaves is a suffix.
        for seg in self.segments.drain(..) {
            std::fs::remove_file(&seg.path).map_err(|e| io("removing", &seg.path, e))?;
            sync_dir(&self.dir)?;
        }
        self.dirty = false;
        self.base = start;
        self.create_segment(next, start, 0)?;
        if self.stable > 0 {
            self.write_marker(Kind::Stable, self.stable)?;
            self.sync()?;
        }
        Ok(())
    }

    /// Whether [`SegmentLog::drop_through`] would delete a file.
    pub(super) fn reclaimable(&self, base: u64) -> bool {
        self.segments.len() > 1 && self.segments[0].last_index() <= base
    }

    /// Deletes the oldest segments whose entries are all at or below `base`
    /// (which must be durable), never the current one.
    pub(super) fn drop_through(&mut self, base: u64) -> Result<(), StoreError> {
        while self.reclaimable(base) {
            // Oldest first, each durably: what a crash leaves is a suffix.
            let seg = self.segments.remove(0);
            if !self.has_spare && seg.cap == self.segment_bytes {
                // Kept for the next segment (see `take_spare`).
                let spare = self.dir.join(SPARE);
                std::fs::rename(&seg.path, &spare).map_err(|e| io("renaming", &seg.path, e))?;
                self.has_spare = true;
            } else {
                std::fs::remove_file(&seg.path).map_err(|e| io("removing", &seg.path, e))?;
            }
            sync_dir(&self.dir)?;
        }
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

/// Reads as much of `buf` as the file holds at `at`.
fn read_at(file: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], at + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
#[path = "segment_log_tests.rs"]
mod tests;
