//! The segment-log fuzz target (re-exported as
//! [`crate::fuzz::segment_log`]): it lives here because the log and its
//! record format are private to the store.

use std::path::Path;

use bytes::Bytes;

use super::segment_log::SegmentLog;
use super::segment_record::{self as rec, RECORD_HEADER, SEGMENT_HEADER};
use crate::position::{Entry, LogPosition};

/// Small segments, so that an append after recovery may roll over.
const SEGMENT_BYTES: u64 = 64 * 1024;
/// Entries read back after an open, at most (a fuzzed log is small anyway).
const MAX_READ: u64 = 4096;

/// Writes `data` as the segment files of a log in `dir` (empty, on a
/// tmpfs for speed) and opens it as a store does after a crash, then checks
/// what must hold for any files: no panic (a damaged log is a
/// [`super::StoreError`]); a log that opens reads back every entry from its
/// start to its last, each where `position` says; opening it again (after
/// recovery cut a torn tail) finds the same log; and an entry appended then
/// is there after another reopen.
///
/// Input: a flags octet, then the bytes after each segment's header.
/// Flag bit 0: fix each record's nonce and CRC up, so the fuzzer reaches
/// what lies behind them (a real writer's records always check out); bit 1:
/// two segments, split at the second octet × 16; bits 2-7: the first
/// segment's start index. Segment headers are always whole and valid: the
/// unit tests cover damaged ones.
pub fn segment_log(dir: &Path, data: &[u8]) {
    let Some((&[flags, split], body)) = data.split_first_chunk::<2>() else {
        return;
    };
    let repair = flags & 1 != 0;
    let start = LogPosition::new(1, u64::from(flags >> 2));
    let parts = if flags & 2 != 0 {
        let at = (usize::from(split) * 16).min(body.len());
        vec![&body[..at], &body[at..]]
    } else {
        vec![body]
    };
    let mut prev = start;
    for (i, part) in parts.iter().enumerate() {
        let seq = i as u64 + 1;
        let nonce = 0x5eed_0000 + seq;
        let mut file = rec::encode_segment_header(seq, nonce, prev).to_vec();
        file.extend_from_slice(part);
        prev = walk_records(&mut file, nonce, repair, prev);
        let path = dir.join(format!("{seq:020}.seg"));
        if std::fs::write(&path, &file).is_err() {
            return;
        }
    }

    let Some(first) = open_and_check(dir) else {
        return;
    };
    let again = open_and_check(dir).expect("a log that opened once opens again");
    assert_eq!(first, again, "opening the log twice found different logs");

    // Recovery leaves a log that takes appends.
    let Ok(mut log) = SegmentLog::open(dir, LogPosition::default(), SEGMENT_BYTES) else {
        panic!("a log that opened twice does not open a third time");
    };
    let last = log.last();
    let next = Entry {
        pos: LogPosition::new(last.epoch.max(1), last.index + 1),
        payload: Bytes::from_static(b"appended after recovery"),
    };
    log.append(std::slice::from_ref(&next))
        .and_then(|()| log.sync())
        .expect("append after recovery");
    drop(log);
    let (_, last_after, _, entries) = open_and_check(dir).expect("reopen after an append");
    assert_eq!(last_after, next.pos);
    assert_eq!(entries.last(), Some(&next));
}

/// What an opened log holds: start, last, stable and its entries.
type Opened = (LogPosition, LogPosition, u64, Vec<Entry>);

fn open_and_check(dir: &Path) -> Option<Opened> {
    let log = SegmentLog::open(dir, LogPosition::default(), SEGMENT_BYTES).ok()?;
    let (start, last) = (log.start(), log.last());
    assert!(
        start.index <= last.index,
        "log starts at {start} after its last {last}"
    );
    let to = last.index.min(start.index + MAX_READ);
    let entries = log
        .read_range(start.index + 1, to)
        .expect("a log that opened reads back");
    let indexes: Vec<u64> = entries.iter().map(|e| e.pos.index).collect();
    let want: Vec<u64> = (start.index + 1..=to).collect();
    assert_eq!(indexes, want, "entries read back are not the log's");
    for e in &entries {
        assert_eq!(log.position(e.pos.index).ok(), Some(e.pos));
    }
    if to == last.index
        && let Some(e) = entries.last()
    {
        assert_eq!(e.pos, last);
    }
    Some((start, last, log.stable(), entries))
}

/// Walks the records after a segment's header as recovery does, and with
/// `repair` gives each the nonce and CRC a writer would have; stops where a
/// record's length runs past the file. Returns the position of the last
/// entry the records hold (ignoring truncations), as the next segment's
/// predecessor.
fn walk_records(file: &mut [u8], nonce: u64, repair: bool, mut last: LogPosition) -> LogPosition {
    let le32 = |b: &[u8], at: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&b[at..at + 4]);
        u32::from_le_bytes(w)
    };
    let le64 = |b: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let mut at = SEGMENT_HEADER;
    while at + RECORD_HEADER <= file.len() {
        let body = le32(file, at) as usize;
        let end = at + RECORD_HEADER + body;
        if end > file.len() {
            break;
        }
        if repair {
            file[at + 24..at + 32].copy_from_slice(&nonce.to_le_bytes());
            let mut h = crc32fast::Hasher::new();
            h.update(&nonce.to_le_bytes());
            h.update(&file[at + 8..end]);
            file[at + 4..at + 8].copy_from_slice(&h.finalize().to_le_bytes());
        }
        let (count, index) = (le32(file, at + 12), le64(file, at + 16));
        if file[at + 8] == 1 {
            // The epoch of the last entry whose header lies in the body.
            let mut e = at + RECORD_HEADER;
            for i in 0..u64::from(count) {
                if e + rec::ENTRY_HEADER > end {
                    break;
                }
                last = LogPosition::new(le64(file, e), index.saturating_add(i));
                e += rec::ENTRY_HEADER + le32(file, e + 8) as usize;
            }
        }
        at = end;
    }
    last
}
