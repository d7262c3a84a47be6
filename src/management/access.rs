//! Vhosts, users, permissions and the definitions export: `/api/vhosts`,
//! `/api/users`, `/api/permissions`, `/api/definitions` and their relatives.
//!
//! Users come from the config file today, and permissions are not enforced
//! yet: every user may use every vhost. The API says exactly that, listing
//! `.*` for configure, write and read on every (user, vhost) pair, so a
//! definitions export imported into RabbitMQ grants what StableMQ allows.
//! Policies and parameters do not exist yet and list empty.

use super::json::Table;
use super::objects::{BindingJson, kind_name, list_bindings};
use super::query::query;
use super::{Access, ApiError, AppState, RABBITMQ_COMPAT_VERSION, caller};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine;
use rand::Rng;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The routes of this file.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/vhosts", get(vhosts_all))
        .route("/api/vhosts/{vhost}", get(vhost_one))
        .route("/api/vhosts/{vhost}/permissions", get(vhost_permissions))
        .route(
            "/api/vhosts/{vhost}/topic-permissions",
            get(empty_list_admin),
        )
        .route("/api/users", get(users_all))
        .route("/api/users/without-permissions", get(empty_list_admin))
        .route("/api/users/{name}", get(user_one))
        .route("/api/users/{name}/permissions", get(user_permissions))
        .route("/api/users/{name}/topic-permissions", get(empty_list_admin))
        .route("/api/permissions", get(permissions_all))
        .route("/api/permissions/{vhost}/{user}", get(permission_one))
        .route("/api/topic-permissions", get(empty_list_admin))
        .route("/api/policies", get(empty_list))
        .route("/api/policies/{vhost}", get(empty_list))
        .route("/api/operator-policies", get(empty_list))
        .route("/api/parameters", get(empty_list))
        .route("/api/global-parameters", get(empty_list_admin))
        .route("/api/definitions", get(definitions_all))
        .route("/api/definitions/{vhost}", get(definitions_in))
}

/// A password in RabbitMQ's `rabbit_password_hashing_sha256` format:
/// base64 of a 4-byte random salt followed by SHA-256(salt + password).
pub fn rabbit_sha256_hash(password: &str) -> String {
    let salt: [u8; 4] = rand::rng().random();
    let digest = Sha256::new()
        .chain_update(salt)
        .chain_update(password.as_bytes())
        .finalize();
    let mut bytes = salt.to_vec();
    bytes.extend_from_slice(&digest);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// For objects that do not exist yet (policies, parameters): the empty
/// list RabbitMQ gives when there are none.
async fn empty_list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<Value>>, ApiError> {
    caller(&state.config, &headers, Access::Management)?;
    Ok(Json(Vec::new()))
}

/// As [`empty_list`], for lists only administrators may read.
async fn empty_list_admin(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<Value>>, ApiError> {
    caller(&state.config, &headers, Access::Administrator)?;
    Ok(Json(Vec::new()))
}

/// One vhost with its message counts.
#[derive(Debug, Serialize)]
struct VhostJson {
    name: String,
    description: String,
    tags: Vec<String>,
    default_queue_type: &'static str,
    metadata: Value,
    tracing: bool,
    cluster_state: Value,
    messages: usize,
    messages_ready: usize,
    messages_unacknowledged: usize,
}

async fn list_vhosts(state: &AppState) -> Result<Vec<VhostJson>, ApiError> {
    let node = state.node().to_string();
    query(state, move |view| {
        view.broker
            .vhosts
            .iter()
            .map(|(name, v)| {
                let ready: usize = v.queues.values().map(|q| q.ready.len()).sum();
                let unacked: usize = v.queues.values().map(|q| q.unacked.len()).sum();
                // RabbitMQ describes the vhost it creates at first boot so.
                let description = if name == "/" {
                    "Default virtual host"
                } else {
                    ""
                };
                VhostJson {
                    name: name.clone(),
                    description: description.to_string(),
                    tags: Vec::new(),
                    default_queue_type: "undefined",
                    metadata: json!({"description": description, "tags": []}),
                    tracing: false,
                    cluster_state: json!({ node.as_str(): "running" }),
                    messages: ready + unacked,
                    messages_ready: ready,
                    messages_unacknowledged: unacked,
                }
            })
            .collect()
    })
    .await
}

async fn vhosts_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<VhostJson>>, ApiError> {
    caller(&state.config, &headers, Access::Management)?;
    Ok(Json(list_vhosts(&state).await?))
}

async fn vhost_one(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<VhostJson>, ApiError> {
    caller(&state.config, &headers, Access::Management)?;
    list_vhosts(&state)
        .await?
        .into_iter()
        .find(|v| v.name == vhost)
        .map(Json)
        .ok_or(ApiError::NotFound)
}

/// One user with its password hash, as RabbitMQ lists and exports users.
#[derive(Debug, Serialize)]
struct UserJson {
    name: String,
    password_hash: String,
    hashing_algorithm: &'static str,
    tags: Vec<String>,
    limits: Value,
}

fn users(state: &AppState) -> Vec<UserJson> {
    state
        .config
        .users
        .iter()
        .zip(state.password_hashes.iter())
        .map(|(u, hash)| UserJson {
            name: u.name.clone(),
            password_hash: hash.clone(),
            hashing_algorithm: "rabbit_password_hashing_sha256",
            tags: u.tags.clone(),
            limits: json!({}),
        })
        .collect()
}

async fn users_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<UserJson>>, ApiError> {
    caller(&state.config, &headers, Access::Administrator)?;
    Ok(Json(users(&state)))
}

async fn user_one(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<UserJson>, ApiError> {
    caller(&state.config, &headers, Access::Administrator)?;
    users(&state)
        .into_iter()
        .find(|u| u.name == name)
        .map(Json)
        .ok_or(ApiError::NotFound)
}

/// A user's rights on a vhost.
#[derive(Debug, Serialize)]
struct PermissionJson {
    user: String,
    vhost: String,
    configure: &'static str,
    write: &'static str,
    read: &'static str,
}

/// Every (user, vhost) pair, by user then vhost; `.*` everywhere, since
/// nothing is refused yet.
async fn permissions(state: &AppState) -> Result<Vec<PermissionJson>, ApiError> {
    let vhosts: Vec<String> =
        query(state, |view| view.broker.vhosts.keys().cloned().collect()).await?;
    let mut out = Vec::new();
    for u in &state.config.users {
        for v in &vhosts {
            out.push(PermissionJson {
                user: u.name.clone(),
                vhost: v.clone(),
                configure: ".*",
                write: ".*",
                read: ".*",
            });
        }
    }
    Ok(out)
}

async fn permissions_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<PermissionJson>>, ApiError> {
    caller(&state.config, &headers, Access::Administrator)?;
    Ok(Json(permissions(&state).await?))
}

async fn permission_one(
    State(state): State<AppState>,
    Path((vhost, user)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<PermissionJson>, ApiError> {
    caller(&state.config, &headers, Access::Administrator)?;
    permissions(&state)
        .await?
        .into_iter()
        .find(|p| p.vhost == vhost && p.user == user)
        .map(Json)
        .ok_or(ApiError::NotFound)
}

async fn vhost_permissions(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<PermissionJson>>, ApiError> {
    caller(&state.config, &headers, Access::Administrator)?;
    let all = permissions(&state).await?;
    if !all.iter().any(|p| p.vhost == vhost) {
        return Err(ApiError::NotFound);
    }
    Ok(Json(all.into_iter().filter(|p| p.vhost == vhost).collect()))
}

async fn user_permissions(
    State(state): State<AppState>,
    Path(user): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<PermissionJson>>, ApiError> {
    caller(&state.config, &headers, Access::Administrator)?;
    if !state.config.users.iter().any(|u| u.name == user) {
        return Err(ApiError::NotFound);
    }
    let all = permissions(&state).await?;
    Ok(Json(all.into_iter().filter(|p| p.user == user).collect()))
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
        let mut queues = Vec::new();
        let mut exchanges = Vec::new();
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
                queues.push(QueueDef {
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
                exchanges.push(ExchangeDef {
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
        let bindings = all
            .into_iter()
            .filter(|b| !b.source.is_empty())
            .filter(|b| {
                b.destination_type != "queue"
                    || !exclusive.contains(&(b.vhost.clone(), b.destination.clone()))
            })
            .collect();
        Some(Objects {
            queues,
            exchanges,
            bindings,
        })
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
    caller(&state.config, &headers, Access::Administrator)?;
    let o = objects(&state, None).await?.unwrap_or(Objects {
        queues: Vec::new(),
        exchanges: Vec::new(),
        bindings: Vec::new(),
    });
    let vhosts: Vec<Value> = list_vhosts(&state)
        .await?
        .into_iter()
        .map(|v| json!({"name": v.name}))
        .collect();
    Ok(Json(json!({
        "rabbit_version": RABBITMQ_COMPAT_VERSION,
        "rabbitmq_version": RABBITMQ_COMPAT_VERSION,
        "product_name": "StableMQ",
        "product_version": env!("CARGO_PKG_VERSION"),
        "users": users(&state),
        "vhosts": vhosts,
        "permissions": permissions(&state).await?,
        "topic_permissions": [],
        "parameters": [],
        "global_parameters": [],
        "policies": [],
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
    caller(&state.config, &headers, Access::Administrator)?;
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
        "parameters": [],
        "policies": [],
        "queues": queues,
        "exchanges": exchanges,
        "bindings": bindings,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_hash_is_rabbitmq_sha256() {
        let encoded = rabbit_sha256_hash("secret");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&encoded)
            .expect("base64");
        assert_eq!(bytes.len(), 4 + 32);
        let (salt, digest) = bytes.split_at(4);
        let expected = Sha256::new()
            .chain_update(salt)
            .chain_update(b"secret")
            .finalize();
        assert_eq!(digest, expected.as_slice());
        assert_ne!(encoded, rabbit_sha256_hash("secret"), "salted");
        // The same layout as a hash RabbitMQ 3.10 made for guest/guest.
        let rabbit = base64::engine::general_purpose::STANDARD
            .decode("VA8YUP5eIyCJ+fy2FIB8Xh7iw0jHB8SKyFLVC6eHQ0swaZqk")
            .expect("base64");
        let (salt, digest) = rabbit.split_at(4);
        let ours = Sha256::new()
            .chain_update(salt)
            .chain_update(b"guest")
            .finalize();
        assert_eq!(digest, ours.as_slice());
    }
}
