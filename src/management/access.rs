//! Vhosts, users, permissions and topic permissions: `/api/vhosts`,
//! `/api/users`, `/api/permissions`, `/api/topic-permissions` and their
//! relatives, read side (writes are in `users_api`, on the same routes).
//!
//! Users and permissions are the replicated access table
//! ([`crate::users`]), read from the master task's latest snapshot; vhosts
//! come from the broker state, with their metadata. Policies and parameters
//! list empty here until their own module serves them.

use super::query::query;
use super::users_api;
use super::{Access, ApiError, AppState, caller};
use crate::users::AccessTable;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{Value, json};

/// The routes of this file, with the writes of `users_api` on the same paths.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/vhosts", get(vhosts_all))
        .route(
            "/api/vhosts/{vhost}",
            get(vhost_one)
                .put(users_api::put_vhost)
                .delete(users_api::delete_vhost),
        )
        .route("/api/vhosts/{vhost}/permissions", get(vhost_permissions))
        .route(
            "/api/vhosts/{vhost}/topic-permissions",
            get(vhost_topic_permissions),
        )
        .route("/api/users", get(users_all))
        .route(
            "/api/users/bulk-delete",
            axum::routing::post(users_api::bulk_delete),
        )
        .route(
            "/api/users/without-permissions",
            get(users_without_permissions),
        )
        .route(
            "/api/users/{name}",
            get(user_one)
                .put(users_api::put_user)
                .delete(users_api::delete_user),
        )
        .route("/api/users/{name}/permissions", get(user_permissions))
        .route(
            "/api/users/{name}/topic-permissions",
            get(user_topic_permissions),
        )
        .route("/api/permissions", get(permissions_all))
        .route(
            "/api/permissions/{vhost}/{user}",
            get(permission_one)
                .put(users_api::put_permission)
                .delete(users_api::delete_permission),
        )
        .route("/api/topic-permissions", get(topic_permissions_all))
        .route(
            "/api/topic-permissions/{vhost}/{user}",
            get(topic_permission_one)
                .put(users_api::put_topic_permission)
                .delete(users_api::delete_topic_permission),
        )
}

/// One vhost with its message counts.
#[derive(Debug, Serialize)]
pub(super) struct VhostJson {
    pub(super) name: String,
    pub(super) description: String,
    pub(super) tags: Vec<String>,
    pub(super) default_queue_type: String,
    pub(super) metadata: Value,
    tracing: bool,
    cluster_state: Value,
    messages: usize,
    messages_ready: usize,
    messages_unacknowledged: usize,
}

/// Every vhost, by name.
pub(super) async fn list_vhosts(state: &AppState) -> Result<Vec<VhostJson>, ApiError> {
    let node = state.node().to_string();
    query(state, move |view| {
        let meta = &view.broker.access.vhost_meta;
        view.broker
            .vhosts
            .iter()
            .map(|(name, v)| {
                let ready: usize = v.queues.values().map(|q| q.ready.len()).sum();
                let unacked: usize = v.queues.values().map(|q| q.unacked.len()).sum();
                let m = meta.get(name).cloned().unwrap_or_default();
                let dqt = m
                    .default_queue_type
                    .clone()
                    .unwrap_or_else(|| "undefined".into());
                let mut metadata = json!({"description": m.description, "tags": m.tags});
                if let Some(t) = &m.default_queue_type {
                    metadata["default_queue_type"] = json!(t);
                }
                VhostJson {
                    name: name.clone(),
                    description: m.description,
                    tags: m.tags,
                    default_queue_type: dqt,
                    metadata,
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

/// Administrators and monitoring users see every vhost; others the vhosts
/// they have permissions in, as in RabbitMQ.
async fn vhosts_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<VhostJson>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let access = state.access();
    let all = list_vhosts(&state).await?;
    Ok(Json(
        all.into_iter()
            .filter(|v| {
                who.access >= Access::Monitoring || access.may_use_vhost(&who.name, &v.name)
            })
            .collect(),
    ))
}

async fn vhost_one(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<VhostJson>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    if who.access < Access::Monitoring && !state.access().may_use_vhost(&who.name, &vhost) {
        return Err(ApiError::NotFound);
    }
    list_vhosts(&state)
        .await?
        .into_iter()
        .find(|v| v.name == vhost)
        .map(Json)
        .ok_or(ApiError::NotFound)
}

/// One user with its password hash, as RabbitMQ lists and exports users.
#[derive(Debug, Serialize)]
pub(super) struct UserJson {
    pub(super) name: String,
    pub(super) password_hash: String,
    pub(super) hashing_algorithm: &'static str,
    pub(super) tags: Vec<String>,
    pub(super) limits: Value,
}

/// Every user, by name.
pub(super) fn users(t: &AccessTable) -> Vec<UserJson> {
    t.users
        .values()
        .map(|u| UserJson {
            name: u.name.clone(),
            password_hash: u.password_hash.clone(),
            hashing_algorithm: u.hashing_algorithm.name(),
            tags: u.tags.clone(),
            limits: Value::Object(t.user_limits_of(&u.name)),
        })
        .collect()
}

async fn users_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<UserJson>>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    Ok(Json(users(&state.access())))
}

async fn users_without_permissions(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<UserJson>>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let t = state.access();
    Ok(Json(
        users(&t)
            .into_iter()
            .filter(|u| !t.permissions.contains_key(&u.name))
            .collect(),
    ))
}

async fn user_one(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<UserJson>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    users(&state.access())
        .into_iter()
        .find(|u| u.name == name)
        .map(Json)
        .ok_or(ApiError::NotFound)
}

/// A user's rights on a vhost.
#[derive(Debug, Serialize)]
pub(super) struct PermissionJson {
    pub(super) user: String,
    pub(super) vhost: String,
    pub(super) configure: String,
    pub(super) write: String,
    pub(super) read: String,
}

/// Every permission, by user then vhost.
pub(super) fn permissions(t: &AccessTable) -> Vec<PermissionJson> {
    let mut out = Vec::new();
    for (user, per_vhost) in &t.permissions {
        for (vhost, p) in per_vhost {
            out.push(PermissionJson {
                user: user.clone(),
                vhost: vhost.clone(),
                configure: p.configure.source.clone(),
                write: p.write.source.clone(),
                read: p.read.source.clone(),
            });
        }
    }
    out
}

async fn permissions_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<PermissionJson>>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    Ok(Json(permissions(&state.access())))
}

async fn permission_one(
    State(state): State<AppState>,
    Path((vhost, user)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<PermissionJson>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    permissions(&state.access())
        .into_iter()
        .find(|p| p.vhost == vhost && p.user == user)
        .map(Json)
        .ok_or(ApiError::NotFound)
}

/// 404 unless the vhost exists.
async fn vhost_exists(state: &AppState, vhost: &str) -> Result<(), ApiError> {
    let v = vhost.to_string();
    if query(state, move |view| view.broker.vhost(&v).is_some()).await? {
        Ok(())
    } else {
        Err(ApiError::NotFound)
    }
}

async fn vhost_permissions(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<PermissionJson>>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    vhost_exists(&state, &vhost).await?;
    let all = permissions(&state.access());
    Ok(Json(all.into_iter().filter(|p| p.vhost == vhost).collect()))
}

async fn user_permissions(
    State(state): State<AppState>,
    Path(user): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<PermissionJson>>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let t = state.access();
    if !t.users.contains_key(&user) {
        return Err(ApiError::NotFound);
    }
    Ok(Json(
        permissions(&t)
            .into_iter()
            .filter(|p| p.user == user)
            .collect(),
    ))
}

/// A user's topic rights on one exchange.
#[derive(Debug, Serialize)]
pub(super) struct TopicPermissionJson {
    pub(super) user: String,
    pub(super) vhost: String,
    pub(super) exchange: String,
    pub(super) write: String,
    pub(super) read: String,
}

/// Every topic permission, by user, vhost, exchange.
pub(super) fn topic_permissions(t: &AccessTable) -> Vec<TopicPermissionJson> {
    let mut out = Vec::new();
    for (user, per_vhost) in &t.topic_permissions {
        for (vhost, per_x) in per_vhost {
            for (exchange, p) in per_x {
                out.push(TopicPermissionJson {
                    user: user.clone(),
                    vhost: vhost.clone(),
                    exchange: exchange.clone(),
                    write: p.write.source.clone(),
                    read: p.read.source.clone(),
                });
            }
        }
    }
    out
}

async fn topic_permissions_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<TopicPermissionJson>>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    Ok(Json(topic_permissions(&state.access())))
}

async fn topic_permission_one(
    State(state): State<AppState>,
    Path((vhost, user)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Vec<TopicPermissionJson>>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let all: Vec<_> = topic_permissions(&state.access())
        .into_iter()
        .filter(|p| p.vhost == vhost && p.user == user)
        .collect();
    if all.is_empty() {
        return Err(ApiError::NotFound);
    }
    Ok(Json(all))
}

async fn vhost_topic_permissions(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<TopicPermissionJson>>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    vhost_exists(&state, &vhost).await?;
    let all = topic_permissions(&state.access());
    Ok(Json(all.into_iter().filter(|p| p.vhost == vhost).collect()))
}

async fn user_topic_permissions(
    State(state): State<AppState>,
    Path(user): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<TopicPermissionJson>>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let t = state.access();
    if !t.users.contains_key(&user) {
        return Err(ApiError::NotFound);
    }
    Ok(Json(
        topic_permissions(&t)
            .into_iter()
            .filter(|p| p.user == user)
            .collect(),
    ))
}
