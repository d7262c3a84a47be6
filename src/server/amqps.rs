//! AMQPS: a client on the TLS port first finishes a TLS handshake, within
//! the handshake timeout (RabbitMQ's `ssl_handshake_timeout`), and is then
//! routed like any other client, with its TLS session beside its socket.
//!
//! A handshake that fails (garbage, plain AMQP on the TLS port, a client
//! certificate that does not verify, no certificate when one is required)
//! or never finishes is logged once and its socket closed; rustls sends the
//! TLS alert. Nothing else is affected: each handshake is a task of its own.
//! The stream protocol's TLS port (`stream::serve_tls_client`) runs the same
//! [`handshake`].

use super::route::{ConnContext, route_client};
use super::socket::ClientSocket;
use crate::tls::{ServerTls, TlsInfo};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// Whether the first bytes a client sent are an AMQP protocol header: a
/// plain AMQP client dialed the TLS port.
async fn sent_plain_amqp(sock: &TcpStream) -> bool {
    let mut head = [0u8; 4];
    matches!(sock.peek(&mut head).await, Ok(4)) && &head == b"AMQP"
}

/// Run the TLS handshake on `sock`, then serve it as client `id`.
pub(super) async fn serve_client(
    tls: Arc<ServerTls>,
    ctx: ConnContext,
    id: u64,
    sock: TcpStream,
    peer: SocketAddr,
) {
    let local = sock.local_addr().ok();
    let Some((stream, info)) = handshake(&tls, id, sock, peer, true).await else {
        return;
    };
    let sock = ClientSocket {
        stream,
        peer,
        local,
        tls: Some(info),
    };
    route_client(ctx, id, sock).await;
}

/// The TLS handshake of client `id` within the handshake timeout (AMQPS and
/// the stream protocol's TLS port alike), or `None`, logged once, when it
/// failed or timed out (`amqp`: say so when a plain AMQP client dialed
/// the port).
pub(super) async fn handshake(
    tls: &ServerTls,
    id: u64,
    sock: TcpStream,
    peer: SocketAddr,
    amqp: bool,
) -> Option<(TlsStream<TcpStream>, TlsInfo)> {
    let timeout = tls.handshake_timeout();
    let acceptor = tls.amqp_acceptor();
    let handshake = async {
        if amqp && sent_plain_amqp(&sock).await {
            return Err("the client sent a plain AMQP header to the TLS port".to_string());
        }
        acceptor.accept(sock).await.map_err(|e| e.to_string())
    };
    let stream = match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(reason)) => {
            tracing::info!(conn = id, %peer, "TLS handshake failed: {reason}");
            return None;
        }
        Err(_) => {
            tracing::info!(conn = id, %peer, "TLS handshake timed out after {timeout:?}");
            return None;
        }
    };
    let info = TlsInfo::of(stream.get_ref().1, tls.settings().cert_login_from);
    tracing::debug!(conn = id, %peer, protocol = %info.protocol, "TLS handshake done");
    Some((stream, info))
}
