//! `/api/parameters`, `/api/global-parameters` and `/api/vhost-limits`, in
//! RabbitMQ 3.10's shapes.
//!
//! Parameters are replicated state (`broker/parameters.rs`): a write is
//! validated here ([`parameter_event`], also used by the definitions import)
//! and becomes a `ParameterSet`/`ParameterCleared` (or global) event sent
//! through the master's management-write path, answered once the event is
//! stable (I1). The vhost limits are the `vhost-limits` component's `limits`
//! parameter, as in RabbitMQ: `/api/vhost-limits` is another view of it.
//!
//! Who may do what, as RabbitMQ's plugin checks it: parameters need the
//! `policymaker` (or `administrator`) tag, global parameters and writes of
//! vhost limits `administrator`; reading vhost limits needs only access to
//! the vhost.

use super::policies::policymaker;
use super::query::query;
use super::users_api::admin;
use super::writes::{WriteError, body_json};
use super::{Access, ApiError, AppState, Caller, caller, caller_for_vhost};
use crate::broker::event::Event;
use crate::broker::parameters::{self, LIMITS_NAME, ParameterError, VHOST_LIMITS};
use crate::master::admin::{AdminOp, AdminOutcome};
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
        .route("/api/parameters", get(all_parameters))
        .route("/api/parameters/{component}", get(component_parameters))
        .route("/api/parameters/{component}/{vhost}", get(vhost_parameters))
        .route(
            "/api/parameters/{component}/{vhost}/{name}",
            get(one_parameter)
                .put(put_parameter_route)
                .delete(delete_parameter),
        )
        .route("/api/global-parameters", get(global_parameters))
        .route(
            "/api/global-parameters/{name}",
            get(global_parameter_one)
                .put(put_global_parameter)
                .delete(delete_global_parameter),
        )
        .route("/api/vhost-limits", get(all_limits))
        .route("/api/vhost-limits/{vhost}", get(vhost_limits))
        .route(
            "/api/vhost-limits/{vhost}/{name}",
            put(put_limit).delete(delete_limit),
        )
}

/// One stored parameter, as the API and the definitions show it.
#[derive(Debug, Clone)]
pub struct ParameterRow {
    /// Vhost.
    pub vhost: String,
    /// Component.
    pub component: String,
    /// Name.
    pub name: String,
    /// Value.
    pub value: Value,
}

impl ParameterRow {
    /// RabbitMQ's JSON for a parameter.
    pub fn to_json(&self) -> Value {
        json!({
            "vhost": self.vhost,
            "component": self.component,
            "name": self.name,
            "value": self.value,
        })
    }
}

/// Stored parameters, sorted by vhost, component, name; None when `vhost`
/// is given and does not exist.
pub async fn rows(
    state: &AppState,
    component: Option<String>,
    vhost: Option<String>,
) -> Result<Option<Vec<ParameterRow>>, ApiError> {
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
            for ((c, n), value) in &v.parameters {
                if component.as_ref().is_some_and(|want| want != c) {
                    continue;
                }
                out.push(ParameterRow {
                    vhost: vname.clone(),
                    component: c.clone(),
                    name: n.clone(),
                    value: value.clone(),
                });
            }
        }
        Some(out)
    })
    .await
}

/// The stored global parameters, by name.
pub async fn global_rows(state: &AppState) -> Result<Vec<(String, Value)>, ApiError> {
    query(state, |view| {
        view.broker
            .global_parameters
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    })
    .await
}

/// Validate a parameter into its event; shared by the PUT and the
/// definitions import, so both refuse the same things.
pub fn parameter_event(
    vhost: &str,
    component: &str,
    name: &str,
    value: &Value,
) -> Result<Event, ParameterError> {
    parameters::validate(component, name, value)?;
    let value = if component == VHOST_LIMITS {
        parameters::stored_limits(value.clone())
    } else {
        value.clone()
    };
    Ok(Event::ParameterSet {
        vhost: vhost.to_string(),
        component: component.to_string(),
        name: name.to_string(),
        value: value.to_string(),
    })
}

/// Callers that may touch parameters: policymakers and administrators, and
/// a policymaker only on a vhost it may use.
fn parameter_caller(
    state: &AppState,
    headers: &HeaderMap,
    vhost: Option<&str>,
) -> Result<Caller, WriteError> {
    let who = match vhost {
        Some(v) => caller_for_vhost(state, headers, v)?,
        None => caller(state, headers, Access::Management)?,
    };
    policymaker(&who)?;
    Ok(who)
}

fn visible(state: &AppState, who: &Caller, rows: Vec<ParameterRow>) -> Vec<Value> {
    let access = state.access();
    rows.into_iter()
        .filter(|r| who.sees_vhost(&access, &r.vhost))
        .map(|r| r.to_json())
        .collect()
}

async fn all_parameters(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<Value>>, WriteError> {
    let who = parameter_caller(&state, &headers, None)?;
    let all = rows(&state, None, None).await?.unwrap_or_default();
    Ok(Json(visible(&state, &who, all)))
}

async fn component_parameters(
    State(state): State<AppState>,
    Path(component): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<Value>>, WriteError> {
    let who = parameter_caller(&state, &headers, None)?;
    let all = rows(&state, Some(component), None)
        .await?
        .unwrap_or_default();
    Ok(Json(visible(&state, &who, all)))
}

async fn vhost_parameters(
    State(state): State<AppState>,
    Path((component, vhost)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Vec<Value>>, WriteError> {
    parameter_caller(&state, &headers, Some(&vhost))?;
    let rows = rows(&state, Some(component), Some(vhost))
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(rows.iter().map(ParameterRow::to_json).collect()))
}

async fn one_parameter(
    State(state): State<AppState>,
    Path((component, vhost, name)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Json<Value>, WriteError> {
    parameter_caller(&state, &headers, Some(&vhost))?;
    rows(&state, Some(component), Some(vhost))
        .await?
        .and_then(|l| l.into_iter().find(|r| r.name == name))
        .map(|r| Json(r.to_json()))
        .ok_or(WriteError::Api(ApiError::NotFound))
}

/// The `value` of a PUT body, which RabbitMQ requires.
pub(super) fn value_of(body: &Map<String, Value>) -> Result<Value, WriteError> {
    body.get("value")
        .cloned()
        .ok_or_else(|| WriteError::BadRequest("key_missing: value".into()))
}

/// Submit one event through the management-write path; an event skipped
/// by the import refers to a vhost that went away meanwhile: 404.
async fn submit(state: &AppState, ev: Event) -> Result<(), WriteError> {
    match admin(state, AdminOp::Import { events: vec![ev] }).await? {
        AdminOutcome::Imported { skipped } if !skipped.is_empty() => {
            Err(WriteError::Api(ApiError::NotFound))
        }
        _ => Ok(()),
    }
}

/// Whether the vhost exists (None: it does not) and has the parameter.
async fn has_parameter(
    state: &AppState,
    vhost: &str,
    component: &str,
    name: &str,
) -> Result<Option<bool>, ApiError> {
    let (v, key) = (vhost.to_string(), (component.to_string(), name.to_string()));
    query(state, move |view| {
        view.broker
            .vhost(&v)
            .map(|v| v.parameters.contains_key(&key))
    })
    .await
}

async fn put_parameter_route(
    State(state): State<AppState>,
    Path((component, vhost, name)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, WriteError> {
    parameter_caller(&state, &headers, Some(&vhost))?;
    let value = value_of(&body_json(&body)?)?;
    let existed = has_parameter(&state, &vhost, &component, &name)
        .await?
        .ok_or(WriteError::Api(ApiError::NotFound))?;
    let ev = parameter_event(&vhost, &component, &name, &value)?;
    submit(&state, ev).await?;
    Ok(if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    }
    .into_response())
}

async fn delete_parameter(
    State(state): State<AppState>,
    Path((component, vhost, name)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, WriteError> {
    parameter_caller(&state, &headers, Some(&vhost))?;
    if has_parameter(&state, &vhost, &component, &name).await? != Some(true) {
        return Err(WriteError::Api(ApiError::NotFound));
    }
    submit(
        &state,
        Event::ParameterCleared {
            vhost,
            component,
            name,
        },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The global parameters: the stored ones only, as RabbitMQ lists them.
/// `internal_cluster_id` is among them (the first master stores one); the
/// configured cluster name is not, until one is set (`cluster_name`).
async fn globals(state: &AppState) -> Result<Vec<Value>, ApiError> {
    Ok(global_rows(state)
        .await?
        .into_iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect())
}

/// The cluster's name: a stored `cluster_name` global parameter (set by
/// `PUT /api/cluster-name`, the global-parameters API or an import), else
/// the configured one, as RabbitMQ falls back to a name of its own.
pub async fn cluster_name(state: &AppState) -> Result<String, ApiError> {
    let stored = query(state, |view| {
        crate::broker::parameters::stored_cluster_name(&view.broker.global_parameters)
    })
    .await?;
    Ok(stored.unwrap_or_else(|| state.config.default_cluster_name()))
}

/// `PUT /api/cluster-name` (`{"name": ..}`, administrators): stored as the
/// `cluster_name` global parameter, as RabbitMQ stores it.
pub async fn set_cluster_name(state: &AppState, name: String) -> Result<(), WriteError> {
    if name.is_empty() {
        return Err(WriteError::BadRequest("name_missing".into()));
    }
    submit(
        state,
        Event::GlobalParameterSet {
            name: CLUSTER_NAME.into(),
            value: Value::String(name).to_string(),
        },
    )
    .await
}

use crate::broker::parameters::CLUSTER_NAME;

async fn global_parameters(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<Value>>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    Ok(Json(globals(&state).await?))
}

async fn global_parameter_one(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    globals(&state)
        .await?
        .into_iter()
        .find(|p| p["name"] == name.as_str())
        .map(Json)
        .ok_or(ApiError::NotFound)
}

async fn put_global_parameter(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, WriteError> {
    caller(&state, &headers, Access::Administrator)?;
    let value = value_of(&body_json(&body)?)?;
    let existed = global_rows(&state).await?.iter().any(|(n, _)| *n == name);
    submit(
        &state,
        Event::GlobalParameterSet {
            name,
            value: value.to_string(),
        },
    )
    .await?;
    Ok(if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    }
    .into_response())
}

async fn delete_global_parameter(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, WriteError> {
    caller(&state, &headers, Access::Administrator)?;
    if !global_rows(&state).await?.iter().any(|(n, _)| *n == name) {
        return Err(WriteError::Api(ApiError::NotFound));
    }
    submit(&state, Event::GlobalParameterCleared { name }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Each vhost's limits, `[{"vhost": .., "value": {..}}]`, for vhosts that
/// have some; None when `vhost` is given and does not exist.
async fn limit_rows(
    state: &AppState,
    vhost: Option<String>,
) -> Result<Option<Vec<(String, Value)>>, ApiError> {
    Ok(rows(state, Some(VHOST_LIMITS.into()), vhost)
        .await?
        .map(|rows| {
            rows.into_iter()
                .filter(|r| r.name == LIMITS_NAME)
                .map(|r| (r.vhost, r.value))
                .collect()
        }))
}

async fn all_limits(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<Value>>, ApiError> {
    let who = caller(&state, &headers, Access::Management)?;
    let access = state.access();
    let rows = limit_rows(&state, None).await?.unwrap_or_default();
    Ok(Json(
        rows.into_iter()
            .filter(|(v, _)| who.sees_vhost(&access, v))
            .map(|(vhost, value)| json!({"vhost": vhost, "value": value}))
            .collect(),
    ))
}

async fn vhost_limits(
    State(state): State<AppState>,
    Path(vhost): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Vec<Value>>, ApiError> {
    caller_for_vhost(&state, &headers, &vhost)?;
    let rows = limit_rows(&state, Some(vhost))
        .await?
        .ok_or(ApiError::NotFound)?;
    // RabbitMQ leaves empty limits out of the one-vhost list (the list of
    // all vhosts shows them).
    Ok(Json(
        rows.into_iter()
            .filter(|(_, value)| !parameters::limits_empty(value))
            .map(|(vhost, value)| json!({"vhost": vhost, "value": value}))
            .collect(),
    ))
}

/// The vhost's current limits (an empty object when none); None when the
/// vhost does not exist.
async fn current_limits(
    state: &AppState,
    vhost: &str,
) -> Result<Option<Map<String, Value>>, ApiError> {
    Ok(limit_rows(state, Some(vhost.to_string()))
        .await?
        .map(|rows| {
            rows.into_iter()
                .next()
                .and_then(|(_, v)| v.as_object().cloned())
                .unwrap_or_default()
        }))
}

/// The event that gives a vhost `limits`. Empty limits stay a parameter
/// (`[]`), as RabbitMQ keeps one after the last limit is deleted.
pub(super) fn limits_event(vhost: String, limits: Map<String, Value>) -> Event {
    Event::ParameterSet {
        vhost,
        component: VHOST_LIMITS.into(),
        name: LIMITS_NAME.into(),
        value: parameters::stored_limits(Value::Object(limits)).to_string(),
    }
}

async fn put_limit(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, WriteError> {
    caller(&state, &headers, Access::Administrator)?;
    let value = value_of(&body_json(&body)?)?;
    let mut limits = current_limits(&state, &vhost)
        .await?
        .ok_or(WriteError::Api(ApiError::NotFound))?;
    limits.insert(name, value);
    parameters::validate_limits(&limits)?;
    submit(&state, limits_event(vhost, limits)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn delete_limit(
    State(state): State<AppState>,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, WriteError> {
    caller(&state, &headers, Access::Administrator)?;
    let mut limits = current_limits(&state, &vhost)
        .await?
        .ok_or(WriteError::Api(ApiError::NotFound))?;
    // Written even when the limit was not set: RabbitMQ then stores the
    // (possibly empty) limits all the same.
    limits.remove(&name);
    submit(&state, limits_event(vhost, limits)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

impl From<ParameterError> for WriteError {
    fn from(e: ParameterError) -> WriteError {
        WriteError::BadRequest(e.to_string())
    }
}
