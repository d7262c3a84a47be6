//! Binding the AMQP listeners.
//!
//! By default StableMQ listens on every IPv4 and IPv6 address, as RabbitMQ does, so
//! clients that dial `localhost` as `::1` reach it too. IPv6 sockets are v6-only so
//! that `0.0.0.0` and `::` can share a port.

use socket2::{Domain, Protocol, Socket, Type};
use std::net::{IpAddr, SocketAddr};
use tokio::net::TcpListener;

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
