//! The `[cluster]` section: which node this is, and every node of the cluster.
//!
//! Every node's file lists the same nodes; only `node` (and the data directory)
//! differ. One node id names one machine's share of the cluster: its broker,
//! its event store, or both (the co-located default), all reached through one
//! replication address.

use serde::Deserialize;
use stablemq_cluster::replication::{Config as ReplicationConfig, NodeId};
use stablemq_cluster::transport::{Cookie, TlsConfig};
use std::collections::HashMap;
use std::net::SocketAddr;

/// `store_commit_interval_us` when unset: at 10k msg/s on the 3-node
/// cluster (S5) it halved the commits and took the p99 from 6–8 ms to about
/// 3 ms; S3's throughput was unchanged (its commits are slower than this).
const DEFAULT_COMMIT_INTERVAL_US: u64 = 1000;

/// What a node runs.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum NodeRole {
    /// A broker: serves AMQP as master, or as a slave that proxies to it.
    Broker,
    /// An event store: a fjall log that counts towards the quorum.
    Store,
}

/// One node of the cluster.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Unique, nonzero.
    pub id: NodeId,
    /// What it runs; both by default.
    #[serde(default = "both_roles")]
    pub roles: Vec<NodeRole>,
    /// Node-to-node traffic (replication) listens here.
    pub cluster_addr: SocketAddr,
    /// AMQP listens here (brokers only); slaves send clients to the master's.
    #[serde(default)]
    pub amqp_addr: Option<SocketAddr>,
    /// The management HTTP API listens here (status: `GET /api/nodes`).
    #[serde(default)]
    pub management_addr: Option<SocketAddr>,
    /// The stream protocol listens here (its port, on `amqp_addr`'s host);
    /// stream clients learn the master (leader) and the other nodes
    /// (replicas) from it, and slaves forward them to the master's.
    #[serde(default)]
    pub stream_addr: Option<SocketAddr>,
    /// The stream protocol over TLS listens here (needs `[tls]`): stream
    /// clients that came over TLS learn the nodes by these addresses, and a
    /// slave forwards them to the master's `stream_addr` with their TLS
    /// session (RabbitMQ's `stream.listeners.ssl`, `advertised_tls_port`).
    #[serde(default)]
    pub stream_tls_addr: Option<SocketAddr>,
}

fn both_roles() -> Vec<NodeRole> {
    vec![NodeRole::Broker, NodeRole::Store]
}

impl NodeConfig {
    /// Whether the node runs `role`.
    pub fn runs(&self, role: NodeRole) -> bool {
        self.roles.contains(&role)
    }
}

/// The `[cluster]` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's id: one of `nodes`.
    pub node: NodeId,
    /// Every node, this one included.
    pub nodes: Vec<NodeConfig>,
    /// The master sends appends or heartbeats at least this often.
    #[serde(default)]
    pub heartbeat_ms: Option<u64>,
    /// A slave that hears no master this long (plus jitter) campaigns.
    #[serde(default)]
    pub election_timeout_ms: Option<u64>,
    /// Random extra wait before campaigning, up to this much.
    #[serde(default)]
    pub election_jitter_ms: Option<u64>,
    /// A master that hears from fewer than a quorum of stores this long
    /// steps down and closes its clients (320).
    #[serde(default)]
    pub check_quorum_ms: Option<u64>,
    /// Stable log entries each store keeps behind its stable index before
    /// compacting them into its state (a node further behind catches up by
    /// snapshot). 0 turns compaction off: the stores keep their whole log.
    #[serde(default)]
    pub store_retention: Option<u64>,
    /// A store starts a commit (an fsync) at most once per this many
    /// microseconds while messages stream in, so that each carries more of
    /// them (see `cluster/src/driver/pacing.rs`); 0 commits as soon as the
    /// last commit is done. Default 1000.
    #[serde(default)]
    pub store_commit_interval_us: Option<u64>,
    /// The shared secret every node proves it holds before node-to-node
    /// traffic flows (like RabbitMQ's Erlang cookie). Prefer `cookie_file`:
    /// a config file is often readable by more people than a secret should be.
    #[serde(default)]
    pub cookie: Option<String>,
    /// A file holding the cookie (surrounding whitespace ignored). Like the
    /// Erlang cookie file, it must not be readable by group or others.
    #[serde(default)]
    pub cookie_file: Option<std::path::PathBuf>,
    /// This node's certificate chain (PEM) for TLS between nodes. TLS is on
    /// when the three `tls_*` files are set, and then every node needs it.
    #[serde(default)]
    pub tls_cert_file: Option<std::path::PathBuf>,
    /// This node's private key (PEM).
    #[serde(default)]
    pub tls_key_file: Option<std::path::PathBuf>,
    /// The CA every node's certificate must chain to (PEM).
    #[serde(default)]
    pub tls_ca_file: Option<std::path::PathBuf>,
}

impl ClusterConfig {
    /// This node's entry.
    pub fn me(&self) -> &NodeConfig {
        // validate() guarantees it exists; a config is validated when parsed.
        self.node(self.node)
            .unwrap_or_else(|| panic!("validated cluster config lacks node {}", self.node))
    }

    /// A node's entry.
    pub fn node(&self, id: NodeId) -> Option<&NodeConfig> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// How many nodes of the cluster (this one included) share this node's
    /// host, as far as the file says: nodes whose `cluster_addr` has this
    /// node's IP address (loopback nodes are one host). Nodes on other
    /// addresses may still be on this host; they are not counted.
    pub fn nodes_on_this_host(&self) -> usize {
        let ip = self.me().cluster_addr.ip();
        self.nodes
            .iter()
            .filter(|n| n.cluster_addr.ip() == ip)
            .count()
    }

    /// The replication engine's view: members and timings.
    pub fn replication(&self) -> ReplicationConfig {
        let with = |role| {
            self.nodes
                .iter()
                .filter(|n| n.runs(role))
                .map(|n| n.id)
                .collect()
        };
        let mut c = ReplicationConfig::new(with(NodeRole::Store), with(NodeRole::Broker));
        if let Some(v) = self.heartbeat_ms {
            c.heartbeat_ms = v;
        }
        if let Some(v) = self.election_timeout_ms {
            c.election_timeout_ms = v;
        }
        if let Some(v) = self.election_jitter_ms {
            c.election_jitter_ms = v;
        }
        if let Some(v) = self.check_quorum_ms {
            c.check_quorum_ms = v;
        }
        match self.store_retention {
            // 0 turns compaction off: every store keeps its whole log.
            Some(0) => c.store_retention = None,
            Some(v) => c.store_retention = Some(v),
            None => {}
        }
        c.commit_interval_us = self
            .store_commit_interval_us
            .unwrap_or(DEFAULT_COMMIT_INTERVAL_US);
        c
    }

    /// The cluster cookie, read from `cookie_file` or taken from `cookie`;
    /// `None` when neither is set (node-to-node traffic is then not
    /// authenticated). Read at start-up, so a bad file stops the node with a
    /// clear error instead of failing every connection later.
    pub fn cookie(&self) -> Result<Option<Cookie>, String> {
        let secret = match (&self.cookie, &self.cookie_file) {
            (Some(_), Some(_)) => {
                return Err("[cluster] has both cookie and cookie_file; keep one".into());
            }
            (Some(inline), None) => inline.trim().as_bytes().to_vec(),
            (None, Some(path)) => read_cookie_file(path)?,
            (None, None) => return Ok(None),
        };
        Cookie::new(&secret)
            .map(Some)
            .map_err(|e| format!("[cluster] cookie: {e}"))
    }

    /// TLS between nodes, from the three `tls_*` files; `None` when none is
    /// set. Loaded at start-up so a bad file stops the node with its reason.
    pub fn tls(&self) -> Result<Option<TlsConfig>, String> {
        match (&self.tls_cert_file, &self.tls_key_file, &self.tls_ca_file) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), Some(ca)) => TlsConfig::from_pem_files(cert, key, ca)
                .map(Some)
                .map_err(|e| format!("[cluster] TLS: {e}")),
            _ => {
                Err("[cluster] TLS needs all of tls_cert_file, tls_key_file and tls_ca_file".into())
            }
        }
    }

    /// Every other node's replication address.
    pub fn peers(&self) -> HashMap<NodeId, SocketAddr> {
        self.nodes
            .iter()
            .filter(|n| n.id != self.node)
            .map(|n| (n.id, n.cluster_addr))
            .collect()
    }

    /// Check the section makes a cluster that can work.
    pub fn validate(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for n in &self.nodes {
            if n.id == 0 {
                return Err("cluster node ids start at 1".into());
            }
            if !seen.insert(n.id) {
                return Err(format!("cluster node {} is listed twice", n.id));
            }
            if n.roles.is_empty() {
                return Err(format!("cluster node {} has no roles", n.id));
            }
            if n.runs(NodeRole::Broker) && n.amqp_addr.is_none() {
                return Err(format!("broker node {} needs amqp_addr", n.id));
            }
        }
        if self.node(self.node).is_none() {
            return Err(format!("this node ({}) is not in cluster.nodes", self.node));
        }
        if !self.nodes.iter().any(|n| n.runs(NodeRole::Store)) {
            return Err("a cluster needs at least one store".into());
        }
        if !self.nodes.iter().any(|n| n.runs(NodeRole::Broker)) {
            return Err("a cluster needs at least one broker".into());
        }
        Ok(())
    }
}

fn read_cookie_file(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let bytes = std::fs::read(path).map_err(|e| format!("cluster cookie_file {shown}: {e}"))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(|e| format!("cluster cookie_file {shown}: {e}"))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(format!(
                "cluster cookie_file {shown} is readable by group or others (mode {:o}); \
                 chmod 600 it",
                mode & 0o777
            ));
        }
    }
    Ok(bytes.trim_ascii().to_vec())
}

#[cfg(test)]
mod tests {
    use super::{DEFAULT_COMMIT_INTERVAL_US, ReplicationConfig};
    use crate::config::Config;
    use stablemq_cluster::transport::Cookie;

    const THREE: &str = r#"
[cluster]
node = 2
heartbeat_ms = 40
[[cluster.nodes]]
id = 1
cluster_addr = "127.0.0.1:25672"
amqp_addr = "127.0.0.1:5672"
[[cluster.nodes]]
id = 2
cluster_addr = "127.0.0.1:25673"
amqp_addr = "127.0.0.1:5673"
[[cluster.nodes]]
id = 3
roles = ["store"]
cluster_addr = "127.0.0.1:25674"
"#;

    #[test]
    fn a_three_node_section_gives_members_peers_and_timings() {
        let c = Config::from_toml(THREE, "x").unwrap();
        let cl = c.cluster.unwrap();
        assert_eq!(cl.me().id, 2);
        let r = cl.replication();
        assert_eq!(r.stores, vec![1, 2, 3]);
        assert_eq!(r.brokers, vec![1, 2]);
        assert_eq!(r.heartbeat_ms, 40);
        let peers = cl.peers();
        assert_eq!(peers.len(), 2);
        assert!(!peers.contains_key(&2));
    }

    /// The replication config of `THREE` with `extra` lines in `[cluster]`.
    fn replication_with(extra: &str) -> ReplicationConfig {
        let toml = THREE.replace("heartbeat_ms = 40", &format!("heartbeat_ms = 40\n{extra}"));
        Config::from_toml(&toml, "x")
            .unwrap()
            .cluster
            .unwrap()
            .replication()
    }

    #[test]
    fn store_retention_is_on_by_default_set_or_turned_off_by_zero() {
        let r = |extra: &str| replication_with(extra).store_retention;
        assert_eq!(r(""), Some(65536));
        assert_eq!(r("store_retention = 100"), Some(100));
        assert_eq!(r("store_retention = 0"), None);
    }

    #[test]
    fn commit_pacing_is_on_by_default_and_can_be_turned_off() {
        let iv = |extra: &str| replication_with(extra).commit_interval_us;
        assert_eq!(iv(""), DEFAULT_COMMIT_INTERVAL_US);
        assert_eq!(iv("store_commit_interval_us = 250"), 250);
        assert_eq!(iv("store_commit_interval_us = 0"), 0);
    }

    #[test]
    fn nodes_on_one_address_share_the_hosts_cores() {
        let c = Config::from_toml(THREE, "x").unwrap();
        assert_eq!(c.cluster.as_ref().unwrap().nodes_on_this_host(), 3);
        assert_eq!(c.worker_threads(2), 1);
        assert_eq!(c.worker_threads(8), 2);
        // Node 2 on a machine of its own, nodes 1 and 3 on another.
        let apart = THREE.replace("127.0.0.1:25673", "10.0.0.2:25673");
        let c = Config::from_toml(&apart, "x").unwrap();
        assert_eq!(c.cluster.as_ref().unwrap().nodes_on_this_host(), 1);
        assert_eq!(c.worker_threads(8), 8);
        let set = THREE.replace("[cluster]", "worker_threads = 4\n[cluster]");
        assert_eq!(Config::from_toml(&set, "x").unwrap().worker_threads(2), 4);
    }

    #[test]
    fn broken_sections_are_refused() {
        let no_me = THREE.replace("node = 2", "node = 9");
        assert!(Config::from_toml(&no_me, "x").is_err());
        let twice = THREE.replace("id = 3", "id = 1");
        assert!(Config::from_toml(&twice, "x").is_err());
        let broker_without_amqp = THREE.replace("amqp_addr = \"127.0.0.1:5673\"", "");
        assert!(Config::from_toml(&broker_without_amqp, "x").is_err());
    }

    fn cookie_of(extra: &str) -> Result<Option<Cookie>, String> {
        let toml = THREE.replace("heartbeat_ms = 40", &format!("heartbeat_ms = 40\n{extra}"));
        Config::from_toml(&toml, "x")
            .unwrap()
            .cluster
            .unwrap()
            .cookie()
    }

    #[test]
    fn a_cookie_comes_inline_or_from_a_private_file() {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(cookie_of("").unwrap(), None);
        let inline = cookie_of("cookie = \"an-inline-cluster-cookie\"").unwrap();
        assert_eq!(
            inline,
            Some(Cookie::new(b"an-inline-cluster-cookie").unwrap())
        );
        assert!(
            cookie_of("cookie = \"short\"")
                .unwrap_err()
                .contains("at least 16")
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cookie");
        std::fs::write(&path, "a-cookie-from-a-file\n").unwrap();
        let line = format!("cookie_file = \"{}\"", path.display());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(cookie_of(&line).unwrap_err().contains("chmod 600"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        // The trailing newline an editor adds is not part of the secret.
        assert_eq!(
            cookie_of(&line).unwrap(),
            Some(Cookie::new(b"a-cookie-from-a-file").unwrap())
        );
        let both = format!("{line}\ncookie = \"an-inline-cluster-cookie\"");
        assert!(cookie_of(&both).unwrap_err().contains("both"));
        let missing = format!("cookie_file = \"{}\"", dir.path().join("nope").display());
        assert!(cookie_of(&missing).is_err());
    }

    #[test]
    fn tls_needs_all_three_files_and_says_which_one_is_bad() {
        let tls_of = |extra: &str| {
            let toml = THREE.replace("heartbeat_ms = 40", &format!("heartbeat_ms = 40\n{extra}"));
            Config::from_toml(&toml, "x")
                .unwrap()
                .cluster
                .unwrap()
                .tls()
        };
        assert!(tls_of("").unwrap().is_none());
        let partial = tls_of("tls_cert_file = \"/nonexistent/node.crt\"").unwrap_err();
        assert!(partial.contains("needs all of"), "{partial}");
        let missing = tls_of(
            "tls_cert_file = \"/nonexistent/node.crt\"\n\
             tls_key_file = \"/nonexistent/node.key\"\n\
             tls_ca_file = \"/nonexistent/ca.crt\"",
        )
        .unwrap_err();
        assert!(missing.contains("/nonexistent/node.crt"), "{missing}");
    }
}
