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
//! Either way, after a kill -9 and a restart, every confirmed message is read
//! back with its body intact (no confirm for an event not on disk).

use compat_tests::common;

use common::confirmed::{WAIT, assert_no_loss, blocking};
use compat_tests::{binary_path, free_port};
use futures_lite::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::time::timeout;

const MIB: u64 = 1024 * 1024;
/// Body size: the id (8 bytes, big-endian), then a fill derived from it.
const BODY: usize = 8 * 1024;
const QUEUE: &str = "full-disk";

fn body(id: u64) -> Vec<u8> {
    let mut b = id.to_be_bytes().to_vec();
    b.extend((0..BODY - 8).map(|i| (id as usize).wrapping_mul(31).wrapping_add(i) as u8));
    b
}

/// A tmpfs of its own, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size_mib: u64) -> Tmpfs {
        let dir = tempfile::tempdir().expect("temp dir");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mount point");
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size_mib}m,mode=0700"),
                "tmpfs",
            ])
            .arg(&mnt)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount -t tmpfs failed ({status}): the full-disk test runs as root, as CI does"
        );
        Tmpfs { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    /// Bytes free on the filesystem (`df`'s avail column).
    fn free(&self) -> u64 {
        let out = Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(self.path())
            .output()
            .expect("run df");
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("df printed {text:?}"))
    }

    /// Fill the filesystem until `leave` bytes are free, with a ballast file.
    fn fill_leaving(&self, leave: u64) {
        let free = self.free();
        assert!(free > leave, "only {free} bytes free, wanted {leave}");
        let ballast = self.path().join("ballast");
        let data = vec![0xa5u8; MIB as usize];
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&ballast)
            .expect("ballast");
        use std::io::Write;
        for _ in 0..(free - leave) / MIB {
            f.write_all(&data).expect("write the ballast");
        }
        f.sync_all().expect("sync the ballast");
    }

    fn free_ballast(&self) {
        std::fs::remove_file(self.path().join("ballast")).expect("delete the ballast");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a process that still holds a file must not keep it mounted.
        let _ = Command::new("umount").arg("-l").arg(self.path()).status();
    }
}

/// One broker process with its data directory on the tmpfs.
struct Node {
    child: Option<Child>,
    amqp_port: u16,
    args: Vec<String>,
    log: PathBuf,
}

impl Node {
    fn start(tmpfs: &Tmpfs, logs: &Path, config: &str) -> Node {
        let cfg = logs.join("stablemq.toml");
        std::fs::write(&cfg, config).expect("config");
        let amqp_port = free_port();
        let args = vec![
            "serve".to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--amqp-port".into(),
            amqp_port.to_string(),
            "--prometheus-port".into(),
            free_port().to_string(),
            "--management-port".into(),
            free_port().to_string(),
            "--data-dir".into(),
            tmpfs.path().join("data").display().to_string(),
            "--config".into(),
            cfg.display().to_string(),
        ];
        let mut node = Node {
            child: None,
            amqp_port,
            args,
            log: logs.join("broker.log"),
        };
        node.spawn();
        node
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log");
        let child = Command::new(binary_path())
            .args(&self.args)
            .env("NO_COLOR", "1")
            .stdout(Stdio::from(log.try_clone().expect("clone")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn the broker");
        self.child = Some(child);
        let addr = SocketAddr::from(([127, 0, 0, 1], self.amqp_port));
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                self.exited().is_none(),
                "the broker exited; log:\n{}",
                self.log()
            );
            assert!(
                Instant::now() < deadline,
                "no listener; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    fn uri(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.amqp_port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            eprintln!("--- broker log ---\n{}", self.log());
        }
    }
}

async fn open(uri: &str) -> (Connection, Channel) {
    let conn = Connection::connect(uri, ConnectionProperties::default())
        .await
        .expect("connect");
    let ch = conn.create_channel().await.expect("channel");
    ch.queue_declare(
        QUEUE.into(),
        QueueDeclareOptions::durable(),
        FieldTable::default(),
    )
    .await
    .expect("declare");
    (conn, ch)
}

/// What the publisher saw.
#[derive(Default)]
struct Seen {
    confirmed: BTreeSet<u64>,
    /// Ids below this were sent (each as its publish went out).
    published: u64,
    nacks: u64,
    error: Option<String>,
}

/// Publish rounds of `round` messages with confirms until `stop` or an
/// error, sleeping `pause` after each round (the load's pace).
async fn publisher(
    ch: Channel,
    round: u64,
    pause: Duration,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
) {
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    let mut next = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut pending = Vec::new();
        for id in next..next + round {
            match ch
                .basic_publish(
                    "".into(),
                    QUEUE.into(),
                    BasicPublishOptions::default(),
                    &body(id),
                    BasicProperties::default().with_delivery_mode(2),
                )
                .await
            {
                Ok(c) => {
                    pending.push((id, c));
                    // Sent: the broker may have written it, even if a
                    // later publish of this round fails.
                    seen.lock().expect("seen").published = id + 1;
                }
                Err(e) => {
                    seen.lock().expect("seen").error = Some(e.to_string());
                    return;
                }
            }
        }
        for (id, c) in pending {
            // A blocked connection waits here, as long as the test lets it.
            match timeout(Duration::from_secs(300), c).await {
                Ok(Ok(conf)) if conf.is_ack() => {
                    seen.lock().expect("seen").confirmed.insert(id);
                }
                Ok(Ok(_)) => seen.lock().expect("seen").nacks += 1,
                Ok(Err(e)) => {
                    seen.lock().expect("seen").error = Some(e.to_string());
                    return;
                }
                Err(_) => {
                    seen.lock().expect("seen").error = Some("no confirm in 300 s".into());
                    return;
                }
            }
        }
        next += round;
        tokio::time::sleep(pause).await;
    }
}

fn confirmed(seen: &Mutex<Seen>) -> usize {
    seen.lock().expect("seen").confirmed.len()
}

/// Read the whole queue back, checking every body; returns the ids.
async fn read_back(uri: &str) -> Vec<u64> {
    let (_conn, ch) = open(uri).await;
    let count = ch
        .queue_declare(
            QUEUE.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("passive declare")
        .message_count();
    ch.basic_qos(500, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut consumer = ch
        .basic_consume(
            QUEUE.into(),
            "check".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let mut ids = Vec::with_capacity(count as usize);
    while ids.len() < count as usize {
        let d = timeout(WAIT, consumer.next())
            .await
            .expect("a delivery within the bound")
            .expect("consumer open")
            .expect("delivery");
        let id = u64::from_be_bytes(d.data[..8].try_into().expect("8-byte id"));
        assert!(d.data == body(id), "message {id} came back corrupted");
        ids.push(id);
    }
    ids
}

fn wait_until(what: &str, node: &mut Node, mut cond: impl FnMut(&mut Node) -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond(node) {
        assert!(Instant::now() < deadline, "no {what} within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_disk_alarm_blocks_publishers_before_the_store_fails_and_clears_when_freed() {
    let tmpfs = Tmpfs::mount(384);
    let logs = tempfile::tempdir().expect("logs");
    let limit = 128 * MIB;
    let mut node = Node::start(
        &tmpfs,
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
    let mut node = Node::start(&tmpfs, logs.path(), "disk_free_limit_bytes = 0\n");
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
    let mut status = None;
    blocking(|| {
        wait_until("the node's stop on ENOSPC", &mut node, |n| {
            status = n.exited();
            status.is_some()
        })
    });
    let status = status.expect("exited");
    let log = node.log();
    assert_eq!(status.code(), Some(70), "exit status {status}; log:\n{log}");
    assert!(
        log.contains("No space left on device") && log.contains("event store failed"),
        "the node stopped for another reason:\n{log}"
    );
    let _ = timeout(WAIT, task)
        .await
        .expect("the publisher ends with the node");
    drop(conn);
    let seen = Arc::try_unwrap(seen)
        .ok()
        .expect("sole owner")
        .into_inner()
        .expect("seen");
    assert!(seen.error.is_some(), "the publisher saw no failure");
    assert_eq!(seen.nacks, 0, "nacks");

    // With space again the node starts on what it wrote: everything it
    // confirmed is there, intact, and nothing it never accepted.
    tmpfs.free_ballast();
    blocking(|| node.restart());
    let ids = read_back(&node.uri()).await;
    let dups = assert_no_loss(&seen.confirmed, &ids, "after ENOSPC");
    let unexpected: Vec<u64> = ids
        .iter()
        .copied()
        .filter(|i| *i >= seen.published)
        .collect();
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
