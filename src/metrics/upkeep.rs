//! The recorder's upkeep: histogram samples drained on a timer, not only by
//! a scrape.
//!
//! `metrics-exporter-prometheus` keeps every sample a histogram records in
//! an unbounded buffer of its own (an `AtomicBucket`, 8 bytes a sample) until
//! something drains it into the histogram's fixed buckets: a scrape
//! (`render`) or `run_upkeep`. The crate runs `run_upkeep` on a timer only
//! when it serves the endpoint itself (`PrometheusBuilder::install`); the
//! node installs the bare recorder (`install_recorder`, whose contract leaves
//! the upkeep to the caller) and serves `/metrics` itself, so nothing but a
//! scrape drained the buffers. A node that nobody scraped kept every sample
//! for good: `stablemq_store_fsync_seconds` and
//! `stablemq_store_fsync_batch_messages` gain one per fsync on every store,
//! `stablemq_quorum_ack_seconds` one per stable batch on the master.
//! Drained every [`PERIOD`], the buffers hold at most one period of samples.
//! (This is not what makes a cluster node's RSS grow in the soak of
//! docs/reliability.md: with the upkeep, and with no recorder at all, the
//! nodes grew alike, about 3 MiB a minute at 450 messages a second.)

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;

/// How often the histograms are drained: the crate's own upkeep interval.
pub const PERIOD: Duration = Duration::from_secs(5);

/// What the upkeep drains: the node's recorder (a counter in the tests).
pub trait Drain: Send + 'static {
    /// Move the samples waiting in every histogram into its buckets.
    fn drain(&self);
}

impl Drain for PrometheusHandle {
    fn drain(&self) {
        self.run_upkeep();
    }
}

/// Drain `recorder` every [`PERIOD`], until the task is aborted.
pub async fn run(recorder: impl Drain) {
    run_every(recorder, PERIOD).await;
}

/// Drain `recorder` every `period`, until the task is aborted.
async fn run_every(recorder: impl Drain, period: Duration) {
    let mut every = tokio::time::interval(period);
    // A late tick (a busy runtime) is not made up for with a burst.
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        recorder.drain();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counting(Arc<AtomicUsize>);

    impl Drain for Counting {
        fn drain(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// With nobody scraping, the recorder is still drained once a period
    /// (never more often), and no more once the task is stopped.
    #[tokio::test]
    async fn drains_every_period_without_a_scrape() {
        let period = Duration::from_millis(10);
        let drained = Arc::new(AtomicUsize::new(0));
        let started = tokio::time::Instant::now();
        let task = tokio::spawn(run_every(Counting(drained.clone()), period));
        // Bounded wait: a loaded machine only makes it take longer.
        let deadline = started + Duration::from_secs(20);
        while drained.load(Ordering::Relaxed) < 5 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(period).await;
        }
        task.abort();
        let _ = task.await;
        let elapsed = started.elapsed();
        let seen = drained.load(Ordering::Relaxed);
        assert!(seen >= 5, "{seen} drains in {elapsed:?}");
        // The first tick is immediate, then one a period at most.
        let most = (elapsed.as_millis() / period.as_millis()) as usize + 1;
        assert!(seen <= most, "{seen} drains in {elapsed:?}");
        tokio::time::sleep(period * 5).await;
        assert_eq!(drained.load(Ordering::Relaxed), seen);
    }

    /// The node's recorder, drained between samples, still counts every
    /// sample in the scrape: the upkeep moves them, it does not drop them.
    #[test]
    fn drained_samples_stay_in_the_scrape() {
        let recorder = super::super::builder()
            .expect("the node's buckets")
            .build_recorder();
        let handle = recorder.handle();
        let name = stablemq_cluster::metrics::FSYNC_BATCH_MESSAGES;
        metrics::with_local_recorder(&recorder, || {
            for _ in 0..1000 {
                metrics::histogram!(name).record(3.0);
            }
            handle.drain();
            for _ in 0..500 {
                metrics::histogram!(name).record(30.0);
            }
        });
        handle.drain();
        let text = handle.render();
        let line = |suffix: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("{name}{suffix}")))
                .map(str::to_owned)
        };
        assert_eq!(
            line("_count").as_deref(),
            Some(&*format!("{name}_count 1500"))
        );
        assert_eq!(line("_sum").as_deref(), Some(&*format!("{name}_sum 18000")));
        // Bucket `le="5"` holds the first thousand only.
        assert_eq!(
            line("_bucket{le=\"5\"}").as_deref(),
            Some(&*format!("{name}_bucket{{le=\"5\"}} 1000"))
        );
    }
}
