//! When a store starts its next commit (`Config::commit_interval_us`).
//!
//! Every commit costs the same fixed work whatever it carries: an
//! `fdatasync`, the block layer's round trip, and the wake-ups that carry
//! its acks. A store that starts a commit as soon as the last one is done
//! spends that on every few messages at moderate rates: at a fixed 10k
//! msg/s on the 3-node co-located cluster (S5), each store committed about
//! 1,700 times a second, and the two cores were nearly saturated, so
//! messages queued behind each other's work (p99 6–8 ms). Starting commits
//! at most once per interval (1 ms) halved the commits, cut the cluster's
//! CPU by about a fifth and the p99 to about 3 ms, for about 0.6 ms more at
//! the median.
//!
//! Waiting only pays when it grows the batch. A batch that is already big
//! (high rates, where the fsync itself batches enough) commits at once, and
//! so does one that the expected arrivals before the window would hardly
//! grow (low rates: at 1k msg/s the next message is about a millisecond
//! away, so waiting would only add latency). The arrival rate is estimated
//! from the entries each commit carried and the time since the one before.

use std::time::{Duration, Instant};

/// A queued batch of this many entries commits at once: waiting would not
/// make its per-entry cost much smaller.
const BATCH_ENOUGH: u64 = 8;
/// Waiting must be expected to bring at least this many more entries.
const GAIN_MIN: f64 = 3.0;
/// Weight of the newest observation in the smoothed arrival rate.
const RATE_WEIGHT: f64 = 0.25;
/// A commit this many intervals after the last one restarts the estimate.
const IDLE_INTERVALS: u32 = 10;

/// The pacing state of one store driver.
#[derive(Debug)]
pub(crate) struct CommitPacer {
    interval: Duration,
    last_start: Option<Instant>,
    /// Entries per second, smoothed over recent commits.
    rate: f64,
}

impl CommitPacer {
    pub(crate) fn new(interval: Duration) -> Self {
        CommitPacer {
            interval,
            last_start: None,
            rate: 0.0,
        }
    }

    /// A commit of `entries` log entries starts at `now`.
    pub(crate) fn started(&mut self, now: Instant, entries: u64) {
        if let Some(prev) = self.last_start {
            let gap = now.saturating_duration_since(prev);
            let observed = entries as f64 / gap.as_secs_f64().max(1e-6);
            if gap >= self.interval * IDLE_INTERVALS {
                // The stream paused: the old rate says nothing about the next.
                self.rate = observed;
            } else {
                self.rate += RATE_WEIGHT * (observed - self.rate);
            }
        }
        self.last_start = Some(now);
    }

    /// When the next commit should start, for `queued` entries waiting at
    /// `now`; `None`: at once.
    pub(crate) fn window(&self, now: Instant, queued: u64) -> Option<Instant> {
        let at = self.last_start? + self.interval;
        if at <= now || queued >= BATCH_ENOUGH {
            return None;
        }
        let expected = self.rate * (at - now).as_secs_f64();
        (expected >= GAIN_MIN).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A pacer that has seen commits of `per_commit` entries every `every`.
    fn warmed(per_commit: u64, every: Duration) -> (CommitPacer, Instant) {
        let mut p = CommitPacer::new(MS);
        let mut t = Instant::now();
        for _ in 0..20 {
            p.started(t, per_commit);
            t += every;
        }
        (p, t - every)
    }

    #[test]
    fn no_commit_yet_or_window_passed_opens_at_once() {
        let p = CommitPacer::new(MS);
        assert_eq!(p.window(Instant::now(), 1), None);
        let (p, last) = warmed(10, MS);
        assert_eq!(p.window(last + MS, 1), None);
        assert_eq!(p.window(last + 2 * MS, 1), None);
    }

    #[test]
    fn a_busy_store_waits_for_the_window() {
        // 10 entries a millisecond: 10k/s, S5's rate.
        let (p, last) = warmed(10, MS);
        let now = last + MS / 4;
        assert_eq!(p.window(now, 2), Some(last + MS));
    }

    #[test]
    fn a_big_batch_commits_at_once() {
        let (p, last) = warmed(50, MS);
        assert_eq!(p.window(last + MS / 4, BATCH_ENOUGH), None);
        assert_eq!(p.window(last + MS / 4, BATCH_ENOUGH - 1), Some(last + MS));
    }

    #[test]
    fn a_slow_stream_is_not_delayed() {
        // One entry a millisecond (1k/s): waiting would bring under one more.
        let (p, last) = warmed(1, MS);
        assert_eq!(p.window(last + MS / 10, 1), None);
        // Nor after an idle spell, whatever the old rate was.
        let (mut p, last) = warmed(10, MS);
        let later = last + Duration::from_secs(1);
        p.started(later, 1);
        assert_eq!(p.window(later + MS / 4, 1), None);
    }

    #[test]
    fn the_rate_follows_the_load() {
        let (mut p, mut t) = warmed(1, MS);
        assert_eq!(p.window(t + MS / 10, 1), None);
        for _ in 0..20 {
            t += MS;
            p.started(t, 10);
        }
        assert_eq!(p.window(t + MS / 10, 1), Some(t + MS));
    }
}
