//! The files of one run of paged records: append-only segment files at
//! logical positions (bytes since the run began), a pending tail in RAM, and
//! deletion of whole files once nothing before a position is needed.
//!
//! Shared by a queue's [`Run`](super::run::Run), read from the front, and a
//! stream's [`StreamPages`](super::stream::StreamPages), read at any offset.
//! What each record is and where it starts is the owner's index; this only
//! stores bytes.

use super::PagingError;
use super::record;
use crate::broker::message::QueuedMessage;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// A segment file is closed for writing once it holds this much.
const SEGMENT_BYTES: u64 = 64 << 20;
/// Appended records wait in RAM until this much is pending, then go to the file
/// in one write.
const FLUSH_BYTES: usize = 256 << 10;

#[derive(Debug)]
struct Segment {
    /// Logical position of the file's first byte.
    start: u64,
    /// Bytes written to the file.
    len: u64,
    file: File,
    path: PathBuf,
}

/// See the module docs.
#[derive(Debug)]
pub(super) struct PageFiles {
    dir: PathBuf,
    run_id: u64,
    next_segment: u64,
    segments: VecDeque<Segment>,
    /// Logical end of what the files hold.
    flushed_end: u64,
    /// Records after `flushed_end`, not yet written.
    pending: Vec<u8>,
    /// A write failed: logged once, then records stay pending in RAM.
    write_failed: bool,
}

impl PageFiles {
    /// No files yet; they will be named `<run_id>-<n>.pages` in `dir`.
    pub(super) fn new(dir: PathBuf, run_id: u64) -> PageFiles {
        PageFiles {
            dir,
            run_id,
            next_segment: 0,
            segments: VecDeque::new(),
            flushed_end: 0,
            pending: Vec::new(),
            write_failed: false,
        }
    }

    /// Logical position the next record gets.
    pub(super) fn end(&self) -> u64 {
        self.flushed_end + self.pending.len() as u64
    }

    /// Append the record of `m`; returns its length. The pending tail goes to
    /// the file once it is large enough.
    pub(super) fn append(&mut self, m: &QueuedMessage) -> usize {
        let rec_len = record::encode(m, &mut self.pending);
        if self.pending.len() >= FLUSH_BYTES {
            self.flush();
        }
        rec_len
    }

    /// Delete the files that end at or before `pos`: nothing before it will
    /// be read again.
    pub(super) fn forget_below(&mut self, pos: u64) {
        while self
            .segments
            .front()
            .is_some_and(|s| s.start + s.len <= pos)
        {
            if let Some(s) = self.segments.pop_front() {
                remove_file(&s.path);
            }
        }
    }

    /// Write the pending records. A failed write (disk full) keeps them in RAM
    /// and is tried again at the next flush: correct, only not bounded.
    pub(super) fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        match self.try_flush() {
            Ok(()) => self.write_failed = false,
            Err(e) => {
                if !self.write_failed {
                    tracing::error!(
                        "paging: writing to {}: {e}; keeping records in RAM",
                        self.dir.display()
                    );
                }
                self.write_failed = true;
            }
        }
    }

    fn try_flush(&mut self) -> std::io::Result<()> {
        if self.segments.back().is_none_or(|s| s.len >= SEGMENT_BYTES) {
            let path = self
                .dir
                .join(format!("{}-{}.pages", self.run_id, self.next_segment));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)?;
            self.next_segment += 1;
            self.segments.push_back(Segment {
                start: self.flushed_end,
                len: 0,
                file,
                path,
            });
        }
        let Some(seg) = self.segments.back_mut() else {
            return Ok(());
        };
        seg.file.write_all_at(&self.pending, seg.len)?;
        seg.len += self.pending.len() as u64;
        self.flushed_end += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    /// Bytes `[pos, pos + len)`, from the files and the pending tail.
    pub(super) fn read_range(&self, pos: u64, len: usize) -> Result<Vec<u8>, PagingError> {
        let mut out = vec![0u8; len];
        let end = pos + len as u64;
        let mut at = pos;
        for seg in &self.segments {
            let seg_end = seg.start + seg.len;
            if seg_end <= at || at >= end.min(self.flushed_end) {
                continue;
            }
            let upto = end.min(seg_end);
            let dst = &mut out[(at - pos) as usize..(upto - pos) as usize];
            seg.file
                .read_exact_at(dst, at - seg.start)
                .map_err(|e| PagingError::Read(seg.path.display().to_string(), e))?;
            at = upto;
        }
        if at < end {
            let from = at
                .checked_sub(self.flushed_end)
                .ok_or(PagingError::Missing(at))? as usize;
            let src = self
                .pending
                .get(from..from + (end - at) as usize)
                .ok_or(PagingError::Missing(at))?;
            out[(at - pos) as usize..].copy_from_slice(src);
        }
        Ok(out)
    }
}

impl Drop for PageFiles {
    fn drop(&mut self) {
        for s in &self.segments {
            remove_file(&s.path);
        }
    }
}

/// Delete a file no run needs any more. A failure only leaves garbage that
/// the next boot wipes.
fn remove_file(path: &std::path::Path) {
    if let Err(e) = std::fs::remove_file(path) {
        tracing::warn!("paging: removing {}: {e}", path.display());
    }
}
