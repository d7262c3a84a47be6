//! `/api/overview`, `/api/whoami`, `/api/cluster-name`, the aliveness test
//! and the health checks: what monitoring scripts poll.

use super::query::{CoreView, query};
use super::{Access, ApiError, AppState, RABBITMQ_COMPAT_VERSION, caller};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

/// The routes of this file.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/overview", get(overview))
        .route("/api/whoami", get(whoami))
        .route("/api/cluster-name", get(cluster_name).put(put_cluster_name))
        .route("/api/aliveness-test/{vhost}", get(aliveness))
        .route("/api/health/checks/alarms", get(alarms))
        .route("/api/health/checks/local-alarms", get(alarms))
        .route(
            "/api/health/checks/port-listener/{port}",
            get(port_listener),
        )
        .route(
            "/api/health/checks/protocol-listener/{protocol}",
            get(protocol_listener),
        )
        .route("/api/health/checks/virtual-hosts", get(virtual_hosts))
        // The pre-3.8 node health check, still used by amqpstorm.
        .route("/api/healthchecks/node", get(healthcheck_node))
        .route("/api/healthchecks/node/", get(healthcheck_node))
        .route("/api/healthchecks/node/{node}", get(healthcheck_named))
}

/// `GET /api/healthchecks/node`: this node answers, so it is ok.
async fn healthcheck_node(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    caller(&state, &headers, Access::Management)?;
    Ok(Json(json!({"status": "ok"})))
}

/// `GET /api/healthchecks/node/{node}`: ok for this node; a peer is asked
/// through `/api/nodes`' view of it.
async fn healthcheck_named(
    State(state): State<AppState>,
    Path(node): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    if node == state.node() {
        return Ok(Json(json!({"status": "ok"})));
    }
    if !state.nodes.peers.iter().any(|p| p.name == node) {
        return Err(ApiError::NotFound);
    }
    let all = state.nodes.all(&who.authorization).await;
    let up = all.iter().any(|r| r.name == node && r.running);
    Ok(Json(match up {
        true => json!({"status": "ok"}),
        false => json!({"status": "failed", "reason": "node is not running"}),
    }))
}

/// Object and message counts across the broker, as one query counts them.
#[derive(Debug, Default)]
struct Totals {
    connections: usize,
    channels: usize,
    consumers: usize,
    exchanges: usize,
    queues: usize,
    messages_ready: usize,
    messages_unacknowledged: usize,
}

impl Totals {
    /// Count in the master task. `user` limits connections, channels and
    /// consumers to one user's (a management-only caller's view).
    fn count(view: CoreView<'_>, user: Option<&str>) -> Totals {
        let mut t = Totals::default();
        for v in view.broker.vhosts.values() {
            t.exchanges += v.exchanges.len();
            t.queues += v.queues.len();
            for q in v.queues.values() {
                t.messages_ready += q.ready.len();
                t.messages_unacknowledged += q.unacked.len();
            }
        }
        if let Some(m) = view.master {
            for (id, s) in m.sessions() {
                if super::internal::is_internal(id) || user.is_some_and(|u| u != s.user) {
                    continue;
                }
                t.connections += 1;
                t.channels += s.channels.len();
                t.consumers += s
                    .channels
                    .values()
                    .map(|c| c.consumers.len())
                    .sum::<usize>();
            }
        }
        t
    }
}

/// `GET /api/overview`, with the master's message counters and rates in
/// `message_stats` (empty on a slave, which sees no traffic).
async fn overview(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let user = (who.access < Access::Monitoring).then(|| who.name.clone());
    // Stream subscriptions slaves serve from their replicas are consumers
    // too (super::stream_replicas), already limited to what `who` sees.
    let replicas = super::stream_replicas::for_lists(&state, &who, None).await;
    let (mut t, message_stats) = query(&state, move |view| {
        let stats = super::stats::overview(view.master);
        (Totals::count(view, user.as_deref()), stats)
    })
    .await?;
    t.consumers += replicas.len();
    let cluster_name = super::parameters::cluster_name(&state).await?;
    // The management listener, as RabbitMQ lists its web contexts.
    let contexts: Vec<Value> = state
        .listeners
        .all()
        .iter()
        .filter(|l| l.protocol == "http")
        .map(|l| {
            json!({
                "node": state.node(),
                "description": "RabbitMQ Management",
                "path": "/",
                "cowboy_opts": "[{sendfile,false}]",
                "port": l.addr.port().to_string(),
            })
        })
        .collect();
    let listeners: Vec<Value> = state
        .listeners
        .all()
        .iter()
        .map(|l| {
            json!({
                "node": state.node(),
                "protocol": l.protocol,
                "ip_address": super::json::host(&l.addr),
                "port": l.addr.port(),
            })
        })
        .collect();
    let exchange_types: Vec<Value> = [
        (
            "direct",
            "AMQP direct exchange, as per the AMQP specification",
        ),
        (
            "fanout",
            "AMQP fanout exchange, as per the AMQP specification",
        ),
        (
            "headers",
            "AMQP headers exchange, as per the AMQP specification",
        ),
        (
            "topic",
            "AMQP topic exchange, as per the AMQP specification",
        ),
    ]
    .iter()
    .map(|(name, description)| json!({"name": name, "description": description, "enabled": true}))
    .collect();
    Ok(Json(json!({
        "management_version": RABBITMQ_COMPAT_VERSION,
        "rabbitmq_version": RABBITMQ_COMPAT_VERSION,
        "product_name": "StableMQ",
        "product_version": env!("CARGO_PKG_VERSION"),
        // Tools take these as labels (kbudde/rabbitmq_exporter's
        // rabbitmq_version_info); there is no Erlang runtime to name.
        "erlang_version": "none",
        "erlang_full_version": "none (StableMQ runs no Erlang VM)",
        "rates_mode": "none",
        "disable_stats": false,
        "enable_queue_totals": true,
        "cluster_name": cluster_name,
        "node": state.node(),
        "exchange_types": exchange_types,
        "message_stats": message_stats,
        "queue_totals": {
            "messages": t.messages_ready + t.messages_unacknowledged,
            "messages_ready": t.messages_ready,
            "messages_unacknowledged": t.messages_unacknowledged,
        },
        "object_totals": {
            "connections": t.connections,
            "channels": t.channels,
            "consumers": t.consumers,
            "exchanges": t.exchanges,
            "queues": t.queues,
        },
        "statistics_db_event_queue": 0,
        "listeners": listeners,
        "contexts": contexts,
    })))
}

/// `GET /api/whoami`.
async fn whoami(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    Ok(Json(json!({"name": who.name, "tags": who.tags})))
}

/// `GET /api/cluster-name`.
async fn cluster_name(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    caller(&state, &headers, Access::Management)?;
    Ok(Json(
        json!({"name": super::parameters::cluster_name(&state).await?}),
    ))
}

/// `PUT /api/cluster-name` `{"name": ..}`: administrators rename the
/// cluster, as in RabbitMQ (a replicated global parameter). The AMQP
/// handshake and the Prometheus identity keep the configured name.
async fn put_cluster_name(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, super::writes::WriteError> {
    caller(&state, &headers, Access::Administrator)?;
    let body = super::writes::body_json(&body)?;
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    super::parameters::set_cluster_name(&state, name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `{"status":"failed", ...}` with 503, as RabbitMQ's health checks fail.
fn failed(body: Value) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

/// `GET /api/aliveness-test/{vhost}`: the vhost exists and the master task
/// answers. RabbitMQ declares a queue named `aliveness-test` and passes a
/// message through it; this check writes nothing, so it leaves no queue
/// behind and needs no log append.
async fn aliveness(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    caller(&state, &headers, Access::Management)?;
    let exists = query(&state, move |view| view.broker.vhost(&vhost).is_some()).await?;
    if !exists {
        return Err(ApiError::NotFound);
    }
    Ok(Json(json!({"status": "ok"})))
}

/// `GET /api/health/checks/alarms` and `local-alarms`: 503 while a resource
/// alarm blocks publishers. Both report this node's alarm only; in a cluster
/// each node has to be asked.
async fn alarms(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    caller(&state, &headers, Access::Management)?;
    let alarm = query(&state, |view| view.alarm.map(str::to_string)).await?;
    Ok(match alarm {
        None => Json(json!({"status": "ok"})).into_response(),
        Some(reason) => {
            let resource = if reason.contains("disk") {
                "disk"
            } else {
                "memory"
            };
            failed(json!({
                "status": "failed",
                "reason": "There are alarms in effect in the cluster",
                "alarms": [{"node": state.node(), "resource": resource}],
            }))
        }
    })
}

/// `GET /api/health/checks/port-listener/{port}`.
async fn port_listener(
    State(state): State<AppState>,
    Path(port): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    caller(&state, &headers, Access::Management)?;
    let port: u16 = port
        .parse()
        .map_err(|_| ApiError::BadRequest("Invalid port".into()))?;
    let ports: Vec<u16> = state
        .listeners
        .all()
        .iter()
        .map(|l| l.addr.port())
        .collect();
    Ok(if ports.contains(&port) {
        Json(json!({"status": "ok", "port": port})).into_response()
    } else {
        failed(json!({
            "status": "failed",
            "reason": "No active listener",
            "missing": port,
            "ports": ports,
        }))
    })
}

/// `GET /api/health/checks/protocol-listener/{protocol}`.
async fn protocol_listener(
    State(state): State<AppState>,
    Path(protocol): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    caller(&state, &headers, Access::Management)?;
    let protocols: Vec<&str> = state.listeners.all().iter().map(|l| l.protocol).collect();
    Ok(if protocols.contains(&protocol.as_str()) {
        Json(json!({"status": "ok", "protocol": protocol})).into_response()
    } else {
        failed(json!({
            "status": "failed",
            "reason": "No active listener",
            "missing": protocol,
            "protocols": protocols,
        }))
    })
}

/// `GET /api/health/checks/virtual-hosts`: every vhost runs as long as the
/// master task answers (vhosts have no processes of their own here).
async fn virtual_hosts(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    caller(&state, &headers, Access::Management)?;
    query(&state, |_| ()).await?;
    Ok(Json(json!({"status": "ok"})))
}
