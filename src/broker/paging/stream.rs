//! A stream's entries: the newest in RAM, the older ones paged out to the
//! body store, all read by offset.
//!
//! A stream is read at any offset by any number of consumers and loses
//! entries only from the front (retention), so unlike a queue's [`Run`]
//! (read once, from the front) its paged part is an index by offset over
//! append-only files: 16 bytes of RAM per paged entry, in chunks of
//! consecutive offsets. RAM keeps a window of the newest entries, where
//! consumers that keep up read; the window is charged to the process's budget
//! like a queue's, and is at most [`STREAM_RAM_WINDOW`]. A consumer behind
//! the window reads records back in batches of at most [`READ_BATCH_BYTES`],
//! only as many as it has credit for, so many consumers at different offsets
//! cost page-cache reads, not RAM.
//!
//! What is in RAM and what is on disk never changes what is read (I4): a
//! record carries every field of the entry, and offsets are the same either
//! way.
//!
//! [`Run`]: super::run::Run

use super::files::PageFiles;
use super::{Pager, PagingError, fatal, ram_cost, record};
use crate::broker::message::QueuedMessage;
use std::collections::VecDeque;
use std::sync::Arc;

/// The most RAM one stream's newest entries take; older ones are paged out.
pub const STREAM_RAM_WINDOW: u64 = 16 << 20;
/// The most record bytes one read from the files brings back.
pub const READ_BATCH_BYTES: usize = 1 << 20;
/// Paged entries per index chunk.
const CHUNK_ENTRIES: usize = 4096;

/// What RAM keeps of one paged entry.
#[derive(Debug, Clone, Copy)]
struct Idx {
    id: u64,
    rec_len: u32,
    body_len: u32,
}

/// Consecutive paged entries.
#[derive(Debug)]
struct IndexChunk {
    /// Offset of `entries[0]`.
    first: u64,
    /// Logical file position of `entries[0]`'s record.
    start: u64,
    entries: VecDeque<Idx>,
}

impl IndexChunk {
    fn end(&self) -> u64 {
        self.first + self.entries.len() as u64
    }
}

/// The paged part of a stream: entries `[first, end)` on disk.
#[derive(Debug)]
pub(super) struct StreamPages {
    files: PageFiles,
    chunks: VecDeque<IndexChunk>,
    /// Entries in `chunks`.
    count: usize,
    /// Body bytes of those entries.
    bytes: u64,
}

impl StreamPages {
    fn new(files: PageFiles) -> StreamPages {
        StreamPages {
            files,
            chunks: VecDeque::new(),
            count: 0,
            bytes: 0,
        }
    }

    /// Append the entry at `offset`, which must follow the last one.
    fn append(&mut self, offset: u64, m: &QueuedMessage) {
        debug_assert!(self.chunks.back().is_none_or(|c| c.end() == offset));
        let pos = self.files.end();
        let rec_len = self.files.append(m);
        let idx = Idx {
            id: m.msg.id,
            rec_len: u32::try_from(rec_len).unwrap_or(u32::MAX),
            body_len: u32::try_from(m.msg.body.len()).unwrap_or(u32::MAX),
        };
        self.count += 1;
        self.bytes += u64::from(idx.body_len);
        match self.chunks.back_mut() {
            Some(c) if c.entries.len() < CHUNK_ENTRIES => c.entries.push_back(idx),
            _ => {
                let mut entries = VecDeque::with_capacity(CHUNK_ENTRIES);
                entries.push_back(idx);
                self.chunks.push_back(IndexChunk {
                    first: offset,
                    start: pos,
                    entries,
                });
            }
        }
    }

    /// Where the index entry of `offset` is: (chunk, entry in it).
    fn locate(&self, offset: u64) -> Option<(usize, usize)> {
        let ci = self.chunks.partition_point(|c| c.end() <= offset);
        let c = self.chunks.get(ci)?;
        let ei = usize::try_from(offset.checked_sub(c.first)?).ok()?;
        (ei < c.entries.len()).then_some((ci, ei))
    }

    fn idx(&self, offset: u64) -> Option<Idx> {
        let (ci, ei) = self.locate(offset)?;
        Some(self.chunks[ci].entries[ei])
    }

    /// Logical file position of the record of `offset`.
    fn position(&self, ci: usize, ei: usize) -> u64 {
        let c = &self.chunks[ci];
        c.start
            + c.entries
                .range(..ei)
                .map(|e| u64::from(e.rec_len))
                .sum::<u64>()
    }

    /// Read up to `max` entries from `offset` on, within one batch of
    /// [`READ_BATCH_BYTES`] (at least one entry).
    fn read(&self, offset: u64, max: usize) -> Result<Vec<QueuedMessage>, PagingError> {
        let Some((ci, ei)) = self.locate(offset) else {
            return Ok(Vec::new());
        };
        let pos = self.position(ci, ei);
        let mut lens = Vec::new();
        let mut total = 0usize;
        'chunks: for c in self.chunks.range(ci..) {
            let skip = if lens.is_empty() { ei } else { 0 };
            for e in c.entries.range(skip..) {
                if lens.len() >= max || (!lens.is_empty() && total >= READ_BATCH_BYTES) {
                    break 'chunks;
                }
                total += e.rec_len as usize;
                lens.push((e.id, e.rec_len as usize));
            }
        }
        // The bodies are slices of this read (a stream's entries read back
        // live until they are sent).
        let bytes = bytes::Bytes::from(self.files.read_range(pos, total)?);
        let mut out = Vec::with_capacity(lens.len());
        let mut at = 0usize;
        for (id, len) in lens {
            let m = record::decode_shared(&bytes, at..at + len)?;
            if m.msg.id != id {
                return Err(PagingError::WrongRecord(id, m.msg.id));
            }
            at += len;
            out.push(m);
        }
        Ok(out)
    }

    /// Drop every entry below `offset`, and the files only they used.
    fn truncate_to(&mut self, offset: u64) {
        while let Some(c) = self.chunks.front_mut() {
            if c.end() <= offset {
                self.count -= c.entries.len();
                self.bytes -= c.entries.iter().map(|e| u64::from(e.body_len)).sum::<u64>();
                self.chunks.pop_front();
                continue;
            }
            while c.first < offset {
                let Some(e) = c.entries.pop_front() else {
                    break;
                };
                self.count -= 1;
                self.bytes -= u64::from(e.body_len);
                c.first += 1;
                c.start += u64::from(e.rec_len);
            }
            break;
        }
        let keep_from = self.chunks.front().map_or(self.files.end(), |c| c.start);
        self.files.forget_below(keep_from);
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct StreamEntries {
    /// Offset of the oldest entry kept (of the next entry when empty).
    first: u64,
    /// Entries `[first, ram_first)`, when a body store is installed.
    pages: Option<StreamPages>,
    /// Entries from `ram_first` on.
    ram: VecDeque<QueuedMessage>,
    /// What `ram` counts against the budget.
    ram_cost: u64,
    /// None: everything stays in RAM (no body store installed).
    pager: Option<Arc<Pager>>,
}

impl StreamEntries {
    /// An empty stream paging through `pager` (None: all in RAM).
    pub fn new(pager: Option<Arc<Pager>>) -> StreamEntries {
        StreamEntries {
            first: 0,
            pages: None,
            ram: VecDeque::new(),
            ram_cost: 0,
            pager,
        }
    }

    /// Offset of the oldest entry kept.
    pub fn first_offset(&self) -> u64 {
        self.first
    }

    /// Entries kept.
    pub fn len(&self) -> usize {
        self.paged_len() + self.ram.len()
    }

    /// No entries kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entries at the end that wait for a log index past `stable` (I1:
    /// appended, not yet stable), and their body bytes. Paged entries are
    /// older than the RAM tail, so only the tail is looked at.
    pub fn unstable_tail(&self, stable: u64) -> (usize, u64) {
        self.ram
            .iter()
            .rev()
            .take_while(|m| m.wait_index > stable)
            .fold((0, 0), |(n, b), m| (n + 1, b + m.msg.body.len() as u64))
    }

    /// Entries kept on disk only.
    pub fn paged_len(&self) -> usize {
        self.pages.as_ref().map_or(0, |p| p.count)
    }

    /// Body bytes of the entries kept on disk only.
    pub fn paged_bytes(&self) -> u64 {
        self.pages.as_ref().map_or(0, |p| p.bytes)
    }

    /// Offset the next entry gets.
    pub fn next_offset(&self) -> u64 {
        self.first + self.len() as u64
    }

    /// Offset of the oldest entry in RAM.
    fn ram_first(&self) -> u64 {
        self.next_offset() - self.ram.len() as u64
    }

    /// Append `m` at the next offset; the oldest entries in RAM go to disk
    /// while the window is over its size or the process over its budget.
    pub fn push(&mut self, m: QueuedMessage) -> u64 {
        let offset = self.next_offset();
        let cost = ram_cost(&m);
        self.ram_cost += cost;
        self.ram.push_back(m);
        let Some(pager) = self.pager.clone() else {
            return offset;
        };
        pager.charge(cost);
        let window = STREAM_RAM_WINDOW.min(pager.budget() / 4).max(1);
        while self.ram_cost > window || pager.used() > pager.budget() {
            let at = self.ram_first();
            let Some(old) = self.ram.pop_front() else {
                break;
            };
            let cost = ram_cost(&old);
            self.ram_cost -= cost;
            pager.release(cost);
            let pages = self
                .pages
                .get_or_insert_with(|| StreamPages::new(pager.new_files()));
            pages.append(at, &old);
        }
        offset
    }

    /// Visit the entries from `offset` on, in order, at most `max` of them,
    /// until `f` says stop. Paged entries are read back in batches.
    pub fn visit_from(
        &self,
        offset: u64,
        max: usize,
        mut f: impl FnMut(u64, &QueuedMessage) -> bool,
    ) {
        let mut at = offset.max(self.first);
        let mut left = max;
        let ram_first = self.ram_first();
        if let Some(pages) = &self.pages {
            while at < ram_first && left > 0 {
                let batch = match pages.read(at, left) {
                    Ok(b) if !b.is_empty() => b,
                    Ok(_) => fatal(PagingError::Missing(at)),
                    Err(e) => fatal(e),
                };
                for m in &batch {
                    if !f(at, m) {
                        return;
                    }
                    at += 1;
                    left -= 1;
                }
            }
        }
        let Some(skip) = at.checked_sub(ram_first) else {
            return;
        };
        let Ok(skip) = usize::try_from(skip) else {
            return;
        };
        for m in self.ram.iter().skip(skip).take(left) {
            if !f(at, m) {
                return;
            }
            at += 1;
        }
    }

    /// The entry at `offset`, if kept (read back from disk when paged).
    pub fn get(&self, offset: u64) -> Option<QueuedMessage> {
        let mut found = None;
        if offset >= self.first {
            self.visit_from(offset, 1, |_, m| {
                found = Some(m.clone());
                false
            });
        }
        found
    }

    /// Body length and message id of the entry at `offset`, from RAM or the
    /// index (no disk read).
    pub fn meta(&self, offset: u64) -> Option<(u64, u64)> {
        let ram_first = self.ram_first();
        if offset < ram_first {
            let i = self.pages.as_ref()?.idx(offset)?;
            return Some((u64::from(i.body_len), i.id));
        }
        let m = self.ram.get(usize::try_from(offset - ram_first).ok()?)?;
        Some((m.msg.body.len() as u64, m.msg.id))
    }

    /// Visit the body length and message id of the entries `[from, to)`, in
    /// order, in one walk over the index and RAM (no disk read). Retention
    /// uses it to count what a cut removes.
    pub fn visit_meta(&self, from: u64, to: u64, mut f: impl FnMut(u64, u64)) {
        let from = from.max(self.first);
        let to = to.min(self.next_offset());
        if from >= to {
            return;
        }
        let ram_first = self.ram_first();
        if let Some(pages) = self.pages.as_ref().filter(|_| from < ram_first)
            && let Some((ci, mut ei)) = pages.locate(from)
        {
            let mut left = to.min(ram_first) - from;
            for c in pages.chunks.range(ci..) {
                for i in c
                    .entries
                    .range(ei..)
                    .take(usize::try_from(left).unwrap_or(usize::MAX))
                {
                    f(u64::from(i.body_len), i.id);
                    left -= 1;
                }
                if left == 0 {
                    break;
                }
                ei = 0;
            }
        }
        let skip = usize::try_from(from.saturating_sub(ram_first)).unwrap_or(usize::MAX);
        let take = usize::try_from(to - from.max(ram_first).min(to)).unwrap_or(usize::MAX);
        for m in self.ram.iter().skip(skip).take(take) {
            f(m.msg.body.len() as u64, m.msg.id);
        }
    }

    /// Drop every entry below `offset` (a first offset past the end empties
    /// the stream and moves its next offset there).
    pub fn truncate_to(&mut self, offset: u64) {
        if offset <= self.first {
            return;
        }
        let mut at = self.ram_first();
        if let Some(pages) = &mut self.pages {
            pages.truncate_to(offset);
            if pages.count == 0 {
                // Nothing paged is kept: the files go with the index.
                self.pages = None;
            }
        }
        while at < offset {
            let Some(m) = self.ram.pop_front() else {
                break;
            };
            let cost = ram_cost(&m);
            self.ram_cost -= cost;
            if let Some(p) = &self.pager {
                p.release(cost);
            }
            at += 1;
        }
        self.first = offset;
    }
}

impl Drop for StreamEntries {
    fn drop(&mut self) {
        if let Some(p) = &self.pager {
            p.release(self.ram_cost);
        }
    }
}

#[cfg(test)]
mod tests;
