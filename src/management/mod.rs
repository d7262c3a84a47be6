//! The management HTTP API (RabbitMQ's port 15672), over axum.
//!
//! For now it serves what operating a cluster needs: `GET /api/nodes`, each
//! node's id, role, epoch, stable index, store lag and reachability, as seen
//! from whichever node is asked. Requests use HTTP basic auth with the
//! broker's users, as RabbitMQ's API does; a user needs the `administrator`
//! or `monitoring` tag to read node status, as in RabbitMQ.

mod nodes;

pub use nodes::{NodeReport, NodeStatusSource, Peer, StoreReport};

use crate::config::Config;
use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use std::net::SocketAddr;
use std::sync::Arc;

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    /// Users and tags.
    pub config: Arc<Config>,
    /// This node's and its peers' status.
    pub nodes: Arc<NodeStatusSource>,
}

/// Bind `addr` and serve until the task is aborted.
pub async fn serve(
    addr: SocketAddr,
    state: AppState,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!("management API listening on {addr}");
    let app = Router::new()
        .route("/api/nodes", get(nodes::list))
        .route("/api/nodes/{name}", get(nodes::one))
        .route("/api/stablemq/node-status", get(nodes::local))
        .with_state(state);
    Ok(tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            tracing::error!("management API stopped: {err}");
        }
    }))
}

/// Why a request was refused, as RabbitMQ's API answers it.
pub enum ApiError {
    /// 401 with RabbitMQ's body and a WWW-Authenticate challenge.
    Unauthorized,
    /// 404.
    NotFound,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                [(
                    header::WWW_AUTHENTICATE,
                    "Basic realm=\"RabbitMQ Management\"",
                )],
                axum::Json(serde_json::json!({
                    "error": "not_authorized",
                    "reason": "Not_Authorized"
                })),
            )
                .into_response(),
            ApiError::NotFound => (
                StatusCode::NOT_FOUND,
                axum::Json(serde_json::json!({"error": "Object Not Found", "reason": "Not Found"})),
            )
                .into_response(),
        }
    }
}

/// Check basic auth: a known user with the right password and a tag that may
/// read node status. Returns the `Authorization` header to forward to peers.
pub fn authorize(config: &Config, headers: &HeaderMap) -> Result<String, ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or(ApiError::Unauthorized)?;
    let encoded = value.strip_prefix("Basic ").ok_or(ApiError::Unauthorized)?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| ApiError::Unauthorized)?;
    let text = String::from_utf8(decoded).map_err(|_| ApiError::Unauthorized)?;
    let (user, password) = text.split_once(':').ok_or(ApiError::Unauthorized)?;
    let u = config
        .users
        .iter()
        .find(|u| u.name == user)
        .ok_or(ApiError::Unauthorized)?;
    if !crate::auth::constant_time_eq(u.password.as_bytes(), password.as_bytes()) {
        return Err(ApiError::Unauthorized);
    }
    if !u
        .tags
        .iter()
        .any(|t| t == "administrator" || t == "monitoring")
    {
        return Err(ApiError::Unauthorized);
    }
    Ok(value.to_string())
}
