//! `GET /api/nodes`: every node's role and replication progress.
//!
//! A node knows only its own state for certain, so the node asked reports
//! itself and asks each peer's management port for its own report (forwarding
//! the caller's credentials). A peer that does not answer within a short
//! timeout is listed as not running and not reachable, which is what an
//! operator needs to see during a failover.
//!
//! `reachable` is about the management port only. Whether a node takes part
//! in replication is `replicating`: the master heard it on an authenticated
//! node-to-node connection within [`REPLICATING_WITHIN`]. Every node reports
//! when it last heard each peer (`peers_heard_ms_ago`), and the list takes
//! the master's view. A node kept out by a wrong cluster cookie answers HTTP
//! (`reachable: true`) but is `replicating: false`.

use super::{ApiError, AppState, authorize};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use stablemq_cluster::driver::{BrokerStatus, StoreStatus};
use stablemq_cluster::replication::{NodeId, RoleKind};
use stablemq_cluster::transport::Heard;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::watch;

/// How long a peer has to answer a status request.
const PEER_TIMEOUT: Duration = Duration::from_millis(800);

/// A node the master heard within this long replicates. A live node is heard
/// at least once per heartbeat (50 ms by default): its acks. Generous, so a
/// busy machine's scheduling gaps do not flap it.
pub const REPLICATING_WITHIN: Duration = Duration::from_secs(3);

/// Where this node's status comes from.
pub struct NodeStatusSource {
    /// This node.
    pub me: Peer,
    /// The broker's replication status (cluster broker nodes).
    pub broker: Option<watch::Receiver<BrokerStatus>>,
    /// The event store's status (cluster store nodes).
    pub store: Option<watch::Receiver<StoreStatus>>,
    /// The single node's local log: its stable index.
    pub local_stable: Option<watch::Receiver<u64>>,
    /// When each peer was last heard on an authenticated node-to-node
    /// connection (cluster nodes).
    pub heard: Option<Heard>,
    /// Every other node.
    pub peers: Vec<Peer>,
    /// Where this node keeps its data (its free disk space is reported).
    pub data_dir: std::path::PathBuf,
    /// The free disk space alarm threshold.
    pub disk_free_limit: u64,
}

/// A node as the config describes it.
#[derive(Debug, Clone)]
pub struct Peer {
    /// Its id (1 for the single node).
    pub id: NodeId,
    /// Its name, RabbitMQ style (`stablemq-1@host`).
    pub name: String,
    /// What it runs: `broker`, `store`.
    pub roles: Vec<String>,
    /// Its management API, if it has one.
    pub management_addr: Option<SocketAddr>,
}

/// One node's status, as `/api/nodes` lists it. The first fields are
/// RabbitMQ's; the rest say how the node stands in replication.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodeReport {
    /// Node name.
    pub name: String,
    /// RabbitMQ's node type; always `disc`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Whether the node answered.
    pub running: bool,
    /// Whether the asking node could reach it.
    pub reachable: bool,
    /// Node id in the cluster config.
    pub id: NodeId,
    /// What it runs.
    pub roles: Vec<String>,
    /// `master`, `slave`, `candidate` (brokers), `store` (store-only), or
    /// `unknown` (not reachable).
    pub role: String,
    /// Highest epoch the node has seen.
    pub epoch: u64,
    /// Highest stable index the node knows.
    pub stable_index: u64,
    /// The master it follows (itself while master).
    pub master: Option<NodeId>,
    /// Its event store, if it runs one.
    pub store: Option<StoreReport>,
    /// How many entries its store is behind the most advanced store.
    pub store_lag: Option<u64>,
    /// Whether it takes part in replication: the master heard it on an
    /// authenticated node-to-node connection within `REPLICATING_WITHIN`
    /// (the master itself: true). `None` when no master is known or the
    /// master did not answer.
    #[serde(default)]
    pub replicating: Option<bool>,
    /// How long ago the master last heard it, in milliseconds; `None` if the
    /// master never did since it started (or is not known), and for the
    /// master itself.
    #[serde(default)]
    pub master_heard_ms_ago: Option<u64>,
    /// This node's own view: how long ago it last heard each peer (by id) on
    /// an authenticated node-to-node connection, in milliseconds. Peers never
    /// heard since it started are absent.
    #[serde(default)]
    pub peers_heard_ms_ago: BTreeMap<NodeId, u64>,
    /// Resources, with RabbitMQ's names (read by monitoring tools such as
    /// kbudde/rabbitmq_exporter); absent for a node that did not answer.
    #[serde(flatten)]
    pub resources: Option<Resources>,
}

/// A node's resource use, as RabbitMQ's `/api/nodes` reports it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Resources {
    /// Milliseconds since the node started.
    pub uptime: u64,
    /// Resident memory in bytes.
    pub mem_used: u64,
    /// The memory alarm threshold.
    pub mem_limit: u64,
    /// Whether the memory alarm is in effect.
    pub mem_alarm: bool,
    /// How memory is measured: the process's resident set, as RabbitMQ's `rss`.
    pub mem_calculation_strategy: String,
    /// Free bytes on the data directory's file system (0 if unknown).
    pub disk_free: u64,
    /// The free disk alarm threshold.
    pub disk_free_limit: u64,
    /// Whether the free disk alarm is in effect.
    pub disk_free_alarm: bool,
    /// Open file descriptors.
    pub fd_used: u64,
    /// The file descriptor limit.
    pub fd_total: u64,
    /// Open sockets.
    pub sockets_used: u64,
    /// The socket limit (the file descriptor limit: sockets are fds).
    pub sockets_total: u64,
    /// CPU cores.
    pub processors: u64,
    /// Network partitions this node sees: none are tracked (a partitioned
    /// broker stops being master instead), so always empty.
    pub partitions: Vec<String>,
}

impl Resources {
    /// This process's readings now.
    fn read(data_dir: &std::path::Path, disk_free_limit: u64) -> Resources {
        let (mem_limit, mem_alarm, disk_free_alarm) = crate::metrics::alarm_state();
        let free = crate::metrics::disk_free_bytes(data_dir);
        let (fd_used, sockets_used) = crate::metrics::open_fds().unwrap_or((0, 0));
        let fd_total = crate::metrics::max_fds().unwrap_or(0);
        Resources {
            uptime: (crate::metrics::uptime_seconds() * 1000.0) as u64,
            mem_used: crate::metrics::resident_memory_bytes(),
            mem_limit,
            mem_alarm,
            mem_calculation_strategy: "rss".into(),
            disk_free: free.unwrap_or(0),
            disk_free_limit,
            // A store-only node has no master task to set the flag: its own
            // reading decides too.
            disk_free_alarm: disk_free_alarm || free.is_some_and(|f| f < disk_free_limit),
            fd_used,
            fd_total,
            sockets_used,
            sockets_total: fd_total,
            processors: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
            partitions: Vec::new(),
        }
    }
}

/// Each running store's lag behind the furthest store, in entries. A store
/// still opening its log has none: its last index is not known yet.
fn set_store_lags(all: &mut [NodeReport]) {
    let front = all
        .iter()
        .filter_map(|r| r.store.filter(|s| s.opened).map(|s| s.last_index))
        .max()
        .unwrap_or(0);
    for r in all {
        r.store_lag = r
            .store
            .filter(|s| r.running && s.opened)
            .map(|s| front.saturating_sub(s.last_index));
    }
}

/// An event store's progress.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct StoreReport {
    /// The epoch it promised.
    pub promised_epoch: u64,
    /// Epoch of its last durable entry.
    pub last_epoch: u64,
    /// Index of its last durable entry.
    pub last_index: u64,
    /// Highest stable index it has learnt.
    pub stable_index: u64,
    /// False while a store on a new or wiped disk catches up from its peers
    /// before it votes (it promises nothing until then). A peer of an older
    /// version does not send it: its stores count as joined.
    #[serde(default = "joined_by_default")]
    pub joined: bool,
    /// False while a restarted store still opens its log: its indexes are
    /// not known yet, and no lag is computed from them (it would be the
    /// whole log). A peer of an older version does not send it.
    #[serde(default = "joined_by_default")]
    pub opened: bool,
}

fn joined_by_default() -> bool {
    true
}

impl NodeStatusSource {
    /// This node's report, from its own state.
    pub fn local(&self) -> NodeReport {
        let broker = self.broker.as_ref().map(|b| *b.borrow());
        let store = self.store.as_ref().map(|s| {
            let s = *s.borrow();
            StoreReport {
                promised_epoch: s.promised,
                last_epoch: s.last.epoch,
                last_index: s.last.index,
                stable_index: s.stable,
                joined: s.joined,
                opened: s.opened,
            }
        });
        let local = self.local_stable.as_ref().map(|s| *s.borrow());
        let (role, epoch, stable_index, master) = match (broker, local) {
            (Some(b), _) => (
                match b.role {
                    RoleKind::Master => "master",
                    RoleKind::Slave => "slave",
                    RoleKind::Candidate => "candidate",
                },
                b.epoch,
                b.stable,
                b.master,
            ),
            (None, Some(stable)) => ("master", 0, stable, Some(self.me.id)),
            (None, None) => (
                "store",
                store.map_or(0, |s| s.promised_epoch),
                store.map_or(0, |s| s.stable_index),
                None,
            ),
        };
        NodeReport {
            name: self.me.name.clone(),
            kind: "disc".into(),
            running: true,
            reachable: true,
            id: self.me.id,
            roles: self.me.roles.clone(),
            role: role.into(),
            epoch,
            stable_index,
            master,
            store,
            store_lag: None,
            replicating: None,
            master_heard_ms_ago: None,
            peers_heard_ms_ago: self
                .heard
                .as_ref()
                .map(|h| {
                    h.all()
                        .into_iter()
                        .map(|(n, ago)| (n, u64::try_from(ago.as_millis()).unwrap_or(u64::MAX)))
                        .collect()
                })
                .unwrap_or_default(),
            resources: Some(Resources::read(&self.data_dir, self.disk_free_limit)),
        }
    }

    /// Every node's report: this node's, and each peer's as it answers.
    pub async fn all(&self, authorization: &str) -> Vec<NodeReport> {
        let mut asks = tokio::task::JoinSet::new();
        for (i, peer) in self.peers.iter().enumerate() {
            let (peer, auth) = (peer.clone(), authorization.to_string());
            asks.spawn_blocking(move || (i, ask_peer(&peer, &auth)));
        }
        let mut peers: Vec<Option<NodeReport>> = vec![None; self.peers.len()];
        while let Some(done) = asks.join_next().await {
            if let Ok((i, report)) = done {
                peers[i] = report;
            }
        }
        let mut all = vec![self.local()];
        for (peer, report) in self.peers.iter().zip(peers) {
            all.push(report.unwrap_or_else(|| unreachable_report(peer)));
        }
        all.sort_by_key(|r| r.id);
        set_store_lags(&mut all);
        mark_replicating(&mut all);
        all
    }
}

/// Fill in `replicating` and `master_heard_ms_ago` from the master's view:
/// the running node that claims mastership with the highest epoch (a deposed
/// master that has not heard of its successor yet has a lower one).
fn mark_replicating(all: &mut [NodeReport]) {
    let master = all
        .iter()
        .filter(|r| r.running && r.role == "master")
        .max_by_key(|r| r.epoch)
        .map(|r| (r.id, r.peers_heard_ms_ago.clone()));
    let Some((master, heard)) = master else {
        return;
    };
    let within = u64::try_from(REPLICATING_WITHIN.as_millis()).unwrap_or(u64::MAX);
    for r in all {
        if r.id == master {
            r.replicating = Some(true);
            continue;
        }
        let ago = heard.get(&r.id).copied();
        r.master_heard_ms_ago = ago;
        r.replicating = Some(ago.is_some_and(|ms| ms <= within));
    }
}

fn ask_peer(peer: &Peer, authorization: &str) -> Option<NodeReport> {
    get_from_peer(peer, "/api/stablemq/node-status", authorization)
}

/// GET `path` from `peer`'s management API with `authorization`, within
/// [`PEER_TIMEOUT`]; `None` if it has none, does not answer in time, or
/// answers anything but `T` (blocking: run it off the async threads).
pub(super) fn get_from_peer<T: serde::de::DeserializeOwned>(
    peer: &Peer,
    path: &str,
    authorization: &str,
) -> Option<T> {
    let addr = peer.management_addr?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(PEER_TIMEOUT))
        .build()
        .into();
    let mut resp = agent
        .get(format!("http://{addr}{path}"))
        .header("authorization", authorization)
        .call()
        .ok()?;
    resp.body_mut().read_json::<T>().ok()
}

fn unreachable_report(peer: &Peer) -> NodeReport {
    NodeReport {
        name: peer.name.clone(),
        kind: "disc".into(),
        running: false,
        reachable: false,
        id: peer.id,
        roles: peer.roles.clone(),
        role: "unknown".into(),
        epoch: 0,
        stable_index: 0,
        master: None,
        store: None,
        store_lag: None,
        replicating: None,
        master_heard_ms_ago: None,
        peers_heard_ms_ago: BTreeMap::new(),
        resources: None,
    }
}

/// `GET /api/nodes`.
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<NodeReport>>, ApiError> {
    let auth = authorize(&state, &headers)?;
    Ok(Json(state.nodes.all(&auth).await))
}

/// `GET /api/nodes/{name}`.
pub async fn one(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<NodeReport>, ApiError> {
    let auth = authorize(&state, &headers)?;
    let all = state.nodes.all(&auth).await;
    all.into_iter()
        .find(|r| r.name == name)
        .map(Json)
        .ok_or(ApiError::NotFound)
}

/// `GET /api/nodes/{name}/memory`: RabbitMQ breaks memory down by Erlang
/// process kind; StableMQ has no such kinds, so it reports the totals only
/// (`memory.total.{rss,allocated,erlang}`, all the resident set size, and
/// `memory.strategy`), which is what tools that chart a node's memory read.
pub async fn memory(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, ApiError> {
    let auth = authorize(&state, &headers)?;
    let all = state.nodes.all(&auth).await;
    let report = all
        .into_iter()
        .find(|r| r.name == name)
        .ok_or(ApiError::NotFound)?;
    let rss = report
        .resources
        .map(|r| r.mem_used)
        .ok_or(ApiError::Unavailable("node not reachable"))?;
    Ok(Json(serde_json::json!({
        "memory": {
            "total": {"rss": rss, "allocated": rss, "erlang": rss},
            "strategy": "rss",
        }
    })))
}

/// `GET /api/stablemq/node-status`: this node alone, for peers' `/api/nodes`
/// (with the user's credentials) and for a peer's own background reads
/// (with the cluster cookie's proof, `node_proof.rs`).
pub async fn local(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<NodeReport>, ApiError> {
    if !node_proven(&state, &headers) {
        authorize(&state, &headers)?;
    }
    Ok(Json(state.nodes.local()))
}

/// Whether the request carries a valid proof of the cluster cookie.
fn node_proven(state: &AppState, headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(super::node_proof::HEADER)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let cookie = state
        .config
        .cluster
        .as_ref()
        .and_then(|c| c.cookie().ok().flatten());
    cookie.is_some_and(|c| super::node_proof::check(&c, value, crate::server::now_ms()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(id: NodeId, role: &str, epoch: u64, heard: &[(NodeId, u64)]) -> NodeReport {
        NodeReport {
            role: role.into(),
            epoch,
            running: true,
            reachable: true,
            peers_heard_ms_ago: heard.iter().copied().collect(),
            ..unreachable_report(&Peer {
                id,
                name: format!("n{id}"),
                roles: vec!["broker".into(), "store".into()],
                management_addr: None,
            })
        }
    }

    #[test]
    fn replicating_is_the_masters_view() {
        let mut all = vec![
            // A deposed master that has not heard of its successor.
            report(1, "master", 2, &[(2, 10), (3, 10)]),
            report(2, "master", 3, &[(1, 10), (3, 60_000)]),
            report(3, "slave", 3, &[(2, 10)]),
        ];
        mark_replicating(&mut all);
        assert_eq!(all[1].replicating, Some(true));
        assert_eq!(all[1].master_heard_ms_ago, None);
        assert_eq!(all[0].replicating, Some(true));
        assert_eq!(all[2].replicating, Some(false), "heard a minute ago");
        assert_eq!(all[2].master_heard_ms_ago, Some(60_000));

        // Never heard (a node kept out since the master started).
        let mut all = vec![report(1, "master", 1, &[]), report(2, "slave", 1, &[])];
        mark_replicating(&mut all);
        assert_eq!(all[1].replicating, Some(false));
        assert_eq!(all[1].master_heard_ms_ago, None);

        // No master answered: unknown, not false.
        let mut all = vec![
            report(1, "candidate", 4, &[(2, 5)]),
            report(2, "slave", 3, &[]),
        ];
        mark_replicating(&mut all);
        assert!(all.iter().all(|r| r.replicating.is_none()));
    }

    /// A store that is still opening its log after a restart reports no
    /// lag, and does not count as the front: the soak saw a restarted node
    /// listed as the whole log behind for the moment it took to open.
    #[test]
    fn a_store_still_opening_has_no_lag() {
        let store = |last_index: u64, opened: bool| StoreReport {
            promised_epoch: 1,
            last_epoch: 1,
            last_index,
            stable_index: last_index,
            joined: true,
            opened,
        };
        let mut all = vec![
            report(1, "master", 1, &[]),
            report(2, "slave", 1, &[]),
            report(3, "slave", 1, &[]),
        ];
        for r in &mut all {
            r.running = true;
        }
        all[0].store = Some(store(20_007, true));
        all[1].store = Some(store(19_990, true));
        all[2].store = Some(store(0, false));
        set_store_lags(&mut all);
        assert_eq!(all[0].store_lag, Some(0));
        assert_eq!(all[1].store_lag, Some(17));
        assert_eq!(all[2].store_lag, None, "not known while opening");
        // Opened: its lag is what it is.
        all[2].store = Some(store(20_000, true));
        set_store_lags(&mut all);
        assert_eq!(all[2].store_lag, Some(7));
    }
}
