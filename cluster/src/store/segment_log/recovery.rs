//! Opening a log: crash recovery replays every record. Entries must
//! continue the log, a `Truncate` marker cuts it, a `Stable` marker records
//! the stable index. The first record that does not check out in the newest
//! segment is a torn tail (never synced): it and everything after it are
//! cut. Anywhere else it is corruption, and the store refuses to open. A
//! newest segment whose creation a crash cut short (no header on disk)
//! holds nothing and is removed.
//!
//! Wherever the newest segment's records end (a torn record, or a header
//! that is not one of this segment's: the end), the file is zeroed from
//! there on open (`zero_tail`). Stopping at the end is not enough: valid
//! records of the segment's own nonce can lie behind it (a multi-page write
//! whose later page reached the disk and whose first did not), and the next
//! append overwrites the end, so the open after it would walk on into them
//! and replay them over what was appended (found by afl:
//! `fuzz/regressions/segment_log/`).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;

use super::files::{io, list, read_at, segment_path, sync_dir, zero_tail};
use super::prepare::{PREPARED, PREPARING};
use super::{Record, SPARE, Segment, SegmentLog};
use crate::position::LogPosition;
use crate::store::StoreError;
use crate::store::segment_record::{self as rec, Kind, RECORD_HEADER, Scanned};

impl SegmentLog {
    /// Open the log in `dir`, creating it (starting after `start`) if there
    /// is none; see the module docs.
    pub(in crate::store) fn open(
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
            pending: Vec::new(),
            pending_at: 0,
            dirty: false,
            has_spare: false,
            has_prepared: dir.join(PREPARED).exists(),
            preparer: None,
        };
        // A zero-fill a crash cut short.
        let preparing = dir.join(PREPARING);
        if preparing.exists() {
            std::fs::remove_file(&preparing).map_err(|e| io("removing", &preparing, e))?;
        }
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
        self.segments
            .push(Segment::empty(seq, nonce, path.clone(), file, prev, cap));
        let mut head = [0u8; RECORD_HEADER];
        loop {
            let at = self.current().end;
            let room = cap.saturating_sub(at);
            let n = read_at(&self.current().file, &mut head, at)
                .map_err(|e| io("reading", &path, e))?;
            let torn = match rec::scan_head(nonce, &head[..n], room) {
                Scanned::End => {
                    if newest {
                        zero_tail(&self.current().file, at, cap)
                            .map_err(|e| io("zeroing the end of", &path, e))?;
                    }
                    break;
                }
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
            zero_tail(&self.current().file, at, cap).map_err(|e| io("cutting", &path, e))?;
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
}
