//! The fsync metrics carry the names the dashboards use and count what they
//! claim to count. A thread-local recorder keeps this test isolated from others.

#![allow(
    clippy::unwrap_used,
    reason = "a test: an unwrap that fails is a failure at its line"
)]

use std::sync::{Arc, Mutex};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use stablemq_cluster::{Entry, EventStore, FjallStore, metrics as names};

/// Every recorded value, by metric name.
#[derive(Default)]
struct Capture {
    values: Mutex<Vec<(String, f64)>>,
}

struct Handle {
    name: String,
    capture: Arc<Capture>,
}

impl Handle {
    fn push(&self, value: f64) {
        self.capture
            .values
            .lock()
            .unwrap()
            .push((self.name.clone(), value));
    }
}

impl metrics::CounterFn for Handle {
    fn increment(&self, value: u64) {
        self.push(value as f64);
    }
    fn absolute(&self, _: u64) {}
}

impl metrics::HistogramFn for Handle {
    fn record(&self, value: f64) {
        self.push(value);
    }
}

struct CaptureRecorder(Arc<Capture>);

impl CaptureRecorder {
    fn handle(&self, key: &Key) -> Arc<Handle> {
        Arc::new(Handle {
            name: key.name().to_owned(),
            capture: self.0.clone(),
        })
    }
}

impl Recorder for CaptureRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.handle(key))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.handle(key))
    }
}

#[test]
fn fsync_metrics_are_recorded_per_sync() {
    assert_eq!(
        names::FSYNC_BATCH_MESSAGES,
        "stablemq_store_fsync_batch_messages"
    );
    assert_eq!(names::FSYNC_SECONDS, "stablemq_store_fsync_seconds");
    assert_eq!(names::FSYNCS_TOTAL, "stablemq_store_fsyncs_total");

    let dir = tempfile::tempdir().unwrap();
    let capture = Arc::new(Capture::default());
    let recorder = CaptureRecorder(capture.clone());
    metrics::with_local_recorder(&recorder, || {
        names::describe();
        let mut store = FjallStore::open(dir.path()).unwrap();
        let batch: Vec<Entry> = (1..=5).map(|i| Entry::new(1, i, "x")).collect();
        store.append(&batch).unwrap();
        store.sync().unwrap();
        store.append(&[Entry::new(1, 6, "y")]).unwrap();
        store.sync().unwrap();
        store.sync().unwrap(); // nothing new: no fsync, nothing recorded
    });

    let values = capture.values.lock().unwrap();
    let of = |name: &str| -> Vec<f64> {
        values
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| *v)
            .collect()
    };
    assert_eq!(of(names::FSYNC_BATCH_MESSAGES), vec![5.0, 1.0]);
    assert_eq!(of(names::FSYNCS_TOTAL), vec![1.0, 1.0]);
    let seconds = of(names::FSYNC_SECONDS);
    assert_eq!(seconds.len(), 2);
    assert!(seconds.iter().all(|s| *s >= 0.0));
}
