//! The stream protocol's connections, publishers and consumers:
//! rabbitmq_stream_management's `/api/stream/...` endpoints, with its field
//! names (checked against RabbitMQ 3.10.8 with that plugin and rstream).
//!
//! Connections are the master's sessions of the stream protocol (the same
//! objects `/api/connections` lists); their publishers and subscriptions are
//! what each connection task last copied to `metrics::stream_clients`. A
//! user without the `monitoring` tag sees only its own, as in RabbitMQ.

use super::query::{CoreView, query};
use super::sessions::{ConnectionJson, visible};
use super::stream_replicas::{self, ReplicaConsumer};
use super::{Access, ApiError, AppState, Caller, caller};
use crate::master::inout::{ClientProtocol, ConnId};
use crate::master::session::Session;
use crate::metrics::stream_clients::{self, ConsumerStats, PublisherStats};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use std::collections::BTreeMap;

/// The routes of this file.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/stream/connections", get(connections_all))
        .route("/api/stream/connections/{vhost}", get(connections_in))
        .route(
            "/api/stream/connections/{vhost}/{name}",
            get(connection_one),
        )
        .route(
            "/api/stream/connections/{vhost}/{name}/publishers",
            get(connection_publishers),
        )
        .route(
            "/api/stream/connections/{vhost}/{name}/consumers",
            get(connection_consumers),
        )
        .route("/api/stream/publishers", get(publishers_all))
        .route("/api/stream/publishers/{vhost}", get(publishers_in))
        .route(
            "/api/stream/publishers/{vhost}/{stream}",
            get(publishers_of),
        )
        .route("/api/stream/consumers", get(consumers_all))
        .route("/api/stream/consumers/{vhost}", get(consumers_in))
        .route("/api/stream/consumers/{vhost}/{stream}", get(consumers_of))
        .route(
            "/api/stablemq/replica-consumers",
            get(super::stream_replicas::this_node),
        )
}

/// The connection a publisher or consumer belongs to.
#[derive(Debug, Serialize)]
struct ConnectionDetails {
    name: String,
    node: String,
    peer_host: Option<String>,
    peer_port: Option<u16>,
    user: String,
}

/// A stream, as `{name, vhost}`.
#[derive(Debug, Serialize)]
struct QueueRef {
    name: String,
    vhost: String,
}

#[derive(Debug, Serialize)]
struct PublisherJson {
    connection_details: ConnectionDetails,
    publisher_id: u8,
    queue: QueueRef,
    reference: String,
    published: u64,
    confirmed: u64,
    errored: u64,
}

#[derive(Debug, Serialize)]
struct ConsumerJson {
    connection_details: ConnectionDetails,
    subscription_id: u8,
    queue: QueueRef,
    credits: u32,
    consumed: u64,
    offset: u64,
    offset_lag: u64,
    properties: BTreeMap<String, String>,
}

/// Which connections a request is about.
#[derive(Clone)]
struct Filter {
    vhost: Option<String>,
    name: Option<String>,
    stream: Option<String>,
}

impl Filter {
    fn all() -> Filter {
        Filter {
            vhost: None,
            name: None,
            stream: None,
        }
    }

    fn vhost(vhost: String) -> Filter {
        Filter {
            vhost: Some(vhost),
            ..Filter::all()
        }
    }
}

/// The stream-protocol sessions the caller may see that `f` selects, with
/// their JSON; None if `f` names a vhost that does not exist.
fn stream_sessions<'a>(
    view: &CoreView<'a>,
    who: &Caller,
    f: &Filter,
    node: &str,
) -> Option<Vec<(ConnId, &'a Session, ConnectionJson)>> {
    if f.vhost
        .as_deref()
        .is_some_and(|v| view.broker.vhost(v).is_none())
    {
        return None;
    }
    Some(
        visible(view, who, f.vhost.as_deref())
            .into_iter()
            .filter(|(_, s)| s.info.protocol == ClientProtocol::Stream)
            .map(|(id, s)| (id, s, ConnectionJson::of(id, s, node)))
            .filter(|(_, _, json)| f.name.as_deref().is_none_or(|n| n == json.name))
            .collect(),
    )
}

fn details(json: &ConnectionJson, s: &Session) -> ConnectionDetails {
    ConnectionDetails {
        name: json.name.clone(),
        node: json.node.clone(),
        peer_host: json.peer_host.clone(),
        peer_port: json.peer_port,
        user: s.user.clone(),
    }
}

fn publisher_json(p: PublisherStats, json: &ConnectionJson, s: &Session) -> PublisherJson {
    PublisherJson {
        connection_details: details(json, s),
        publisher_id: p.publisher_id,
        queue: QueueRef {
            name: p.stream,
            vhost: s.vhost.to_string(),
        },
        reference: p.reference,
        published: p.published,
        confirmed: p.confirmed,
        errored: p.errored,
    }
}

/// The newest stable offset of `stream` (I1: only stable entries are
/// shown), for a consumer's lag.
fn last_stable_offset(view: &CoreView<'_>, vhost: &str, stream: &str) -> Option<u64> {
    let s = view.broker.queue(vhost, stream)?.stream.as_ref()?;
    let (kept, _) = s.stable_counts(view.master.map(|m| m.stable_index()));
    (s.first_offset() + kept as u64).checked_sub(1)
}

/// How far a consumer at `offset` is behind the newest stable offset.
fn offset_lag(view: &CoreView<'_>, vhost: &str, stream: &str, offset: u64) -> u64 {
    last_stable_offset(view, vhost, stream).map_or(0, |last| last.saturating_sub(offset))
}

fn consumer_json(
    view: &CoreView<'_>,
    c: ConsumerStats,
    json: &ConnectionJson,
    s: &Session,
) -> ConsumerJson {
    let offset = c.offset.unwrap_or(0);
    let lag = offset_lag(view, &s.vhost, &c.stream, offset);
    ConsumerJson {
        connection_details: details(json, s),
        subscription_id: c.subscription_id,
        queue: QueueRef {
            name: c.stream,
            vhost: s.vhost.to_string(),
        },
        credits: c.credits,
        consumed: c.consumed,
        offset,
        offset_lag: lag,
        properties: c.properties.into_iter().collect(),
    }
}

fn list_publishers(
    view: CoreView<'_>,
    who: &Caller,
    f: &Filter,
    node: &str,
) -> Option<Vec<PublisherJson>> {
    let sessions = stream_sessions(&view, who, f, node)?;
    let mut out = Vec::new();
    for (id, s, json) in sessions {
        for p in stream_clients::read(id).publishers {
            if f.stream.as_deref().is_none_or(|st| st == p.stream) {
                out.push(publisher_json(p, &json, s));
            }
        }
    }
    Some(out)
}

fn list_consumers(
    view: &CoreView<'_>,
    who: &Caller,
    f: &Filter,
    node: &str,
) -> Option<Vec<ConsumerJson>> {
    let sessions = stream_sessions(view, who, f, node)?;
    let mut out = Vec::new();
    for (id, s, json) in sessions {
        for c in stream_clients::read(id).consumers {
            if f.stream.as_deref().is_none_or(|st| st == c.stream) {
                out.push(consumer_json(view, c, &json, s));
            }
        }
    }
    Some(out)
}

async fn connections(
    state: AppState,
    headers: HeaderMap,
    f: Filter,
) -> Result<Vec<ConnectionJson>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let node = state.node().to_string();
    let list = query(&state, move |view| {
        stream_sessions(&view, &who, &f, &node).map(|l| l.into_iter().map(|(_, _, j)| j).collect())
    })
    .await?;
    list.ok_or(ApiError::NotFound)
}

async fn publishers(
    state: AppState,
    headers: HeaderMap,
    f: Filter,
) -> Result<Json<Vec<PublisherJson>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let node = state.node().to_string();
    let list = query(&state, move |view| list_publishers(view, &who, &f, &node)).await?;
    list.map(Json).ok_or(ApiError::NotFound)
}

async fn consumers(
    state: AppState,
    headers: HeaderMap,
    f: Filter,
) -> Result<Json<Vec<ConsumerJson>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let node = state.node().to_string();
    // The subscriptions slaves serve from their replicas are on no
    // connection of this node: they are listed with the rest, but not under
    // one connection of this node's.
    let replicas = match f.name {
        Some(_) => Vec::new(),
        None => stream_replicas::gather(&state, &who).await,
    };
    let list = query(&state, move |view| {
        let mut list = list_consumers(&view, &who, &f, &node)?;
        list.extend(
            replicas
                .into_iter()
                .filter(|c| f.vhost.as_deref().is_none_or(|v| v == c.vhost))
                .filter(|c| f.stream.as_deref().is_none_or(|s| s == c.stream))
                .map(|c| replica_consumer_json(&view, c)),
        );
        Some(list)
    })
    .await?;
    list.map(Json).ok_or(ApiError::NotFound)
}

/// A subscription a node serves from its replica, with its lag behind this
/// node's newest stable offset.
fn replica_consumer_json(view: &CoreView<'_>, c: ReplicaConsumer) -> ConsumerJson {
    let offset = c.offset.unwrap_or(0);
    let lag = offset_lag(view, &c.vhost, &c.stream, offset);
    ConsumerJson {
        connection_details: ConnectionDetails {
            name: c.connection,
            node: c.node,
            peer_host: c.peer_host,
            peer_port: c.peer_port,
            user: c.user,
        },
        subscription_id: c.subscription_id,
        queue: QueueRef {
            name: c.stream,
            vhost: c.vhost,
        },
        credits: c.credits,
        consumed: c.consumed,
        offset,
        offset_lag: lag,
        properties: c.properties.into_iter().collect(),
    }
}

async fn connections_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<ConnectionJson>>, ApiError> {
    connections(state, headers, Filter::all()).await.map(Json)
}

async fn connections_in(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<ConnectionJson>>, ApiError> {
    connections(state, headers, Filter::vhost(vhost))
        .await
        .map(Json)
}

/// One connection by vhost and name.
fn one(vhost: String, name: String) -> Filter {
    Filter {
        name: Some(name),
        ..Filter::vhost(vhost)
    }
}

async fn connection_one(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<ConnectionJson>, ApiError> {
    let list = connections(state, headers, one(vhost, name)).await?;
    list.into_iter().next().map(Json).ok_or(ApiError::NotFound)
}

/// 404 unless the connection exists (and the caller may see it).
async fn require_connection(
    state: &AppState,
    headers: &HeaderMap,
    f: &Filter,
) -> Result<(), ApiError> {
    let list = connections(state.clone(), headers.clone(), f.clone()).await?;
    if list.is_empty() {
        return Err(ApiError::NotFound);
    }
    Ok(())
}

async fn connection_publishers(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Vec<PublisherJson>>, ApiError> {
    let f = one(vhost, name);
    require_connection(&state, &headers, &f).await?;
    publishers(state, headers, f).await
}

async fn connection_consumers(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Vec<ConsumerJson>>, ApiError> {
    let f = one(vhost, name);
    require_connection(&state, &headers, &f).await?;
    consumers(state, headers, f).await
}

async fn publishers_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<PublisherJson>>, ApiError> {
    publishers(state, headers, Filter::all()).await
}

async fn publishers_in(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<PublisherJson>>, ApiError> {
    publishers(state, headers, Filter::vhost(vhost)).await
}

/// Publishers or consumers of one stream.
fn of_stream(vhost: String, stream: String) -> Filter {
    Filter {
        stream: Some(stream),
        ..Filter::vhost(vhost)
    }
}

async fn publishers_of(
    State(state): State<AppState>,
    Path((vhost, stream)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Vec<PublisherJson>>, ApiError> {
    publishers(state, headers, of_stream(vhost, stream)).await
}

async fn consumers_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<ConsumerJson>>, ApiError> {
    consumers(state, headers, Filter::all()).await
}

async fn consumers_in(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<ConsumerJson>>, ApiError> {
    consumers(state, headers, Filter::vhost(vhost)).await
}

async fn consumers_of(
    State(state): State<AppState>,
    Path((vhost, stream)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Vec<ConsumerJson>>, ApiError> {
    consumers(state, headers, of_stream(vhost, stream)).await
}
