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
//! imported and exported as RabbitMQ does (`parameters.rs`).

use super::access::{PermissionJson, list_vhosts, permissions, topic_permissions, users};
use super::json::Table;
use super::objects::{BindingJson, kind_name, list_bindings};
use super::query::query;
use super::users_api::{admin, body_object, regex, tags, topic_regex, user_fields};
use super::{Access, ApiError, AppState, RABBITMQ_COMPAT_VERSION, caller};
use crate::broker::event::{Binding, Destination, Event, ExchangeKind, ExchangeSpec, QueueSpec};
use crate::broker::parameters::{LIMITS_NAME, VHOST_LIMITS};
use crate::master::admin::{AdminOp, AdminOutcome};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{Map, Value, json};
use stablemq_protocol::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};

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

/// Read a definitions file for `serve --definitions`.
pub fn load_file(path: &std::path::Path) -> Result<(Vec<Event>, Vec<String>), String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let doc: Value = serde_json::from_slice(&text)
        .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    parse(&doc, None)
}

/// Turn a definitions document into events, in import order, and the list
/// of entries StableMQ does not import. `only_vhost` is the per-vhost form:
/// entries carry no vhost and users, vhosts and permissions are ignored.
/// A malformed entry fails the whole import (400), as in RabbitMQ.
pub fn parse(doc: &Value, only_vhost: Option<&str>) -> Result<(Vec<Event>, Vec<String>), String> {
    let mut events = Vec::new();
    let mut not_imported = Vec::new();
    let list = |key: &str| -> Result<Vec<&Map<String, Value>>, String> {
        match doc.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_object()
                        .ok_or(format!("'{key}' entries must be objects"))
                })
                .collect(),
            Some(_) => Err(format!("'{key}' must be a list")),
        }
    };
    let s = |m: &Map<String, Value>, k: &str| -> Result<String, String> {
        m.get(k)
            .and_then(Value::as_str)
            .map(String::from)
            .ok_or(format!(
                "missing or invalid '{k}' in {}",
                Value::Object(m.clone())
            ))
    };
    let vhost_of = |m: &Map<String, Value>| -> Result<String, String> {
        match only_vhost {
            Some(v) => Ok(v.to_string()),
            None => s(m, "vhost"),
        }
    };
    let b = |m: &Map<String, Value>, k: &str, default: bool| -> bool {
        match m.get(k) {
            Some(Value::Bool(x)) => *x,
            Some(Value::String(x)) => x == "true",
            _ => default,
        }
    };
    if only_vhost.is_none() {
        for u in list("users")? {
            let (password_hash, hashing_algorithm, tags) = user_fields(u)
                .map_err(|e| format!("user {}: {e:?}", s(u, "name").unwrap_or_default()))?;
            events.push(Event::UserPut {
                name: s(u, "name")?,
                password_hash,
                hashing_algorithm,
                tags,
            });
        }
        for v in list("vhosts")? {
            let name = s(v, "name")?;
            let meta = v.get("metadata").and_then(Value::as_object);
            let get = |k: &str| v.get(k).or_else(|| meta.and_then(|m| m.get(k)));
            events.push(Event::VhostCreated {
                vhost: name.clone(),
            });
            events.push(Event::VhostMetadata {
                vhost: name,
                description: get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                tags: tags(get("tags")).map_err(|e| format!("vhost tags: {e:?}"))?,
                default_queue_type: get("default_queue_type")
                    .and_then(Value::as_str)
                    .map(String::from),
            });
            // RabbitMQ exports the limits here and among the parameters;
            // `[]` is its empty list.
            if let Some(l @ Value::Object(o)) = v.get("limits")
                && !o.is_empty()
            {
                let vhost = s(v, "name")?;
                let ev = super::parameters::parameter_event(&vhost, VHOST_LIMITS, LIMITS_NAME, l)
                    .map_err(|e| format!("limits of vhost '{vhost}': {e}"))?;
                events.push(ev);
            }
        }
        for p in list("permissions")? {
            let re = |k: &str| s(p, k).and_then(|x| regex(&x).map_err(|e| format!("{e:?}")));
            events.push(Event::PermissionSet {
                user: s(p, "user")?,
                vhost: s(p, "vhost")?,
                configure: re("configure")?,
                write: re("write")?,
                read: re("read")?,
            });
        }
        for p in list("topic_permissions")? {
            let re = |k: &str| s(p, k).and_then(|x| topic_regex(&x).map_err(|e| format!("{e:?}")));
            events.push(Event::TopicPermissionSet {
                user: s(p, "user")?,
                vhost: s(p, "vhost")?,
                exchange: s(p, "exchange")?,
                write: re("write")?,
                read: re("read")?,
            });
        }
        for g in list("global_parameters")? {
            // Every one, internal_cluster_id and cluster_name included:
            // RabbitMQ 3.10's import replaces its own with the file's.
            let value = g.get("value").cloned().unwrap_or(Value::Null);
            events.push(Event::GlobalParameterSet {
                name: s(g, "name")?,
                value: value.to_string(),
            });
        }
    }
    for p in list("parameters")? {
        let (vhost, component, name) = (vhost_of(p)?, s(p, "component")?, s(p, "name")?);
        let value = p.get("value").cloned().unwrap_or(Value::Null);
        match super::parameters::parameter_event(&vhost, &component, &name, &value) {
            Ok(ev) => events.push(ev),
            // A component of a plugin StableMQ lacks: said, not dropped silently.
            Err(e) => not_imported.push(format!(
                "parameter '{name}' of component '{component}' in vhost '{vhost}': {}",
                e.to_string().trim()
            )),
        }
    }
    // Before queues and exchanges, as RabbitMQ orders it, so they are
    // declared with their policy in place.
    for p in list("policies")? {
        let name = s(p, "name")?;
        let vhost = vhost_of(p)?;
        let ev = super::policies::policy_event(&vhost, &name, p)
            .map_err(|e| format!("policy '{name}' in vhost '{vhost}': {}", e.0))?;
        events.push(ev);
    }
    for q in list("queues")? {
        events.push(Event::QueueDeclared {
            vhost: vhost_of(q)?,
            name: s(q, "name")?,
            spec: QueueSpec {
                durable: b(q, "durable", true),
                auto_delete: b(q, "auto_delete", false),
                exclusive_owner: None,
                arguments: arguments(q.get("arguments"))?,
            },
        });
    }
    for x in list("exchanges")? {
        let name = s(x, "name")?;
        let kind_text = s(x, "type")?;
        let Some(kind) = ExchangeKind::parse(&kind_text) else {
            not_imported.push(format!(
                "exchange '{name}' in vhost '{}': type '{kind_text}' is not supported",
                vhost_of(x)?
            ));
            continue;
        };
        if name.is_empty() || name.starts_with("amq.") {
            continue;
        }
        events.push(Event::ExchangeDeclared {
            vhost: vhost_of(x)?,
            name,
            spec: ExchangeSpec {
                kind,
                durable: b(x, "durable", true),
                auto_delete: b(x, "auto_delete", false),
                internal: b(x, "internal", false),
                arguments: arguments(x.get("arguments"))?,
            },
        });
    }
    for bd in list("bindings")? {
        let dest = s(bd, "destination")?;
        let destination = match s(bd, "destination_type")?.as_str() {
            "queue" => Destination::Queue(dest),
            "exchange" => Destination::Exchange(dest),
            other => return Err(format!("invalid destination_type '{other}'")),
        };
        events.push(Event::Bound {
            vhost: vhost_of(bd)?,
            binding: Binding {
                source: s(bd, "source")?,
                destination,
                routing_key: s(bd, "routing_key").unwrap_or_default(),
                arguments: arguments(bd.get("arguments"))?,
            },
        });
    }
    Ok((events, not_imported))
}

/// JSON arguments as an AMQP table, as RabbitMQ's management plugin reads
/// them: integers become signed 64-bit, other numbers doubles, strings long
/// strings, lists arrays, objects tables.
fn arguments(v: Option<&Value>) -> Result<FieldTable, String> {
    match v {
        None | Some(Value::Null) => Ok(FieldTable::default()),
        Some(Value::Object(m)) => {
            let mut t = FieldTable::default();
            for (k, v) in m {
                t.insert(ShortString::from(k.as_str()), amqp_value(v));
            }
            Ok(t)
        }
        Some(other) => Err(format!("arguments must be an object, got {other}")),
    }
}

fn amqp_value(v: &Value) -> AMQPValue {
    match v {
        Value::Null => AMQPValue::Void,
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => AMQPValue::LongLongInt(i),
            None => AMQPValue::Double(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => AMQPValue::LongString(LongString::from(s.as_str())),
        Value::Array(a) => {
            let mut arr = FieldArray::default();
            for x in a {
                arr.push(amqp_value(x));
            }
            AMQPValue::FieldArray(arr)
        }
        Value::Object(_) => match arguments(Some(v)) {
            Ok(t) => AMQPValue::FieldTable(t),
            Err(_) => AMQPValue::Void,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rabbitmq_export_parses_in_import_order() {
        let doc = json!({
            "rabbit_version": "3.10.8",
            "users": [{"name": "u", "password_hash": "VA8YUP5eIyCJ+fy2FIB8Xh7iw0jHB8SKyFLVC6eHQ0swaZqk",
                       "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["management"], "limits": {}}],
            "vhosts": [{"name": "v", "limits": [], "metadata": {"description": "d", "tags": ["t"]}}],
            "permissions": [{"user": "u", "vhost": "v", "configure": ".*", "write": "", "read": "^q"}],
            "topic_permissions": [{"user": "u", "vhost": "v", "exchange": "amq.topic", "write": "^a", "read": ".*"}],
            "parameters": [],
            "global_parameters": [{"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-x"}],
            "policies": [{"vhost": "v", "name": "p", "pattern": ".*", "apply-to": "queues", "definition": {"max-length": 10}, "priority": 0}],
            "queues": [{"name": "q", "vhost": "v", "durable": true, "auto_delete": false,
                        "arguments": {"x-max-length": 10, "x-queue-type": "classic"}}],
            "exchanges": [{"name": "x", "vhost": "v", "type": "topic", "durable": true, "auto_delete": false,
                           "internal": false, "arguments": {}},
                          {"name": "d", "vhost": "v", "type": "x-delayed-message", "durable": true,
                           "auto_delete": false, "internal": false, "arguments": {}}],
            "bindings": [{"source": "x", "vhost": "v", "destination": "q", "destination_type": "queue",
                          "routing_key": "a.#", "arguments": {}}]
        });
        let (events, skipped) = parse(&doc, None).expect("parses");
        assert!(matches!(events[0], Event::UserPut { .. }));
        assert!(matches!(events[1], Event::VhostCreated { .. }));
        assert!(matches!(events.last(), Some(Event::Bound { .. })));
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        let q = events
            .iter()
            .find_map(|e| match e {
                Event::QueueDeclared { spec, .. } => Some(spec.clone()),
                _ => None,
            })
            .expect("queue");
        assert_eq!(
            q.arguments.inner().get("x-max-length"),
            Some(&AMQPValue::LongLongInt(10))
        );
        assert!(parse(&json!({"queues": [{"vhost": "v"}]}), None).is_err());
        assert!(parse(&json!({"permissions": [{"user": "u", "vhost": "v", "configure": "(", "write": "", "read": ""}]}), None).is_err());
    }
}
