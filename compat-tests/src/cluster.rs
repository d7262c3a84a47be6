//! A 3-node StableMQ cluster of real processes, from `examples/cluster/`.
//!
//! The three example configs are read as shipped, and only their addresses,
//! data directories and metrics ports are swapped for free loopback ports and a
//! temporary directory, so the tests exercise the layout the docs tell
//! operators to run. Nodes are killed with real signals (SIGKILL, SIGSTOP) and
//! restarted on the same ports and data.

use crate::{binary_path, free_port};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `guest:guest`, base64: the management API's basic auth for the default user.
const GUEST_AUTH: &str = "Basic Z3Vlc3Q6Z3Vlc3Q=";

/// One node process.
pub struct ClusterNode {
    /// Node id from the config (1-based).
    pub id: u64,
    /// AMQP port.
    pub amqp_port: u16,
    /// Management API port.
    pub management_port: u16,
    /// Prometheus port.
    pub prometheus_port: u16,
    /// Stream protocol port.
    pub stream_port: u16,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    stopped: bool,
    /// Run with `stablemq store` (the event store only) instead of `serve`.
    store_only: bool,
}

/// A running cluster; every process is killed when it drops.
pub struct Cluster {
    /// The nodes, index = id - 1.
    pub nodes: Vec<ClusterNode>,
    dir: tempfile::TempDir,
}

/// One node's status as its management API reports it.
#[derive(Debug, Clone)]
pub struct NodeStatus {
    /// master, slave, candidate.
    pub role: String,
    /// Highest epoch seen.
    pub epoch: u64,
    /// The master it follows.
    pub master: Option<u64>,
    /// Its stable index.
    pub stable_index: u64,
}

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("examples")
        .join("cluster")
}

impl Cluster {
    /// Start the three example nodes and wait for a master.
    pub fn start_example() -> Cluster {
        Cluster::start_example_with(None)
    }

    /// Like [`Cluster::start_example`], but node `store_only` (0-based) runs
    /// `stablemq store`: an event store without a broker.
    pub fn start_example_with(store_only: Option<usize>) -> Cluster {
        Cluster::start_example_tuned(store_only, "")
    }

    /// Like [`Cluster::start_example_with`], with `cluster_lines` (TOML keys
    /// of the `[cluster]` section, e.g. `store_retention = 50`) added to
    /// every node's config.
    pub fn start_example_tuned(store_only: Option<usize>, cluster_lines: &str) -> Cluster {
        Cluster::start_example_sections(store_only, cluster_lines, &|_| String::new())
    }

    /// Like [`Cluster::start_example_tuned`], with `sections(i)` (whole TOML
    /// sections, e.g. a `[tls]` of its own) appended to node `i`'s config.
    /// Lines of `sections(i)` before its first `[table]` are top-level keys
    /// (e.g. `auth_mechanisms`): they go at the top of the file.
    pub fn start_example_sections(
        store_only: Option<usize>,
        cluster_lines: &str,
        sections: &dyn Fn(usize) -> String,
    ) -> Cluster {
        Cluster::start_example_edited(store_only, cluster_lines, sections, &|_, text| text)
    }

    /// Like [`Cluster::start_example_sections`], with each node's config
    /// text (its free ports filled in) passed through `edit(i, text)` last,
    /// e.g. to add keys to the `[[cluster.nodes]]` entries.
    pub fn start_example_edited(
        store_only: Option<usize>,
        cluster_lines: &str,
        sections: &dyn Fn(usize) -> String,
        edit: &dyn Fn(usize, String) -> String,
    ) -> Cluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let ports: Vec<[u16; 5]> = (0..3)
            .map(|_| {
                [
                    free_port(),
                    free_port(),
                    free_port(),
                    free_port(),
                    free_port(),
                ]
            })
            .collect();
        let mut nodes = Vec::new();
        for id in 1..=3u64 {
            let src = example_dir().join(format!("node{id}.toml"));
            let mut text = std::fs::read_to_string(&src)
                .unwrap_or_else(|e| panic!("read {}: {e}", src.display()));
            // Two passes: a free port may be one of the documented ones
            // (25701 to 25703), and a one-pass chain of replacements would
            // then rewrite it again as a later node's (two nodes on one port).
            let mut filled = Vec::new();
            for (i, p) in ports.iter().enumerate() {
                let n = i as u16;
                for (k, (documented, port)) in
                    [(25701, p[0]), (5672, p[1]), (15672, p[2]), (5552, p[4])]
                        .into_iter()
                        .enumerate()
                {
                    let token = format!("127.0.0.1:@{i}.{k}@\"");
                    text = text.replace(&format!("127.0.0.1:{}\"", documented + n), &token);
                    filled.push((token, format!("127.0.0.1:{port}\"")));
                }
            }
            for (token, addr) in filled {
                text = text.replace(&token, &addr);
            }
            let me = &ports[id as usize - 1];
            let data = dir.path().join(format!("node{id}"));
            text = text
                .replace(
                    &format!("data_dir = \"./data/node{id}\""),
                    &format!("data_dir = \"{}\"", data.display()),
                )
                .replace(
                    &format!("prometheus_port = {}", 15691 + id),
                    &format!("prometheus_port = {}", me[3]),
                );
            assert!(
                text.contains(&me[1].to_string()) && text.contains(&data.display().to_string()),
                "examples/cluster/node{id}.toml no longer has the documented ports and data_dir"
            );
            if !cluster_lines.is_empty() {
                assert!(
                    text.contains("\n[cluster]\n"),
                    "node{id}.toml has no [cluster]"
                );
                text = text.replacen(
                    "\n[cluster]\n",
                    &format!("\n[cluster]\n{cluster_lines}\n"),
                    1,
                );
            }
            let extra = sections(id as usize - 1);
            let (top, tables): (Vec<&str>, Vec<&str>) = {
                let lines: Vec<&str> = extra.lines().collect();
                let first_table = lines
                    .iter()
                    .position(|l| l.trim_start().starts_with('['))
                    .unwrap_or(lines.len());
                (lines[..first_table].to_vec(), lines[first_table..].to_vec())
            };
            text = format!("{}\n{text}\n{}\n", top.join("\n"), tables.join("\n"));
            text = edit(id as usize - 1, text);
            let config = dir.path().join(format!("node{id}.toml"));
            std::fs::write(&config, text).expect("write config");
            nodes.push(ClusterNode {
                id,
                amqp_port: me[1],
                management_port: me[2],
                prometheus_port: me[3],
                stream_port: me[4],
                config,
                log: dir.path().join(format!("node{id}.log")),
                child: None,
                stopped: false,
                store_only: false,
            });
        }
        if let Some(i) = store_only {
            nodes[i].store_only = true;
        }
        let mut cluster = Cluster { nodes, dir };
        for i in 0..3 {
            cluster.spawn(i);
        }
        for i in 0..3 {
            cluster.wait_listening(i);
        }
        cluster.wait_master(Duration::from_secs(30));
        cluster
    }

    /// The temporary directory holding configs, data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// AMQP URI of node `i` (0-based) for guest on `/`.
    pub fn uri(&self, i: usize) -> String {
        format!(
            "amqp://guest:guest@127.0.0.1:{}/%2f",
            self.nodes[i].amqp_port
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
        let child = Command::new(binary_path())
            .arg(if node.store_only { "store" } else { "serve" })
            .arg("--config")
            .arg(&node.config)
            .arg("--bind")
            .arg("127.0.0.1")
            // STABLEMQ_TEST_LOG_LEVEL raises the nodes' log level (a tracing
            // filter) when a cluster test needs diagnosing.
            .arg("--log-level")
            .arg(std::env::var("STABLEMQ_TEST_LOG_LEVEL").unwrap_or_else(|_| "info".into()))
            .env("NO_COLOR", "1")
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", binary_path().display()));
        node.child = Some(child);
        node.stopped = false;
    }

    fn wait_listening(&mut self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let addr = SocketAddr::from(([127, 0, 0, 1], self.nodes[i].management_port));
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

    /// Node `i`'s config file; a test may rewrite it between `kill9` and
    /// `start`.
    pub fn config(&self, i: usize) -> &Path {
        &self.nodes[i].config
    }

    /// Node `i`'s output so far.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default()
    }

    /// Whether node `i` runs and is not stopped.
    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].child.is_some() && !self.nodes[i].stopped
    }

    /// Node `i`'s own status, if it answers within `timeout`.
    pub fn status(&self, i: usize, timeout: Duration) -> Option<NodeStatus> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .build()
            .into();
        let url = format!(
            "http://127.0.0.1:{}/api/stablemq/node-status",
            self.nodes[i].management_port
        );
        let mut resp = agent
            .get(&url)
            .header("authorization", GUEST_AUTH)
            .call()
            .ok()?;
        let v: serde_json::Value = resp.body_mut().read_json().ok()?;
        Some(NodeStatus {
            role: v["role"].as_str()?.to_string(),
            epoch: v["epoch"].as_u64()?,
            master: v["master"].as_u64(),
            stable_index: v["stable_index"].as_u64()?,
        })
    }

    /// Node `i`'s Prometheus scrape.
    pub fn metrics(&self, i: usize) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.nodes[i].prometheus_port);
        let mut resp = ureq::get(&url)
            .call()
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        resp.body_mut().read_to_string().expect("metrics text")
    }

    /// `GET path` on node `i`'s management API as guest, as JSON.
    pub fn api(&self, i: usize, path: &str) -> serde_json::Value {
        self.try_api(i, path)
            .unwrap_or_else(|e| panic!("GET {path} on node {}: {e}", i + 1))
    }

    /// [`Cluster::api`] for a node that may not answer yet.
    pub fn try_api(&self, i: usize, path: &str) -> Result<serde_json::Value, String> {
        let url = format!("http://127.0.0.1:{}{path}", self.nodes[i].management_port);
        let mut resp = ureq::get(&url)
            .header("authorization", GUEST_AUTH)
            .call()
            .map_err(|e| e.to_string())?;
        resp.body_mut().read_json().map_err(|e| e.to_string())
    }

    /// `GET /api/nodes` on node `i`, as JSON.
    pub fn api_nodes(&self, i: usize) -> serde_json::Value {
        self.api(i, "/api/nodes")
    }

    /// The index of the node that serves as master in the highest epoch among
    /// the nodes that answer, if one does.
    pub fn master(&self) -> Option<usize> {
        let mut best: Option<(u64, usize)> = None;
        for i in 0..self.nodes.len() {
            if !self.is_up(i) {
                continue;
            }
            if let Some(s) = self.status(i, Duration::from_millis(500))
                && s.role == "master"
                && best.is_none_or(|(e, _)| s.epoch > e)
            {
                best = Some((s.epoch, i));
            }
        }
        best.map(|(_, i)| i)
    }

    /// Wait for a master (other than `not`, if given); panics after `timeout`.
    pub fn wait_master_other_than(&self, not: Option<usize>, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(m) = self.master().filter(|m| Some(*m) != not) {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "no master within {timeout:?}; logs:\n{}",
                self.all_logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait for any master.
    pub fn wait_master(&self, timeout: Duration) -> usize {
        self.wait_master_other_than(None, timeout)
    }

    /// Every node's log, for failure messages.
    pub fn all_logs(&self) -> String {
        (0..self.nodes.len())
            .map(|i| format!("--- node {} ---\n{}", i + 1, self.log(i)))
            .collect()
    }

    /// SIGKILL node `i` and reap it.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.nodes[i].stopped = false;
    }

    /// Start node `i` again (same config, ports and data) after `kill9`.
    pub fn start(&mut self, i: usize) {
        assert!(
            self.nodes[i].child.is_none(),
            "node {} still running",
            i + 1
        );
        self.spawn(i);
        self.wait_listening(i);
    }

    /// SIGSTOP node `i`: it stays alive but does nothing, as a long GC pause or
    /// a hung VM would.
    pub fn sigstop(&mut self, i: usize) {
        self.signal(i, libc::SIGSTOP);
        self.nodes[i].stopped = true;
    }

    /// SIGCONT node `i` after `sigstop`.
    pub fn sigcont(&mut self, i: usize) {
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

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].stopped {
                self.sigcont(i);
            }
            self.kill9(i);
        }
        if std::thread::panicking() {
            eprintln!("{}", self.all_logs());
        }
    }
}
