//! Definitions in RabbitMQ's JSON format: `GET /api/definitions` exports,
//! `POST /api/definitions` imports (also per vhost), and
//! `stablemq serve --definitions FILE` imports at boot as RabbitMQ's
//! `load_definitions` does.
//!
//! An import becomes ordinary events, in RabbitMQ's order (users, vhosts,
//! permissions, topic permissions, queues, exchanges, bindings), submitted
//! to the master as one management write and answered once stable. Objects
//! that already exist are left as they are; items StableMQ cannot take
//! (runtime parameters of components it does not know, exchange types it
//! lacks) are listed in the answer and logged, never dropped silently.
//! Runtime parameters (vhost limits among them) and global parameters are
//! imported and exported as RabbitMQ does (`parameters.rs`). The document's
//! parsing into events is in `parse.rs`.

mod parse;
pub use parse::{load_file, parse};

use super::access::{PermissionJson, list_vhosts, permissions, topic_permissions, users};
use super::bindings::{BindingJson, list_bindings};
use super::json::Table;
use super::objects::kind_name;
use super::query::query;
use super::users_api::{admin, body_object};
use super::{Access, ApiError, AppState, RABBITMQ_COMPAT_VERSION, caller};
use crate::broker::event::Event;
use crate::broker::parameters::{LIMITS_NAME, VHOST_LIMITS};
use crate::master::admin::{AdminOp, AdminOutcome};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{Value, json};

/// The routes of this file.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/definitions", get(definitions_all).post(import_all))
        .route(
            "/api/definitions/{vhost}",
            get(definitions_in).post(import_in),
        )
}

/// A queue as definitions carry it.
#[derive(Debug, Serialize)]
struct QueueDef {
    name: String,
    vhost: String,
    durable: bool,
    auto_delete: bool,
    arguments: Table,
}

/// An exchange as definitions carry it.
#[derive(Debug, Serialize)]
struct ExchangeDef {
    name: String,
    vhost: String,
    #[serde(rename = "type")]
    kind: &'static str,
    durable: bool,
    auto_delete: bool,
    internal: bool,
    arguments: Table,
}

/// The objects of a definitions export, as the master task copies them.
#[derive(Default)]
struct Objects {
    queues: Vec<QueueDef>,
    exchanges: Vec<ExchangeDef>,
    bindings: Vec<BindingJson>,
}

/// What RabbitMQ exports: every queue but exclusive ones (they die with
/// their connection), every exchange but the predeclared ones, every
/// binding but the default exchange's implicit ones and those to exclusive
/// queues. None when `vhost` does not exist.
async fn objects(state: &AppState, vhost: Option<String>) -> Result<Option<Objects>, ApiError> {
    query(state, move |view| {
        let all = list_bindings(&view, vhost.as_deref())?;
        let mut o = Objects::default();
        let mut exclusive = std::collections::HashSet::new();
        for (vname, v) in &view.broker.vhosts {
            if vhost.as_ref().is_some_and(|want| want != vname) {
                continue;
            }
            let mut names: Vec<&String> = v.queues.keys().collect();
            names.sort();
            for name in names {
                let q = &v.queues[name];
                if q.spec.exclusive_owner.is_some() {
                    exclusive.insert((vname.clone(), name.clone()));
                    continue;
                }
                o.queues.push(QueueDef {
                    name: name.clone(),
                    vhost: vname.clone(),
                    durable: q.spec.durable,
                    auto_delete: q.spec.auto_delete,
                    arguments: Table(q.spec.arguments.clone()),
                });
            }
            let mut xs: Vec<_> = v.exchanges.values().collect();
            xs.sort_by(|a, b| a.name.cmp(&b.name));
            for x in xs {
                if x.name.is_empty() || x.name.starts_with("amq.") {
                    continue;
                }
                o.exchanges.push(ExchangeDef {
                    name: x.name.clone(),
                    vhost: vname.clone(),
                    kind: kind_name(x.spec.kind),
                    durable: x.spec.durable,
                    auto_delete: x.spec.auto_delete,
                    internal: x.spec.internal,
                    arguments: Table(x.spec.arguments.clone()),
                });
            }
        }
        o.bindings = all
            .into_iter()
            .filter(|b| !b.source.is_empty())
            .filter(|b| {
                b.destination_type != "queue"
                    || !exclusive.contains(&(b.vhost.clone(), b.destination.clone()))
            })
            .collect();
        Some(o)
    })
    .await
}

/// Policies as definitions carry them, by vhost then name.
async fn policies(state: &AppState, vhost: Option<String>) -> Result<Vec<Value>, ApiError> {
    query(state, move |view| {
        let mut out = Vec::new();
        for (vname, v) in &view.broker.vhosts {
            if vhost.as_ref().is_some_and(|want| want != vname) {
                continue;
            }
            for p in v.policies.values() {
                out.push(json!({
                    "vhost": vname,
                    "name": p.name,
                    "pattern": p.pattern,
                    "apply-to": p.apply_to.as_str(),
                    "definition": p.definition,
                    "priority": p.priority,
                }));
            }
        }
        out
    })
    .await
}

/// A binding as definitions carry it (no `properties_key`).
fn binding_def(b: BindingJson) -> Value {
    json!({
        "source": b.source,
        "vhost": b.vhost,
        "destination": b.destination,
        "destination_type": b.destination_type,
        "routing_key": b.routing_key,
        "arguments": b.arguments,
    })
}

/// `GET /api/definitions`: the whole broker in RabbitMQ's definitions
/// format, importable by RabbitMQ (`rabbitmqctl import_definitions`).
async fn definitions_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let o = objects(&state, None).await?.unwrap_or_default();
    let params = super::parameters::rows(&state, None, None)
        .await?
        .unwrap_or_default();
    let limits_of = |vhost: &str| {
        params
            .iter()
            .find(|p| p.vhost == vhost && p.component == VHOST_LIMITS && p.name == LIMITS_NAME)
            .map_or(json!([]), |p| p.value.clone())
    };
    let vhosts: Vec<Value> = list_vhosts(&state)
        .await?
        .into_iter()
        .map(|v| json!({"name": v.name, "limits": limits_of(&v.name), "metadata": v.metadata}))
        .collect();
    let globals: Vec<Value> = super::parameters::global_rows(&state)
        .await?
        .into_iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    let t = state.access();
    let perms: Vec<PermissionJson> = permissions(&t);
    Ok(Json(json!({
        "rabbit_version": RABBITMQ_COMPAT_VERSION,
        "rabbitmq_version": RABBITMQ_COMPAT_VERSION,
        "product_name": "StableMQ",
        "product_version": env!("CARGO_PKG_VERSION"),
        "users": users(&t),
        "vhosts": vhosts,
        "permissions": perms,
        "topic_permissions": topic_permissions(&t),
        "parameters": params.iter().map(|p| p.to_json()).collect::<Vec<_>>(),
        "global_parameters": globals,
        "policies": policies(&state, None).await?,
        "queues": o.queues,
        "exchanges": o.exchanges,
        "bindings": o.bindings.into_iter().map(binding_def).collect::<Vec<_>>(),
    })))
}

/// `GET /api/definitions/{vhost}`: one vhost's objects, without vhost
/// fields, as RabbitMQ exports a single vhost (and, like RabbitMQ, 400 for
/// a vhost that does not exist).
async fn definitions_in(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let policies = policies(&state, Some(vhost.clone())).await?;
    let params = super::parameters::rows(&state, None, Some(vhost.clone()))
        .await?
        .unwrap_or_default();
    let o = objects(&state, Some(vhost))
        .await?
        .ok_or_else(|| ApiError::BadRequest("vhost_not_found".into()))?;
    let strip = |mut v: Value| {
        if let Some(m) = v.as_object_mut() {
            m.remove("vhost");
        }
        v
    };
    let to_values = |items: Vec<Value>| items.into_iter().map(strip).collect::<Vec<_>>();
    let queues = to_values(o.queues.iter().map(|q| json!(q)).collect());
    let exchanges = to_values(o.exchanges.iter().map(|x| json!(x)).collect());
    let bindings = to_values(o.bindings.into_iter().map(binding_def).collect());
    Ok(Json(json!({
        "rabbit_version": RABBITMQ_COMPAT_VERSION,
        "rabbitmq_version": RABBITMQ_COMPAT_VERSION,
        "product_name": "StableMQ",
        "product_version": env!("CARGO_PKG_VERSION"),
        // RabbitMQ 3.10 keeps the vhost field on parameters here.
        "parameters": params.iter().map(|p| p.to_json()).collect::<Vec<_>>(),
        "policies": to_values(policies),
        "queues": queues,
        "exchanges": exchanges,
        "bindings": bindings,
    })))
}

/// `POST /api/definitions`.
async fn import_all(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let who = caller(&state, &headers, Access::Administrator)?;
    let doc = Value::Object(body_object(&body)?);
    let (events, not_imported) = parse(&doc, None).map_err(ApiError::BadRequest)?;
    let existing: std::collections::HashSet<String> =
        query(&state, |view| view.broker.vhosts.keys().cloned().collect()).await?;
    let events = grant_creator(events, &existing, &who.name);
    import(&state, events, not_imported).await
}

/// As RabbitMQ does for an import through the API, the importing user gets
/// full permissions on each vhost the import creates (right after it, so
/// permissions in the file still have the last word). A boot import has no
/// such user.
fn grant_creator(
    events: Vec<Event>,
    existing: &std::collections::HashSet<String>,
    user: &str,
) -> Vec<Event> {
    let mut out = Vec::with_capacity(events.len());
    for ev in events {
        let new_vhost = match &ev {
            Event::VhostCreated { vhost } if !existing.contains(vhost) => Some(vhost.clone()),
            _ => None,
        };
        out.push(ev);
        if let Some(vhost) = new_vhost {
            out.push(Event::PermissionSet {
                user: user.to_string(),
                vhost,
                configure: ".*".into(),
                write: ".*".into(),
                read: ".*".into(),
            });
        }
    }
    out
}

/// `POST /api/definitions/{vhost}`: queues, exchanges and bindings (and
/// policies) into one existing vhost; entries carry no vhost field.
async fn import_in(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let v = vhost.clone();
    if !query(&state, move |view| view.broker.vhost(&v).is_some()).await? {
        return Err(ApiError::NotFound);
    }
    let doc = Value::Object(body_object(&body)?);
    let (events, not_imported) = parse(&doc, Some(&vhost)).map_err(ApiError::BadRequest)?;
    import(&state, events, not_imported).await
}

/// Submit the events; 204 when everything was imported, else 200 with the
/// list of what was not (RabbitMQ has no such answer: it fails or succeeds;
/// StableMQ says what it skipped rather than drop it silently).
async fn import(
    state: &AppState,
    events: Vec<Event>,
    mut not_imported: Vec<String>,
) -> Result<Response, ApiError> {
    for n in &not_imported {
        tracing::warn!("definitions import: {n}");
    }
    if let AdminOutcome::Imported { skipped } = admin(state, AdminOp::Import { events }).await? {
        not_imported.extend(skipped);
    }
    if not_imported.is_empty() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    Ok((StatusCode::OK, Json(json!({"not_imported": not_imported}))).into_response())
}
