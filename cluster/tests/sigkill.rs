//! I1 on one node: whatever `on_stable` reported survives SIGKILL.
//!
//! The test re-executes its own binary in "writer" mode (selected by an
//! environment variable). The writer appends through `LocalLog` on a fjall store
//! and prints every stable index it is told about. The parent kills it with
//! SIGKILL while it is still writing, reopens the store, and checks that every
//! index up to the last one printed is there with the right payload.

#![allow(
    clippy::unwrap_used,
    reason = "a test: an unwrap that fails is a failure at its line"
)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use stablemq_cluster::{EventStore, FjallStore, LocalLog};

const WRITER_DIR_ENV: &str = "STABLEMQ_TEST_SIGKILL_WRITER_DIR";
const TEST_NAME: &str = "sigkill_keeps_every_stable_entry";
/// Kill once this much is stable: several thousand group commits' worth.
const KILL_AFTER_STABLE: u64 = 20_000;
/// The writer gives up here, so a parent that never kills still terminates.
const WRITER_ENTRIES_MAX: u64 = 2_000_000;
/// Unacked entries the writer allows in flight, to bound its memory.
const WRITER_IN_FLIGHT_MAX: u64 = 5_000;

fn payload(index: u64) -> Bytes {
    Bytes::from(format!("entry {index:010} ").repeat(6))
}

fn parse_stable(line: &str) -> Option<u64> {
    line.strip_prefix("STABLE ")?.trim().parse().ok()
}

#[test]
fn sigkill_keeps_every_stable_entry() {
    if let Some(dir) = std::env::var_os(WRITER_DIR_ENV) {
        writer(Path::new(&dir));
        return;
    }

    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(WRITER_DIR_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();

    let mut stable = 0;
    for line in lines.by_ref() {
        if let Some(index) = parse_stable(&line.unwrap()) {
            stable = index;
            if stable >= KILL_AFTER_STABLE {
                break;
            }
        }
    }
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    // Lines the writer printed before dying were printed after their fsync too.
    for line in lines {
        if let Some(index) = parse_stable(&line.unwrap()) {
            stable = stable.max(index);
        }
    }
    assert!(
        stable >= KILL_AFTER_STABLE,
        "writer stopped early at stable {stable}"
    );

    let store = FjallStore::open(dir.path()).unwrap();
    let recovered = store.read_from(1).unwrap();
    assert!(
        recovered.len() as u64 >= stable,
        "lost stable entries: stable {stable}, recovered {}",
        recovered.len()
    );
    // Everything recovered, stable or not, must be exactly what was appended.
    for (index, entry) in (1..).zip(&recovered) {
        assert_eq!(entry.pos.index, index);
        assert_eq!(entry.pos.epoch, 1);
        assert_eq!(entry.payload, payload(index), "payload of entry {index}");
    }
    eprintln!(
        "sigkill: last printed stable {stable}, recovered {} entries",
        recovered.len()
    );
}

/// Child mode: append forever (bounded), printing each stable index after fsync.
fn writer(dir: &Path) {
    let stable = Arc::new(AtomicU64::new(0));
    let seen = stable.clone();
    let store = FjallStore::open(dir).unwrap();
    let (mut log, recovered) = LocalLog::open(
        Box::new(store),
        move |index| {
            seen.store(index, Ordering::Release);
            // Straight to the pipe, not through the test harness's capture.
            let mut out = std::io::stdout().lock();
            writeln!(out, "STABLE {index}").unwrap();
            out.flush().unwrap();
        },
        |err| panic!("writer store failed: {err}"),
    )
    .unwrap();
    assert!(recovered.is_empty());
    for index in 1..=WRITER_ENTRIES_MAX {
        while index - stable.load(Ordering::Acquire) > WRITER_IN_FLIGHT_MAX {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        assert_eq!(log.append(payload(index)).index, index);
    }
    log.shutdown().unwrap();
}
