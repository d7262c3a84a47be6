//! The three node processes of a partition run, one per network namespace.
//!
//! Each node runs `stablemq serve` with the shipped `examples/cluster/`
//! config, its loopback addresses swapped for its namespace's address (the
//! ports stay: every namespace has its own), inside its namespace through
//! `ip netns exec` (which execs, so the child's pid is the broker's). Nodes
//! are killed and paused by pid.

use crate::binary_path;
use crate::netns::Net;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `guest:guest`, base64: the management API's basic auth for the default user.
const GUEST_AUTH: &str = "Basic Z3Vlc3Q6Z3Vlc3Q=";

/// The example configs' loopback ports of node 1; node `i` adds `i`.
const CLUSTER_PORT: u16 = 25701;
const AMQP_PORT: u16 = 5672;
const MANAGEMENT_PORT: u16 = 15672;
/// The stream port of node 1 in the example configs (node i has this + i).
const STREAM_PORT: u16 = 5552;

/// One node process.
struct Node {
    ns: String,
    ip: Ipv4Addr,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    stopped: bool,
}

/// The cluster's nodes; every process is killed (by pid) when it drops.
pub struct Nodes {
    nodes: Vec<Node>,
    dir: tempfile::TempDir,
}

/// One node's status as its management API reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// master, slave or candidate.
    pub role: String,
    /// The highest epoch it has seen.
    pub epoch: u64,
}

fn example(id: usize) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/cluster")
        .join(format!("node{id}.toml"))
}

impl Nodes {
    /// Write the three configs (with `cluster_lines` added to `[cluster]`)
    /// and start the nodes in `net`'s namespaces.
    pub fn start(net: &Net, cluster_lines: &str) -> Nodes {
        let dir = tempfile::Builder::new()
            .prefix(&format!("{}-", net.tag()))
            .tempdir()
            .expect("temp dir");
        let mut nodes = Vec::new();
        for i in 0..3 {
            let id = i + 1;
            let src = example(id);
            let mut text = std::fs::read_to_string(&src)
                .unwrap_or_else(|e| panic!("read {}: {e}", src.display()));
            for j in 0..3u16 {
                let ip = net.ip(usize::from(j));
                for base in [CLUSTER_PORT, AMQP_PORT, MANAGEMENT_PORT, STREAM_PORT] {
                    let port = base + j;
                    text = text.replace(
                        &format!("\"127.0.0.1:{port}\""),
                        &format!("\"{ip}:{port}\""),
                    );
                }
            }
            let data = dir.path().join(format!("node{id}"));
            text = text.replace(
                &format!("data_dir = \"./data/node{id}\""),
                &format!("data_dir = \"{}\"", data.display()),
            );
            assert!(
                !text.contains("\"127.0.0.1:") && text.contains(&data.display().to_string()),
                "examples/cluster/node{id}.toml no longer has the documented addresses and data_dir"
            );
            text = text.replacen(
                "\n[cluster]\n",
                &format!("\n[cluster]\n{cluster_lines}\n"),
                1,
            );
            // The clients come from the bridge's address, not loopback: let
            // guest in from there, as RabbitMQ's `loopback_users = none`.
            text.insert_str(0, "loopback_users = []\n");
            let config = dir.path().join(format!("node{id}.toml"));
            std::fs::write(&config, text).expect("write config");
            nodes.push(Node {
                ns: net.ns(i),
                ip: net.ip(i),
                config,
                log: dir.path().join(format!("node{id}.log")),
                child: None,
                stopped: false,
            });
        }
        let mut all = Nodes { nodes, dir };
        for i in 0..3 {
            all.spawn(i);
        }
        for i in 0..3 {
            all.wait_listening(i);
        }
        all
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never empty; for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The directory of configs, data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Node `i`'s cluster (replication) port.
    pub fn cluster_port(i: usize) -> u16 {
        CLUSTER_PORT + i as u16
    }

    /// AMQP URI of node `i` for guest on `/`.
    pub fn uri(&self, i: usize) -> String {
        format!(
            "amqp://guest:guest@{}:{}/%2f",
            self.nodes[i].ip,
            AMQP_PORT + i as u16
        )
    }

    /// Every node's URI.
    pub fn uris(&self) -> Vec<String> {
        (0..self.nodes.len()).map(|i| self.uri(i)).collect()
    }

    fn spawn(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .expect("open node log");
        let log2 = log.try_clone().expect("clone log");
        let child = Command::new("ip")
            .args(["netns", "exec", &node.ns])
            .arg(binary_path())
            .arg("serve")
            .arg("--config")
            .arg(&node.config)
            .arg("--bind")
            .arg(node.ip.to_string())
            .arg("--log-level")
            .arg(std::env::var("STABLEMQ_TEST_LOG_LEVEL").unwrap_or_else(|_| "info".into()))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn ip netns exec {}: {e}", binary_path().display()));
        node.child = Some(child);
        node.stopped = false;
    }

    fn wait_listening(&mut self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let addr = SocketAddr::from((self.nodes[i].ip, MANAGEMENT_PORT + i as u16));
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            if let Some(c) = self.nodes[i].child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                panic!("node {} exited with {status}; log:\n{}", i + 1, self.log(i));
            }
            assert!(
                Instant::now() < deadline,
                "node {} did not listen within 60 s; log:\n{}",
                i + 1,
                self.log(i)
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Node `i`'s output so far.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default()
    }

    /// Whether node `i` runs and is not stopped.
    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].child.is_some() && !self.nodes[i].stopped
    }

    /// Node `i`'s status, if it answers within `timeout`.
    pub fn status(&self, i: usize, timeout: Duration) -> Option<Status> {
        status_of(self.nodes[i].ip, MANAGEMENT_PORT + i as u16, timeout)
    }

    /// A function that reads node `i`'s status, for a monitor thread.
    pub fn status_reader(&self, i: usize) -> impl Fn(Duration) -> Option<Status> + Send + 'static {
        let ip = self.nodes[i].ip;
        move |t| status_of(ip, MANAGEMENT_PORT + i as u16, t)
    }

    /// The node that serves as master in the highest epoch, among those that
    /// answer.
    pub fn master(&self) -> Option<(usize, u64)> {
        let mut best: Option<(usize, u64)> = None;
        for i in 0..self.nodes.len() {
            if !self.is_up(i) {
                continue;
            }
            if let Some(s) = self.status(i, Duration::from_millis(500))
                && s.role == "master"
                && best.is_none_or(|(_, e)| s.epoch > e)
            {
                best = Some((i, s.epoch));
            }
        }
        best
    }

    /// SIGKILL node `i` and reap it.
    pub fn kill9(&mut self, i: usize) {
        if self.nodes[i].stopped {
            self.signal(i, libc::SIGCONT);
        }
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.nodes[i].stopped = false;
    }

    /// Start node `i` again (same config and data) after [`Nodes::kill9`].
    pub fn restart(&mut self, i: usize) {
        assert!(
            self.nodes[i].child.is_none(),
            "node {} still running",
            i + 1
        );
        self.spawn(i);
        self.wait_listening(i);
    }

    /// SIGSTOP node `i`.
    pub fn pause(&mut self, i: usize) {
        self.signal(i, libc::SIGSTOP);
        self.nodes[i].stopped = true;
    }

    /// SIGCONT node `i` after [`Nodes::pause`].
    pub fn resume(&mut self, i: usize) {
        self.signal(i, libc::SIGCONT);
        self.nodes[i].stopped = false;
    }

    #[allow(unsafe_code, reason = "kill(2) has no safe wrapper in libc")]
    fn signal(&self, i: usize, sig: i32) {
        let pid = self.nodes[i].child.as_ref().expect("node not running").id();
        let pid = i32::try_from(pid).expect("pid fits i32");
        // SAFETY: kill(2) on a child we spawned and have not reaped.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
    }
}

fn status_of(ip: Ipv4Addr, port: u16, timeout: Duration) -> Option<Status> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .build()
        .into();
    let url = format!("http://{ip}:{port}/api/stablemq/node-status");
    let mut resp = agent
        .get(&url)
        .header("authorization", GUEST_AUTH)
        .call()
        .ok()?;
    let v: serde_json::Value = resp.body_mut().read_json().ok()?;
    Some(Status {
        role: v["role"].as_str()?.to_string(),
        epoch: v["epoch"].as_u64()?,
    })
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill9(i);
        }
    }
}
