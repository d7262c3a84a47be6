//! Connections, channels and consumers: `/api/connections`, `/api/channels`,
//! `/api/consumers` and their per-vhost and per-object forms.
//!
//! These are the master's session state, never replicated: a slave has none
//! (its clients are proxied to the master, which lists them). The exception
//! is a stream subscription a slave serves from its replica, which the
//! consumer lists gather from the slaves (`stream_replicas`). A user without
//! the `monitoring` tag sees only its own, as in RabbitMQ.

use super::json::{Table, connection_name, host};
use super::query::{CoreView, query};
use super::stream_replicas::{self, ReplicaConsumer};
use super::{Access, ApiError, AppState, Caller, caller};
use crate::broker::queue::Queue;
use crate::master::inout::ConnId;
use crate::master::session::Session;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use stablemq_protocol::{AMQPValue, FieldTable, ShortString};

/// The routes of this file.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/connections", get(connections_all))
        .route("/api/connections/{name}", get(connection_one))
        .route("/api/connections/{name}/channels", get(connection_channels))
        .route("/api/vhosts/{vhost}/connections", get(connections_in))
        .route("/api/channels", get(channels_all))
        .route("/api/channels/{name}", get(channel_one))
        .route("/api/vhosts/{vhost}/channels", get(channels_in))
        .route("/api/consumers", get(consumers_all))
        .route("/api/consumers/{vhost}", get(consumers_in))
}

/// One connection as `/api/connections` lists it.
#[derive(Debug, Serialize)]
pub struct ConnectionJson {
    pub(super) name: String,
    pub(super) node: String,
    vhost: String,
    user: String,
    user_who_performed_action: String,
    state: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    protocol: &'static str,
    auth_mechanism: String,
    ssl: bool,
    /// Null on a plain connection, as RabbitMQ reports one.
    ssl_protocol: Option<String>,
    ssl_key_exchange: Option<String>,
    ssl_cipher: Option<String>,
    ssl_hash: Option<String>,
    peer_cert_issuer: Option<String>,
    peer_cert_subject: Option<String>,
    peer_cert_validity: Option<String>,
    host: Option<String>,
    port: Option<u16>,
    pub(super) peer_host: Option<String>,
    pub(super) peer_port: Option<u16>,
    channels: usize,
    channel_max: u16,
    frame_max: u32,
    timeout: u16,
    connected_at: u64,
    /// Socket traffic (RabbitMQ's inet stats): bytes and reads in, bytes and
    /// writes out, bytes pending, each counter with its rate; read by
    /// monitoring tools such as kbudde/rabbitmq_exporter.
    recv_oct: u64,
    recv_oct_details: Rate,
    recv_cnt: u64,
    send_oct: u64,
    send_oct_details: Rate,
    send_cnt: u64,
    send_pend: u64,
    /// Work units of the connection task (RabbitMQ: process reductions).
    reductions: u64,
    reductions_details: Rate,
    client_properties: Table,
    /// The client's own name for the connection (`connection_name` in its
    /// client properties), if it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    user_provided_name: Option<String>,
}

/// A counter's rate per second, RabbitMQ's `*_details` object.
#[derive(Debug, Serialize)]
struct Rate {
    rate: f64,
}

impl ConnectionJson {
    pub(super) fn of(id: ConnId, s: &Session, node: &str) -> ConnectionJson {
        let info = &s.info;
        let tls = info.tls.as_ref();
        let cert = tls.and_then(|t| t.peer_cert.as_ref());
        let name = connection_name(info.peer, info.local);
        let traffic = crate::metrics::conn_stats::traffic(id);
        let rate = |counter: &str, count: u64| Rate {
            rate: super::stats::rate(format!("connection/{name}/{counter}"), count),
        };
        let user_provided_name = info
            .client_properties
            .inner()
            .get("connection_name")
            .and_then(crate::broker::queue_args::text);
        ConnectionJson {
            recv_oct_details: rate("recv_oct", traffic.recv_oct),
            send_oct_details: rate("send_oct", traffic.send_oct),
            reductions_details: rate("reductions", traffic.reductions),
            recv_oct: traffic.recv_oct,
            recv_cnt: traffic.recv_cnt,
            send_oct: traffic.send_oct,
            send_cnt: traffic.send_cnt,
            send_pend: traffic.send_pend,
            reductions: traffic.reductions,
            name,
            node: node.to_string(),
            vhost: s.vhost.to_string(),
            user: s.user.clone(),
            user_who_performed_action: s.user.clone(),
            state: "running",
            kind: "network",
            protocol: info.protocol.display_name(),
            auth_mechanism: info.auth_mechanism.clone(),
            ssl: tls.is_some(),
            ssl_protocol: tls.map(|t| t.protocol.clone()),
            ssl_key_exchange: tls.map(|t| t.key_exchange.clone()),
            ssl_cipher: tls.map(|t| t.cipher.clone()),
            ssl_hash: tls.map(|t| t.hash.clone()),
            peer_cert_issuer: cert.map(|c| c.issuer.clone()),
            peer_cert_subject: cert.map(|c| c.subject.clone()),
            peer_cert_validity: cert.map(|c| c.validity.clone()),
            host: info.local.as_ref().map(host),
            port: info.local.map(|a| a.port()),
            peer_host: info.peer.as_ref().map(host),
            peer_port: info.peer.map(|a| a.port()),
            // A stream connection has no channels: the ones its bridge
            // opens on the master are not the client's (RabbitMQ 3.10 lists
            // none for it).
            channels: match info.protocol {
                crate::master::inout::ClientProtocol::Stream => 0,
                crate::master::inout::ClientProtocol::Amqp091 => s.channels.len(),
            },
            channel_max: info.channel_max,
            frame_max: info.frame_max,
            timeout: info.heartbeat_secs,
            connected_at: s.connected_at_ms,
            client_properties: Table(info.client_properties.clone()),
            user_provided_name,
        }
    }
}

/// Sessions the caller may see, in connection order (oldest first), limited
/// to one vhost if asked.
pub(super) fn visible<'a>(
    view: &CoreView<'a>,
    who: &Caller,
    vhost: Option<&str>,
) -> Vec<(ConnId, &'a Session)> {
    let Some(m) = view.master else {
        return Vec::new();
    };
    let mut list: Vec<(ConnId, &Session)> = m
        .sessions()
        .filter(|(id, _)| !super::internal::is_internal(*id))
        .filter(|(_, s)| who.sees_user(&s.user))
        .filter(|(_, s)| vhost.is_none_or(|v| v == &*s.vhost))
        .collect();
    list.sort_by_key(|(id, _)| *id);
    list
}

fn list_connections(
    view: CoreView<'_>,
    who: &Caller,
    vhost: Option<&str>,
    node: &str,
) -> Option<Vec<ConnectionJson>> {
    if vhost.is_some_and(|v| view.broker.vhost(v).is_none()) {
        return None;
    }
    Some(
        visible(&view, who, vhost)
            .into_iter()
            .map(|(id, s)| ConnectionJson::of(id, s, node))
            .collect(),
    )
}

async fn connections_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<ConnectionJson>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let node = state.node().to_string();
    let list = query(&state, move |view| {
        list_connections(view, &who, None, &node)
    })
    .await?;
    Ok(Json(list.unwrap_or_default()))
}

async fn connections_in(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<ConnectionJson>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let node = state.node().to_string();
    query(&state, move |view| {
        list_connections(view, &who, Some(&vhost), &node)
    })
    .await?
    .map(Json)
    .ok_or(ApiError::NotFound)
}

async fn connection_one(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<ConnectionJson>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let node = state.node().to_string();
    let list = query(&state, move |view| {
        list_connections(view, &who, None, &node)
    })
    .await?;
    list.unwrap_or_default()
        .into_iter()
        .find(|c| c.name == name)
        .map(Json)
        .ok_or(ApiError::NotFound)
}

/// The connection a channel or consumer belongs to, as RabbitMQ nests it.
#[derive(Debug, Serialize)]
pub struct ConnectionDetails {
    name: String,
    peer_host: Option<String>,
    peer_port: Option<u16>,
}

/// One channel as `/api/channels` lists it.
#[derive(Debug, Serialize)]
pub struct ChannelJson {
    name: String,
    number: u16,
    node: String,
    vhost: String,
    user: String,
    user_who_performed_action: String,
    state: &'static str,
    connection_details: ConnectionDetails,
    consumer_count: usize,
    messages_unacknowledged: usize,
    /// Confirms owed are not counted per channel yet.
    messages_unconfirmed: usize,
    messages_uncommitted: usize,
    acks_uncommitted: usize,
    prefetch_count: u16,
    global_prefetch_count: u16,
    confirm: bool,
    transactional: bool,
}

fn list_channels(
    view: CoreView<'_>,
    who: &Caller,
    vhost: Option<&str>,
    node: &str,
) -> Option<Vec<ChannelJson>> {
    if vhost.is_some_and(|v| view.broker.vhost(v).is_none()) {
        return None;
    }
    let mut out = Vec::new();
    for (_, s) in visible(&view, who, vhost) {
        let conn = connection_name(s.info.peer, s.info.local);
        let mut numbers: Vec<u16> = s.channels.keys().copied().collect();
        numbers.sort_unstable();
        for n in numbers {
            let c = &s.channels[&n];
            out.push(ChannelJson {
                name: format!("{conn} ({n})"),
                number: n,
                node: node.to_string(),
                vhost: s.vhost.to_string(),
                user: s.user.clone(),
                user_who_performed_action: s.user.clone(),
                state: "running",
                connection_details: ConnectionDetails {
                    name: conn.clone(),
                    peer_host: s.info.peer.as_ref().map(host),
                    peer_port: s.info.peer.map(|a| a.port()),
                },
                consumer_count: c.consumers.len(),
                messages_unacknowledged: c.unacked.len(),
                messages_unconfirmed: 0,
                messages_uncommitted: c.tx.as_ref().map_or(0, |t| t.publishes.len()),
                acks_uncommitted: c.tx.as_ref().map_or(0, |t| t.acks.len()),
                prefetch_count: c.consumer_prefetch,
                global_prefetch_count: c.channel_prefetch,
                confirm: c.confirm_next.is_some(),
                transactional: c.tx.is_some(),
            });
        }
    }
    Some(out)
}

async fn channels_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<ChannelJson>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let node = state.node().to_string();
    let list = query(&state, move |view| list_channels(view, &who, None, &node)).await?;
    Ok(Json(list.unwrap_or_default()))
}

async fn channels_in(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<ChannelJson>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let node = state.node().to_string();
    query(&state, move |view| {
        list_channels(view, &who, Some(&vhost), &node)
    })
    .await?
    .map(Json)
    .ok_or(ApiError::NotFound)
}

async fn channel_one(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<ChannelJson>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let node = state.node().to_string();
    let list = query(&state, move |view| list_channels(view, &who, None, &node)).await?;
    list.unwrap_or_default()
        .into_iter()
        .find(|c| c.name == name)
        .map(Json)
        .ok_or(ApiError::NotFound)
}

async fn connection_channels(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<ChannelJson>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let node = state.node().to_string();
    query(&state, move |view| {
        let exists = visible(&view, &who, None)
            .iter()
            .any(|(_, s)| connection_name(s.info.peer, s.info.local) == name);
        if !exists {
            return None;
        }
        let mut list = list_channels(view, &who, None, &node)?;
        list.retain(|c| c.connection_details.name == name);
        Some(list)
    })
    .await?
    .map(Json)
    .ok_or(ApiError::NotFound)
}

/// The channel a consumer is on, as RabbitMQ nests it.
#[derive(Debug, Serialize)]
pub struct ChannelDetails {
    name: String,
    number: u16,
    connection_name: String,
    node: String,
    peer_host: Option<String>,
    peer_port: Option<u16>,
    user: String,
}

/// A queue named by vhost and name.
#[derive(Debug, Serialize)]
pub struct QueueRef {
    name: String,
    vhost: String,
}

/// One consumer as `/api/consumers` lists it.
#[derive(Debug, Serialize)]
pub struct ConsumerJson {
    consumer_tag: String,
    queue: QueueRef,
    channel_details: ChannelDetails,
    ack_required: bool,
    prefetch_count: u16,
    exclusive: bool,
    active: bool,
    activity_status: &'static str,
    arguments: Table,
    /// A stream consumer: the next offset it reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
    /// A stream consumer: how many entries it is behind the stream's end.
    #[serde(skip_serializing_if = "Option::is_none")]
    offset_lag: Option<u64>,
}

impl ConsumerJson {
    /// Whether this consumer reads from `vhost`/`queue`.
    pub fn is_on(&self, vhost: &str, queue: &str) -> bool {
        self.queue.vhost == vhost && self.queue.name == queue
    }

    /// A stream subscription a slave serves from its replica, listed as the
    /// master lists the stream subscriptions it serves itself (tag
    /// `stream-subscription-<id>`, acks required) but on the client's
    /// connection to that slave, which has no channel on the master (number
    /// 0). `offset` is the next it reads; `stream_end` the stream's next
    /// offset on this node, for the lag.
    fn of_replica(c: ReplicaConsumer, stream_end: Option<u64>) -> ConsumerJson {
        let mut arguments = FieldTable::default();
        for (k, v) in c.properties {
            arguments.insert(ShortString::from(k), AMQPValue::LongString(v.into()));
        }
        let next = c.offset.map_or(0, |o| o + 1);
        ConsumerJson {
            consumer_tag: format!("stream-subscription-{}", c.subscription_id),
            queue: QueueRef {
                name: c.stream,
                vhost: c.vhost,
            },
            channel_details: ChannelDetails {
                name: c.connection.clone(),
                number: 0,
                connection_name: c.connection,
                node: c.node,
                peer_host: c.peer_host,
                peer_port: c.peer_port,
                user: c.user,
            },
            ack_required: true,
            prefetch_count: 0,
            exclusive: false,
            active: true,
            activity_status: "up",
            arguments: Table(arguments),
            offset: Some(next),
            offset_lag: Some(stream_end.map_or(0, |end| end.saturating_sub(next))),
        }
    }
}

/// `consumers` and, after them, the subscriptions slaves serve from their
/// replicas (`replicas`, from [`stream_replicas::for_lists`]) in `vhost`.
pub fn consumers_with_replicas(
    view: &CoreView<'_>,
    who: &Caller,
    vhost: Option<&str>,
    node: &str,
    replicas: Vec<ReplicaConsumer>,
) -> Vec<ConsumerJson> {
    let mut out = consumers(view, who, vhost, node);
    for c in replicas {
        if vhost.is_some_and(|want| want != c.vhost) {
            continue;
        }
        let end = next_offset_of(view.broker.queue(&c.vhost, &c.stream));
        out.push(ConsumerJson::of_replica(c, end));
    }
    out
}

/// The offset a stream's next entry gets (None: not a stream), for a
/// consumer's lag.
fn next_offset_of(queue: Option<&Queue>) -> Option<u64> {
    queue
        .and_then(|q| q.stream.as_ref())
        .map(|s| s.next_offset())
}

/// Consumers the caller may see, by queue (vhost, then name) and, within a
/// queue, in delivery order. With single active consumer only the first is
/// active; the others wait.
pub fn consumers(
    view: &CoreView<'_>,
    who: &Caller,
    vhost: Option<&str>,
    node: &str,
) -> Vec<ConsumerJson> {
    let Some(m) = view.master else {
        return Vec::new();
    };
    let sessions: std::collections::HashMap<ConnId, &Session> = m.sessions().collect();
    let mut queues: Vec<_> = m
        .queue_consumers()
        .filter(|((v, _), _)| vhost.is_none_or(|want| want == *v))
        .collect();
    queues.sort_by_key(|(key, _)| *key);
    let mut out = Vec::new();
    for ((v, q), qc) in queues {
        let queue = view.broker.queue(v, q);
        let single_active = queue.is_some_and(|q| q.args.single_active_consumer);
        let stream_end = next_offset_of(queue);
        for (i, key) in qc.list.iter().enumerate() {
            let Some(s) = sessions.get(&key.conn).filter(|s| who.sees_user(&s.user)) else {
                continue;
            };
            let Some(c) = s
                .channels
                .get(&key.ch)
                .and_then(|ch| ch.consumers.get(&key.tag))
            else {
                continue;
            };
            let conn = connection_name(s.info.peer, s.info.local);
            let (active, activity_status) = match (single_active, i) {
                (false, _) => (true, "up"),
                (true, 0) => (true, "single_active"),
                (true, _) => (false, "waiting"),
            };
            out.push(ConsumerJson {
                consumer_tag: key.tag.to_string(),
                queue: QueueRef {
                    name: q.to_string(),
                    vhost: v.to_string(),
                },
                channel_details: ChannelDetails {
                    name: format!("{conn} ({})", key.ch),
                    number: key.ch,
                    connection_name: conn,
                    node: node.to_string(),
                    peer_host: s.info.peer.as_ref().map(host),
                    peer_port: s.info.peer.map(|a| a.port()),
                    user: s.user.clone(),
                },
                ack_required: !c.no_ack,
                prefetch_count: c.prefetch,
                exclusive: qc.exclusive,
                active,
                activity_status,
                arguments: Table(c.arguments.clone()),
                offset: c.stream_offset,
                offset_lag: c
                    .stream_offset
                    .zip(stream_end)
                    .map(|(at, end)| end.saturating_sub(at)),
            });
        }
    }
    out
}

async fn consumers_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<ConsumerJson>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let node = state.node().to_string();
    let replicas = stream_replicas::for_lists(&state, &who, None).await;
    Ok(Json(
        query(&state, move |view| {
            consumers_with_replicas(&view, &who, None, &node, replicas)
        })
        .await?,
    ))
}

async fn consumers_in(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<ConsumerJson>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let node = state.node().to_string();
    let replicas = stream_replicas::for_lists(&state, &who, Some(vhost.clone())).await;
    query(&state, move |view| {
        view.broker
            .vhost(&vhost)
            .map(|_| consumers_with_replicas(&view, &who, Some(&vhost), &node, replicas))
    })
    .await?
    .map(Json)
    .ok_or(ApiError::NotFound)
}
