//! A full disk under load, on a filesystem of its own: a tmpfs the test mounts
//! in a private temporary directory (as root, as CI runs the tests) and
//! unmounts when it ends, also on failure. A single node keeps its data
//! directory there; lapin publishes persistent messages with confirms, and a
//! ballast file fills the rest of the filesystem.
//!
//! - With the disk alarm on (`disk_free_limit_bytes`), publishers get
//!   `connection.blocked` before the store runs out of space, the store never
//!   fails, and once the ballast is deleted the alarm clears and publishing
//!   resumes without a restart.
//! - With the alarm off, the disk fills until a write fails with ENOSPC: the
//!   store must refuse to go on (the node stops, exit code 70) rather than
//!   confirm anything it could not write.
//!
//! - A disk whose writes fail with EIO (`eio.rs`: ext4 on a loop device
//!   whose backing file's tmpfs fills up): the store must stop at the first
//!   failed write or fsync, as for ENOSPC.
//!
//! Every way, after a kill -9 (and, for EIO, a repair of the filesystem) and
//! a restart, every confirmed message is read back with its body intact (no
//! confirm for an event not on disk).

mod disk;
mod eio;
mod node;

use compat_tests::common::confirmed::{WAIT, assert_no_loss, blocking};
use disk::Tmpfs;
use node::{
    Node, Seen, confirmed, never_published, open, publisher, read_back, seen_after_the_stop,
    wait_for_exit, wait_until,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::time::timeout;

pub(crate) const MIB: u64 = 1024 * 1024;
/// Body size: the id (8 bytes, big-endian), then a fill derived from it.
pub(crate) const BODY: usize = 8 * 1024;
pub(crate) const QUEUE: &str = "full-disk";

pub(crate) fn body(id: u64) -> Vec<u8> {
    let mut b = id.to_be_bytes().to_vec();
    b.extend((0..BODY - 8).map(|i| (id as usize).wrapping_mul(31).wrapping_add(i) as u8));
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_disk_alarm_blocks_publishers_before_the_store_fails_and_clears_when_freed() {
    let tmpfs = Tmpfs::mount(384);
    let logs = tempfile::tempdir().expect("logs");
    let limit = 128 * MIB;
    let mut node = Node::start(
        &tmpfs.path().join("data"),
        logs.path(),
        &format!("disk_free_limit_bytes = {limit}\n"),
    );
    // 32 MiB above the limit: a few seconds of this load.
    tmpfs.fill_leaving(limit + 32 * MIB);
    let (conn, ch) = open(&node.uri()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    // About 2.5 MiB/s of bodies: 50 messages of 8 KiB per round, 150 ms apart.
    let task = tokio::spawn(publisher(
        ch,
        50,
        Duration::from_millis(150),
        stop.clone(),
        seen.clone(),
    ));

    let started = Instant::now();
    blocking(|| wait_until("connection.blocked", &mut node, |_| conn.status().blocked()));
    let blocked_after = started.elapsed();
    let free_at_block = tmpfs.free();
    assert!(
        node.exited().is_none(),
        "the broker stopped:\n{}",
        node.log()
    );
    // Blocked means held: nothing more is read from the publisher, so once
    // what was in flight is confirmed, the count stays put.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = confirmed(&seen);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(confirmed(&seen), held, "confirms went on while blocked");
    assert!(
        conn.status().blocked(),
        "unblocked while the disk is still full"
    );
    let log = node.log();
    assert!(
        log.contains("low on disk"),
        "no disk alarm in the log:\n{log}"
    );
    assert!(
        !log.contains("event store failed"),
        "the store failed before the alarm held publishers:\n{log}"
    );

    // Space comes back: the alarm clears and the same connection goes on.
    tmpfs.free_ballast();
    blocking(|| {
        wait_until("connection.unblocked", &mut node, |_| {
            !conn.status().blocked()
        })
    });
    let target = held + 500;
    blocking(|| {
        wait_until("confirms after the alarm cleared", &mut node, |_| {
            confirmed(&seen) >= target
        })
    });
    stop.store(true, Ordering::Relaxed);
    timeout(WAIT, task)
        .await
        .expect("publisher stops")
        .expect("publisher");
    let seen = Arc::try_unwrap(seen)
        .ok()
        .expect("sole owner")
        .into_inner()
        .expect("seen");
    assert_eq!(seen.nacks, 0, "nacks");
    assert!(
        seen.error.is_none(),
        "the publisher failed: {:?}",
        seen.error
    );
    assert!(
        node.log().contains("resource alarm cleared"),
        "{}",
        node.log()
    );
    drop(conn);

    // Nothing confirmed is lost or corrupted, across a crash.
    blocking(|| node.restart());
    let ids = read_back(&node.uri()).await;
    let dups = assert_no_loss(&seen.confirmed, &ids, "after the disk alarm");
    eprintln!(
        "disk alarm: blocked after {blocked_after:?} with {} MiB free (limit {} MiB); \
         {held} confirmed before the block, {} in all, {} read back after kill -9, \
         duplicates {dups}, lost 0",
        free_at_block / MIB,
        limit / MIB,
        seen.confirmed.len(),
        ids.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enospc_stops_the_store_without_confirming_what_it_could_not_write() {
    let tmpfs = Tmpfs::mount(192);
    let logs = tempfile::tempdir().expect("logs");
    // The alarm is off: nothing stops the publisher before the disk is full.
    let mut node = Node::start(
        &tmpfs.path().join("data"),
        logs.path(),
        "disk_free_limit_bytes = 0\n",
    );
    tmpfs.fill_leaving(64 * MIB);
    let (conn, ch) = open(&node.uri()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let task = tokio::spawn(publisher(
        ch,
        100,
        Duration::ZERO,
        stop.clone(),
        seen.clone(),
    ));

    // The store must fail on ENOSPC and the node stop, rather than confirm.
    let status = blocking(|| wait_for_exit("the node's stop on ENOSPC", &mut node));
    let log = node.log();
    assert_eq!(status.code(), Some(70), "exit status {status}; log:\n{log}");
    assert!(
        log.contains("No space left on device") && log.contains("event store failed"),
        "the node stopped for another reason:\n{log}"
    );
    let seen = seen_after_the_stop(task, conn, seen).await;

    // With space again the node starts on what it wrote: everything it
    // confirmed is there, intact, and nothing it never accepted.
    tmpfs.free_ballast();
    blocking(|| node.restart());
    let ids = read_back(&node.uri()).await;
    let dups = assert_no_loss(&seen.confirmed, &ids, "after ENOSPC");
    let unexpected = never_published(&ids, seen.published);
    assert!(unexpected.is_empty(), "ids never published: {unexpected:?}");
    eprintln!(
        "ENOSPC: node stopped with {status}; {} published, {} confirmed, {} read back \
         after restart ({} unconfirmed but written), duplicates {dups}, lost 0",
        seen.published,
        seen.confirmed.len(),
        ids.len(),
        ids.len() - dups - seen.confirmed.len()
    );
}
