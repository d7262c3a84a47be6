//! Where a new client connection goes: a single node serves it; a cluster
//! node serves it while it is master and otherwise proxies it, in whole
//! frames, to the master's node, waiting through an election for one.

use super::master_task::{self, MasterMsg};
use super::socket::{ClientSocket, IntoHalves};
use super::{conn_task, forwarded, proxy};
use crate::config::Config;
use stablemq_cluster::driver::BrokerStatus;
use stablemq_cluster::replication::NodeId;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Where a new client connection goes.
#[derive(Clone)]
pub(super) enum Router {
    /// Always served here.
    Local,
    /// Served here while this node is master, proxied to the master otherwise.
    Cluster {
        me: NodeId,
        serving: watch::Receiver<bool>,
        status: watch::Receiver<BrokerStatus>,
        amqp_addrs: Arc<HashMap<NodeId, SocketAddr>>,
        stream_addrs: Arc<HashMap<NodeId, SocketAddr>>,
        /// The nodes' stream protocol over TLS addresses (those that have one).
        stream_tls_addrs: Arc<HashMap<NodeId, SocketAddr>>,
        /// Whose forwarded clients this node believes, and the cookie its
        /// own forwarding headers are signed with (`forwarded.rs`).
        trust: Arc<forwarded::Trust>,
    },
}

/// How long a client arriving during an election waits for a master.
const ELECTION_WAIT: Duration = Duration::from_secs(10);

/// Everything a connection task needs besides its socket.
#[derive(Clone)]
pub(super) struct ConnContext {
    pub(super) config: Arc<Config>,
    pub(super) master_tx: mpsc::Sender<MasterMsg>,
    /// The budget of inputs connections may have waiting in batches.
    pub(super) credit: master_task::InputCredit,
    pub(super) shutdown: watch::Receiver<bool>,
    pub(super) router: Router,
    /// The master task's latest users and permissions, for logins.
    pub(super) users: crate::users::Snapshot,
    /// The master task's cluster name, for connection.start.
    pub(super) cluster_name: watch::Receiver<String>,
    /// The node's connection limit (`connection_max`).
    pub(super) slots: super::slots::Slots,
    /// The log index the replica applied last (a slave's): stream reads
    /// served from the replica wait on it (`stream::replica`).
    pub(super) replica_applied: watch::Receiver<u64>,
}

/// Over `connection_max`, wait unserved for a slot, as RabbitMQ's listener
/// does; the slot is held until the client is gone. `None`: the node is
/// stopping.
pub(super) async fn admit(ctx: &ConnContext) -> Option<super::slots::Slot> {
    let mut stop = ctx.shutdown.clone();
    tokio::select! {
        s = ctx.slots.admit() => s,
        _ = stop.changed() => None,
    }
}

/// A client of the plain AMQP port. On a cluster node it may be one a
/// slave forwards, announced by a PROXY header (`forwarded.rs`): it is then
/// served as the client it stands for, with that client's address and TLS
/// session. A header not to be believed closes the connection.
pub(super) async fn route_plain(
    ctx: ConnContext,
    id: u64,
    mut sock: tokio::net::TcpStream,
    peer: SocketAddr,
) {
    let Router::Cluster { trust, .. } = &ctx.router else {
        return route_client(ctx, id, ClientSocket::plain(sock, peer)).await;
    };
    let within = Duration::from_millis(ctx.config.handshake_timeout_ms);
    match forwarded::take(&mut sock, peer.ip(), trust, within).await {
        Ok(None) => route_client(ctx, id, ClientSocket::plain(sock, peer)).await,
        Ok(Some(f)) => {
            let client = ClientSocket {
                stream: sock,
                peer: f.peer,
                local: Some(f.local),
                tls: f.tls,
            };
            route_client(ctx, id, client).await
        }
        Err(e) => tracing::warn!(conn = id, %peer, "client closed: {e}"),
    }
}

pub(super) async fn route_client<S: IntoHalves>(ctx: ConnContext, id: u64, sock: ClientSocket<S>) {
    let Some(_slot) = admit(&ctx).await else {
        return;
    };
    if let Router::Cluster {
        me,
        serving,
        status,
        amqp_addrs,
        trust,
        ..
    } = &ctx.router
    {
        let status = status.clone();
        let decided = decide(*me, serving, &status).await;
        match decided {
            Ok(None) => {}
            Ok(Some(master)) => {
                match amqp_addrs.get(&master) {
                    Some(&addr) => {
                        let to = proxy::Upstream {
                            addr,
                            master,
                            status,
                            cookie: trust.cookie.clone(),
                        };
                        proxy::run(sock, to, ctx.shutdown.clone()).await
                    }
                    None => {
                        tracing::warn!(master, "no AMQP address for the master; dropping client")
                    }
                }
                return;
            }
            Err(_) => {
                tracing::warn!(peer = %sock.peer, "no master elected in time; dropping client");
                return;
            }
        }
    }
    conn_task::run(id, sock, ctx).await;
}

/// Where a cluster node's new client goes: `Ok(None)` served here (this
/// node is master), `Ok(Some(m))` forwarded to master `m` (0: the node is
/// stopping), `Err` no master was elected within [`ELECTION_WAIT`]. A client
/// that arrives mid-election waits for the outcome.
pub(super) async fn decide(
    me: NodeId,
    serving: &watch::Receiver<bool>,
    status: &watch::Receiver<BrokerStatus>,
) -> Result<Option<NodeId>, tokio::time::error::Elapsed> {
    let (mut serving, mut status) = (serving.clone(), status.clone());
    tokio::time::timeout(ELECTION_WAIT, async {
        loop {
            if *serving.borrow_and_update() {
                return None;
            }
            if let Some(m) = status.borrow_and_update().master.filter(|m| *m != me) {
                return Some(m);
            }
            tokio::select! {
                r = serving.changed() => if r.is_err() { return Some(0) },
                r = status.changed() => if r.is_err() { return Some(0) },
            }
        }
    })
    .await
}
