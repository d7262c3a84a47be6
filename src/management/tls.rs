//! The API over HTTPS, and this node's TLS certificate through the API.
//!
//! `HttpsListener` accepts TCP, runs each TLS handshake in a task of its
//! own (with the `[tls]` handshake timeout, so a stalled client never holds
//! up the others) and hands finished sessions to axum. The routes report
//! which certificate new handshakes present and reload it from disk, as
//! SIGHUP does. Both are about this node only, so a slave does not forward
//! them to the master (`forward`).

use super::{Access, ApiError, AppState, caller};
use crate::tls::ServerTls;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;

/// Paths under this prefix act on the node that received them.
pub const NODE_LOCAL_PREFIX: &str = "/api/stablemq/tls/";

/// The routes of this file.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/stablemq/tls/certificate", get(certificate))
        .route("/api/stablemq/tls/reload", post(reload))
}

fn node_tls() -> Result<Arc<ServerTls>, ApiError> {
    crate::tls::installed().ok_or(ApiError::NotFound)
}

async fn certificate(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    caller(&state, &headers, Access::Monitoring)?;
    let tls = node_tls()?;
    Ok(Json(json!({
        "cert_file": tls.settings().cert_file,
        "sha256": tls.fingerprint(),
    })))
}

/// Reread the certificate, key and CA. A file that does not load is a 400
/// naming it, and the old certificate stays in use.
async fn reload(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    caller(&state, &headers, Access::Administrator)?;
    let tls = node_tls()?;
    let done = tokio::task::spawn_blocking(move || tls.reload())
        .await
        .map_err(|_| ApiError::Unavailable("the reload did not finish"))?;
    match done {
        Ok(sha256) => {
            tracing::info!(%sha256, "TLS certificate reloaded through the management API");
            Ok(Json(json!({ "sha256": sha256 })))
        }
        Err(e) => {
            tracing::error!("TLS reload failed, keeping the old certificate: {e}");
            Err(ApiError::BadRequest(format!("TLS reload failed: {e}")))
        }
    }
}

/// A listener whose connections are TLS sessions, for `axum::serve`.
pub struct HttpsListener {
    sessions: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    _accept: StopOnDrop,
}

/// Stops the accept task when the listener goes.
struct StopOnDrop(tokio::task::AbortHandle);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl HttpsListener {
    /// Bind `addr` and start accepting.
    pub async fn bind(addr: SocketAddr, tls: Arc<ServerTls>) -> std::io::Result<HttpsListener> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let (tx, rx) = mpsc::channel(64);
        let task = tokio::spawn(accept(listener, tls, tx));
        Ok(HttpsListener {
            sessions: rx,
            local,
            _accept: StopOnDrop(task.abort_handle()),
        })
    }
}

async fn accept(
    listener: TcpListener,
    tls: Arc<ServerTls>,
    tx: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!("HTTPS accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let (acceptor, timeout, tx) = (tls.http_acceptor(), tls.handshake_timeout(), tx.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(timeout, acceptor.accept(sock)).await {
                Ok(Ok(s)) => {
                    let _ = tx.send((s, peer)).await;
                }
                Ok(Err(e)) => tracing::info!(%peer, "HTTPS handshake failed: {e}"),
                Err(_) => tracing::info!(%peer, "HTTPS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for HttpsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.sessions.recv().await {
            Some(s) => s,
            // The accept task is gone (the node is stopping): no more clients.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
