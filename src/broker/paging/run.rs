//! A run: the paged-out messages of one queue at one priority level, in id
//! order, appended to segment files and read back from the front.
//!
//! Positions are logical (bytes since the run began); each segment file holds a
//! contiguous range of them. A segment is deleted as soon as the read position
//! passes its end, so a run that is drained while it is filled (a standing
//! backlog) uses disk for what it holds, not for what went through it.
//!
//! RAM per message is one 16-byte [`Entry`] (id with flags, record length, body
//! length), kept in chunks so the index grows and shrinks without copying.

use super::PagingError;
use super::files::PageFiles;
use super::record;
use crate::broker::message::QueuedMessage;
use std::collections::VecDeque;
use std::path::PathBuf;

/// Entries per index chunk.
const CHUNK_ENTRIES: usize = 4096;

/// The message was removed while paged out; its record is skipped on reading.
const REMOVED: u64 = 1 << 63;
/// delivery_mode 2 (for "is any removal logged").
const PERSISTENT: u64 = 1 << 62;
/// Flagged redelivered after it was paged out (a new master's
/// `mark_redelivered`); overrides the flag in the record.
const REDELIVERED: u64 = 1 << 61;
const ID_MASK: u64 = REDELIVERED - 1;

/// What RAM keeps of one paged-out message.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Message id in the low 61 bits, flags above.
    id_flags: u64,
    /// Bytes of its record on disk.
    rec_len: u32,
    /// Bytes of its body (for the queue's byte count and length limits).
    body_len: u32,
}

impl Entry {
    fn id(&self) -> u64 {
        self.id_flags & ID_MASK
    }
    fn has(&self, flag: u64) -> bool {
        self.id_flags & flag != 0
    }
}

#[derive(Debug)]
struct Chunk {
    /// Logical position of the first entry's record.
    start: u64,
    entries: VecDeque<Entry>,
}

impl Chunk {
    fn last_id(&self) -> u64 {
        self.entries.back().map_or(0, Entry::id)
    }
}

/// One level's paged-out messages; see the module docs.
#[derive(Debug)]
pub struct Run {
    files: PageFiles,
    /// Logical position of the first entry's record.
    read_pos: u64,
    /// Entries from `read_pos` on, removed ones included until they reach the front.
    chunks: VecDeque<Chunk>,
    /// Entries not removed.
    live: usize,
    /// Body bytes of the entries not removed.
    live_bytes: u64,
}

impl Run {
    /// An empty run writing files named `<run_id>-<n>.pages` in `dir`.
    pub fn new(dir: PathBuf, run_id: u64) -> Run {
        Run {
            files: PageFiles::new(dir, run_id),
            read_pos: 0,
            chunks: VecDeque::new(),
            live: 0,
            live_bytes: 0,
        }
    }

    /// Messages held (not removed).
    pub fn len(&self) -> usize {
        self.live
    }

    /// Body bytes of the messages held.
    pub fn bytes(&self) -> u64 {
        self.live_bytes
    }

    /// Id of the first message, which is never a removed one.
    pub fn first_id(&self) -> Option<u64> {
        self.chunks
            .front()
            .and_then(|c| c.entries.front())
            .map(Entry::id)
    }

    /// Id of the last message appended (perhaps removed since).
    pub fn last_id(&self) -> Option<u64> {
        self.chunks.back().map(Chunk::last_id)
    }

    /// Append a message; its id must be above every id in the run.
    pub fn append(&mut self, m: &QueuedMessage, persistent: bool) {
        debug_assert!(self.last_id().is_none_or(|l| l < m.msg.id));
        let pos = self.files.end();
        let rec_len = self.files.append(m);
        let mut flags = 0;
        if persistent {
            flags |= PERSISTENT;
        }
        if m.redelivered {
            flags |= REDELIVERED;
        }
        let body_len = m.msg.body.len();
        let entry = Entry {
            id_flags: (m.msg.id & ID_MASK) | flags,
            rec_len: u32::try_from(rec_len).unwrap_or(u32::MAX),
            body_len: u32::try_from(body_len).unwrap_or(u32::MAX),
        };
        match self.chunks.back_mut() {
            Some(c) if c.entries.len() < CHUNK_ENTRIES => c.entries.push_back(entry),
            _ => {
                let mut entries = VecDeque::with_capacity(CHUNK_ENTRIES);
                entries.push_back(entry);
                self.chunks.push_back(Chunk {
                    start: pos,
                    entries,
                });
            }
        }
        self.live += 1;
        self.live_bytes += body_len as u64;
    }

    /// Read messages from the front until about `max_bytes` of records (at
    /// least one message), removing them from the run.
    pub fn pop_front(&mut self, max_bytes: usize) -> Result<Vec<QueuedMessage>, PagingError> {
        let mut take = Vec::new();
        let mut total = 0usize;
        'chunks: for c in &self.chunks {
            for e in &c.entries {
                if !take.is_empty() && total >= max_bytes {
                    break 'chunks;
                }
                total += e.rec_len as usize;
                take.push(*e);
            }
        }
        let bytes = self.files.read_range(self.read_pos, total)?;
        let mut out = Vec::with_capacity(take.len());
        let mut at = 0usize;
        for e in &take {
            let rec = &bytes[at..at + e.rec_len as usize];
            at += e.rec_len as usize;
            self.pop_entry();
            if e.has(REMOVED) {
                continue;
            }
            let mut m = record::decode(rec)?;
            if m.msg.id != e.id() {
                return Err(PagingError::WrongRecord(e.id(), m.msg.id));
            }
            m.redelivered |= e.has(REDELIVERED);
            self.live -= 1;
            self.live_bytes -= u64::from(e.body_len);
            out.push(m);
        }
        self.trim_front();
        Ok(out)
    }

    /// Drop the front entry (already read or removed) and the files behind it.
    fn pop_entry(&mut self) {
        let Some(c) = self.chunks.front_mut() else {
            return;
        };
        if let Some(e) = c.entries.pop_front() {
            c.start += u64::from(e.rec_len);
            self.read_pos += u64::from(e.rec_len);
        }
        if c.entries.is_empty() {
            self.chunks.pop_front();
        }
        self.files.forget_below(self.read_pos);
    }

    /// Skip removed entries at the front, so the first entry is a live one.
    fn trim_front(&mut self) {
        while self
            .chunks
            .front()
            .and_then(|c| c.entries.front())
            .is_some_and(|e| e.has(REMOVED))
        {
            self.pop_entry();
        }
    }

    fn find(&self, id: u64) -> Option<(usize, usize)> {
        let ci = self.chunks.partition_point(|c| c.last_id() < id);
        let c = self.chunks.get(ci)?;
        let ei = c.entries.binary_search_by_key(&id, Entry::id).ok()?;
        (!c.entries[ei].has(REMOVED)).then_some((ci, ei))
    }

    /// Whether the message is here and persistent; None when it is not here.
    pub fn is_persistent(&self, id: u64) -> Option<bool> {
        let (ci, ei) = self.find(id)?;
        Some(self.chunks[ci].entries[ei].has(PERSISTENT))
    }

    /// Remove a message; returns its body length, or None when it is not here.
    pub fn remove(&mut self, id: u64) -> Option<u64> {
        let (ci, ei) = self.find(id)?;
        let e = &mut self.chunks[ci].entries[ei];
        e.id_flags |= REMOVED;
        let body_len = u64::from(e.body_len);
        self.live -= 1;
        self.live_bytes -= body_len;
        self.trim_front();
        Some(body_len)
    }

    /// Read one message without removing it (dead-lettering content from deep in
    /// a queue): a disk read, on paths that are not per-delivery.
    pub fn get(&self, id: u64) -> Result<Option<QueuedMessage>, PagingError> {
        let Some((ci, ei)) = self.find(id) else {
            return Ok(None);
        };
        let c = &self.chunks[ci];
        let pos = c.start
            + c.entries
                .range(..ei)
                .map(|e| u64::from(e.rec_len))
                .sum::<u64>();
        let e = c.entries[ei];
        let bytes = self.files.read_range(pos, e.rec_len as usize)?;
        let mut m = record::decode(&bytes)?;
        m.redelivered |= e.has(REDELIVERED);
        Ok(Some(m))
    }

    /// Flag every message redelivered.
    pub fn mark_redelivered(&mut self) {
        for c in &mut self.chunks {
            for e in &mut c.entries {
                e.id_flags |= REDELIVERED;
            }
        }
    }

    /// Visit `(id, body length, persistent)` of every message, in order, until
    /// `f` says stop; returns false when it stopped.
    pub fn visit(&self, f: &mut impl FnMut(u64, u64, bool) -> bool) -> bool {
        for c in &self.chunks {
            for e in &c.entries {
                if !e.has(REMOVED) && !f(e.id(), u64::from(e.body_len), e.has(PERSISTENT)) {
                    return false;
                }
            }
        }
        true
    }
}
