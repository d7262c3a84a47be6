//! Measurements of a perf run: one clock, shared counters, latency histograms
//! (HdrHistogram, microseconds), rates and the process's own CPU time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

/// The run's clock. Send times travel in message bodies as nanoseconds since
/// `Clock::start`; producers and consumers share it (one process), so
/// end-to-end latency needs no synchronised wall clocks.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock that starts now.
    pub fn new() -> Clock {
        Clock {
            start: Instant::now(),
        }
    }

    /// Nanoseconds since the clock started.
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The instant `ns` nanoseconds after the start.
    pub fn at(&self, ns: u64) -> Instant {
        self.start + Duration::from_nanos(ns)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// Totals so far, updated by every task once per batch and read by the sampler.
#[derive(Debug, Default)]
pub struct Counters {
    /// Messages published.
    pub published: AtomicU64,
    /// Publishes acked by the broker.
    pub confirmed: AtomicU64,
    /// Publishes nacked by the broker.
    pub nacked: AtomicU64,
    /// Messages consumed.
    pub consumed: AtomicU64,
}

/// A copy of [`Counters`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Messages published.
    pub published: u64,
    /// Publishes acked by the broker.
    pub confirmed: u64,
    /// Publishes nacked by the broker.
    pub nacked: u64,
    /// Messages consumed.
    pub consumed: u64,
}

impl Counters {
    /// The totals now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            published: self.published.load(Ordering::Relaxed),
            confirmed: self.confirmed.load(Ordering::Relaxed),
            nacked: self.nacked.load(Ordering::Relaxed),
            consumed: self.consumed.load(Ordering::Relaxed),
        }
    }
}

/// Adds a task's local count to a shared counter, remembering what it has
/// already added, so the hot loop touches the atomic once per batch.
#[derive(Debug, Default)]
pub struct Flushed(u64);

impl Flushed {
    /// Add what `local` gained since the last flush to `shared`.
    pub fn flush(&mut self, local: u64, shared: &AtomicU64) {
        if local > self.0 {
            shared.fetch_add(local - self.0, Ordering::Relaxed);
            self.0 = local;
        }
    }
}

/// Largest latency a histogram holds (one hour in microseconds); larger values
/// are recorded as this.
const MAX_LATENCY_US: u64 = 3_600_000_000;

/// A latency histogram in microseconds, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
}

/// Record the time from `sent_ns` to `now_ns` (clock nanoseconds). A send time in
/// the future (it cannot be, except through a corrupted body) counts as 0.
pub fn record_latency(h: &mut Histogram<u64>, sent_ns: u64, now_ns: u64) {
    h.saturating_record(now_ns.saturating_sub(sent_ns) / 1_000);
}

/// Percentiles of one latency histogram, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    /// Latencies recorded.
    pub count: u64,
    /// The median.
    pub p50: u64,
    /// The 99th percentile.
    pub p99: u64,
    /// The 99.9th percentile.
    pub p999: u64,
    /// The largest.
    pub max: u64,
    /// The mean.
    pub mean: f64,
}

impl Latency {
    /// `None` for an empty histogram.
    pub fn of(h: &Histogram<u64>) -> Option<Latency> {
        (!h.is_empty()).then(|| Latency {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
        })
    }
}

/// Messages per second; 0 for an empty interval.
pub fn rate(count: u64, ns: u64) -> f64 {
    if ns == 0 {
        0.0
    } else {
        count as f64 * 1e9 / ns as f64
    }
}

/// One second of a run: the rates over that second.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds since the start of the run, at the end of this sample.
    pub t: f64,
    /// Messages published per second.
    pub publish_rate: f64,
    /// Confirms per second.
    pub confirm_rate: f64,
    /// Messages consumed per second.
    pub consume_rate: f64,
}

impl Sample {
    /// The rates between two snapshots taken `ns` nanoseconds apart.
    pub fn between(t: f64, before: &Snapshot, after: &Snapshot, ns: u64) -> Sample {
        Sample {
            t,
            publish_rate: rate(after.published.saturating_sub(before.published), ns),
            confirm_rate: rate(after.confirmed.saturating_sub(before.confirmed), ns),
            consume_rate: rate(after.consumed.saturating_sub(before.consumed), ns),
        }
    }
}

/// User and system CPU seconds this process has used so far.
#[allow(unsafe_code, reason = "libc has no safe wrapper for this call")]
pub fn cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage only writes the struct we hand it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return (0.0, 0.0);
    }
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// The client's CPU use over the measured part of the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cpu {
    /// User CPU seconds.
    pub user_s: f64,
    /// System CPU seconds.
    pub sys_s: f64,
    /// User plus system CPU seconds.
    pub total_s: f64,
    /// CPU seconds over wall seconds: 1.0 is one core busy.
    pub cores: f64,
    /// CPU seconds per million messages moved (the larger of published and
    /// consumed); `None` when no message moved.
    pub per_million_msgs_s: Option<f64>,
}

impl Cpu {
    /// The CPU use between two `cpu_seconds` readings `wall_ns` apart, over which `msgs` messages moved.
    pub fn between(before: (f64, f64), after: (f64, f64), wall_ns: u64, msgs: u64) -> Cpu {
        let user_s = (after.0 - before.0).max(0.0);
        let sys_s = (after.1 - before.1).max(0.0);
        let total_s = user_s + sys_s;
        Cpu {
            user_s,
            sys_s,
            total_s,
            cores: if wall_ns == 0 {
                0.0
            } else {
                total_s * 1e9 / wall_ns as f64
            },
            per_million_msgs_s: (msgs > 0).then(|| total_s * 1e6 / msgs as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = latency_histogram();
        // 1..=1000 µs, once each
        for us in 1..=1000u64 {
            record_latency(&mut h, 0, us * 1_000);
        }
        let l = Latency::of(&h).unwrap();
        assert_eq!(l.count, 1000);
        assert_eq!(l.p50, 500);
        assert_eq!(l.p99, 990);
        assert_eq!(l.p999, 999);
        assert_eq!(l.max, 1000);
        assert!((l.mean - 500.5).abs() < 0.5, "{}", l.mean);
        assert!(Latency::of(&latency_histogram()).is_none());
    }

    #[test]
    fn latency_saturates_and_never_goes_negative() {
        let mut h = latency_histogram();
        record_latency(&mut h, 5_000, 1_000); // sent "after" received
        record_latency(&mut h, 0, u64::MAX); // beyond the histogram's range
        assert_eq!(h.len(), 2);
        assert_eq!(h.min(), 0);
        assert!(h.max() >= MAX_LATENCY_US && h.max() <= MAX_LATENCY_US * 1001 / 1000);
    }

    #[test]
    fn merged_histograms_add_up() {
        let mut a = latency_histogram();
        let mut b = latency_histogram();
        for _ in 0..99 {
            record_latency(&mut a, 0, 100_000);
        }
        record_latency(&mut b, 0, 50_000_000);
        a.add(&b).unwrap();
        let l = Latency::of(&a).unwrap();
        assert_eq!(l.count, 100);
        assert_eq!(l.p50, 100);
        assert!(l.p999 >= 49_990, "{}", l.p999);
    }

    #[test]
    fn rates_and_samples() {
        assert_eq!(rate(500, 500_000_000), 1000.0);
        assert_eq!(rate(5, 0), 0.0);
        let before = Snapshot {
            published: 100,
            confirmed: 50,
            nacked: 0,
            consumed: 10,
        };
        let after = Snapshot {
            published: 2100,
            confirmed: 1050,
            nacked: 0,
            consumed: 10,
        };
        let s = Sample::between(2.0, &before, &after, 2_000_000_000);
        assert_eq!(
            (s.publish_rate, s.confirm_rate, s.consume_rate),
            (1000.0, 500.0, 0.0)
        );
    }

    #[test]
    fn flushed_adds_only_the_difference() {
        let shared = AtomicU64::new(0);
        let mut f = Flushed::default();
        f.flush(10, &shared);
        f.flush(10, &shared);
        f.flush(25, &shared);
        assert_eq!(shared.load(Ordering::Relaxed), 25);
    }

    #[test]
    fn cpu_accounting() {
        let c = Cpu::between((1.0, 0.5), (3.0, 1.5), 2_000_000_000, 2_000_000);
        assert_eq!((c.user_s, c.sys_s, c.total_s), (2.0, 1.0, 3.0));
        assert_eq!(c.cores, 1.5);
        assert_eq!(c.per_million_msgs_s, Some(1.5));
        let (u, s) = cpu_seconds();
        assert!(u >= 0.0 && s >= 0.0);
    }
}
