//! Bindings: `/api/bindings`, its per-vhost form, a binding between two
//! named ends, and the bindings at one end of a queue or exchange
//! (`/api/queues/{vhost}/{name}/bindings`,
//! `/api/exchanges/{vhost}/{name}/bindings/source|destination`).
//!
//! Listed as RabbitMQ lists them: per vhost, first the default exchange's
//! implicit binding of each queue, then each exchange's bindings.

use super::json::{Table, properties_key};
use super::objects::{exchange_name, sorted_exchanges};
use super::query::{CoreView, query};
use super::{Access, ApiError, AppState, caller, caller_for_vhost};
use crate::broker::event::Destination;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

/// The routes of this file.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/queues/{vhost}/{name}/bindings", get(queue_bindings))
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/source",
            get(exchange_bindings_source),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/destination",
            get(exchange_bindings_destination),
        )
        .route("/api/bindings", get(bindings_all))
        .route("/api/bindings/{vhost}", get(bindings_in))
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{dest}",
            get(bindings_between),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{dest}/{props}",
            get(binding_one),
        )
}

/// One binding as `/api/bindings` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct BindingJson {
    /// Source exchange ("" for the default exchange's implicit bindings).
    pub source: String,
    /// Vhost.
    pub vhost: String,
    /// Queue or exchange name.
    pub destination: String,
    /// `queue` or `exchange`.
    pub destination_type: &'static str,
    /// Binding key.
    pub routing_key: String,
    /// Binding arguments.
    pub arguments: Table,
    /// Names the binding in URLs.
    pub properties_key: String,
}

/// Every binding of a vhost: first the default exchange's implicit binding
/// of each queue (RabbitMQ lists them too), then each exchange's bindings in
/// creation order.
fn vhost_bindings(vname: &str, v: &crate::broker::Vhost, out: &mut Vec<BindingJson>) {
    let mut queues: Vec<&String> = v.queues.keys().collect();
    queues.sort();
    for q in queues {
        out.push(BindingJson {
            source: String::new(),
            vhost: vname.to_string(),
            destination: q.clone(),
            destination_type: "queue",
            routing_key: q.clone(),
            arguments: Table::default(),
            properties_key: properties_key(q, &Default::default()),
        });
    }
    for x in sorted_exchanges(v) {
        for b in &x.bindings {
            let (destination, destination_type) = match &b.destination {
                Destination::Queue(q) => (q.clone(), "queue"),
                Destination::Exchange(e) => (e.clone(), "exchange"),
            };
            out.push(BindingJson {
                source: b.source.clone(),
                vhost: vname.to_string(),
                destination,
                destination_type,
                routing_key: b.routing_key.clone(),
                arguments: Table(b.arguments.clone()),
                properties_key: properties_key(&b.routing_key, &b.arguments),
            });
        }
    }
}

/// Bindings of one vhost, or of all; None when the vhost does not exist.
pub fn list_bindings(view: &CoreView<'_>, vhost: Option<&str>) -> Option<Vec<BindingJson>> {
    if vhost.is_some_and(|v| view.broker.vhost(v).is_none()) {
        return None;
    }
    let mut out = Vec::new();
    for (vname, v) in &view.broker.vhosts {
        if vhost.is_none_or(|want| want == vname) {
            vhost_bindings(vname, v, &mut out);
        }
    }
    Some(out)
}

async fn bindings_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<BindingJson>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let list = query(&state, |view| list_bindings(&view, None)).await?;
    let access = state.access();
    let mut list = list.unwrap_or_default();
    list.retain(|o| who.sees_vhost(&access, &o.vhost));
    Ok(Json(list))
}

async fn bindings_in(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<BindingJson>>, ApiError> {
    caller_for_vhost(&state, &headers, &vhost)?;
    query(&state, move |view| list_bindings(&view, Some(&vhost)))
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound)
}

/// Which end of a binding names an object.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    Source,
    Destination,
}

/// Bindings of a vhost that touch one named exchange or queue; None when
/// the vhost or that object does not exist.
fn bindings_of(
    view: &CoreView<'_>,
    vhost: &str,
    name: &str,
    end: End,
    destination_type: &'static str,
) -> Option<Vec<BindingJson>> {
    let exists = match destination_type {
        "queue" => view.broker.queue(vhost, name).is_some(),
        _ => view.broker.exchange(vhost, name).is_some(),
    };
    if !exists {
        return None;
    }
    let mut all = list_bindings(view, Some(vhost))?;
    all.retain(|b| match end {
        End::Source => b.source == name,
        End::Destination => b.destination == name && b.destination_type == destination_type,
    });
    Some(all)
}

async fn queue_bindings(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Vec<BindingJson>>, ApiError> {
    bindings_at(&state, &headers, vhost, name, End::Destination, "queue").await
}

async fn exchange_bindings_source(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Vec<BindingJson>>, ApiError> {
    let name = exchange_name(name);
    bindings_at(&state, &headers, vhost, name, End::Source, "exchange").await
}

async fn exchange_bindings_destination(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Vec<BindingJson>>, ApiError> {
    let name = exchange_name(name);
    bindings_at(&state, &headers, vhost, name, End::Destination, "exchange").await
}

/// The bindings at one end of a queue or exchange, for a caller allowed in
/// the vhost; 404 when the object does not exist.
async fn bindings_at(
    state: &AppState,
    headers: &HeaderMap,
    vhost: String,
    name: String,
    end: End,
    kind: &'static str,
) -> Result<Json<Vec<BindingJson>>, ApiError> {
    caller_for_vhost(state, headers, &vhost)?;
    query(state, move |view| {
        bindings_of(&view, &vhost, &name, end, kind)
    })
    .await?
    .map(Json)
    .ok_or(ApiError::NotFound)
}

/// The bindings from exchange `source` to queue (`q`) or exchange (`e`)
/// `dest`; None when either end is missing.
fn between(
    view: &CoreView<'_>,
    vhost: &str,
    source: &str,
    kind: &str,
    dest: &str,
) -> Option<Vec<BindingJson>> {
    view.broker.exchange(vhost, source)?;
    let destination_type = match kind {
        "q" => "queue",
        "e" => "exchange",
        _ => return None,
    };
    let mut list = bindings_of(view, vhost, dest, End::Destination, destination_type)?;
    list.retain(|b| b.source == source);
    Some(list)
}

async fn bindings_between(
    State(state): State<AppState>,
    Path((vhost, source, kind, dest)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> Result<Json<Vec<BindingJson>>, ApiError> {
    caller_for_vhost(&state, &headers, &vhost)?;
    let source = exchange_name(source);
    query(&state, move |view| {
        between(&view, &vhost, &source, &kind, &dest)
    })
    .await?
    .map(Json)
    .ok_or(ApiError::NotFound)
}

async fn binding_one(
    State(state): State<AppState>,
    Path((vhost, source, kind, dest, props)): Path<(String, String, String, String, String)>,
    headers: HeaderMap,
) -> Result<Json<BindingJson>, ApiError> {
    caller_for_vhost(&state, &headers, &vhost)?;
    let source = exchange_name(source);
    query(&state, move |view| {
        between(&view, &vhost, &source, &kind, &dest)?
            .into_iter()
            .find(|b| b.properties_key == props)
    })
    .await?
    .map(Json)
    .ok_or(ApiError::NotFound)
}
