//! Queues and exchanges: `/api/queues`, `/api/exchanges` and their
//! per-vhost and per-object forms (bindings are in `bindings.rs`).
//!
//! Lists are sorted by vhost, then name, as RabbitMQ sorts them by default.
//! Counters are exact, taken in one query; rates are not kept.

use super::json::Table;
use super::query::{CoreView, query};
use super::sessions::{ConsumerJson, consumers_with_replicas};
use super::stream_replicas::{self, ReplicaConsumer};
use super::{Access, ApiError, AppState, caller, caller_for_vhost};
use crate::broker::event::ExchangeKind;
use crate::broker::exchange::Exchange;
use crate::broker::queue::Queue;
use crate::master::session::QueueConsumers;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::HashMap;

/// The routes of this file.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/queues", get(queues_all))
        .route("/api/queues/{vhost}", get(queues_in))
        .route("/api/queues/{vhost}/{name}", get(queue_one))
        .route("/api/exchanges", get(exchanges_all))
        .route("/api/exchanges/{vhost}", get(exchanges_in))
        .route("/api/exchanges/{vhost}/{name}", get(exchange_one))
}

/// One queue as `/api/queues` lists it.
#[derive(Debug, Serialize)]
pub struct QueueJson {
    name: String,
    vhost: String,
    durable: bool,
    auto_delete: bool,
    exclusive: bool,
    arguments: Table,
    node: String,
    #[serde(rename = "type")]
    kind: &'static str,
    state: &'static str,
    messages: usize,
    messages_ready: usize,
    messages_unacknowledged: usize,
    message_bytes: u64,
    message_bytes_ready: u64,
    message_bytes_unacknowledged: u64,
    /// Ready messages past the RAM budget are paged out (docs/architecture.md);
    /// unacked ones are always in RAM.
    messages_ram: usize,
    messages_ready_ram: usize,
    messages_unacknowledged_ram: usize,
    message_bytes_ram: u64,
    messages_paged_out: usize,
    message_bytes_paged_out: u64,
    /// delivery_mode 2, ready and unacked: counted from the ready index
    /// (no disk reads), so a listing costs time in the queue's length.
    messages_persistent: usize,
    message_bytes_persistent: u64,
    /// What the queue's messages cost in RAM (bodies, names, a fixed overhead
    /// each, 16 bytes per paged-out message); there is no queue process.
    memory: u64,
    /// 1 while consumers take every message at once (none waits), else 0;
    /// RabbitMQ averages this over time, StableMQ reports the moment.
    consumer_utilisation: f64,
    /// The same, under RabbitMQ 3.10's newer name.
    consumer_capacity: f64,
    /// When the queue last saw traffic, once an API reading finds none since
    /// the previous one (RabbitMQ: since its process went idle).
    #[serde(skip_serializing_if = "Option::is_none")]
    idle_since: Option<String>,
    /// The `timestamp` property of the first ready message, if it has one.
    head_message_timestamp: Option<u64>,
    consumers: usize,
    exclusive_consumer_tag: Option<String>,
    single_active_consumer_tag: Option<String>,
    policy: Option<String>,
    operator_policy: Option<String>,
    effective_policy_definition: Map<String, Value>,
    /// Quorum queues: the node that leads them (the master).
    #[serde(skip_serializing_if = "Option::is_none")]
    leader: Option<String>,
    /// Streams: their offsets and segments (RabbitMQ 3.10 reports none of
    /// these; issue 22 asks for them).
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<StreamJson>,
    /// Streams: readers (consumers) per node, as RabbitMQ reports them.
    #[serde(skip_serializing_if = "Option::is_none")]
    readers: Option<Map<String, Value>>,
    /// Quorum queues: every node holding them.
    #[serde(skip_serializing_if = "Option::is_none")]
    members: Option<Vec<String>>,
    /// Quorum queues: the members that are up.
    #[serde(skip_serializing_if = "Option::is_none")]
    online: Option<Vec<String>>,
    /// Message counters and rates, once the queue has seen traffic.
    #[serde(skip_serializing_if = "Option::is_none")]
    message_stats: Option<Value>,
    /// Only in `GET /api/queues/{vhost}/{name}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    consumer_details: Option<Vec<ConsumerJson>>,
}

/// A stream's offsets and segments in `/api/queues`.
#[derive(Debug, Serialize)]
struct StreamJson {
    /// The oldest entry kept.
    first_offset: u64,
    /// The newest entry (none while the stream is empty).
    last_offset: Option<u64>,
    /// The offset the next entry gets.
    next_offset: u64,
    /// Segments the entries are in (retention removes whole ones).
    segments: usize,
}

impl QueueJson {
    /// Copy one queue's numbers (in the master task). `stable`: the
    /// master's stable index (None on a slave, whose replica is all stable).
    fn of(
        vhost: &str,
        q: &Queue,
        qc: Option<&QueueConsumers>,
        node: &str,
        stable: Option<u64>,
    ) -> QueueJson {
        let first_tag = || qc.and_then(|c| c.list.first()).map(|k| k.tag.to_string());
        let unacked_bytes: u64 = q.unacked.values().map(|m| m.msg.body.len() as u64).sum();
        let (mut persistent, mut persistent_bytes) = (0usize, 0u64);
        for m in q.unacked.values().filter(|m| m.msg.is_persistent()) {
            persistent += 1;
            persistent_bytes += m.msg.body.len() as u64;
        }
        q.ready.visit(|_, len, p| {
            if p {
                persistent += 1;
                persistent_bytes += len;
            }
            true
        });
        // A stream pages its older entries out, a queue its ready tail.
        let (paged, paged_bytes) = match &q.stream {
            Some(s) => (s.paged_len(), s.paged_bytes()),
            None => (q.ready.len() - q.ready.ram_len(), q.ready.paged_bytes()),
        };
        let consumers = qc.map_or(0, |c| c.list.len());
        let utilisation = if consumers > 0 && q.ready.is_empty() {
            1.0
        } else {
            0.0
        };
        let quorum = q.args.quorum;
        // A stream's entries are all "ready": acks remove none. Only stable
        // ones count (I1): a client that reads the count must not see an
        // entry it has no confirm for yet.
        let stream = q.stream.as_ref();
        let (ready, ready_bytes) = match stream {
            Some(s) => s.stable_counts(stable),
            None => (q.ready.len(), q.ready_bytes),
        };
        let replicated = quorum || stream.is_some();
        QueueJson {
            name: q.name.to_string(),
            vhost: vhost.to_string(),
            durable: q.spec.durable,
            auto_delete: q.spec.auto_delete,
            exclusive: q.spec.exclusive_owner.is_some(),
            arguments: Table(q.spec.arguments.clone()),
            node: node.to_string(),
            kind: match (quorum, stream.is_some()) {
                (true, _) => "quorum",
                (_, true) => "stream",
                _ => "classic",
            },
            state: "running",
            messages: match stream {
                Some(_) => ready,
                None => q.len(),
            },
            messages_ready: ready,
            messages_unacknowledged: q.unacked.len(),
            message_bytes: ready_bytes + unacked_bytes,
            message_bytes_ready: ready_bytes,
            message_bytes_unacknowledged: unacked_bytes,
            messages_ram: (ready + q.unacked.len()).saturating_sub(paged),
            messages_ready_ram: ready.saturating_sub(paged),
            messages_unacknowledged_ram: q.unacked.len(),
            message_bytes_ram: ready_bytes.saturating_sub(paged_bytes) + unacked_bytes,
            messages_paged_out: paged,
            message_bytes_paged_out: paged_bytes,
            messages_persistent: persistent,
            message_bytes_persistent: persistent_bytes,
            memory: q.ready.memory_bytes() + unacked_bytes,
            consumer_utilisation: utilisation,
            consumer_capacity: utilisation,
            idle_since: None,
            head_message_timestamp: q.head().and_then(|m| *m.msg.properties.timestamp()),
            consumers,
            exclusive_consumer_tag: qc.filter(|c| c.exclusive).and_then(|_| first_tag()),
            single_active_consumer_tag: if q.args.single_active_consumer {
                first_tag()
            } else {
                None
            },
            policy: q.policy.as_ref().map(|p| p.name.clone()),
            operator_policy: None,
            effective_policy_definition: q
                .policy
                .as_ref()
                .map(|p| p.definition.clone())
                .unwrap_or_default(),
            leader: replicated.then(|| node.to_string()),
            stream: stream.map(|s| StreamJson {
                first_offset: s.first_offset(),
                last_offset: s.next_offset().checked_sub(1),
                next_offset: s.next_offset(),
                segments: s.segment_count(),
            }),
            readers: stream.map(|_| {
                let mut m = Map::new();
                m.insert(node.to_string(), Value::from(consumers));
                m
            }),
            members: replicated.then(|| vec![node.to_string()]),
            online: replicated.then(|| vec![node.to_string()]),
            consumer_details: None,
            message_stats: None,
        }
    }

    /// Count the subscriptions slaves serve from their replicas of this
    /// stream: in `consumers`, and in `readers` under the serving node.
    fn add_replica_readers(&mut self, replicas: &[ReplicaConsumer]) {
        if self.kind != "stream" {
            return;
        }
        for c in replicas
            .iter()
            .filter(|c| c.vhost == self.vhost && c.stream == self.name)
        {
            self.consumers += 1;
            if let Some(readers) = &mut self.readers {
                let n = readers.get(&c.node).and_then(Value::as_u64).unwrap_or(0);
                readers.insert(c.node.clone(), Value::from(n + 1));
            }
        }
    }
}

/// Each queue's consumers, by (vhost, queue).
fn consumers_by_queue<'a>(view: &CoreView<'a>) -> HashMap<(&'a str, &'a str), &'a QueueConsumers> {
    view.master
        .map(|m| m.queue_consumers().collect())
        .unwrap_or_default()
}

/// Queues of one vhost (or all); None when the vhost does not exist.
fn list_queues(view: CoreView<'_>, vhost: Option<&str>, node: &str) -> Option<Vec<QueueJson>> {
    let by_queue = consumers_by_queue(&view);
    let mut out = Vec::new();
    for (vname, v) in &view.broker.vhosts {
        if vhost.is_some_and(|want| want != vname) {
            continue;
        }
        let mut names: Vec<&String> = v.queues.keys().collect();
        names.sort();
        for name in names {
            let q = &v.queues[name];
            let qc = by_queue.get(&(vname.as_str(), name.as_str())).copied();
            let stable = view.master.map(|m| m.stable_index());
            let mut json = QueueJson::of(vname, q, qc, node, stable);
            json.message_stats = super::stats::queue(view.master, vname, name);
            json.idle_since = super::stats::queue_idle_since(view.master, vname, name);
            out.push(json);
        }
    }
    match vhost {
        Some(want) if view.broker.vhost(want).is_none() => None,
        _ => Some(out),
    }
}

async fn queues_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<QueueJson>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let node = state.node().to_string();
    let replicas = stream_replicas::for_lists(&state, &who, None).await;
    let list = query(&state, move |view| list_queues(view, None, &node)).await?;
    let access = state.access();
    let mut list = list.unwrap_or_default();
    list.retain(|o| who.sees_vhost(&access, &o.vhost));
    for q in &mut list {
        q.add_replica_readers(&replicas);
    }
    Ok(Json(list))
}

async fn queues_in(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<QueueJson>>, ApiError> {
    let who = caller_for_vhost(&state, &headers, &vhost)?;
    let node = state.node().to_string();
    let replicas = stream_replicas::for_lists(&state, &who, Some(vhost.clone())).await;
    let mut list = query(&state, move |view| list_queues(view, Some(&vhost), &node))
        .await?
        .ok_or(ApiError::NotFound)?;
    for q in &mut list {
        q.add_replica_readers(&replicas);
    }
    Ok(Json(list))
}

async fn queue_one(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<QueueJson>, ApiError> {
    let who = caller_for_vhost(&state, &headers, &vhost)?;
    let node = state.node().to_string();
    let replicas = stream_replicas::for_lists(&state, &who, Some(vhost.clone())).await;
    query(&state, move |view| {
        let q = view.broker.queue(&vhost, &name)?;
        let qc = consumers_by_queue(&view)
            .get(&(vhost.as_str(), name.as_str()))
            .copied();
        let stable = view.master.map(|m| m.stable_index());
        let mut json = QueueJson::of(&vhost, q, qc, &node, stable);
        json.message_stats = super::stats::queue(view.master, &vhost, &name);
        json.idle_since = super::stats::queue_idle_since(view.master, &vhost, &name);
        json.add_replica_readers(&replicas);
        let mut details = consumers_with_replicas(&view, &who, Some(&vhost), &node, replicas);
        details.retain(|c| c.is_on(&vhost, &name));
        json.consumer_details = Some(details);
        Some(json)
    })
    .await?
    .map(Json)
    .ok_or(ApiError::NotFound)
}

/// One exchange as `/api/exchanges` lists it.
#[derive(Debug, Serialize)]
pub struct ExchangeJson {
    name: String,
    vhost: String,
    #[serde(rename = "type")]
    kind: &'static str,
    durable: bool,
    auto_delete: bool,
    internal: bool,
    arguments: Table,
    /// Message counters and rates, once the exchange has seen traffic.
    #[serde(skip_serializing_if = "Option::is_none")]
    message_stats: Option<Value>,
    /// The policy the exchange follows, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
    /// Per-link rates, only in `GET /api/exchanges/{vhost}/{name}`; rates
    /// are not kept, so always empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    incoming: Option<Vec<Value>>,
    /// As `incoming`.
    #[serde(skip_serializing_if = "Option::is_none")]
    outgoing: Option<Vec<Value>>,
}

impl ExchangeJson {
    fn of(vhost: &str, x: &Exchange) -> ExchangeJson {
        ExchangeJson {
            name: x.name.clone(),
            vhost: vhost.to_string(),
            kind: kind_name(x.spec.kind),
            durable: x.spec.durable,
            auto_delete: x.spec.auto_delete,
            internal: x.spec.internal,
            arguments: Table(x.spec.arguments.clone()),
            policy: x.policy.as_ref().map(|p| p.name.clone()),
            message_stats: None,
            incoming: None,
            outgoing: None,
        }
    }
}

/// RabbitMQ's name of an exchange type.
pub fn kind_name(kind: ExchangeKind) -> &'static str {
    match kind {
        ExchangeKind::Direct => "direct",
        ExchangeKind::Fanout => "fanout",
        ExchangeKind::Topic => "topic",
        ExchangeKind::Headers => "headers",
    }
}

/// The default exchange is called `amq.default` in URLs (its name is empty).
pub(super) fn exchange_name(url_name: String) -> String {
    if url_name == "amq.default" {
        String::new()
    } else {
        url_name
    }
}

/// A vhost's exchanges sorted by name.
pub(super) fn sorted_exchanges(v: &crate::broker::Vhost) -> Vec<&Exchange> {
    let mut xs: Vec<&Exchange> = v.exchanges.values().collect();
    xs.sort_by(|a, b| a.name.cmp(&b.name));
    xs
}

fn list_exchanges(view: CoreView<'_>, vhost: Option<&str>) -> Option<Vec<ExchangeJson>> {
    if vhost.is_some_and(|v| view.broker.vhost(v).is_none()) {
        return None;
    }
    let mut out = Vec::new();
    for (vname, v) in &view.broker.vhosts {
        if vhost.is_none_or(|want| want == vname) {
            out.extend(sorted_exchanges(v).into_iter().map(|x| {
                let mut json = ExchangeJson::of(vname, x);
                json.message_stats = super::stats::exchange(view.master, vname, &x.name);
                json
            }));
        }
    }
    Some(out)
}

async fn exchanges_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<ExchangeJson>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let list = query(&state, |view| list_exchanges(view, None)).await?;
    let access = state.access();
    let mut list = list.unwrap_or_default();
    list.retain(|o| who.sees_vhost(&access, &o.vhost));
    Ok(Json(list))
}

async fn exchanges_in(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<ExchangeJson>>, ApiError> {
    caller_for_vhost(&state, &headers, &vhost)?;
    query(&state, move |view| list_exchanges(view, Some(&vhost)))
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound)
}

async fn exchange_one(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<ExchangeJson>, ApiError> {
    caller_for_vhost(&state, &headers, &vhost)?;
    let name = exchange_name(name);
    query(&state, move |view| {
        let mut x = ExchangeJson::of(&vhost, view.broker.exchange(&vhost, &name)?);
        x.message_stats = super::stats::exchange(view.master, &vhost, &name);
        x.incoming = Some(Vec::new());
        x.outgoing = Some(Vec::new());
        Some(x)
    })
    .await?
    .map(Json)
    .ok_or(ApiError::NotFound)
}
