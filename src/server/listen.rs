//! Binding the AMQP and AMQPS listeners, and their accept loops.
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
    /// The TLS to handshake with first: it came to the AMQPS port.
    pub(super) tls: Option<Arc<ServerTls>>,
}

/// Bind the AMQP port (unless it is 0) and the AMQPS port (when `[tls]` is
/// configured) on every address of `opts`, and start one accept task per
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
        listeners.extend(bind(opts.amqp_port)?.into_iter().map(|l| (l, None)));
    }
    let tls = crate::tls::installed();
    if let (Some(section), Some(tls)) = (&opts.config.tls, &tls) {
        let bound = bind(section.amqps_port)?;
        listeners.extend(bound.into_iter().map(|l| (l, Some(tls.clone()))));
    }
    if listeners.is_empty() {
        return Err(ServeError::Other(
            "no AMQP listener could be bound (--amqp-port 0 needs [tls])".into(),
        ));
    }
    let (tx, rx) = mpsc::channel::<Accepted>(64);
    let mut acceptors = Vec::new();
    for (l, tls) in listeners {
        if let Ok(a) = l.local_addr() {
            match tls {
                None => tracing::info!("AMQP listening on {a}"),
                Some(_) => tracing::info!("AMQPS listening on {a}"),
            }
        }
        acceptors.push(tokio::spawn(accept_loop(l, tls, tx.clone())));
    }
    Ok((acceptors, rx))
}

async fn accept_loop(l: TcpListener, tls: Option<Arc<ServerTls>>, tx: mpsc::Sender<Accepted>) {
    loop {
        match l.accept().await {
            Ok((sock, peer)) => {
                let tls = tls.clone();
                if tx.send(Accepted { sock, peer, tls }).await.is_err() {
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
