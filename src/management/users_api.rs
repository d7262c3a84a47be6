//! Management writes for users, vhosts, permissions and topic permissions,
//! in RabbitMQ 3.10's shapes: PUT answers 201 for a new object and 204 for
//! a changed one, DELETE 204 (404 when there is nothing to delete), and a
//! malformed request 400 with `{"error": "bad_request", "reason": ...}`.
//! Only administrators write.
//!
//! A write goes to the master task as [`MasterMsg::Admin`] and is answered
//! once its events are stable (I1). On a node that is not the master the
//! task drops the request and the answer is 503.

use super::{Access, ApiError, AppState, caller};
use crate::master::admin::{AdminError, AdminOp, AdminOutcome};
use crate::server::MasterMsg;
use crate::users::{HashAlgorithm, Pattern, password};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a write waits for the master task and the log.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Send a write to the master task and wait for its stable answer.
pub(super) async fn admin(state: &AppState, op: AdminOp) -> Result<AdminOutcome, ApiError> {
    let (tx, rx) = oneshot::channel();
    let gone = ApiError::Unavailable("this node is not the master, or it is stopping");
    let busy = ApiError::Unavailable("the broker did not answer in time");
    match tokio::time::timeout(WRITE_TIMEOUT, state.master.send(MasterMsg::Admin(op, tx))).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => return Err(gone),
        Err(_) => return Err(busy),
    }
    match tokio::time::timeout(WRITE_TIMEOUT, rx).await {
        Ok(Ok(Ok(outcome))) => Ok(outcome),
        Ok(Ok(Err(AdminError::NotFound))) => Err(ApiError::NotFound),
        Ok(Ok(Err(AdminError::BadRequest(r)))) => Err(ApiError::BadRequest(r)),
        Ok(Err(_)) => Err(gone),
        Err(_) => Err(busy),
    }
}

/// 201 for something new, 204 otherwise.
fn status(o: &AdminOutcome) -> StatusCode {
    match o {
        AdminOutcome::Created => StatusCode::CREATED,
        _ => StatusCode::NO_CONTENT,
    }
}

/// The JSON object of a request body (an empty body is an empty object).
pub(super) fn body_object(body: &[u8]) -> Result<serde_json::Map<String, Value>, ApiError> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::BadRequest("body is not a JSON object".into())),
        Err(e) => Err(ApiError::BadRequest(format!("invalid JSON: {e}"))),
    }
}

/// A string field, if present.
pub(super) fn text(
    m: &serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<String>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ApiError::BadRequest(format!(
            "'{key}' must be a string, got {other}"
        ))),
    }
}

/// A mandatory string field.
pub(super) fn required(m: &serde_json::Map<String, Value>, key: &str) -> Result<String, ApiError> {
    text(m, key)?.ok_or_else(|| ApiError::BadRequest(format!("[{{key_missing,{key}}}]")))
}

/// Tags as RabbitMQ accepts them: a comma-separated string or a list.
pub(super) fn tags(v: Option<&Value>) -> Result<Vec<String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(s
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| {
                t.as_str()
                    .map(|s| s.trim().to_string())
                    .ok_or_else(|| ApiError::BadRequest("tags must be strings".into()))
            })
            .collect(),
        Some(other) => Err(ApiError::BadRequest(format!("invalid tags {other}"))),
    }
}

/// Check a permission regex as RabbitMQ does before storing it.
pub(super) fn regex(source: &str) -> Result<String, ApiError> {
    Pattern::new(source)
        .map(|p| p.source)
        .map_err(|e| ApiError::BadRequest(format!("invalid regexp '{source}': {e}")))
}

/// Check a topic permission regex (variables allowed).
pub(super) fn topic_regex(source: &str) -> Result<String, ApiError> {
    Pattern::new_topic(source)
        .map(|p| p.source)
        .map_err(|e| ApiError::BadRequest(format!("invalid regexp '{source}': {e}")))
}

/// A user from a PUT body or a definitions entry: (hash, algorithm, tags).
pub(super) fn user_fields(
    m: &serde_json::Map<String, Value>,
) -> Result<(String, HashAlgorithm, Vec<String>), ApiError> {
    let pw = text(m, "password")?;
    let hash = text(m, "password_hash")?;
    let algo = match text(m, "hashing_algorithm")? {
        None => HashAlgorithm::Sha256,
        Some(a) => HashAlgorithm::parse(&a)
            .ok_or_else(|| ApiError::BadRequest(format!("unsupported hashing algorithm '{a}'")))?,
    };
    let (hash, algo) = match (pw, hash) {
        (Some(_), Some(_)) => {
            return Err(ApiError::BadRequest(
                "both password and password_hash are provided".into(),
            ));
        }
        (Some(p), None) => (password::hash(&p), HashAlgorithm::Sha256),
        (None, Some(h)) => {
            if !password::well_formed(&h) {
                return Err(ApiError::BadRequest("invalid password_hash".into()));
            }
            (h, algo)
        }
        // Neither: the user cannot log in with a password, as in RabbitMQ.
        (None, None) => (String::new(), algo),
    };
    Ok((hash, algo, tags(m.get("tags"))?))
}

pub(super) async fn put_user(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let m = body_object(&body)?;
    let (password_hash, hashing_algorithm, tags) = user_fields(&m)?;
    let op = AdminOp::PutUser {
        name,
        password_hash,
        hashing_algorithm,
        tags,
    };
    Ok(status(&admin(&state, op).await?))
}

pub(super) async fn delete_user(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let op = AdminOp::DeleteUsers {
        names: vec![name],
        must_exist: true,
    };
    Ok(status(&admin(&state, op).await?))
}

/// `POST /api/users/bulk-delete` with `{"users": [...]}`; missing users are
/// ignored.
pub(super) async fn bulk_delete(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let m = body_object(&body)?;
    let names = match m.get("users") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(String::from)
                    .ok_or_else(|| ApiError::BadRequest("users must be strings".into()))
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err(ApiError::BadRequest("[{key_missing,users}]".into())),
    };
    let op = AdminOp::DeleteUsers {
        names,
        must_exist: false,
    };
    admin(&state, op).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn put_vhost(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let who = caller(&state, &headers, Access::Administrator)?;
    let m = body_object(&body)?;
    let op = AdminOp::PutVhost {
        acting_user: Some(who.name),
        name,
        description: text(&m, "description")?,
        tags: match m.get("tags") {
            None => None,
            v => Some(tags(v)?),
        },
        default_queue_type: text(&m, "default_queue_type")?,
    };
    Ok(status(&admin(&state, op).await?))
}

pub(super) async fn delete_vhost(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    Ok(status(&admin(&state, AdminOp::DeleteVhost { name }).await?))
}

pub(super) async fn put_permission(
    State(state): State<AppState>,
    Path((vhost, user)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let m = body_object(&body)?;
    let op = AdminOp::SetPermission {
        user,
        vhost,
        configure: regex(&required(&m, "configure")?)?,
        write: regex(&required(&m, "write")?)?,
        read: regex(&required(&m, "read")?)?,
    };
    Ok(status(&admin(&state, op).await?))
}

pub(super) async fn delete_permission(
    State(state): State<AppState>,
    Path((vhost, user)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let op = AdminOp::ClearPermission { user, vhost };
    Ok(status(&admin(&state, op).await?))
}

pub(super) async fn put_topic_permission(
    State(state): State<AppState>,
    Path((vhost, user)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let m = body_object(&body)?;
    let op = AdminOp::SetTopicPermission {
        user,
        vhost,
        exchange: required(&m, "exchange")?,
        write: topic_regex(&required(&m, "write")?)?,
        read: topic_regex(&required(&m, "read")?)?,
    };
    Ok(status(&admin(&state, op).await?))
}

pub(super) async fn delete_topic_permission(
    State(state): State<AppState>,
    Path((vhost, user)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let op = AdminOp::ClearTopicPermission {
        user,
        vhost,
        exchange: None,
    };
    Ok(status(&admin(&state, op).await?))
}
