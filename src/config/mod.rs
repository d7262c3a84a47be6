//! Broker configuration: the TOML file and its defaults.
//!
//! With no file at all the broker runs as RabbitMQ does out of the box: vhost `/`,
//! user `guest`/`guest` allowed from loopback only.

mod cluster;
mod front;
mod tls;

pub use cluster::{ClusterConfig, NodeConfig, NodeRole};
pub use front::{STREAM_PROTOCOL_VERSION, ServerProperties};
pub use tls::{CertLoginFrom, TlsConfig, Verify};

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A user allowed to log in.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct UserConfig {
    /// Login name.
    pub name: String,
    /// Clear-text password from the config file (hashes come with the users issue).
    pub password: String,
    /// RabbitMQ-style tags (administrator, monitoring, ...); kept for the management API.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Virtual hosts created at boot; `/` always exists.
    #[serde(default = "default_vhosts")]
    pub vhosts: Vec<String>,
    /// Users. When the file names none, `guest`/`guest` exists, as in RabbitMQ.
    #[serde(default = "default_users")]
    pub users: Vec<UserConfig>,
    /// Users that may connect only from loopback (RabbitMQ's `loopback_users`).
    #[serde(default = "default_loopback_users")]
    pub loopback_users: Vec<String>,
    /// SASL mechanisms connection.start offers, in this order (RabbitMQ's
    /// `auth_mechanisms`): `PLAIN`, `AMQPLAIN`, `EXTERNAL`. EXTERNAL is
    /// off by default, as in RabbitMQ, where it needs a plugin and this
    /// list; listed, it is offered on TLS connections with a verified client
    /// certificate only.
    #[serde(default = "default_auth_mechanisms")]
    pub auth_mechanisms: Vec<String>,
    /// Highest channel number a client may open.
    #[serde(default = "default_channel_max")]
    pub channel_max: u16,
    /// Largest frame the broker accepts and sends.
    #[serde(default = "default_frame_max")]
    pub frame_max: u32,
    /// Heartbeat interval in seconds the broker proposes (0 disables).
    #[serde(default = "default_heartbeat")]
    pub heartbeat_secs: u16,
    /// The cluster's name until one is stored (`PUT /api/cluster-name`, the
    /// `cluster_name` global parameter or an import); unset, the name of the
    /// cluster's first node, as RabbitMQ names a cluster after its first node.
    #[serde(default)]
    pub cluster_name: Option<String>,
    /// How long a delivery may stay unacknowledged before its channel is closed
    /// with 406 (RabbitMQ's `consumer_timeout`, 30 minutes by default).
    #[serde(default = "default_consumer_timeout")]
    pub consumer_timeout_ms: u64,
    /// How often a stream's `max-age` is looked at when nothing is
    /// published to it (a publish, a policy change and a start look at once):
    /// its closed segments older than that go. Osiris 1.4+ looks every
    /// hour (its `retention_eval_interval`), RabbitMQ 3.10's osiris only
    /// when a segment fills: a minute here, where a look costs a comparison
    /// per stream.
    #[serde(default = "default_stream_retention_interval")]
    pub stream_retention_interval_ms: u64,
    /// How many client connections the node serves at once (RabbitMQ's
    /// `connection_max`); unset, no limit. As in RabbitMQ, a client over the
    /// limit is not served until another connection closes.
    #[serde(default)]
    pub connection_max: Option<u32>,
    /// How long a client has from its TCP connect to connection.open before
    /// the socket is closed (RabbitMQ's `handshake_timeout`, 10 s).
    #[serde(default = "front::default_handshake_timeout_ms")]
    pub handshake_timeout_ms: u64,
    /// The `product` and `version` connection.start reports.
    #[serde(default)]
    pub server_properties: ServerProperties,
    /// Memory alarm threshold in bytes of resident memory: above it publishers are
    /// blocked (connection.blocked), as with RabbitMQ's vm_memory_high_watermark.
    /// Default: 40% of the machine's memory.
    #[serde(default)]
    pub memory_high_watermark_bytes: Option<u64>,
    /// Disk alarm threshold: publishers are blocked while the data directory's
    /// filesystem has less free space than this (RabbitMQ's disk_free_limit, 50 MB).
    #[serde(default = "default_disk_free_limit")]
    pub disk_free_limit_bytes: u64,
    /// RAM for ready messages, over all queues, in bytes; messages beyond it
    /// are paged out to `<data-dir>/pages` and read back ahead of delivery
    /// (docs/architecture.md, "Queues longer than RAM").
    #[serde(default = "default_message_ram_budget")]
    pub message_ram_budget_bytes: u64,
    /// Directory of the event store when `--data-dir` is not given (lets one
    /// file per node of a cluster on one machine say where each node keeps
    /// its data).
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// Prometheus port when `--prometheus-port` is not given.
    #[serde(default)]
    pub prometheus_port: Option<u16>,
    /// Management API port when `--management-port` is not given.
    #[serde(default)]
    pub management_port: Option<u16>,
    /// Replication: this node's id and every node of the cluster. Absent = the
    /// embedded single node with its own local store.
    #[serde(default)]
    pub cluster: Option<ClusterConfig>,
    /// TLS for clients: AMQPS, SASL EXTERNAL and HTTPS for the management
    /// API (docs/tls.md). Absent = no TLS listener.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Threads that run connections and the master (the async runtime's
    /// workers), when `--worker-threads` is not given. Default: the host's
    /// cores, shared out among the nodes of `[cluster]` that the file puts
    /// on this host (see [`Config::worker_threads`]).
    #[serde(default)]
    pub worker_threads: Option<usize>,
}

fn default_vhosts() -> Vec<String> {
    vec!["/".to_string()]
}
fn default_users() -> Vec<UserConfig> {
    vec![UserConfig {
        name: "guest".into(),
        password: "guest".into(),
        tags: vec!["administrator".into()],
    }]
}
fn default_loopback_users() -> Vec<String> {
    vec!["guest".into()]
}
fn default_auth_mechanisms() -> Vec<String> {
    vec!["PLAIN".into(), "AMQPLAIN".into()]
}
fn default_channel_max() -> u16 {
    2047
}
fn default_frame_max() -> u32 {
    131_072
}
fn default_heartbeat() -> u16 {
    60
}
fn default_disk_free_limit() -> u64 {
    50_000_000
}
fn default_message_ram_budget() -> u64 {
    crate::broker::paging::DEFAULT_RAM_BUDGET_BYTES
}
fn default_consumer_timeout() -> u64 {
    1_800_000
}
fn default_stream_retention_interval() -> u64 {
    60_000
}

impl Config {
    /// The cluster name in effect while none is stored: the configured one,
    /// else the first node's name (the node with the lowest id in a cluster,
    /// this node alone), the name `GET /api/nodes` lists for it.
    pub fn default_cluster_name(&self) -> String {
        if let Some(name) = &self.cluster_name {
            return name.clone();
        }
        let first = self
            .cluster
            .as_ref()
            .and_then(|c| c.nodes.iter().map(|n| n.id).min());
        crate::metrics::node_name(first)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            vhosts: default_vhosts(),
            users: default_users(),
            loopback_users: default_loopback_users(),
            auth_mechanisms: default_auth_mechanisms(),
            channel_max: default_channel_max(),
            frame_max: default_frame_max(),
            heartbeat_secs: default_heartbeat(),
            cluster_name: None,
            consumer_timeout_ms: default_consumer_timeout(),
            stream_retention_interval_ms: default_stream_retention_interval(),
            connection_max: None,
            handshake_timeout_ms: front::default_handshake_timeout_ms(),
            server_properties: ServerProperties::default(),
            memory_high_watermark_bytes: None,
            disk_free_limit_bytes: default_disk_free_limit(),
            message_ram_budget_bytes: default_message_ram_budget(),
            data_dir: None,
            prometheus_port: None,
            management_port: None,
            cluster: None,
            tls: None,
            worker_threads: None,
        }
    }
}

/// Why a config file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The path given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("invalid config {path}: {source}")]
    Parse {
        /// The path given.
        path: String,
        /// The parser's message.
        source: toml::de::Error,
    },
    /// A value is out of range.
    #[error("invalid config: {0}")]
    Invalid(String),
}

impl Config {
    /// Where the stream protocol over TLS is set: `[tls] stream_port` on a
    /// single node; each node's `stream_tls_addr` in a cluster, where every
    /// node must know the others' (metadata names them), and never without
    /// `[tls]`.
    pub fn check_stream_tls(&self) -> Result<(), String> {
        let port = self.tls.as_ref().and_then(|t| t.stream_port);
        let Some(cluster) = &self.cluster else {
            return Ok(());
        };
        if port.is_some() {
            return Err("[tls] stream_port (--stream-tls-port) is for a single node: in a cluster give each node a stream_tls_addr in [[cluster.nodes]]".into());
        }
        let me = cluster.nodes.iter().find(|n| n.id == cluster.node);
        if self.tls.is_none() && me.is_some_and(|n| n.stream_tls_addr.is_some()) {
            return Err("stream_tls_addr needs a [tls] section (the certificate and key)".into());
        }
        Ok(())
    }

    /// Parse TOML text, then check ranges.
    pub fn from_toml(text: &str, path: &str) -> Result<Config, ConfigError> {
        let mut c: Config = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_string(),
            source,
        })?;
        if !c.vhosts.iter().any(|v| v == "/") {
            c.vhosts.insert(0, "/".into());
        }
        if c.frame_max != 0 && c.frame_max < stablemq_protocol::FRAME_MIN_SIZE {
            return Err(ConfigError::Invalid(format!(
                "frame_max {} is below the AMQP minimum {}",
                c.frame_max,
                stablemq_protocol::FRAME_MIN_SIZE
            )));
        }
        if let Some(cluster) = &c.cluster {
            cluster.validate().map_err(ConfigError::Invalid)?;
        }
        if let Some(tls) = &c.tls {
            tls.validate().map_err(ConfigError::Invalid)?;
        }
        c.check_stream_tls().map_err(ConfigError::Invalid)?;
        if c.worker_threads == Some(0) {
            return Err(ConfigError::Invalid(
                "worker_threads must be at least 1".into(),
            ));
        }
        if let Some(m) = c
            .auth_mechanisms
            .iter()
            .find(|m| !crate::auth::KNOWN_MECHANISMS.contains(&m.as_str()))
        {
            return Err(ConfigError::Invalid(format!(
                "auth_mechanisms: unknown mechanism {m:?} (known: PLAIN, AMQPLAIN, EXTERNAL)"
            )));
        }
        Ok(c)
    }

    /// The async runtime's worker threads on a host with `cores` cores: the
    /// file's `worker_threads`, else the cores shared out among the nodes of
    /// the cluster that run on this host (at least one each).
    ///
    /// Why share them: every node runs its own workers, and workers that
    /// outnumber the cores spend their time waking and switching, not
    /// working. Three co-located nodes on two cores (examples/cluster/) with
    /// two workers each used 53 us of CPU per confirmed message at confirm
    /// window 100; with one each, 36 us, and 1.4x the rate
    /// (docs/benchmarks.md). A single node keeps one worker per core: it
    /// needs them to parse a fast producer and consumer in parallel (a
    /// transient 16 B stream ran 30% slower on one worker).
    pub fn worker_threads(&self, cores: usize) -> usize {
        if let Some(n) = self.worker_threads {
            return n;
        }
        let sharing = self
            .cluster
            .as_ref()
            .map_or(1, ClusterConfig::nodes_on_this_host);
        (cores / sharing.max(1)).max(1)
    }

    /// Load a file, or the defaults when `path` is None.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        match path {
            None => Ok(Config::default()),
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                    path: p.display().to_string(),
                    source,
                })?;
                Config::from_toml(&text, &p.display().to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_rabbitmq_defaults() {
        let c = Config::from_toml("", "x").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.users[0].name, "guest");
        assert_eq!(c.channel_max, 2047);
    }

    #[test]
    fn users_and_vhosts_parse_and_root_vhost_is_kept() {
        let c = Config::from_toml(
            "vhosts = [\"other\"]\n[[users]]\nname = \"alice\"\npassword = \"pw\"\n",
            "x",
        )
        .unwrap();
        assert_eq!(c.vhosts, vec!["/".to_string(), "other".to_string()]);
        assert_eq!(c.users.len(), 1);
        assert!(Config::from_toml("bogus = 1", "x").is_err());
        assert!(Config::from_toml("frame_max = 100", "x").is_err());
    }

    #[test]
    fn front_door_settings_parse_with_rabbitmq_defaults() {
        let c = Config::from_toml("", "x").unwrap();
        assert_eq!(c.server_properties.product, "StableMQ");
        assert_eq!(
            c.server_properties.amqp_version(),
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(c.server_properties.stream_version(), "3.13.0");
        assert_eq!(c.connection_max, None);
        assert_eq!(c.handshake_timeout_ms, 10_000);
        let c = Config::from_toml(
            "connection_max = 5\nhandshake_timeout_ms = 500\n[server_properties]\nproduct = \"RabbitMQ\"\nversion = \"3.10.8\"\n",
            "x",
        )
        .unwrap();
        assert_eq!(c.connection_max, Some(5));
        assert_eq!(c.handshake_timeout_ms, 500);
        assert_eq!(c.server_properties.product, "RabbitMQ");
        assert_eq!(c.server_properties.version.as_deref(), Some("3.10.8"));
        assert_eq!(c.server_properties.stream_version(), "3.10.8");
        assert!(Config::from_toml("[server_properties]\nbogus = 1\n", "x").is_err());
    }

    #[test]
    fn worker_threads_default_to_the_cores_or_are_set() {
        let c = Config::default();
        assert_eq!(c.worker_threads(2), 2);
        assert_eq!(c.worker_threads(16), 16);
        let c = Config::from_toml("worker_threads = 3\n", "x").unwrap();
        assert_eq!(c.worker_threads(16), 3);
        assert!(Config::from_toml("worker_threads = 0\n", "x").is_err());
    }

    #[test]
    fn the_stream_tls_listener_is_stream_port_alone_and_stream_tls_addr_in_a_cluster() {
        let tls = "[tls]\ncert_file = \"c\"\nkey_file = \"k\"\nstream_port = 5551\n";
        let c = Config::from_toml(tls, "x").unwrap();
        assert_eq!(c.tls.as_ref().and_then(|t| t.stream_port), Some(5551));
        let cluster = concat!(
            "[cluster]\nnode = 1\n",
            "[[cluster.nodes]]\nid = 1\nroles = [\"broker\", \"store\"]\ncluster_addr = \"127.0.0.1:25701\"\namqp_addr = \"127.0.0.1:5672\"\n",
            "[[cluster.nodes]]\nid = 2\nroles = [\"broker\", \"store\"]\ncluster_addr = \"127.0.0.1:25702\"\namqp_addr = \"127.0.0.1:5673\"\n",
            "[[cluster.nodes]]\nid = 3\nroles = [\"broker\", \"store\"]\ncluster_addr = \"127.0.0.1:25703\"\namqp_addr = \"127.0.0.1:5674\"\n",
        );
        let mut c = Config::from_toml(cluster, "x").unwrap();
        assert!(c.check_stream_tls().is_ok());
        c.tls = Config::from_toml(tls, "x").unwrap().tls;
        let err = c.check_stream_tls().unwrap_err();
        assert!(err.contains("give each node a stream_tls_addr"), "{err}");
        // A node's own stream_tls_addr needs the certificate of [tls].
        let with_addr = cluster.replacen(
            "amqp_addr = \"127.0.0.1:5672\"\n",
            "amqp_addr = \"127.0.0.1:5672\"\nstream_tls_addr = \"127.0.0.1:5551\"\n",
            1,
        );
        let err = Config::from_toml(&with_addr, "x").unwrap_err().to_string();
        assert!(
            err.contains("stream_tls_addr needs a [tls] section"),
            "{err}"
        );
        let tls_only = "[tls]\ncert_file = \"c\"\nkey_file = \"k\"\n";
        assert!(Config::from_toml(&format!("{with_addr}{tls_only}"), "x").is_ok());
    }
}
