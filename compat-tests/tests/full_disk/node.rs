//! The broker process under test, the confirming publisher, and the
//! read-back that checks every confirmed message's body.

use super::{QUEUE, body};
use compat_tests::common::confirmed::WAIT;
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

/// One broker process with its data directory on the test's filesystem.
pub(crate) struct Node {
    child: Option<Child>,
    amqp_port: u16,
    args: Vec<String>,
    log: PathBuf,
}

impl Node {
    /// A broker on `data` (a directory the test's filesystem holds), with
    /// `config` as its config file and its log under `logs`.
    pub(crate) fn start(data: &Path, logs: &Path, config: &str) -> Node {
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
            data.display().to_string(),
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

    pub(crate) fn spawn(&mut self) {
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

    pub(crate) fn uri(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.amqp_port)
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub(crate) fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub(crate) fn restart(&mut self) {
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

pub(crate) async fn open(uri: &str) -> (Connection, Channel) {
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
pub(crate) struct Seen {
    pub(crate) confirmed: BTreeSet<u64>,
    /// Ids below this were sent (each as its publish went out).
    pub(crate) published: u64,
    pub(crate) nacks: u64,
    pub(crate) error: Option<String>,
}

/// Publish rounds of `round` messages with confirms until `stop` or an
/// error, sleeping `pause` after each round (the load's pace).
pub(crate) async fn publisher(
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

pub(crate) fn confirmed(seen: &Mutex<Seen>) -> usize {
    seen.lock().expect("seen").confirmed.len()
}

/// Read the whole queue back, checking every body; returns the ids.
pub(crate) async fn read_back(uri: &str) -> Vec<u64> {
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

pub(crate) fn wait_until(what: &str, node: &mut Node, mut cond: impl FnMut(&mut Node) -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond(node) {
        assert!(Instant::now() < deadline, "no {what} within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until the node exits by itself (`what`: the stop awaited); its
/// status. A blocking wait.
pub(crate) fn wait_for_exit(what: &str, node: &mut Node) -> ExitStatus {
    let mut status = None;
    wait_until(what, node, |n| {
        status = n.exited();
        status.is_some()
    });
    status.expect("exited")
}

/// What the publisher saw once the node stopped under it: it must have
/// failed, with no nack (a node that cannot write stops, it does not nack).
pub(crate) async fn seen_after_the_stop(
    task: tokio::task::JoinHandle<()>,
    conn: Connection,
    seen: Arc<Mutex<Seen>>,
) -> Seen {
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
    seen
}

/// Ids read back that were never published (at or above `published`).
pub(crate) fn never_published(ids: &[u64], published: u64) -> Vec<u64> {
    ids.iter().copied().filter(|i| *i >= published).collect()
}
