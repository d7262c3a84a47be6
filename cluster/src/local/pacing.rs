//! When the single node's store thread stops filling a batch that something
//! waits for and commits it (see [`super::commit`]).
//!
//! Committing as soon as anything waits is right when the publishers wait for
//! each confirm (confirm window 1, or a burst that fits one window): nothing
//! more would come. But a client that writes one publish at a time with many
//! in flight (amqp091-go at confirm window 100) keeps publishing during an
//! fsync, and a store that commits at once then commits a handful of messages
//! per fsync: measured with the broker in a session of its own (as a service
//! runs), 5.7 messages per fsync, 5,300 fsyncs a second, a third of a core
//! on the store thread alone, and every fsync's confirms and deliveries each
//! a socket write and a client wake-up of their own. Waiting for the rest of
//! the burst (the next publish is some 20 µs behind the last) gave 1.5x the
//! rate at 55% of the broker CPU per message (docs/benchmarks.md).
//!
//! So a batch that is wanted keeps filling while input keeps coming: the wait
//! ends when nothing came for [`QUIET`], the batch holds [`ENOUGH`] entries,
//! or [`INTERVAL`] has passed since the last commit started. Waiting only pays
//! when more comes: at window 1 or 10 the client is blocked on the confirm, and
//! every wait would add [`QUIET`] to its round trip. The pacer therefore
//! learns what its waits brought (smoothed); while that is below [`GAIN_MIN`]
//! entries it stops waiting, and tries again once every [`PROBE_EVERY`] commits, so a
//! load that changes is noticed within a few milliseconds and a client at
//! window 1 pays [`QUIET`] once every [`PROBE_EVERY`] round trips.
//!
//! Pure: the caller passes the time and what it saw (sans-IO, as the
//! cluster's stores pace with `driver::pacing`).

use std::time::{Duration, Instant};

/// A wait ends when nothing came for this long: longer than the gap between
/// two publishes of a client writing as fast as it can (10–30 µs here), far
/// shorter than an fsync (120–190 µs).
pub(super) const QUIET: Duration = Duration::from_micros(50);
/// A batch this big commits at once: waiting would hardly lower its cost per
/// entry.
const ENOUGH: usize = 64;
/// The most a commit waits after the previous one started: the latency a
/// busy store may add, as the cluster's stores' `commit_interval_us`.
pub(super) const INTERVAL: Duration = Duration::from_millis(1);
/// A wait is worth it when it is expected to bring at least this many entries.
const GAIN_MIN: f64 = 3.0;
/// While waiting does not pay, one commit in this many waits anyway, to see
/// whether the load has changed.
const PROBE_EVERY: u32 = 64;
/// Weight of the newest wait in the smoothed gain.
const GAIN_WEIGHT: f64 = 0.25;

/// The pacing state of the store thread.
#[derive(Debug)]
pub(super) struct Pacer {
    /// When the last commit started.
    last_start: Option<Instant>,
    /// Entries a wait brought, smoothed.
    gain: f64,
    /// Commits since the last wait, while waiting does not pay.
    skipped: u32,
}

impl Pacer {
    /// A pacer that starts out not waiting (until its first probe).
    pub(super) fn new() -> Pacer {
        Pacer {
            last_start: None,
            gain: 0.0,
            skipped: 0,
        }
    }

    /// Whether a wanted batch of `queued` entries should wait for more at
    /// `now`, and until when at most; `None`: commit at once.
    pub(super) fn wait_until(&mut self, now: Instant, queued: usize) -> Option<Instant> {
        if queued >= ENOUGH {
            return None;
        }
        let until = self.last_start.map_or(now + INTERVAL, |t| t + INTERVAL);
        if until <= now {
            return None;
        }
        if self.gain < GAIN_MIN {
            self.skipped += 1;
            if self.skipped < PROBE_EVERY {
                return None;
            }
        }
        self.skipped = 0;
        Some(until)
    }

    /// How long the next receive of a wait that ends at `until` may block at
    /// `now`, with `queued` entries in the batch; zero: stop waiting.
    pub(super) fn next_wait(now: Instant, until: Instant, queued: usize) -> Duration {
        if queued >= ENOUGH {
            return Duration::ZERO;
        }
        until.saturating_duration_since(now).min(QUIET)
    }

    /// A wait (after [`Pacer::wait_until`] said so) brought `gained` entries.
    pub(super) fn waited(&mut self, gained: usize) {
        self.gain += GAIN_WEIGHT * (gained as f64 - self.gain);
    }

    /// A commit starts at `now`.
    pub(super) fn started(&mut self, now: Instant) {
        self.last_start = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` commits two intervals apart, each asking to wait QUIET after it
    /// started and reporting `gained` for every wait; how many waited.
    fn commits(p: &mut Pacer, t: &mut Instant, n: u32, gained: usize) -> u32 {
        let mut waits = 0;
        for _ in 0..n {
            p.started(*t);
            *t += INTERVAL * 2;
            if p.wait_until(*t - INTERVAL * 2 + QUIET, 1).is_some() {
                waits += 1;
                p.waited(gained);
            }
        }
        waits
    }

    /// As many commits as it takes to make the smoothed gain settle.
    fn settle(p: &mut Pacer, t: &mut Instant, gained: usize) {
        commits(p, t, PROBE_EVERY * 40, gained);
    }

    /// A new pacer settled on waits that bring `gained`, and the time.
    fn settled(gained: usize) -> (Pacer, Instant) {
        let (mut p, mut t) = (Pacer::new(), Instant::now());
        settle(&mut p, &mut t, gained);
        (p, t)
    }

    #[test]
    fn a_new_pacer_commits_at_once_until_it_probes() {
        let mut p = Pacer::new();
        let t = Instant::now();
        for _ in 1..PROBE_EVERY {
            assert_eq!(p.wait_until(t, 1), None);
        }
        // The probe: a wait, bounded by the interval.
        assert_eq!(p.wait_until(t, 1), Some(t + INTERVAL));
    }

    #[test]
    fn waits_that_bring_entries_go_on_until_the_interval() {
        let (mut p, t) = settled(20);
        p.started(t);
        let now = t + Duration::from_micros(200);
        assert_eq!(p.wait_until(now, 5), Some(t + INTERVAL));
        // Each receive blocks for QUIET at most, never past the end.
        assert_eq!(Pacer::next_wait(now, t + INTERVAL, 5), QUIET);
        assert_eq!(
            Pacer::next_wait(t + INTERVAL - Duration::from_micros(10), t + INTERVAL, 5),
            Duration::from_micros(10)
        );
        assert_eq!(
            Pacer::next_wait(t + INTERVAL, t + INTERVAL, 5),
            Duration::ZERO
        );
    }

    #[test]
    fn a_big_batch_or_a_late_one_commits_at_once() {
        let (mut p, t) = settled(20);
        p.started(t);
        assert_eq!(p.wait_until(t + QUIET, ENOUGH), None);
        assert_eq!(p.wait_until(t + INTERVAL, 1), None);
        assert!(p.wait_until(t + QUIET, ENOUGH - 1).is_some());
    }

    #[test]
    fn waits_that_bring_nothing_stop_but_for_a_probe() {
        // A client at confirm window 1: nothing comes while it waits.
        let (mut p, mut t) = settled(0);
        let waits = commits(&mut p, &mut t, PROBE_EVERY * 10, 0);
        assert_eq!(waits, 10, "one probe per {PROBE_EVERY} commits");
    }

    #[test]
    fn the_gain_follows_the_load() {
        let mut p = Pacer::new();
        let mut t = Instant::now();
        settle(&mut p, &mut t, 0);
        assert!(p.gain < GAIN_MIN);
        // The load changes to a fast publisher: probes bring entries, and
        // within a few probes the pacer waits every time.
        settle(&mut p, &mut t, 30);
        for _ in 0..10 {
            p.started(t);
            assert!(p.wait_until(t + QUIET, 1).is_some());
            p.waited(30);
            t += INTERVAL * 2;
        }
    }
}
