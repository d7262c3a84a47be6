//! In-memory views of a log: positions only ([`EpochRuns`], for stores, whose
//! payloads live on disk) and whole entries ([`MemLog`], for brokers).

use crate::position::{Entry, LogPosition};

/// The epoch of every index of a log, stored as runs (first index, epoch).
///
/// A store must check log matching (`prev` present with the right epoch) for
/// every append without reading its disk. Epochs change only at takeovers, so
/// runs make this a few words per epoch instead of one per entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpochRuns {
    /// `(first_index, epoch)`, both strictly increasing; the last run ends at
    /// `last`.
    runs: Vec<(u64, u64)>,
    /// Index of the last entry; `base.index` when empty.
    last: u64,
    /// The last entry compacted away (`(0,0)`: none). Entries up to it are
    /// stable and live only in the store's materialized state; its position
    /// is kept for log matching at the boundary.
    base: LogPosition,
}

impl EpochRuns {
    /// The runs of a log holding `positions` (consecutive, from index 1). Used
    /// when a store restarts and reads its log back.
    pub fn from_positions(positions: impl IntoIterator<Item = LogPosition>) -> Self {
        let mut runs = EpochRuns::default();
        for pos in positions {
            runs.push(pos);
        }
        runs
    }

    /// The runs of a log whose entries up to `base` were compacted, holding
    /// `positions` (consecutive, from `base.index + 1`).
    pub fn from_base(base: LogPosition, positions: impl IntoIterator<Item = LogPosition>) -> Self {
        let mut runs = EpochRuns {
            runs: Vec::new(),
            last: base.index,
            base,
        };
        for pos in positions {
            runs.push(pos);
        }
        runs
    }

    /// The last position; the base when no entry follows it (`(0,0)` when empty).
    pub fn last(&self) -> LogPosition {
        match self.runs.last() {
            Some(&(_, epoch)) => LogPosition::new(epoch, self.last),
            None => self.base,
        }
    }

    /// The last compacted position (`(0,0)` when nothing was compacted).
    pub fn base(&self) -> LogPosition {
        self.base
    }

    /// The epoch of the entry at `index`; index 0 is the empty prefix (epoch 0),
    /// the base answers its own epoch, below the base (compacted) and beyond
    /// the end is `None`.
    pub fn epoch_at(&self, index: u64) -> Option<u64> {
        if index == self.base.index {
            return Some(self.base.epoch);
        }
        if index == 0 || index < self.base.index {
            return None;
        }
        if index > self.last {
            return None;
        }
        let i = self.runs.partition_point(|&(first, _)| first <= index);
        // `i >= 1` because the first run starts at 1 <= index.
        self.runs.get(i.checked_sub(1)?).map(|&(_, epoch)| epoch)
    }

    /// First index of the run holding `index` (an index of the log), never
    /// below the first entry after the base.
    pub fn run_start(&self, index: u64) -> u64 {
        let i = self.runs.partition_point(|&(first, _)| first <= index);
        i.checked_sub(1)
            .and_then(|i| self.runs.get(i))
            .map_or(self.base.index, |&(first, _)| first)
    }

    /// Forget every entry up to `pos` (compaction: the state holds them), or
    /// everything, if the log does not hold `pos` (a snapshot installed over a
    /// log that disagrees with it, or that ends before it): the log then
    /// starts after `pos`.
    pub fn compact_through(&mut self, pos: LogPosition) {
        if pos.index <= self.base.index {
            return;
        }
        if self.epoch_at(pos.index) != Some(pos.epoch) {
            self.runs.clear();
            self.last = pos.index;
        } else {
            // The run holding `pos` now starts right after it.
            let i = self.runs.partition_point(|&(first, _)| first <= pos.index);
            self.runs.drain(..i.saturating_sub(1));
            if pos.index == self.last {
                self.runs.clear();
            } else if let Some(first) = self.runs.first_mut() {
                first.0 = pos.index + 1;
            }
        }
        self.base = pos;
    }

    /// Append one position; it must follow the last one.
    pub fn push(&mut self, pos: LogPosition) {
        debug_assert_eq!(pos.index, self.last + 1, "runs must stay contiguous");
        debug_assert!(pos.epoch >= self.last().epoch, "epochs never go back");
        if self
            .runs
            .last()
            .is_none_or(|&(_, epoch)| epoch != pos.epoch)
        {
            self.runs.push((pos.index, pos.epoch));
        }
        self.last = pos.index;
    }

    /// Forget every index above `index` (never below the base: compacted
    /// entries are stable).
    pub fn truncate_after(&mut self, index: u64) {
        if index >= self.last {
            return;
        }
        debug_assert!(index >= self.base.index, "truncating compacted entries");
        let index = index.max(self.base.index);
        self.runs.retain(|&(first, _)| first <= index);
        self.last = index;
    }
}

/// A broker's copy of the log: the entries above `base` in memory.
///
/// Entries up to `base` were dropped once every store held them (the master's
/// `floor`) and they were applied: nobody will be sent them again from here.
/// The position at `base` is kept, so an append right after it can still be
/// checked (log matching). A peer that needs older entries (a restarted slave)
/// catches up from a store, which keeps the whole log on disk.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemLog {
    /// `entries[i]` has index `base + 1 + i`.
    entries: std::collections::VecDeque<Entry>,
    /// Highest dropped index (0: nothing dropped).
    base: u64,
    /// Position of the entry at `base` (`(0,0)` when `base` is 0).
    base_pos: LogPosition,
}

impl MemLog {
    /// Position of the last entry; `(0,0)` when empty.
    pub fn last(&self) -> LogPosition {
        self.entries.back().map_or(self.base_pos, |e| e.pos)
    }

    /// Highest index dropped from memory: entries `..=base` are gone.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Position of the entry at `index` (index 0 is `(0,0)`); `None` past the
    /// end and below `base`.
    pub fn pos_at(&self, index: u64) -> Option<LogPosition> {
        if index == 0 {
            return Some(LogPosition::ZERO);
        }
        if index == self.base {
            return Some(self.base_pos);
        }
        self.get(index).map(|e| e.pos)
    }

    /// The entry at `index`, if in memory.
    pub fn get(&self, index: u64) -> Option<&Entry> {
        let i = usize::try_from(index.checked_sub(self.base + 1)?).ok()?;
        self.entries.get(i)
    }

    /// Clones of the entries `from..=to`, clamped to what is in memory.
    pub fn range(&self, from: u64, to: u64) -> Vec<Entry> {
        let lo = from.max(self.base + 1);
        let hi = to.min(self.last().index);
        if lo > hi {
            return Vec::new();
        }
        let (lo, hi) = ((lo - self.base - 1) as usize, (hi - self.base) as usize);
        self.entries.range(lo..hi).cloned().collect()
    }

    /// Append one entry; it must follow the last one.
    pub fn push(&mut self, entry: Entry) {
        debug_assert_eq!(entry.pos.index, self.last().index + 1);
        self.entries.push_back(entry);
    }

    /// Forget every entry above `index` (never below `base`: those are stable).
    pub fn truncate_after(&mut self, index: u64) {
        debug_assert!(index >= self.base, "truncating below the dropped prefix");
        let keep = index.saturating_sub(self.base);
        self.entries
            .truncate(usize::try_from(keep).unwrap_or(usize::MAX));
    }

    /// Drop the entries up to `index` from memory, keeping its position.
    /// Does nothing if `index` is at or below `base` or beyond the last entry.
    pub fn drop_up_to(&mut self, index: u64) {
        if index <= self.base || index > self.last().index {
            return;
        }
        let Some(pos) = self.pos_at(index) else {
            return;
        };
        let n = (index - self.base) as usize;
        self.entries.drain(..n);
        self.base = index;
        self.base_pos = pos;
    }

    /// Forget every entry and start after `pos`: a snapshot of the stable log
    /// up to `pos` replaced everything up to there.
    pub fn reset_to(&mut self, pos: LogPosition) {
        self.entries.clear();
        self.base = pos.index;
        self.base_pos = pos;
    }

    /// First index of the run of same-epoch entries holding `index` (not below
    /// the first entry in memory).
    pub fn run_start(&self, index: u64) -> u64 {
        let Some(epoch) = self.get(index).map(|e| e.pos.epoch) else {
            return 0;
        };
        let mut first = index;
        while first > self.base + 1 && self.get(first - 1).is_some_and(|e| e.pos.epoch == epoch) {
            first -= 1;
        }
        first
    }
}

/// Where a receiver whose log lacks `prev` asks the sender to retry from (see
/// [`super::RejectReason::Mismatch`]): its own end if it is shorter, else just
/// before the run holding the conflicting entry, but never below what it knows is
/// stable (stable entries are identical everywhere, so retrying below is waste).
pub(crate) fn mismatch_hint(last: u64, run_start: u64, prev: LogPosition, stable: u64) -> u64 {
    if prev.index > last {
        last
    } else {
        run_start.saturating_sub(1).max(stable.min(prev.index - 1))
    }
}

/// Whether `entries` are consecutive from `prev.index + 1` with epochs that never
/// go back (and not below `prev`'s).
pub(crate) fn entries_follow(prev: LogPosition, entries: &[Entry]) -> bool {
    let mut last = prev;
    entries.iter().all(|e| {
        let ok = e.pos.index == last.index + 1 && e.pos.epoch >= last.epoch;
        last = e.pos;
        ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_answer_epochs_and_truncate() {
        let mut runs = EpochRuns::from_positions(
            [(1, 1), (1, 2), (3, 3), (3, 4), (4, 5)].map(|(e, i)| LogPosition::new(e, i)),
        );
        assert_eq!(runs.last(), LogPosition::new(4, 5));
        assert_eq!(runs.epoch_at(0), Some(0));
        assert_eq!(runs.epoch_at(2), Some(1));
        assert_eq!(runs.epoch_at(4), Some(3));
        assert_eq!(runs.epoch_at(6), None);
        assert_eq!(runs.run_start(4), 3);
        runs.truncate_after(3);
        assert_eq!(runs.last(), LogPosition::new(3, 3));
        runs.truncate_after(1);
        assert_eq!(runs.last(), LogPosition::new(1, 1));
        runs.push(LogPosition::new(5, 2));
        assert_eq!(runs.epoch_at(2), Some(5));
        runs.truncate_after(0);
        assert_eq!(runs.last(), LogPosition::ZERO);
    }

    #[test]
    fn memlog_ranges_are_clamped() {
        let mut log = MemLog::default();
        for i in 1..=4 {
            log.push(Entry::new(if i < 3 { 1 } else { 2 }, i, "x"));
        }
        assert_eq!(log.range(2, 10).len(), 3);
        assert_eq!(log.range(0, 1).len(), 1);
        assert!(log.range(5, 9).is_empty());
        assert_eq!(log.run_start(4), 3);
        assert_eq!(log.pos_at(0), Some(LogPosition::ZERO));
        log.truncate_after(2);
        assert_eq!(log.last(), LogPosition::new(1, 2));
    }

    #[test]
    fn dropped_prefix_keeps_its_boundary_position() {
        let mut log = MemLog::default();
        for i in 1..=6 {
            log.push(Entry::new(if i < 4 { 1 } else { 2 }, i, "x"));
        }
        log.drop_up_to(3);
        assert_eq!(log.base(), 3);
        assert_eq!(log.pos_at(3), Some(LogPosition::new(1, 3)));
        assert_eq!(log.pos_at(2), None, "dropped");
        assert!(log.get(3).is_none());
        assert_eq!(log.get(4).map(|e| e.pos), Some(LogPosition::new(2, 4)));
        assert_eq!(log.range(1, 10).len(), 3, "only what is in memory");
        assert_eq!(log.run_start(6), 4);
        log.drop_up_to(2); // below base: nothing
        log.drop_up_to(9); // beyond the end: nothing
        assert_eq!(log.base(), 3);
        log.truncate_after(4);
        assert_eq!(log.last(), LogPosition::new(2, 4));
        log.drop_up_to(4);
        assert_eq!(
            log.last(),
            LogPosition::new(2, 4),
            "an empty tail keeps the last position"
        );
        log.push(Entry::new(3, 5, "y"));
        assert_eq!(log.range(5, 5).len(), 1);
    }

    #[test]
    fn hint_skips_the_conflicting_run_but_not_below_stable() {
        // Shorter receiver: retry from its end.
        assert_eq!(mismatch_hint(3, 1, LogPosition::new(2, 9), 0), 3);
        // Conflict inside a run starting at 5: retry before the run.
        assert_eq!(mismatch_hint(9, 5, LogPosition::new(2, 7), 0), 4);
        assert_eq!(mismatch_hint(9, 5, LogPosition::new(2, 7), 6), 6);
    }
}
