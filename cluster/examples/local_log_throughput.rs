//! Quick throughput check of `LocalLog` on a real disk:
//! `cargo run --release -p stablemq-cluster --example local_log_throughput -- [entries] [payload_bytes] [in_flight_max] [dir]`
//!
//! Appends as fast as allowed with at most `in_flight_max` unacked entries (as a
//! broker bounding unconfirmed publishes would), and reports entries/s and the
//! group-commit batch size (entries per fsync = entries / on_stable calls).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use stablemq_cluster::{FjallStore, LocalLog};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let entries: u64 = args.next().map_or(Ok(200_000), |a| a.parse())?;
    let payload_bytes: usize = args.next().map_or(Ok(1024), |a| a.parse())?;
    let in_flight_max: u64 = args.next().map_or(Ok(50_000), |a| a.parse())?;
    let tmp = tempfile::tempdir()?;
    let dir = args
        .next()
        .map_or_else(|| tmp.path().to_owned(), Into::into);

    let stable = Arc::new((Mutex::new(0u64), Condvar::new()));
    let commits = Arc::new(AtomicU64::new(0));
    let (s, c) = (stable.clone(), commits.clone());
    let (mut log, _) = LocalLog::open(
        Box::new(FjallStore::open(&dir)?),
        move |index| {
            c.fetch_add(1, Ordering::Relaxed);
            *s.0.lock().expect("no holder of the lock panics") = index;
            s.1.notify_all();
        },
        |err| panic!("store failed: {err}"),
    )?;

    let payload = bytes::Bytes::from(vec![0xabu8; payload_bytes]);
    let started = Instant::now();
    for index in 1..=entries {
        let mut done = stable.0.lock().expect("no holder of the lock panics");
        while index - *done > in_flight_max {
            done = stable.1.wait(done).expect("no holder of the lock panics");
        }
        drop(done);
        log.append(payload.clone());
    }
    log.shutdown()?;
    let seconds = started.elapsed().as_secs_f64();
    let commits = commits.load(Ordering::Relaxed);
    println!(
        "{entries} x {payload_bytes} B, in flight <= {in_flight_max}: {:.0} entries/s, {:.1} MB/s, \
         {commits} fsyncs, {:.1} entries/fsync, {:.2} ms/commit (append+fsync cycle)",
        entries as f64 / seconds,
        (entries as f64 * payload_bytes as f64) / seconds / 1e6,
        entries as f64 / commits as f64,
        seconds * 1e3 / commits as f64,
    );
    Ok(())
}
