//! The segment files themselves: their names, creating one (or reusing the
//! spare, a compacted file kept so that commits overwrite blocks the
//! filesystem already allocated), rolling over to the next, and deleting
//! them on compaction or reset; and the IO helpers that name the file in
//! their errors.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::prepare::{PREPARED, Preparer};
use super::{SPARE, SUFFIX, Segment, SegmentLog};
use crate::position::LogPosition;
use crate::store::StoreError;
use crate::store::segment_record::{self as rec, Kind, RECORD_HEADER};

pub(super) fn io(what: &str, path: &Path, err: std::io::Error) -> StoreError {
    StoreError::Io(std::io::Error::new(
        err.kind(),
        format!("{what} {}: {err}", path.display()),
    ))
}

/// fsync a directory, so that files created, renamed or removed in it stay so.
pub(in crate::store) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("syncing directory", dir, e))
}

pub(super) fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}{SUFFIX}"))
}

/// The sequence numbers of the segments in `dir`, oldest first.
pub(super) fn list(dir: &Path) -> Result<Vec<u64>, StoreError> {
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

/// The file at `from`, of size `cap`, renamed to `path` with its new
/// header written and synced under its old name first, so a file named as
/// a segment always has a whole header. A file of another size (made under
/// another segment size) is removed instead.
fn reuse(from: &Path, cap: u64, header: &[u8], path: &Path) -> Result<Option<File>, StoreError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(from)
        .map_err(|e| io("opening", from, e))?;
    let len = file.metadata().map_err(|e| io("reading", from, e))?.len();
    if len != cap {
        drop(file);
        std::fs::remove_file(from).map_err(|e| io("removing", from, e))?;
        return Ok(None);
    }
    file.write_all_at(header, 0)
        .and_then(|()| file.sync_data())
        .map_err(|e| io("reusing", from, e))?;
    std::fs::rename(from, path).map_err(|e| io("reusing", from, e))?;
    Ok(Some(file))
}

/// Makes `file` `len` bytes long with its blocks allocated up front
/// (`fallocate`), or, where the filesystem cannot, sparse.
///
/// Why not sparse: commits then allocate blocks as they go, and with
/// several stores committing side by side on one disk (a co-located
/// cluster) each file's blocks interleave with the others'. On ext4 the
/// extent tree of such a file outgrows the inode, and the commits'
/// unwritten-extent conversions then allocated and freed extent blocks
/// (`ext4:ext4_free_blocks` in a kworker): about 2,400 frees in a 10 s S5
/// run on fresh stores, nearly all on the first segment, each a discard on
/// a disk mounted with `-o discard`; in one traced run every store's fsync
/// stalled for 45-54 ms at once during such a burst. With the first segment
/// allocated up front: 30-110 frees per run. Zeros (`prepare`) would be
/// better still, but cost a write.
pub(super) fn allocate(file: &File, len: u64) -> std::io::Result<()> {
    use rustix::fs::{FallocateFlags, fallocate};
    match fallocate(file, FallocateFlags::empty(), 0, len) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => {
            file.set_len(len)
        }
        Err(e) => Err(e.into()),
    }
}

/// Zeroes `file` from `at` to `len` and syncs it, keeping its blocks
/// allocated: `fallocate(ZERO_RANGE)` where the filesystem has it, else the
/// tail cut off and allocated again (`allocate`, sparse where it cannot).
/// Recovery calls it after the newest segment's last good record, so no
/// byte behind it (a torn write, or a reused file's old records) can ever
/// be read as a record once the next append overwrites the end.
pub(super) fn zero_tail(file: &File, at: u64, len: u64) -> std::io::Result<()> {
    use rustix::fs::{FallocateFlags, fallocate};
    if at < len {
        match fallocate(file, FallocateFlags::ZERO_RANGE, at, len - at) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => {
                file.set_len(at)?;
                allocate(file, len)?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    file.sync_data()
}

/// How far from its start `file` lies in written extents, as the
/// filesystem's extent map (`FIEMAP`) has it; `None` where the filesystem
/// keeps no such map (tmpfs). See `SegmentLog::zero_ahead` for why.
pub(super) fn written_prefix(file: &File) -> std::io::Result<Option<u64>> {
    use fiemap::FiemapExtentFlags as F;
    let mut end = 0;
    for extent in fiemap::Fiemap::new(file) {
        let extent = match extent {
            Ok(extent) => extent,
            // No extent map here (tmpfs answers EOPNOTSUPP, others ENOTTY,
            // ENOSYS or EINVAL): nothing to convert either, as far as the
            // log can know.
            Err(e)
                if [
                    rustix::io::Errno::OPNOTSUPP,
                    rustix::io::Errno::NOTTY,
                    rustix::io::Errno::NOSYS,
                    rustix::io::Errno::INVAL,
                ]
                .iter()
                .any(|n| e.raw_os_error() == Some(n.raw_os_error())) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let pending = F::UNWRITTEN | F::DELALLOC | F::UNKNOWN;
        if extent.fe_logical > end || extent.fe_flags.intersects(pending) {
            break;
        }
        end = extent.fe_logical + extent.fe_length;
    }
    Ok(Some(end))
}

/// `written_prefix` of a segment, `u64::MAX` where the filesystem cannot
/// tell.
fn known_written(seg: &Segment) -> Result<u64, StoreError> {
    Ok(written_prefix(&seg.file)
        .map_err(|e| io("mapping the extents of", &seg.path, e))?
        .unwrap_or(u64::MAX))
}

/// Reads as much of `buf` as the file holds at `at`.
pub(super) fn read_at(file: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
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

/// Zeros written ahead of the commits at a time (see
/// `SegmentLog::zero_ahead`): one extra write and fdatasync per MiB of log
/// where no prepared or reused file was ready.
pub(super) const ZERO_AHEAD: u64 = 1024 * 1024;

/// Zeros to write from.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// Writes zeros over bytes `from..to` of `file` (not synced).
pub(super) fn write_zeros(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZEROS.len() as u64) as usize;
        file.write_all_at(&ZEROS[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

impl SegmentLog {
    /// Creates segment `seq` after `prev`, durably, as the current one.
    pub(super) fn create_segment(
        &mut self,
        seq: u64,
        prev: LogPosition,
        room: u64,
    ) -> Result<(), StoreError> {
        let path = segment_path(&self.dir, seq);
        let cap = self.segment_bytes.max(rec::SEGMENT_HEADER as u64 + room);
        // Never 0: a header of zeros is the end of a segment.
        let nonce = rand::random::<u64>() | 1;
        let header = rec::encode_segment_header(seq, nonce, prev);
        let reused = match self.take_spare(cap, &header, &path)? {
            Some(file) => Some(file),
            None => self.take_prepared(cap, &header, &path)?,
        };
        let file = match reused {
            Some(file) => file,
            None => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(|e| io("creating", &path, e))?;
                file.write_all_at(&header, 0)
                    .and_then(|()| allocate(&file, cap))
                    .and_then(|()| file.sync_all())
                    .map_err(|e| io("creating", &path, e))?;
                file
            }
        };
        sync_dir(&self.dir)?;
        self.segments
            .push(Segment::empty(seq, nonce, path, file, prev, cap));
        self.last = prev;
        Ok(())
    }

    /// Makes bytes `from..end` of the current segment (where a commit is
    /// about to go; nothing the log holds lies at or after `from`) lie in
    /// written extents, zero-filling ahead of the commits where they do
    /// not, so that no commit's fdatasync depends on a metadata change.
    ///
    /// Why: ext4 (with `dioread_nolock`, its default) writes into unwritten
    /// extents (`fallocate`, `ZERO_RANGE`, new blocks) by converting them
    /// once the data is on the device. When that conversion fails (a journal
    /// write failing under it), the kernel logs "failed to convert unwritten
    /// extents to written extents -- potential data loss!", the extent map
    /// in memory may already say written, and the fdatasync that waited
    /// for the data returns 0; after a remount the range reads as zeros,
    /// and the commit was confirmed. The EIO test
    /// (`compat-tests/tests/full_disk/eio.rs`) lost the last confirmed
    /// messages this way in about one run in 15. A conversion here, for
    /// zeros, that fails that way stops the filesystem (read-only) before
    /// the commit goes down, so the commit's own write fails instead.
    pub(super) fn zero_ahead(&mut self, from: u64, end: u64) -> Result<(), StoreError> {
        let seg = self.current_mut();
        if seg.written >= end {
            return Ok(());
        }
        seg.written = known_written(seg)?;
        if seg.written >= end {
            return Ok(());
        }
        let start = seg.written.max(from);
        let to = end.max(start + ZERO_AHEAD).min(seg.cap);
        write_zeros(&seg.file, start, to)
            .and_then(|()| seg.file.sync_data())
            .map_err(|e| io("zero-filling", &seg.path, e))?;
        seg.written = known_written(seg)?;
        if seg.written < end {
            let err = std::io::Error::other(format!(
                "Input/output error: bytes {}..{end} are not in written extents after a \
                 zero-fill and fdatasync",
                seg.written
            ));
            return Err(io("zero-filling", &seg.path, err));
        }
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
        reuse(&self.dir.join(SPARE), cap, header, path)
    }

    /// The prepared (zeroed) file as the segment at `path`, if it is
    /// ready; as [`SegmentLog::take_spare`]. A bigger segment (for a big
    /// record) leaves it for the next one.
    fn take_prepared(
        &mut self,
        cap: u64,
        header: &[u8],
        path: &Path,
    ) -> Result<Option<File>, StoreError> {
        if let Some(p) = self.preparer.take_if(|p| p.is_finished()) {
            match p.join() {
                Ok(()) => self.has_prepared = true,
                Err(e) => tracing::warn!(
                    dir = %self.dir.display(),
                    error = %e,
                    "zero-filling the next segment failed; it will be allocated with fallocate"
                ),
            }
        }
        if !self.has_prepared || cap != self.segment_bytes {
            return Ok(None);
        }
        self.has_prepared = false;
        reuse(&self.dir.join(PREPARED), cap, header, path)
    }

    /// Start zero-filling the next segment once the current one is a quarter
    /// full, unless a file is waiting to be reused (see `prepare`).
    pub(super) fn prepare_if_due(&mut self) {
        let seg = self.current();
        if self.preparer.is_some()
            || self.has_prepared
            || self.has_spare
            || seg.end.saturating_mul(4) < seg.cap
        {
            return;
        }
        match Preparer::start(&self.dir, self.segment_bytes) {
            Ok(p) => self.preparer = Some(p),
            Err(e) => tracing::warn!(error = %e, "starting the segment preparer failed"),
        }
    }

    /// Syncs the current segment and starts the next one after the log's
    /// end, carrying the stable index over, with room for a `room`-byte
    /// record after that.
    pub(super) fn roll_over(&mut self, room: u64) -> Result<(), StoreError> {
        self.sync()?;
        let seq = self.current().seq + 1;
        self.create_segment(seq, self.last, room + RECORD_HEADER as u64)?;
        if self.stable > 0 {
            self.write_marker(Kind::Stable, self.stable)?;
        }
        Ok(())
    }

    /// Replaces the whole log with an empty one starting after `start`
    /// (a snapshot install whose log did not hold its base), durably.
    pub(in crate::store) fn reset(&mut self, start: LogPosition) -> Result<(), StoreError> {
        let next = self.current().seq + 1;
        // Oldest first, each durably: what a crash leaves is a suffix.
        // What was not written belongs to the files going.
        self.pending.clear();
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
    pub(in crate::store) fn reclaimable(&self, base: u64) -> bool {
        self.segments.len() > 1 && self.segments[0].last_index() <= base
    }

    /// Deletes the oldest segments whose entries are all at or below `base`
    /// (which must be durable), never the current one.
    pub(in crate::store) fn drop_through(&mut self, base: u64) -> Result<(), StoreError> {
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
}
