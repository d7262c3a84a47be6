//! Binding the AMQP, AMQPS and stream protocol listeners, and their accept loops.
//!
//! By default StableMQ listens on every IPv4 and IPv6 address, as RabbitMQ does, so
//! clients that dial `localhost` as `::1` reach it too. IPv6 sockets are v6-only so
//! that `0.0.0.0` and `::` can share a port.

use super::{ServeError, ServeOptions};
use crate::tls::ServerTls;
use socket2::{Domain, Protocol, Socket, Type};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Bind one listener.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let domain = if addr.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let sock = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_reuse_address(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(1024)?;
    TcpListener::from_std(sock.into())
}

/// Bind every address on `port`. An IPv6 address that cannot be bound (a host
/// without IPv6) is skipped with a warning when `ipv6_optional`; anything else fails.
pub fn bind_all(
    ips: &[IpAddr],
    port: u16,
    ipv6_optional: bool,
) -> Result<Vec<TcpListener>, (SocketAddr, std::io::Error)> {
    let mut out = Vec::new();
    for ip in ips {
        let addr = SocketAddr::new(*ip, port);
        match bind(addr) {
            Ok(l) => out.push(l),
            Err(e) if ip.is_ipv6() && ipv6_optional => {
                tracing::warn!("not listening on {addr}: {e}");
            }
            Err(e) => return Err((addr, e)),
        }
    }
    Ok(out)
}

/// A client socket fresh from `accept`.
pub(super) struct Accepted {
    /// The socket.
    pub(super) sock: TcpStream,
    /// The client's address.
    pub(super) peer: SocketAddr,
    /// Which listener it came to.
    pub(super) front: Front,
}

/// What a listener speaks.
#[derive(Clone)]
pub(super) enum Front {
    /// AMQP 0-9-1.
    Amqp,
    /// AMQP 0-9-1 after a TLS handshake with this configuration.
    Amqps(Arc<ServerTls>),
    /// The RabbitMQ stream protocol.
    Stream,
    /// The RabbitMQ stream protocol after a TLS handshake.
    StreamTls(Arc<ServerTls>),
}

/// Bind the AMQP port (unless it is 0), the AMQPS port (when `[tls]` is
/// configured), the stream port (unless 0) and the stream TLS port (when
/// `[tls]` names one) on every address of `opts`, and start one accept task per
/// listener; all feed the one queue returned.
pub(super) fn start_acceptors(
    opts: &ServeOptions,
) -> Result<(Vec<JoinHandle<()>>, mpsc::Receiver<Accepted>), ServeError> {
    let bind = |port| {
        bind_all(&opts.amqp_ips, port, opts.ipv6_optional)
            .map_err(|(addr, source)| ServeError::Listen { addr, source })
    };
    let mut listeners = Vec::new();
    if opts.amqp_port != 0 {
        listeners.extend(bind(opts.amqp_port)?.into_iter().map(|l| (l, Front::Amqp)));
    }
    let tls = crate::tls::installed();
    if let (Some(section), Some(tls)) = (&opts.config.tls, &tls) {
        let bound = bind(section.amqps_port)?;
        listeners.extend(bound.into_iter().map(|l| (l, Front::Amqps(tls.clone()))));
    }
    let stream_tls = opts.stream_tls_port.filter(|p| *p != 0).zip(tls.as_ref());
    // The stream listeners as the management API lists them (one address,
    // as for AMQP): only those bound.
    let listed = |protocol, port| crate::management::Listener {
        protocol,
        addr: SocketAddr::new(
            opts.amqp_ips
                .first()
                .copied()
                .unwrap_or(IpAddr::from([0, 0, 0, 0])),
            port,
        ),
    };
    if let Some((port, tls)) = stream_tls {
        let bound = bind(port)?;
        listeners.extend(
            bound
                .into_iter()
                .map(|l| (l, Front::StreamTls(tls.clone()))),
        );
        opts.listeners.push(listed("stream/ssl", port));
    }
    if listeners.is_empty() {
        return Err(ServeError::Other(
            "no AMQP listener could be bound (--amqp-port 0 needs [tls])".into(),
        ));
    }
    if opts.stream_port != 0 {
        match bind(opts.stream_port) {
            Ok(bound) => {
                listeners.extend(bound.into_iter().map(|l| (l, Front::Stream)));
                opts.listeners.push(listed("stream", opts.stream_port));
            }
            // The default port is a convenience: a second node on the same
            // host (or a test) runs without it rather than not at all.
            Err(e) if opts.stream_port_optional => {
                tracing::warn!("stream protocol off: {e}; give --stream-port to choose a port")
            }
            Err(e) => return Err(e),
        }
    }
    let (tx, rx) = mpsc::channel::<Accepted>(64);
    let mut acceptors = Vec::new();
    for (l, front) in listeners {
        if let Ok(a) = l.local_addr() {
            match front {
                Front::Amqp => tracing::info!("AMQP listening on {a}"),
                Front::Amqps(_) => tracing::info!("AMQPS listening on {a}"),
                Front::Stream => tracing::info!("stream protocol listening on {a}"),
                Front::StreamTls(_) => tracing::info!("stream protocol over TLS listening on {a}"),
            }
        }
        acceptors.push(tokio::spawn(accept_loop(l, front, tx.clone())));
    }
    Ok((acceptors, rx))
}

async fn accept_loop(l: TcpListener, front: Front, tx: mpsc::Sender<Accepted>) {
    loop {
        match l.accept().await {
            Ok((sock, peer)) => {
                let front = front.clone();
                if tx.send(Accepted { sock, peer, front }).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
