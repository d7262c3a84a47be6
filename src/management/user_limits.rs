//! `/api/user-limits`: per-user limits (`max-connections`, `max-channels`)
//! in RabbitMQ 3.10's shapes. Any management user reads every user's
//! limits, as in RabbitMQ; only administrators write.
//!
//! The limits live in the replicated access table (`users/limits.rs`); a
//! write becomes a `UserLimitsSet` event through the master's
//! management-write path, answered once it is stable (I1).

use super::users_api::admin;
use super::writes::{WriteError, body_json};
use super::{Access, ApiError, AppState, caller};
use crate::broker::event::Event;
use crate::master::admin::{AdminOp, AdminOutcome};
use crate::users::limits;
use axum::body::Bytes as Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use serde_json::{Map, Value, json};

/// The routes of this file.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/user-limits", get(all_limits))
        .route("/api/user-limits/{user}", get(user_limits))
        .route(
            "/api/user-limits/{user}/{name}",
            put(put_limit).delete(delete_limit),
        )
}

/// `[{"user": .., "value": {..}}]`, one row per user with limits.
fn rows(t: &crate::users::AccessTable, only: Option<&str>) -> Vec<Value> {
    t.user_limits
        .iter()
        .filter(|(u, l)| only.is_none_or(|o| o == u.as_str()) && !l.is_empty())
        .map(|(u, l)| json!({"user": u, "value": l}))
        .collect()
}

async fn all_limits(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<Value>>, ApiError> {
    caller(&state, &headers, Access::Management)?;
    Ok(Json(rows(&state.access(), None)))
}

/// One user's limits (an empty list when it has none); 404 for a user that
/// does not exist.
async fn user_limits(
    State(state): State<AppState>,
    Path(user): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<Value>>, ApiError> {
    caller(&state, &headers, Access::Management)?;
    let t = state.access();
    if !t.users.contains_key(&user) {
        return Err(ApiError::NotFound);
    }
    Ok(Json(rows(&t, Some(&user))))
}

/// Submit a change of `user`'s limits; a user that does not exist (or went
/// away meanwhile) is RabbitMQ's 400 `no_such_user`.
async fn submit(
    state: &AppState,
    user: String,
    change: Map<String, Value>,
) -> Result<(), WriteError> {
    let no_such_user = || WriteError::BadRequest(format!("no_such_user: {user}"));
    if !state.access().users.contains_key(&user) {
        return Err(no_such_user());
    }
    let ev = Event::UserLimitsSet {
        name: user.clone(),
        value: Value::Object(change).to_string(),
    };
    match admin(state, AdminOp::Import { events: vec![ev] }).await? {
        AdminOutcome::Imported { skipped } if !skipped.is_empty() => Err(no_such_user()),
        _ => Ok(()),
    }
}

async fn put_limit(
    State(state): State<AppState>,
    Path((user, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, WriteError> {
    caller(&state, &headers, Access::Administrator)?;
    let value = body_json(&body)?
        .get("value")
        .cloned()
        .ok_or_else(|| WriteError::BadRequest("[{key_missing,value}]".into()))?;
    let mut change = Map::new();
    change.insert(name, value);
    limits::validate(&change).map_err(WriteError::BadRequest)?;
    submit(&state, user, change).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// 204 whether or not the limit was set, as RabbitMQ answers.
async fn delete_limit(
    State(state): State<AppState>,
    Path((user, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, WriteError> {
    caller(&state, &headers, Access::Administrator)?;
    let mut change = Map::new();
    change.insert(name, Value::Null);
    submit(&state, user, change).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
