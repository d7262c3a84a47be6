//! How each kind of node runs: the embedded single node, a cluster's broker
//! node, and a store-only node.

use super::master_task::{Backend, MasterMsg};
use super::replica::Core;
use super::route::Router;
use super::{
    ServeError, ServeOptions, cluster_node, recover_local, run_broker, start_management,
    wait_for_signal,
};
use crate::management::{NodeStatusSource, Peer};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// Both ends of the master task's queue.
type MasterQueue = (mpsc::Sender<MasterMsg>, mpsc::Receiver<MasterMsg>);

/// The embedded single node: recover the local log, serve the management
/// API, and run the broker until a signal.
pub(super) async fn serve_single(
    opts: ServeOptions,
    master: MasterQueue,
) -> Result<(), ServeError> {
    let (core, backend) = recover_local(&opts)?;
    let users = watch::channel(core.broker().access.clone());
    let local_stable = match &backend {
        Backend::Local { stable, .. } => Some(stable.clone()),
        Backend::Replicated { .. } => None,
    };
    let source = NodeStatusSource {
        me: Peer {
            id: 1,
            name: crate::metrics::node_name(None),
            roles: vec!["broker".into(), "store".into()],
            management_addr: opts.management_addr,
        },
        broker: None,
        store: None,
        local_stable,
        heard: None,
        peers: Vec::new(),
        data_dir: opts.data_dir.clone(),
        disk_free_limit: opts.config.disk_free_limit_bytes,
    };
    let amqp_port = Some(opts.amqp_port);
    let api_addr = opts.management_addr;
    let _api = start_management(
        &opts,
        api_addr,
        amqp_port,
        source,
        master.0.clone(),
        &users.0,
    )
    .await?;
    run_broker(opts, core, backend, Router::Local, None, master, users.0).await
}

/// A cluster node: start its share of the cluster, serve the management API,
/// and run the broker (a broker node) or wait for a signal (a store-only one).
pub(super) async fn serve_cluster(
    mut opts: ServeOptions,
    cluster: &crate::config::ClusterConfig,
    master: MasterQueue,
) -> Result<(), ServeError> {
    let node = cluster_node::start(cluster, &opts.data_dir).await?;
    let me = cluster.me();
    let source = cluster_status_source(&opts, cluster, &node);
    let api_addr = match opts.management_off {
        true => None,
        false => opts.management_addr.or(me.management_addr),
    };
    let amqp_port = me.amqp_addr.map(|a| a.port());
    opts.stream_tls_port = me.stream_tls_addr.map(|a| a.port());
    // A slave's replica has no users until the log reaches it; its API
    // answers 401 until then.
    let users = watch::channel(Arc::new(crate::users::AccessTable::default()));
    let _api = start_management(
        &opts,
        api_addr,
        amqp_port,
        source,
        master.0.clone(),
        &users.0,
    )
    .await?;
    let (Some(backend), Some(status), Some(amqp)) = (node.backend, node.status, me.amqp_addr)
    else {
        return serve_store_only(me.id, master, node.store).await;
    };
    opts.amqp_ips = vec![amqp.ip()];
    opts.amqp_port = amqp.port();
    opts.ipv6_optional = false;
    if let Some(stream) = me.stream_addr {
        opts.stream_port = stream.port();
        opts.stream_port_optional = false;
    }
    // Until this node wins an election it is a slave: a replica built from the
    // stable entries it is sent, and every client proxied to the master.
    let core = Core::Following(crate::broker::Broker::new());
    let router = Router::Cluster {
        me: me.id,
        serving: node.serving,
        status,
        amqp_addrs: Arc::new(node.amqp_addrs),
        stream_addrs: Arc::new(node.stream_addrs),
        stream_tls_addrs: Arc::new(node.stream_tls_addrs),
        trust: Arc::new(forwarding_trust(cluster)?),
    };
    let driver = node.driver;
    let result = run_broker(opts, core, backend, router, node.store, master, users.0).await;
    drop(driver);
    result
}

/// Whose forwarded clients a cluster node believes: its peers' addresses,
/// with the cluster cookie if there is one.
fn forwarding_trust(
    cluster: &crate::config::ClusterConfig,
) -> Result<super::forwarded::Trust, ServeError> {
    let nodes = cluster
        .nodes
        .iter()
        .flat_map(|n| [Some(n.cluster_addr), n.amqp_addr])
        .flatten()
        .map(|a| a.ip())
        .collect();
    let cookie = cluster.cookie().map_err(ServeError::Other)?;
    Ok(super::forwarded::Trust { nodes, cookie })
}

/// What `/api/nodes` and `/api/overview` report of a cluster node: this
/// node, its broker's and store's status, and its peers.
fn cluster_status_source(
    opts: &ServeOptions,
    cluster: &crate::config::ClusterConfig,
    node: &cluster_node::ClusterNode,
) -> NodeStatusSource {
    let me = cluster.me();
    let peer_of = |n: &crate::config::NodeConfig| Peer {
        id: n.id,
        name: crate::metrics::node_name(Some(n.id)),
        roles: n
            .roles
            .iter()
            .map(|r| format!("{r:?}").to_lowercase())
            .collect(),
        management_addr: n.management_addr,
    };
    NodeStatusSource {
        me: peer_of(me),
        broker: node.status.clone(),
        store: node.store_status.clone(),
        local_stable: None,
        heard: Some(node.heard.clone()),
        peers: cluster
            .nodes
            .iter()
            .filter(|n| n.id != me.id)
            .map(peer_of)
            .collect(),
        data_dir: opts.data_dir.clone(),
        disk_free_limit: opts.config.disk_free_limit_bytes,
    }
}

/// A store-only node: no AMQP, no broker state; queries of broker state
/// fail at once (503) with nobody reading the queue. Runs the store until
/// a signal.
async fn serve_store_only(
    me: stablemq_cluster::replication::NodeId,
    master: MasterQueue,
    store: Option<tokio::task::JoinHandle<()>>,
) -> Result<(), ServeError> {
    drop(master);
    tracing::info!(node = me, "store-only node running");
    wait_for_signal().await?;
    if let Some(store) = store {
        store.abort();
        let _ = store.await;
    }
    Ok(())
}
