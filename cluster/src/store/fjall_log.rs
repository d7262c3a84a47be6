//! The layout of [`super::FjallStore`]'s `log` keyspace: one fjall key-value
//! (a *record*) per run of consecutive entries appended together, not one per
//! entry.
//!
//! Why: fjall's cost is mostly per key-value, not per byte. In S2 (1 KB
//! persistent publishes) each entry cost a skiplist insert into the memtable
//! (about 2.3k instructions of key compares), a journal item, and a bloom
//! filter hash and block item at flush: about 4k of the whole server's 34k
//! instructions per message. A group commit appends tens to hundreds of
//! entries at once, so one record per commit (capped at [`RECORD_BYTES_MAX`])
//! pays those once per commit instead.
//!
//! Keys and values:
//! - A record's key is its first index then its last index, big-endian
//!   `u64` each (16 bytes), so key order is log order. Its value is, per
//!   entry in order, the epoch (big-endian `u64`), the payload length
//!   (big-endian `u32`) and the payload.
//! - A store written before records existed holds one entry per key: the
//!   index alone (8 bytes), valued epoch then payload. Such keys are read as
//!   one-entry records, so an old data dir opens and reads as before, and the
//!   two kinds sort together: an 8-byte key is a prefix of, so sorts before,
//!   any 16-byte key with the same first index.
//!
//! Records never overlap, and each entry is in exactly one: appends made
//! new records after the last one, and removing a suffix rewrote the
//! record it cut through as a shorter one (in the same atomic batch).
//!
//! The log is now in segment files ([`super::segment_log`]); this keyspace
//! is only read, once, by the first open of a store written before them,
//! which moves its entries there (`fjall.rs`, `migrate`). Writing is kept
//! for the tests that build such a store.

#[cfg(test)]
use std::io::Read;

use bytes::Bytes;
use fjall::Keyspace;

use super::StoreError;
use crate::position::{Entry, LogPosition};

#[cfg(test)]
/// The old format capped records as the segment log does.
use super::segment_record::RECORD_BYTES_MAX;
/// Bytes in front of each payload in a record: epoch and length.
const ENTRY_HEADER: usize = 12;
/// Key length of a one-entry key written before records existed.
const LEGACY_KEY: usize = 8;
/// Key length of a record.
const RECORD_KEY: usize = 16;

/// A record's key: first and last index.
pub(super) fn record_key(first: u64, last: u64) -> [u8; RECORD_KEY] {
    let mut key = [0u8; RECORD_KEY];
    key[..8].copy_from_slice(&first.to_be_bytes());
    key[8..].copy_from_slice(&last.to_be_bytes());
    key
}

/// The smallest key of any record starting at `first` (both kinds).
pub(super) fn start_key(first: u64) -> [u8; LEGACY_KEY] {
    first.to_be_bytes()
}

/// First and last index of the record stored under `key`.
pub(super) fn parse_key(key: &[u8]) -> Result<(u64, u64), StoreError> {
    let word = |b: &[u8]| -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        u64::from_be_bytes(w)
    };
    match key.len() {
        LEGACY_KEY => {
            let index = word(key);
            Ok((index, index))
        }
        RECORD_KEY => {
            let (first, last) = (word(&key[..8]), word(&key[8..]));
            if last < first {
                return Err(StoreError::Corrupt(format!(
                    "log record key {first}..={last} ends before it starts"
                )));
            }
            Ok((first, last))
        }
        n => Err(StoreError::Corrupt(format!(
            "log key of {n} bytes, expected {LEGACY_KEY} or {RECORD_KEY}"
        ))),
    }
}

#[cfg(test)]
/// Appends `entries` (consecutive, already checked) to `batch` as records.
pub(super) fn write_records(
    batch: &mut fjall::OwnedWriteBatch,
    log: &Keyspace,
    entries: &[Entry],
) -> Result<(), StoreError> {
    let mut rest = entries;
    while !rest.is_empty() {
        let (n, _) = super::segment_record::next_run(rest);
        let (record, tail) = rest.split_at(n);
        rest = tail;
        let (first, last) = (record[0].pos.index, record[n - 1].pos.index);
        batch.insert(log, record_key(first, last), encode_record(record)?);
    }
    Ok(())
}

#[cfg(test)]
/// A record's value, built straight into the slice fjall keeps (one
/// allocation, each payload copied once).
pub(super) fn encode_record(entries: &[Entry]) -> Result<fjall::Slice, StoreError> {
    let mut len = 0;
    for entry in entries {
        if u32::try_from(entry.payload.len()).is_err() {
            return Err(StoreError::Misuse(format!(
                "log entry {} of {} bytes: more than a record can hold",
                entry.pos,
                entry.payload.len()
            )));
        }
        len += ENTRY_HEADER + entry.payload.len();
    }
    let mut reader = RecordReader {
        entries,
        header: [0; ENTRY_HEADER],
        at: 0,
    };
    Ok(fjall::Slice::from_reader(&mut reader, len)?)
}

#[cfg(test)]
/// Reads out a record's value from its entries (see [`encode_record`]).
struct RecordReader<'a> {
    /// Entries not fully read yet; the first is the current one.
    entries: &'a [Entry],
    /// The current entry's header.
    header: [u8; ENTRY_HEADER],
    /// Bytes of the current entry (header then payload) already read.
    at: usize,
}

#[cfg(test)]
impl Read for RecordReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let Some(entry) = self.entries.first() else {
            return Ok(0);
        };
        if self.at == 0 {
            self.header[..8].copy_from_slice(&entry.pos.epoch.to_be_bytes());
            // Checked by `encode_record`.
            let len = entry.payload.len() as u32;
            self.header[8..].copy_from_slice(&len.to_be_bytes());
        }
        let n = if self.at < ENTRY_HEADER {
            let part = &self.header[self.at..];
            let n = part.len().min(buf.len());
            buf[..n].copy_from_slice(&part[..n]);
            n
        } else {
            let part = &entry.payload[self.at - ENTRY_HEADER..];
            let n = part.len().min(buf.len());
            buf[..n].copy_from_slice(&part[..n]);
            n
        };
        self.at += n;
        if self.at == ENTRY_HEADER + entry.payload.len() {
            self.entries = &self.entries[1..];
            self.at = 0;
        }
        Ok(n)
    }
}

/// The entries of the record `first..=last` stored as `value` (under a key of
/// `key_len` bytes), pushed onto `out` from index `from` on. The payloads
/// share one copy of the value.
pub(super) fn decode_record(
    key_len: usize,
    first: u64,
    last: u64,
    value: &[u8],
    from: u64,
    out: &mut Vec<Entry>,
) -> Result<(), StoreError> {
    if key_len == LEGACY_KEY {
        if first >= from {
            out.push(decode_legacy(first, value)?);
        }
        return Ok(());
    }
    let value = Bytes::copy_from_slice(value);
    let mut at = 0;
    for index in first..=last {
        let (epoch, len) = entry_header(&value, at, index)?;
        let start = at + ENTRY_HEADER;
        at = start + len;
        if index >= from {
            out.push(Entry {
                pos: LogPosition::new(epoch, index),
                payload: value.slice(start..at),
            });
        }
    }
    if at != value.len() {
        return Err(StoreError::Corrupt(format!(
            "log record {first}..={last} has {} bytes after its last entry",
            value.len() - at
        )));
    }
    Ok(())
}

/// Epoch and payload length of the entry whose header is at `at`, checked
/// against the value's length.
fn entry_header(value: &[u8], at: usize, index: u64) -> Result<(u64, usize), StoreError> {
    let corrupt = || StoreError::Corrupt(format!("log entry {index}: its record is cut short"));
    let header = value.get(at..at + ENTRY_HEADER).ok_or_else(corrupt)?;
    let mut epoch = [0u8; 8];
    epoch.copy_from_slice(&header[..8]);
    let mut len = [0u8; 4];
    len.copy_from_slice(&header[8..]);
    let len = u32::from_be_bytes(len) as usize;
    if value.len() < at + ENTRY_HEADER + len {
        return Err(corrupt());
    }
    Ok((u64::from_be_bytes(epoch), len))
}

/// A one-entry value written before records existed: epoch, then payload.
pub(super) fn decode_legacy(index: u64, value: &[u8]) -> Result<Entry, StoreError> {
    let (epoch, payload) = value.split_first_chunk::<8>().ok_or_else(|| {
        StoreError::Corrupt(format!(
            "log entry {index} has {} bytes, shorter than its epoch",
            value.len()
        ))
    })?;
    Ok(Entry {
        pos: LogPosition::new(u64::from_be_bytes(*epoch), index),
        payload: Bytes::copy_from_slice(payload),
    })
}

/// The first index of the record holding `index`, if any.
fn record_at(log: &Keyspace, index: u64) -> Result<Option<u64>, StoreError> {
    let Some(guard) = log.range(..=record_key(index, u64::MAX)).next_back() else {
        return Ok(None);
    };
    let (first, last) = parse_key(&guard.key()?)?;
    Ok((last >= index).then_some(first))
}

/// Where a forward scan for the entries from `from` on starts: the start of
/// the record holding `from`, else `from` itself.
fn scan_start(log: &Keyspace, from: u64) -> Result<[u8; LEGACY_KEY], StoreError> {
    Ok(match record_at(log, from)? {
        Some(first) => start_key(first),
        None => start_key(from),
    })
}

/// The entries from `from` to `to` (inclusive) in log order, as stored:
/// the caller checks that they are contiguous.
pub(super) fn read_entries(log: &Keyspace, from: u64, to: u64) -> Result<Vec<Entry>, StoreError> {
    let mut out = Vec::new();
    if to < from {
        return Ok(out);
    }
    let start = scan_start(log, from)?;
    let end = record_key(to, u64::MAX);
    for guard in log.range::<&[u8], _>(&start[..]..=&end[..]) {
        let (key, value) = guard.into_inner()?;
        let (first, last) = parse_key(&key)?;
        if last < from {
            continue;
        }
        decode_record(key.len(), first, last, &value, from, &mut out)?;
    }
    out.retain(|e| e.pos.index <= to);
    Ok(out)
}

/// The last index of the contiguous run of entries after `base`, and where
/// the first hole after it is (the first index present beyond it), if any.
pub(super) fn contiguous_end(log: &Keyspace, base: u64) -> Result<(u64, Option<u64>), StoreError> {
    let mut last_seen = base;
    let start = scan_start(log, base + 1)?;
    for guard in log.range(start..) {
        let (first, last) = parse_key(&guard.key()?)?;
        if last <= last_seen {
            continue;
        }
        if first > last_seen + 1 {
            return Ok((last_seen, Some(first)));
        }
        last_seen = last;
    }
    Ok((last_seen, None))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Entries of one epoch whose payload length is their index (the fjall
    /// store's tests use them too).
    pub(in crate::store) fn entries(
        epoch: u64,
        indexes: std::ops::RangeInclusive<u64>,
    ) -> Vec<Entry> {
        indexes
            .map(|i| Entry::new(epoch, i, vec![i as u8; i as usize]))
            .collect()
    }

    #[test]
    fn a_record_round_trips_from_any_index() {
        let mut record = entries(7, 3..=5);
        record[1].pos.epoch = 8;
        record[2].payload = Bytes::new();
        let value = encode_record(&record).unwrap();
        let mut out = Vec::new();
        decode_record(RECORD_KEY, 3, 5, &value, 0, &mut out).unwrap();
        assert_eq!(out, record);
        out.clear();
        decode_record(RECORD_KEY, 3, 5, &value, 4, &mut out).unwrap();
        assert_eq!(out, record[1..].to_vec());
    }

    #[test]
    fn short_values_and_bad_keys_are_corrupt_not_panics() {
        let value = encode_record(&entries(1, 1..=2)).unwrap();
        let mut out = Vec::new();
        for cut in [0, 5, 12, value.len() - 1] {
            assert!(matches!(
                decode_record(RECORD_KEY, 1, 2, &value[..cut], 0, &mut out),
                Err(StoreError::Corrupt(_))
            ));
        }
        // More entries in the value than the key says.
        assert!(matches!(
            decode_record(RECORD_KEY, 1, 1, &value, 0, &mut out),
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(
            decode_legacy(1, &[0; 7]),
            Err(StoreError::Corrupt(_))
        ));
        assert!(decode_legacy(1, &[0; 8]).unwrap().payload.is_empty());
        assert!(matches!(parse_key(&[0; 9]), Err(StoreError::Corrupt(_))));
        assert!(matches!(
            parse_key(&record_key(5, 4)),
            Err(StoreError::Corrupt(_))
        ));
        assert_eq!(parse_key(&start_key(9)).unwrap(), (9, 9));
        assert_eq!(parse_key(&record_key(9, 12)).unwrap(), (9, 12));
    }

    /// Big appends are split into records of at most `RECORD_BYTES_MAX`
    /// payload bytes, and an oversized entry gets one of its own.
    #[test]
    fn appends_are_split_into_bounded_records() {
        let dir = tempfile::tempdir().unwrap();
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let log = db
            .keyspace("log", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        let big = |i: u64, n: usize| Entry::new(1, i, vec![i as u8; n]);
        let written = vec![
            big(1, 100 * 1024),
            big(2, 100 * 1024),
            big(3, 100 * 1024),
            big(4, RECORD_BYTES_MAX + 1),
            big(5, 10),
        ];
        let mut batch = db.batch();
        write_records(&mut batch, &log, &written).unwrap();
        batch.commit().unwrap();
        let keys: Vec<(u64, u64)> = log
            .iter()
            .map(|g| parse_key(&g.key().unwrap()).unwrap())
            .collect();
        assert_eq!(keys, vec![(1, 2), (3, 3), (4, 4), (5, 5)]);
        assert_eq!(read_entries(&log, 2, 4).unwrap(), written[1..4].to_vec());
        assert_eq!(contiguous_end(&log, 0).unwrap(), (5, None));
        assert_eq!(contiguous_end(&log, 2).unwrap(), (5, None));
    }
}
