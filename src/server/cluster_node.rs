//! Starting this node's share of a cluster: the node network, its event store
//! and its broker's replication driver, from the `[cluster]` config section.

use super::master_task::Backend;
use crate::config::{ClusterConfig, NodeConfig, NodeRole};
use crate::metrics as m;
use stablemq_cluster::driver::{
    BrokerNodeDriver, BrokerStatus, NodeNet, StoreStatus, run_store_node_with,
};
use stablemq_cluster::replication::{NodeId, RoleKind};
use stablemq_cluster::transport::{Heard, TransportOptions};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::ServeError;

/// What a started node hands the server.
pub struct ClusterNode {
    /// The broker's replication driver (broker nodes); dropping it stops it.
    pub driver: Option<BrokerNodeDriver>,
    /// The master task's log backend (broker nodes).
    pub backend: Option<Backend>,
    /// Whether this node serves clients itself (set by the master task).
    pub serving: watch::Receiver<bool>,
    /// The engine's status: who the master is.
    pub status: Option<watch::Receiver<BrokerStatus>>,
    /// Every broker's AMQP address, for proxying to the master.
    pub amqp_addrs: HashMap<NodeId, SocketAddr>,
    /// Every broker node's stream protocol address.
    pub stream_addrs: HashMap<NodeId, SocketAddr>,
    /// Every broker node's stream protocol over TLS address (those that have one).
    pub stream_tls_addrs: HashMap<NodeId, SocketAddr>,
    /// The event store (store nodes); abort it to stop.
    pub store: Option<JoinHandle<()>>,
    /// The event store's status (store nodes).
    pub store_status: Option<watch::Receiver<StoreStatus>>,
    /// When each peer was last heard on an authenticated node-to-node
    /// connection (`/api/nodes` reports it as `replicating`).
    pub heard: Heard,
}

/// Bind the cluster address and start whichever of store and broker this node
/// runs.
pub async fn start(cluster: &ClusterConfig, data_dir: &Path) -> Result<ClusterNode, ServeError> {
    let me = cluster.me();
    let repl = cluster.replication();
    let listener = tokio::net::TcpListener::bind(me.cluster_addr)
        .await
        .map_err(|source| ServeError::Listen {
            addr: me.cluster_addr,
            source,
        })?;
    tracing::info!(
        node = me.id,
        addr = %me.cluster_addr,
        stores = ?repl.stores,
        brokers = ?repl.brokers,
        quorum = repl.quorum(),
        "cluster node starting"
    );
    let opts = transport_options(cluster)?;
    let net = NodeNet::start(me.id, listener, cluster.peers(), opts);
    let heard = net.heard.clone();
    let (store, store_status) = if me.runs(NodeRole::Store) {
        let dir = data_dir.join("store");
        let (repl, outbox, id) = (repl.clone(), net.outbox.clone(), me.id);
        let (status_tx, status) = watch::channel(StoreStatus::default());
        let inbound = net.store_inbound;
        let task = tokio::spawn(async move {
            // The store compacts its log into the state the broker's own
            // reducer makes of it (a store-only node is the same binary).
            // No configured vhosts: a cluster's vhosts are in its log.
            let reducer = Box::new(crate::broker::state::BrokerReducer::new(Vec::new()));
            if let Err(err) =
                run_store_node_with(repl, id, outbox, inbound, dir, Some(reducer), status_tx).await
            {
                // A store that cannot write must not pretend to be a member.
                tracing::error!("event store stopped: {err}; exiting");
                std::process::exit(70);
            }
        });
        (Some(task), Some(status))
    } else {
        (None, None)
    };
    let (serving_tx, serving) = watch::channel(false);
    let (driver, backend, status) = if me.runs(NodeRole::Broker) {
        let seed = me.id ^ u64::from(std::process::id()).rotate_left(32) ^ now_nanos();
        let (driver, events) =
            BrokerNodeDriver::start_with(repl, me.id, net.outbox, net.broker_inbound, seed)
                .map_err(|e| ServeError::Other(e.to_string()))?;
        let handle = driver.handle();
        let status = handle.watch_status();
        tokio::spawn(export_status(status.clone(), store_status.clone()));
        let backend = Backend::Replicated {
            handle,
            events,
            serving: serving_tx,
        };
        (Some(driver), Some(backend), Some(status))
    } else {
        (None, None, None)
    };
    let amqp_addrs = addresses(cluster, |n| n.amqp_addr);
    let stream_addrs = addresses(cluster, |n| n.stream_addr);
    let stream_tls_addrs = addresses(cluster, |n| n.stream_tls_addr);
    Ok(ClusterNode {
        stream_addrs,
        stream_tls_addrs,
        driver,
        backend,
        serving,
        status,
        amqp_addrs,
        store,
        store_status,
        heard,
    })
}

/// The node-to-node transport's options: the cookie and TLS of the
/// `[cluster]` section (with a log line saying what protects the traffic).
fn transport_options(cluster: &ClusterConfig) -> Result<TransportOptions, ServeError> {
    // A restarted peer must hear the master well within an election timeout,
    // or it campaigns needlessly: redial at least 5 times a second.
    let cookie = cluster.cookie().map_err(ServeError::Other)?;
    let tls = cluster.tls().map_err(ServeError::Other)?;
    match (&cookie, &tls) {
        (None, None) => tracing::warn!(
            "no [cluster] cookie_file and no TLS: node-to-node traffic is not \
             authenticated, so anyone who can reach the cluster port can join the replication"
        ),
        (Some(_), None) => tracing::info!(
            "node-to-node traffic is authenticated by the cluster cookie, not encrypted"
        ),
        (_, Some(_)) => tracing::info!("node-to-node traffic uses mutual TLS"),
    }
    Ok(TransportOptions {
        backoff_max: std::time::Duration::from_millis(200),
        cookie,
        tls,
        ..TransportOptions::default()
    })
}

/// Every node's address of one kind (`addr` of its config), by node id.
fn addresses(
    cluster: &ClusterConfig,
    addr: impl Fn(&NodeConfig) -> Option<SocketAddr>,
) -> HashMap<NodeId, SocketAddr> {
    cluster
        .nodes
        .iter()
        .filter_map(|n| Some((n.id, addr(n)?)))
        .collect()
}

/// Keep the role, epoch and slave lag gauges current. The lag needs the
/// master's stable index, which a slave learns through its own event store
/// (the master tells every store what is stable); a slave without a store
/// of its own reports no lag.
async fn export_status(
    mut status: watch::Receiver<BrokerStatus>,
    mut store: Option<watch::Receiver<StoreStatus>>,
) {
    loop {
        let s = *status.borrow_and_update();
        let store_stable = store.as_mut().map(|st| st.borrow_and_update().stable);
        match (s.role, store_stable) {
            (RoleKind::Master, _) => metrics::gauge!(m::SLAVE_LAG).set(0.0),
            (_, Some(known)) => {
                metrics::gauge!(m::SLAVE_LAG).set(known.saturating_sub(s.stable) as f64)
            }
            (_, None) => {}
        }
        for (role, name) in [
            (RoleKind::Master, "master"),
            (RoleKind::Slave, "slave"),
            (RoleKind::Candidate, "candidate"),
        ] {
            let on = if s.role == role { 1.0 } else { 0.0 };
            metrics::gauge!(m::ROLE, "role" => name).set(on);
        }
        metrics::gauge!(m::EPOCH).set(s.epoch as f64);
        metrics::gauge!(m::STABLE_INDEX).set(s.stable as f64);
        let store_changed = async {
            match store.as_mut() {
                Some(st) => st.changed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = status.changed() => if r.is_err() { return },
            r = store_changed => if r.is_err() { store = None },
        }
    }
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
