//! The bytes of [`super::segment_log`]'s files: a segment header, then
//! records, each with its own CRC. Pure encoding and decoding, no I/O.
//!
//! Segment header ([`SEGMENT_HEADER`] bytes): the magic `SMQSEG01`, the
//! segment's sequence number, the position of the entry just before the
//! segment's first one (epoch then index), the segment's *nonce* (random,
//! drawn when the file is started) and a CRC32 of those 40 bytes. All
//! integers are little-endian.
//!
//! Record header ([`RECORD_HEADER`] bytes): body length (`u32`), CRC32
//! (`u32`) of everything after it (the rest of the header and the body), the
//! kind (`u8`, three bytes of padding), a count (`u32`), an index (`u64`)
//! and the segment's nonce (`u64`), which also salts the CRC.
//! - [`Kind::Entries`]: `count` entries from `index` on; the body holds, per
//!   entry, its epoch (`u64`), payload length (`u32`) and payload.
//! - [`Kind::Stable`]: the stable index is `index` from here on; no body.
//! - [`Kind::Truncate`]: every entry after `index` is gone; no body.
//!
//! The end of a segment's records is the first header of zeros, or of
//! another nonce: bytes a reused file held before, or a record forged in a
//! message body, which cannot know the nonce.
//! A header that is neither, but whose record does not check out (short,
//! CRC mismatch, unknown kind), is a torn write.

use bytes::Bytes;

use super::StoreError;
use crate::position::{Entry, LogPosition};

/// Bytes of a segment's header.
pub(super) const SEGMENT_HEADER: usize = 48;
/// Bytes of a record's header.
pub(super) const RECORD_HEADER: usize = 32;
/// Bytes in front of each payload in an entries record: epoch and length.
pub(super) const ENTRY_HEADER: usize = 12;
/// Payload bytes in one entries record at most (a single larger entry gets
/// one of its own): a catch-up read of one entry reads its whole record.
pub(super) const RECORD_BYTES_MAX: usize = 256 * 1024;
const SEGMENT_MAGIC: &[u8; 8] = b"SMQSEG01";

/// How many of `entries` go in the next record, and their payload bytes:
/// as many as fit in [`RECORD_BYTES_MAX`], and at least one.
pub(super) fn next_run(entries: &[Entry]) -> (usize, usize) {
    let mut bytes = 0;
    let mut n = 0;
    while n < entries.len() && (n == 0 || bytes + entries[n].payload.len() <= RECORD_BYTES_MAX) {
        bytes += entries[n].payload.len();
        n += 1;
    }
    (n, bytes)
}

/// What a record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A run of entries appended together.
    Entries = 1,
    /// The stable index.
    Stable = 2,
    /// A conflict truncation: entries after `index` are gone.
    Truncate = 3,
}

/// A record's header, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Head {
    pub kind: Kind,
    pub count: u32,
    pub index: u64,
    /// Bytes of the body.
    pub body: usize,
}

/// What lies at an offset of a segment.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Scanned {
    /// A whole record with a matching CRC.
    Record(Head),
    /// No more records (zeros, or bytes of another segment's life).
    End,
    /// A record cut short or damaged; the reason.
    Torn(String),
}

fn crc(seq: u64, bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(bytes);
    h.finalize()
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// A segment's header.
pub(super) fn encode_segment_header(
    seq: u64,
    nonce: u64,
    prev: LogPosition,
) -> [u8; SEGMENT_HEADER] {
    let mut h = [0u8; SEGMENT_HEADER];
    h[..8].copy_from_slice(SEGMENT_MAGIC);
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..24].copy_from_slice(&prev.epoch.to_le_bytes());
    h[24..32].copy_from_slice(&prev.index.to_le_bytes());
    h[32..40].copy_from_slice(&nonce.to_le_bytes());
    let sum = crc(seq, &h[..40]);
    h[40..44].copy_from_slice(&sum.to_le_bytes());
    h
}

/// The position before segment `seq`'s first entry and its nonce, from its
/// header.
pub(super) fn decode_segment_header(seq: u64, h: &[u8]) -> Result<(LogPosition, u64), StoreError> {
    let bad = |why: &str| StoreError::Corrupt(format!("log segment {seq}: {why}"));
    if h.len() < SEGMENT_HEADER {
        return Err(bad("shorter than its header"));
    }
    if &h[..8] != SEGMENT_MAGIC {
        return Err(bad("not a segment (bad magic)"));
    }
    if u64_at(h, 8) != seq || u32_at(h, 40) != crc(seq, &h[..40]) {
        return Err(bad("header does not check out"));
    }
    Ok((
        LogPosition::new(u64_at(h, 16), u64_at(h, 24)),
        u64_at(h, 32),
    ))
}

/// Appends to `out` one record of the segment of nonce `seq` holding `entries` (at least
/// one, consecutive).
pub(super) fn encode_entries(
    out: &mut Vec<u8>,
    seq: u64,
    entries: &[Entry],
) -> Result<(), StoreError> {
    let start = out.len();
    out.resize(start + RECORD_HEADER, 0);
    for entry in entries {
        let len = u32::try_from(entry.payload.len()).map_err(|_| {
            StoreError::Misuse(format!(
                "log entry {} of {} bytes: more than a record can hold",
                entry.pos,
                entry.payload.len()
            ))
        })?;
        out.extend_from_slice(&entry.pos.epoch.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&entry.payload);
    }
    let body = out.len() - start - RECORD_HEADER;
    let count = u32::try_from(entries.len())
        .map_err(|_| StoreError::Misuse("too many entries in one record".into()))?;
    let first = entries.first().map_or(0, |e| e.pos.index);
    finish_header(&mut out[start..], seq, Kind::Entries, count, first, body)
}

/// Appends to `out` a record without a body.
pub(super) fn encode_marker(out: &mut Vec<u8>, seq: u64, kind: Kind, index: u64) {
    let start = out.len();
    out.resize(start + RECORD_HEADER, 0);
    // A marker's body is empty: it always fits.
    let _ = finish_header(&mut out[start..], seq, kind, 0, index, 0);
}

fn finish_header(
    rec: &mut [u8],
    seq: u64,
    kind: Kind,
    count: u32,
    index: u64,
    body: usize,
) -> Result<(), StoreError> {
    let body = u32::try_from(body)
        .map_err(|_| StoreError::Misuse(format!("a log record of {body} bytes")))?;
    rec[..4].copy_from_slice(&body.to_le_bytes());
    rec[8] = kind as u8;
    rec[12..16].copy_from_slice(&count.to_le_bytes());
    rec[16..24].copy_from_slice(&index.to_le_bytes());
    rec[24..32].copy_from_slice(&seq.to_le_bytes());
    let sum = crc(seq, &rec[8..]);
    rec[4..8].copy_from_slice(&sum.to_le_bytes());
    Ok(())
}

/// The header at the start of `head` (at least [`RECORD_HEADER`] bytes) in
/// the segment of nonce `seq`, whose file has `room` bytes from this offset on. The body
/// is checked separately ([`check_body`]) once read.
pub(super) fn scan_head(seq: u64, head: &[u8], room: u64) -> Scanned {
    if head.len() < RECORD_HEADER {
        return Scanned::End;
    }
    if head[..RECORD_HEADER].iter().all(|&b| b == 0) || u64_at(head, 24) != seq {
        return Scanned::End;
    }
    let kind = match head[8] {
        1 => Kind::Entries,
        2 => Kind::Stable,
        3 => Kind::Truncate,
        k => return Scanned::Torn(format!("record of unknown kind {k}")),
    };
    let body = u32_at(head, 0) as usize;
    if (RECORD_HEADER + body) as u64 > room {
        return Scanned::Torn(format!("record of {body} bytes runs past the file"));
    }
    if kind != Kind::Entries && body != 0 {
        return Scanned::Torn(format!("{kind:?} record with a body"));
    }
    Scanned::Record(Head {
        kind,
        count: u32_at(head, 12),
        index: u64_at(head, 16),
        body,
    })
}

/// Whether `head` (the header bytes) and `body` have the CRC the header says.
pub(super) fn check_body(seq: u64, head: &[u8], body: &[u8]) -> bool {
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(&head[8..RECORD_HEADER]);
    h.update(body);
    h.finalize() == u32_at(head, 4)
}

/// Walks an entries record's body: the position of each of its `count`
/// entries from `first` on, and where its payload lies. Refuses a body whose
/// entries do not fill it exactly.
pub(super) fn walk_entries(
    first: u64,
    count: u32,
    body: &[u8],
    mut each: impl FnMut(LogPosition, std::ops::Range<usize>),
) -> Result<(), StoreError> {
    let corrupt = |why: String| StoreError::Corrupt(format!("log record at {first}: {why}"));
    let mut at = 0;
    for i in 0..u64::from(count) {
        let header = body
            .get(at..at + ENTRY_HEADER)
            .ok_or_else(|| corrupt("cut short".into()))?;
        let epoch = u64_at(header, 0);
        let len = u32_at(header, 8) as usize;
        let start = at + ENTRY_HEADER;
        at = start + len;
        if at > body.len() {
            return Err(corrupt("cut short".into()));
        }
        each(LogPosition::new(epoch, first + i), start..at);
    }
    if at != body.len() {
        return Err(corrupt(format!(
            "{} bytes after its last entry",
            body.len() - at
        )));
    }
    Ok(())
}

/// The entries of a record body with index in `from..=to`, pushed onto `out`
/// sharing `body`.
pub(super) fn decode_entries(
    first: u64,
    count: u32,
    body: &Bytes,
    from: u64,
    to: u64,
    out: &mut Vec<Entry>,
) -> Result<(), StoreError> {
    walk_entries(first, count, body, |pos, range| {
        if pos.index >= from && pos.index <= to {
            out.push(Entry {
                pos,
                payload: body.slice(range),
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_torn_not_a_panic() {
        let entries = vec![
            Entry::new(3, 7, "a"),
            Entry::new(4, 8, ""),
            Entry::new(4, 9, "ccc"),
        ];
        let mut out = Vec::new();
        encode_entries(&mut out, 5, &entries).unwrap();
        encode_marker(&mut out, 5, Kind::Stable, 8);
        let Scanned::Record(head) = scan_head(5, &out, out.len() as u64) else {
            panic!("not a record")
        };
        assert_eq!((head.kind, head.count, head.index), (Kind::Entries, 3, 7));
        let body = Bytes::copy_from_slice(&out[RECORD_HEADER..RECORD_HEADER + head.body]);
        assert!(check_body(5, &out, &body));
        let mut back = Vec::new();
        decode_entries(7, 3, &body, 8, 9, &mut back).unwrap();
        assert_eq!(back, entries[1..].to_vec());
        let rest = &out[RECORD_HEADER + head.body..];
        assert_eq!(
            scan_head(5, rest, rest.len() as u64),
            Scanned::Record(Head {
                kind: Kind::Stable,
                count: 0,
                index: 8,
                body: 0
            })
        );
        // Another segment's bytes, zeros, a short file, a flipped bit.
        assert_eq!(scan_head(6, &out, out.len() as u64), Scanned::End);
        assert_eq!(scan_head(5, &[0; RECORD_HEADER], 100), Scanned::End);
        assert!(matches!(scan_head(5, &out, 40), Scanned::Torn(_)));
        let mut flipped = body.to_vec();
        flipped[3] ^= 1;
        assert!(!check_body(5, &out, &flipped));
        // A body that does not hold what the header says.
        assert!(decode_entries(7, 4, &body, 0, 99, &mut back).is_err());
        assert!(decode_entries(7, 2, &body, 0, 99, &mut back).is_err());
        assert!(decode_entries(7, 3, &body.slice(..body.len() - 1), 0, 99, &mut back).is_err());
    }

    #[test]
    fn segment_headers_check_their_sequence_and_crc() {
        let h = encode_segment_header(9, 77, LogPosition::new(2, 41));
        assert_eq!(
            decode_segment_header(9, &h).unwrap(),
            (LogPosition::new(2, 41), 77)
        );
        assert!(decode_segment_header(8, &h).is_err());
        let mut bad = h;
        bad[20] ^= 1;
        assert!(decode_segment_header(9, &bad).is_err());
        assert!(decode_segment_header(9, &h[..10]).is_err());
    }
}
