//! Stream subscriptions served by slaves from their replicas, for the
//! consumer lists of `/api/stream/...`.
//!
//! A slave serves a stream client's subscriptions from its own replica and
//! relays the rest of the connection to the master
//! (`server/stream/replica`), so the master never sees those subscriptions.
//! RabbitMQ's management API lists a cluster's consumers whichever node
//! serves them; so does this: every node lists what it serves at
//! `/api/stablemq/replica-consumers`, and a consumer list gathers them from
//! this node and its peers (asked with the caller's credentials, as
//! `/api/nodes` asks them). RabbitMQ's AMQP-side lists count a stream
//! protocol consumer too (`/api/consumers`, a queue's `consumers`,
//! `consumer_details` and `readers`, the overview's total); so do they here,
//! through [`for_lists`].

use super::nodes::get_from_peer;
use super::query::query;
use super::{Access, ApiError, AppState, Caller, caller};
use crate::metrics::stream_clients;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};

/// One subscription a node serves from its replica.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct ReplicaConsumer {
    pub(super) vhost: String,
    pub(super) stream: String,
    pub(super) subscription_id: u8,
    pub(super) credits: u32,
    pub(super) consumed: u64,
    pub(super) offset: Option<u64>,
    pub(super) properties: Vec<(String, String)>,
    /// The connection, as the serving node names it.
    pub(super) connection: String,
    pub(super) node: String,
    pub(super) peer_host: Option<String>,
    pub(super) peer_port: Option<u16>,
    pub(super) user: String,
}

/// What this node serves that `who` may see (a user without the
/// `monitoring` tag sees only its own, in the vhosts it may use).
fn local(state: &AppState, who: &Caller) -> Vec<ReplicaConsumer> {
    let access = state.access();
    let node = state.node();
    let mut out = Vec::new();
    for c in stream_clients::replica_clients() {
        if !who.sees_user(&c.user) || !who.sees_vhost(&access, &c.vhost) {
            continue;
        }
        let connection = super::json::connection_name(c.peer, c.local);
        for s in c.consumers {
            out.push(ReplicaConsumer {
                vhost: c.vhost.clone(),
                stream: s.stream,
                subscription_id: s.subscription_id,
                credits: s.credits,
                consumed: s.consumed,
                offset: s.offset,
                properties: s.properties,
                connection: connection.clone(),
                node: node.to_string(),
                peer_host: c.peer.map(|a| super::json::host(&a)),
                peer_port: c.peer.map(|a| a.port()),
                user: c.user.clone(),
            });
        }
    }
    out
}

/// `GET /api/stablemq/replica-consumers`: this node's alone.
pub(super) async fn this_node(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<ReplicaConsumer>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    Ok(Json(local(&state, &who)))
}

/// This node's and every reachable peer's (a peer that does not answer in
/// time adds nothing).
pub(super) async fn gather(state: &AppState, who: &Caller) -> Vec<ReplicaConsumer> {
    let mut asks = tokio::task::JoinSet::new();
    for peer in &state.nodes.peers {
        let (peer, auth) = (peer.clone(), who.authorization.clone());
        asks.spawn_blocking(move || {
            get_from_peer::<Vec<ReplicaConsumer>>(&peer, "/api/stablemq/replica-consumers", &auth)
        });
    }
    let mut all = local(state, who);
    while let Some(done) = asks.join_next().await {
        if let Ok(Some(list)) = done {
            all.extend(list);
        }
    }
    all
}

/// The replica-served subscriptions for an AMQP-side list: [`gather`]'s, but
/// only when some stream exists (in `vhost`, or in any vhost), so that the
/// queue and consumer pages of a cluster without streams ask no peer (an
/// HTTP round each, up to the peer timeout for one that is cut off).
pub(super) async fn for_lists(
    state: &AppState,
    who: &Caller,
    vhost: Option<String>,
) -> Vec<ReplicaConsumer> {
    if state.nodes.peers.is_empty() {
        return local(state, who);
    }
    let any_stream = query(state, move |view| {
        view.broker
            .vhosts
            .iter()
            .filter(|(name, _)| vhost.as_deref().is_none_or(|want| want == name.as_str()))
            .any(|(_, v)| v.queues.values().any(|q| q.stream.is_some()))
    })
    .await
    .unwrap_or(false);
    if !any_stream {
        return Vec::new();
    }
    gather(state, who).await
}
