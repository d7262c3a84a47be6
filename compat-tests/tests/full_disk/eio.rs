//! EIO from the disk: the store stops at the first failed write or fsync,
//! the node exits rather than confirm, and after the disk is repaired every
//! confirmed message is there.

use super::disk::FailingDisk;
use super::node::{
    Node, Seen, never_published, open, publisher, read_back, seen_after_the_stop, wait_for_exit,
};
use compat_tests::common::confirmed::{assert_no_loss, blocking};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Real space behind the ext4: a few seconds of unpaced 8 KiB publishes.
const BACKING_MIB: u64 = 96;
/// What ext4 believes it has: far more, so no write fails with ENOSPC.
const IMAGE_MIB: u64 = 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eio_stops_the_store_without_confirming_what_it_could_not_write() {
    let disk = FailingDisk::mount(BACKING_MIB, IMAGE_MIB);
    let logs = tempfile::tempdir().expect("logs");
    // The alarm is off, and would not fire anyway: ext4 reports ~900 MiB free.
    let mut node = Node::start(
        &disk.path().join("data"),
        logs.path(),
        "disk_free_limit_bytes = 0\n",
    );
    let (conn, ch) = open(&node.uri()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let task = tokio::spawn(publisher(ch, 100, Duration::ZERO, stop, seen.clone()));

    let status = blocking(|| wait_for_exit("the node's stop on EIO", &mut node));
    let log = node.log();
    assert_eq!(status.code(), Some(70), "exit status {status}; log:\n{log}");
    // The store's own failure is the device's: EIO, or EROFS once ext4 has
    // remounted itself read-only. The loop driver passes the backing tmpfs's
    // ENOSPC up for some writes (a block it cannot store), so that counts
    // too, ext4 itself being nowhere near full (checked below). fjall's
    // journal, written by a worker of its own, may hit it first; the store
    // then fails on fjall's poisoned state.
    let device = |l: &str| {
        [
            "Input/output error",
            "Read-only file system",
            "No space left on device",
        ]
        .iter()
        .any(|m| l.contains(m))
    };
    let failure = log
        .lines()
        .find(|l| l.contains("event store failed"))
        .unwrap_or_else(|| panic!("the node stopped for another reason:\n{log}"));
    let fjall_failed_first = failure.contains("Poisoned")
        && log
            .lines()
            .any(|l| (l.contains("journal") || l.contains("Worker")) && device(l));
    assert!(
        device(failure) || fjall_failed_first,
        "the store failed on something other than the device: {failure}\n{log}"
    );
    // And ext4 itself was nowhere near full: not the ENOSPC test again.
    let free_mib = disk.free() / super::MIB;
    assert!(
        free_mib > IMAGE_MIB / 2,
        "ext4 had only {free_mib} MiB free: the disk filled instead of failing"
    );
    let seen = seen_after_the_stop(task, conn, seen).await;
    assert!(
        !seen.confirmed.is_empty(),
        "nothing was confirmed before the disk failed: the test proves nothing"
    );

    // The disk comes back (room behind it, e2fsck): the node starts on what
    // it wrote. Every confirmed message is there, intact, and nothing that
    // was never published.
    let fsck = disk.repair(4 * BACKING_MIB);
    blocking(|| node.restart());
    let ids = read_back(&node.uri()).await;
    let dups = assert_no_loss(&seen.confirmed, &ids, "after EIO");
    let unexpected = never_published(&ids, seen.published);
    assert!(unexpected.is_empty(), "ids never published: {unexpected:?}");
    eprintln!(
        "EIO: node stopped with {status}; {} published, {} confirmed, {} read back after \
         e2fsck and a restart ({} unconfirmed but written), duplicates {dups}, lost 0; \
         e2fsck: {}",
        seen.published,
        seen.confirmed.len(),
        ids.len(),
        ids.len() - dups - seen.confirmed.len(),
        fsck.lines().find(|l| l.contains(" files ")).unwrap_or("")
    );
}
