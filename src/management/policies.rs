//! `/api/policies` and `/api/operator-policies`, in RabbitMQ 3.10's shapes
//! (parameters are in `parameters.rs`).
//!
//! A policy write is validated here ([`policy_event`], also used by the
//! definitions import) and becomes a `PolicySet` or `PolicyCleared` event,
//! sent through the master's management-write path: it is answered once
//! the event is stable (I1), and apply re-picks every object's policy on
//! the master and every replica alike (I4).

use super::query::query;
use super::users_api::admin;
use super::writes::{WriteError, body_json};
use super::{Access, ApiError, AppState, Caller, caller, caller_for_vhost};
use crate::broker::event::Event;
use crate::broker::policy::{Policy, PolicyError};
use crate::master::admin::{AdminOp, AdminOutcome};
use axum::body::Bytes as Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Map, Value, json};

/// The routes of this file.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/policies", get(policies_all))
        .route("/api/policies/{vhost}", get(policies_in))
        .route(
            "/api/policies/{vhost}/{name}",
            get(policy_one).put(put_policy_route).delete(delete_policy),
        )
        .route("/api/operator-policies", get(empty_list))
        .route("/api/operator-policies/{vhost}", get(empty_list))
}

/// Policies as `/api/policies` lists them, sorted by vhost then name.
async fn list(state: &AppState, vhost: Option<String>) -> Result<Option<Vec<Value>>, ApiError> {
    query(state, move |view| {
        if let Some(v) = &vhost
            && view.broker.vhost(v).is_none()
        {
            return None;
        }
        let mut out = Vec::new();
        for (vname, v) in &view.broker.vhosts {
            if vhost.as_ref().is_some_and(|want| want != vname) {
                continue;
            }
            for p in v.policies.values() {
                out.push(policy_json(vname, p));
            }
        }
        Some(out)
    })
    .await
}

fn policy_json(vhost: &str, p: &Policy) -> Value {
    json!({
        "vhost": vhost,
        "name": p.name,
        "pattern": p.pattern,
        "apply-to": p.apply_to.as_str(),
        "definition": p.definition,
        "priority": p.priority,
    })
}

async fn policies_all(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<Value>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let access = state.access();
    let mut all = list(&state, None).await?.unwrap_or_default();
    all.retain(|p| {
        p["vhost"]
            .as_str()
            .is_some_and(|v| who.sees_vhost(&access, v))
    });
    Ok(Json(all))
}

async fn policies_in(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<Value>>, ApiError> {
    caller_for_vhost(&state, &headers, &vhost)?;
    list(&state, Some(vhost))
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound)
}

async fn policy_one(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    caller_for_vhost(&state, &headers, &vhost)?;
    list(&state, Some(vhost))
        .await?
        .and_then(|l| l.into_iter().find(|p| p["name"] == name.as_str()))
        .map(Json)
        .ok_or(ApiError::NotFound)
}

/// Only `policymaker` and `administrator` users write policies.
pub(super) fn policymaker(who: &Caller) -> Result<(), WriteError> {
    if who
        .tags
        .iter()
        .any(|t| t == "policymaker" || t == "administrator")
    {
        Ok(())
    } else {
        Err(WriteError::NotAuthorised("Not policymaker user".into()))
    }
}

/// Validate a policy body (`pattern`, `definition`, optional `priority` and
/// `apply-to`) into its event. Shared by `PUT /api/policies/...` and the
/// definitions import, so both refuse the same things.
pub fn policy_event(
    vhost: &str,
    name: &str,
    body: &Map<String, Value>,
) -> Result<Event, PolicyError> {
    let pattern = body
        .get("pattern")
        .and_then(Value::as_str)
        .ok_or_else(|| PolicyError("pattern is required (a string)".into()))?;
    let definition = match body.get("definition") {
        Some(Value::Object(d)) => d.clone(),
        _ => return Err(PolicyError("definition is required (an object)".into())),
    };
    let priority = match body.get("priority") {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| PolicyError(format!("priority {n} is not an integer")))?,
        // rabbitmqadmin sends numbers as strings.
        Some(Value::String(s)) => s
            .parse()
            .map_err(|_| PolicyError(format!("priority {s} is not an integer")))?,
        Some(v) => return Err(PolicyError(format!("priority {v} is not an integer"))),
    };
    let apply_to = match body.get("apply-to") {
        None | Some(Value::Null) => "all",
        Some(Value::String(s)) => s.as_str(),
        Some(v) => return Err(PolicyError(format!("apply-to {v} is not a string"))),
    };
    let p = Policy::new(name, pattern, apply_to, priority, definition)?;
    Ok(Event::PolicySet {
        vhost: vhost.to_string(),
        name: name.to_string(),
        pattern: p.pattern,
        apply_to: p.apply_to.as_str().to_string(),
        priority: p.priority,
        definition: Value::Object(p.definition).to_string(),
    })
}

/// Create or replace a policy: 201 when new, 204 when replaced.
pub async fn put_policy(
    state: &AppState,
    vhost: &str,
    name: &str,
    body: &Map<String, Value>,
) -> Result<StatusCode, WriteError> {
    let ev = policy_event(vhost, name, body).map_err(|e| WriteError::BadRequest(e.to_string()))?;
    let (v, n) = (vhost.to_string(), name.to_string());
    let existed = query(state, move |view| {
        view.broker.vhost(&v).map(|v| v.policies.contains_key(&n))
    })
    .await?
    .ok_or(WriteError::Api(ApiError::NotFound))?;
    imported(admin(state, AdminOp::Import { events: vec![ev] }).await?)?;
    Ok(if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    })
}

/// An import of one event that was skipped refers to a missing vhost.
fn imported(o: AdminOutcome) -> Result<(), WriteError> {
    match o {
        AdminOutcome::Imported { skipped } if !skipped.is_empty() => {
            Err(WriteError::Api(ApiError::NotFound))
        }
        _ => Ok(()),
    }
}

async fn put_policy_route(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, WriteError> {
    let who = caller_for_vhost(&state, &headers, &vhost)?;
    policymaker(&who)?;
    let m = body_json(&body)?;
    Ok(put_policy(&state, &vhost, &name, &m).await?.into_response())
}

async fn delete_policy(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, WriteError> {
    let who = caller_for_vhost(&state, &headers, &vhost)?;
    policymaker(&who)?;
    let (v, n) = (vhost.clone(), name.clone());
    let exists = query(&state, move |view| {
        view.broker
            .vhost(&v)
            .is_some_and(|v| v.policies.contains_key(&n))
    })
    .await?;
    if !exists {
        return Err(WriteError::Api(ApiError::NotFound));
    }
    let ev = Event::PolicyCleared { vhost, name };
    imported(admin(&state, AdminOp::Import { events: vec![ev] }).await?)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// For lists of objects StableMQ has none of (operator policies).
async fn empty_list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<Value>>, ApiError> {
    caller(&state, &headers, Access::Management)?;
    Ok(Json(Vec::new()))
}

impl From<PolicyError> for WriteError {
    fn from(e: PolicyError) -> WriteError {
        WriteError::BadRequest(e.to_string())
    }
}
