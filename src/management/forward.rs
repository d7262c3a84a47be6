//! Management writes on a slave go to the master.
//!
//! Only the master changes state, and every node serves the management API,
//! so a write (any method but GET and HEAD) that reaches a slave is passed on
//! to the master's management API as it came: method, path and query,
//! credentials, `X-Reason`, body. The master's answer comes back unchanged.
//! Tools pointed at any node of a cluster therefore behave as against one
//! RabbitMQ node. Reads stay local: a slave answers from its replica.

use super::{ApiError, AppState};
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use stablemq_cluster::replication::RoleKind;
use std::net::SocketAddr;
use std::time::Duration;

/// Largest write body passed on (a definitions import is the biggest).
const BODY_MAX_BYTES: usize = 64 << 20;

/// How long the master has to answer a forwarded write.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a write must go: None to handle it here.
fn master_addr(state: &AppState) -> Result<Option<SocketAddr>, ApiError> {
    let Some(status) = state.nodes.broker.as_ref().map(|b| *b.borrow()) else {
        // The single node, or a store-only node (which has no broker to
        // write to and answers 503 itself).
        return Ok(None);
    };
    if status.role == RoleKind::Master {
        return Ok(None);
    }
    let no_master = ApiError::Unavailable("no master elected yet; retry");
    let master = status.master.ok_or(no_master)?;
    if master == state.nodes.me.id {
        return Ok(None);
    }
    state
        .nodes
        .peers
        .iter()
        .find(|p| p.id == master)
        .and_then(|p| p.management_addr)
        .map(Some)
        .ok_or(ApiError::Unavailable(
            "the master has no management API configured",
        ))
}

/// The middleware: writes on a slave are forwarded, the rest runs here.
pub async fn writes_to_master(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let node_local = req.uri().path().starts_with(super::tls::NODE_LOCAL_PREFIX);
    if req.method() == Method::GET || req.method() == Method::HEAD || node_local {
        return next.run(req).await;
    }
    let addr = match master_addr(&state) {
        Ok(None) => return next.run(req).await,
        Ok(Some(a)) => a,
        Err(e) => return e.into_response(),
    };
    let (parts, body) = req.into_parts();
    let Ok(body) = to_bytes(body, BODY_MAX_BYTES).await else {
        return ApiError::BadRequest("request body too large".into()).into_response();
    };
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let url = format!("http://{addr}{path}");
    let pass = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let fwd = Forward {
        method: parts.method.clone(),
        url,
        authorization: pass("authorization"),
        content_type: pass("content-type"),
        reason: pass("x-reason"),
        body: body.to_vec(),
    };
    match tokio::task::spawn_blocking(move || fwd.send()).await {
        Ok(Ok(r)) => r,
        _ => ApiError::Unavailable("the master did not answer").into_response(),
    }
}

/// One write to pass on.
struct Forward {
    method: Method,
    url: String,
    authorization: Option<String>,
    content_type: Option<String>,
    reason: Option<String>,
    body: Vec<u8>,
}

impl Forward {
    /// Send it (blocking) and turn the master's answer into ours.
    fn send(self) -> Result<Response, ureq::Error> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(FORWARD_TIMEOUT))
            .build()
            .into();
        let mut b = ureq::http::Request::builder()
            .method(self.method.as_str())
            .uri(&self.url);
        for (k, v) in [
            ("authorization", &self.authorization),
            ("content-type", &self.content_type),
            ("x-reason", &self.reason),
        ] {
            if let Some(v) = v {
                b = b.header(k, v);
            }
        }
        let mut resp = if self.body.is_empty() {
            let req = b.body(()).map_err(ureq::Error::from)?;
            agent.run(req)?
        } else {
            let req = b.body(self.body).map_err(ureq::Error::from)?;
            agent.run(req)?
        };
        let status =
            StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let copy = |name: header::HeaderName| resp.headers().get(name.as_str()).cloned();
        let location = copy(header::LOCATION);
        let content_type = copy(header::CONTENT_TYPE);
        let challenge = copy(header::WWW_AUTHENTICATE);
        let body = resp.body_mut().read_to_vec()?;
        let mut out = Response::builder().status(status);
        for (k, v) in [
            (header::LOCATION, location),
            (header::CONTENT_TYPE, content_type),
            (header::WWW_AUTHENTICATE, challenge),
        ] {
            if let Some(v) = v
                && let Ok(v) = axum::http::HeaderValue::from_bytes(v.as_bytes())
            {
                out = out.header(k, v);
            }
        }
        Ok(out
            .body(Body::from(body))
            .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response()))
    }
}
