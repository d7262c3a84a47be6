//! Clients that recover by themselves across a failover of a real 3-node
//! cluster (the shipped `examples/cluster/` configs): the RabbitMQ Java client
//! (Debian's `librabbitmq-client-java`, automatic and topology recovery, the
//! list of the three nodes' addresses) and aio-pika's `connect_robust` (from
//! `.venv`, with the three nodes' URLs), each in a program of its own
//! (`compat-tests/clients/java/RecoveryClient.java`,
//! `compat-tests/python/recovery/robust_client.py`).
//!
//! Each program declares a durable exchange, a durable queue and an
//! exclusive "tap" queue declared without a name, publishes persistent
//! messages with confirms and consumes both queues. The test SIGKILLs the
//! master, which the client is connected to directly or through a slave's
//! proxy. The client must reconnect to a surviving node with its own
//! recovery (no help from the test), declare its topology again (the tap queue
//! died with the master's session: it gets messages again only if topology
//! recovery declared it, bound it and consumed from it), and resume
//! publishing and consuming. At the end the checker reads what the client
//! consumed plus what is left in the queue: 0 confirmed messages lost;
//! duplicates (a batch whose confirms were lost is published again, a delivery
//! whose ack was lost comes again) are reported, as at-least-once allows.
//!
//! That check alone is weak: the client consumes its queue as fast as it
//! fills, so at the kill hardly anything waits in it, and a message the
//! failover lost was most often delivered before the kill and counts as
//! consumed. So the test also binds a durable "ledger" queue of its own
//! beside the client's, which nobody consumes until the end: every
//! confirmed message must be in it after the failover.

use compat_tests::common;

use common::confirmed::*;
use compat_tests::cluster::Cluster;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lapin::ExchangeKind;
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions};
use lapin::types::FieldTable;

/// Messages per batch of confirms in both programs.
const BATCH: u64 = 100;
/// Where Debian's librabbitmq-client-java and libslf4j-java put their jars.
const JARS: &str = "/usr/share/java";

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The ids in `dir/name`, one per line (a torn last line is skipped).
fn ids(dir: &Path, name: &str) -> Vec<u64> {
    std::fs::read_to_string(dir.join(name))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn events(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("events")).unwrap_or_default()
}

/// Which client library runs.
#[derive(Clone, Copy, Debug)]
enum Client {
    Java,
    AioPika,
}

impl Client {
    /// The exchange the program declares and publishes to (its source).
    fn exchange(self) -> &'static str {
        match self {
            Client::Java => "recovery.java",
            Client::AioPika => "recovery.aio-pika",
        }
    }
}

/// Declares the client's exchange as the client does (durable, direct) and
/// a durable ledger queue bound to it with the client's routing key (its
/// queue's name), before the client starts.
async fn declare_ledger(uris: &[String], exchange: &str, key: &str, ledger: &str) {
    let (_conn, ch, _) = connect_any(uris, 0).await;
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.exchange_declare(
        exchange.into(),
        ExchangeKind::Direct,
        durable,
        FieldTable::default(),
    )
    .await
    .expect("exchange.declare");
    declare(&ch, ledger).await.expect("queue.declare");
    ch.queue_bind(
        ledger.into(),
        exchange.into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("queue.bind");
}

/// Compile `RecoveryClient.java` into `out` and return the command that runs it.
fn java_command(out: &Path) -> Command {
    let jar = Path::new(JARS).join("amqp-client.jar");
    assert!(
        jar.is_file() && Path::new(JARS).join("slf4j-nop.jar").is_file(),
        "{} is missing: the recovery test needs Debian's librabbitmq-client-java, \
         libslf4j-java and default-jdk-headless (scripts/test.sh installs them)",
        jar.display()
    );
    let src = manifest().join("clients/java/RecoveryClient.java");
    let status = Command::new("javac")
        .args(["-nowarn", "-cp"])
        .arg(&jar)
        .arg("-d")
        .arg(out)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("run javac (default-jdk-headless): {e}"));
    assert!(status.success(), "javac {} failed", src.display());
    let cp = format!(
        "{}:{JARS}/amqp-client.jar:{JARS}/slf4j-api.jar:{JARS}/slf4j-nop.jar",
        out.display()
    );
    let mut cmd = Command::new("java");
    cmd.args(["-cp", &cp, "RecoveryClient"]);
    cmd
}

fn python_command() -> Command {
    let python = match std::env::var_os("STABLEMQ_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "STABLEMQ_PYTHON is not set. The recovery test needs a Python with aio-pika \
             10.2.1: run it with scripts/test.sh, which creates .venv and sets STABLEMQ_PYTHON"
        ),
    };
    let mut cmd = Command::new(python);
    cmd.arg(manifest().join("python/recovery/robust_client.py"));
    cmd
}

/// A client program writing its record into `dir`; killed if still running
/// when dropped.
struct Program {
    child: Child,
    dir: PathBuf,
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Program {
    fn start(client: Client, cluster: &Cluster, order: &[usize], dir: &Path, queue: &str) -> Self {
        let mut cmd = match client {
            Client::Java => {
                let classes = dir.join("classes");
                std::fs::create_dir_all(&classes).expect("classes dir");
                let mut cmd = java_command(&classes);
                cmd.arg(dir).arg(queue);
                let addrs: Vec<String> = order
                    .iter()
                    .map(|i| format!("127.0.0.1:{}", cluster.nodes[*i].amqp_port))
                    .collect();
                cmd.arg(addrs.join(","));
                cmd
            }
            Client::AioPika => {
                let mut cmd = python_command();
                cmd.arg(dir).arg(queue);
                for i in order {
                    cmd.arg(cluster.uri(*i));
                }
                cmd
            }
        };
        let log = std::fs::File::create(dir.join("output")).expect("output file");
        let child = cmd
            .stdout(Stdio::from(log.try_clone().expect("clone")))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("start the {client:?} client: {e}"));
        Program {
            child,
            dir: dir.to_path_buf(),
        }
    }

    fn output(&self) -> String {
        let out = std::fs::read_to_string(self.dir.join("output")).unwrap_or_default();
        format!("events:\n{}\noutput:\n{out}", events(&self.dir))
    }

    /// Wait until `ready` holds, panicking if the program exits or `WAIT` passes.
    fn wait_for(&mut self, what: &str, ready: impl Fn(&Path) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !ready(&self.dir) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the client exited ({status}) before {what}:\n{}",
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {WAIT:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Ask the program to stop publishing, drain and exit; wait for it.
    fn stop(&mut self) {
        std::fs::write(self.dir.join("stop"), b"").expect("write the stop file");
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert!(
                    status.success(),
                    "the client failed ({status}):\n{}",
                    self.output()
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the client did not stop within 90 s:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn max_id(dir: &Path, name: &str) -> u64 {
    ids(dir, name).into_iter().max().unwrap_or(0)
}

/// Where the client first connects.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Start {
    /// On the master (the first address): its connection dies with it.
    Master,
    /// On a slave (the first address), which proxies it to the master and
    /// closes it with 320 when the master dies.
    Slave,
    /// Wherever the client's own choice lands: the Java client shuffles its
    /// address list before every connection attempt, so it starts on the
    /// master or on a slave, and the test reports which.
    Shuffled,
}

/// Kill the master under `client` and check what it recovered.
async fn recovers_across_master_kill(client: Client, start: Start, queue: &str) {
    let mut cluster = blocking(Cluster::start_example);
    let master = blocking(|| cluster.wait_master(WAIT));
    let slave = (master + 1) % 3;
    // The first node's address first; the others follow, as a client
    // configured with the whole cluster has them.
    // The master's address first (the Java client shuffles the list anyway).
    let order = match start {
        Start::Slave => [slave, master, (master + 2) % 3],
        _ => [master, slave, (master + 2) % 3],
    };
    let ledger = format!("{queue}.ledger");
    declare_ledger(&cluster.uris(), client.exchange(), queue, &ledger).await;
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut program = Program::start(client, &cluster, &order, tmp.path(), queue);
    blocking(|| {
        program.wait_for("1000 confirms, 500 deliveries and a tap", |d| {
            ids(d, "confirmed").len() >= 1000
                && ids(d, "consumed").len() >= 500
                && !ids(d, "tap").is_empty()
        })
    });
    let on_master =
        events(tmp.path()).contains(&format!("connected {}", cluster.nodes[master].amqp_port));
    assert!(
        start == Start::Shuffled
            || events(tmp.path())
                .contains(&format!("connected {}", cluster.nodes[order[0]].amqp_port)),
        "the client did not start on node {}:\n{}",
        order[0] + 1,
        program.output()
    );
    let path = if on_master {
        "on the master"
    } else {
        "proxied through a slave"
    };

    let killed_at = Instant::now();
    blocking(|| cluster.kill9(master));
    let new_master = blocking(|| cluster.wait_master_other_than(Some(master), WAIT));
    blocking(|| program.wait_for("a recovery", |d| events(d).contains("recovered ")));
    let recovered_after = killed_at.elapsed();
    // Every id above `fresh` was first published after the recovery.
    let fresh = max_id(tmp.path(), "confirmed") + BATCH;
    blocking(|| {
        program.wait_for(
            "confirms, deliveries and taps of messages published after the recovery",
            |d| {
                max_id(d, "confirmed") > fresh + 1000
                    && max_id(d, "consumed") > fresh
                    && max_id(d, "tap") > fresh
            },
        )
    });
    blocking(|| program.stop());
    let dir = tmp.path();
    let summary = events(dir);
    assert!(
        summary.contains("missing=0 "),
        "the recovered consumer did not get every confirmed message:\n{}",
        program.output()
    );

    let confirmed: BTreeSet<u64> = ids(dir, "confirmed").into_iter().collect();
    let consumed = ids(dir, "consumed");
    // What the client left unacked went back to the queue when it closed.
    let left = consume_all(&cluster.uris(), queue).await;
    let mut seen = consumed.clone();
    seen.extend(&left);
    let dups = assert_no_loss(
        &confirmed,
        &seen,
        &format!("{client:?} across kill -9 master"),
    );
    // Nobody consumed the ledger: every confirmed message is in it.
    let in_ledger = consume_all(&cluster.uris(), &ledger).await;
    assert_no_loss(
        &confirmed,
        &in_ledger,
        &format!("{client:?} across kill -9 master, in the unconsumed ledger queue"),
    );
    let recovered_on = summary
        .lines()
        .find_map(|l| l.strip_prefix("recovered "))
        .unwrap_or("?")
        .to_string();
    eprintln!(
        "{client:?} ({start:?}, {path}): kill -9 master (node {}), node {} master, client recovered \
         on port {recovered_on} after {recovered_after:?}; confirmed {}, consumed {} \
         (+{} left in the queue), duplicates {dups}, lost 0; ledger queue {} messages, \
         lost 0; {}",
        master + 1,
        new_master + 1,
        confirmed.len(),
        consumed.len(),
        left.len(),
        in_ledger.len(),
        summary
            .lines()
            .find(|l| l.starts_with("summary"))
            .unwrap_or("")
    );
    assert_ne!(
        recovered_on,
        cluster.nodes[master].amqp_port.to_string(),
        "recovered on the dead node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn java_client_recovers_across_a_master_kill() {
    recovers_across_master_kill(Client::Java, Start::Shuffled, "recovery.java").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn aio_pika_connect_robust_on_the_master_recovers_across_its_kill() {
    recovers_across_master_kill(Client::AioPika, Start::Master, "recovery.aio-pika").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn aio_pika_connect_robust_through_a_slave_recovers_across_the_master_kill() {
    recovers_across_master_kill(Client::AioPika, Start::Slave, "recovery.aio-pika-slave").await;
}
