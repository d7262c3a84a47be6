//! A client a slave forwards, as the master sees it: its real address and
//! the TLS session that ended on the slave.
//!
//! A slave proxies its clients to the master's AMQP port in whole frames
//! (`proxy.rs`). Without more, the master would see the slave's address and
//! a plain connection: the loopback rule would judge the slave, and SASL
//! EXTERNAL could not be offered to a client whose certificate the slave
//! verified. So before the client's first byte, the slave writes a PROXY
//! protocol v2 header (HAProxy's specification, built and parsed with the
//! `ppp` crate) with the client's source and destination addresses and two
//! StableMQ TLVs: the client's TLS session (JSON of [`TlsInfo`], with the time
//! it was written) and, when the cluster has a cookie, an HMAC-SHA256 of all
//! of it under the cookie.
//!
//! The master believes a header only from a cluster node's IP and, with a
//! cookie, only with a valid proof written within [`SKEW_MS`] of its clock.
//! Anything else that starts with the PROXY signature is closed and logged:
//! a client cannot claim another address or a certificate it does not hold.
//! A connection that does not start with the signature is an ordinary client.
//!
//! What it is not: RabbitMQ's `proxy_protocol` setting for load balancers in
//! front of the broker (not done); only StableMQ nodes write these headers.

use crate::tls::TlsInfo;
use ppp::v2;
use stablemq_cluster::transport::auth::Cookie;
use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::net::TcpStream;

/// The 12 bytes every PROXY protocol v2 header starts with.
const SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// Signature, version/command, family/protocol and the 2-byte length.
const FIXED: usize = 16;
/// The largest header accepted: two addresses, a TLS session and a MAC fit
/// in well under this; a larger length is a stranger's.
const HEADER_MAX: usize = 8192;
/// StableMQ's TLV (in the range the spec leaves to applications): the
/// client's TLS session and when the header was written.
const TLV_CLIENT: u8 = 0xE0;
/// StableMQ's TLV: the cookie's proof over the addresses and [`TLV_CLIENT`].
const TLV_PROOF: u8 = 0xE1;
/// The label of the proof: a proof for anything else does not pass for one.
const PROOF_LABEL: &[u8] = b"stablemq forwarded client v1";
/// How far the writer's clock may be from ours: a header recorded on the
/// wire cannot be replayed after this.
pub(super) const SKEW_MS: u64 = 60_000;

/// The client a slave forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Forwarded {
    /// The client's address.
    pub(crate) peer: SocketAddr,
    /// The address it dialed (on the slave).
    pub(crate) local: SocketAddr,
    /// Its TLS session, when it came over AMQPS.
    pub(crate) tls: Option<TlsInfo>,
}

/// What [`TLV_CLIENT`] carries.
#[derive(serde::Serialize, serde::Deserialize)]
struct ClientTlv {
    /// When the slave wrote the header (ms since the Unix epoch).
    at_ms: u64,
    tls: Option<TlsInfo>,
}

/// Whom the master believes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Trust {
    /// The cluster nodes' IPs: only they write headers.
    pub(crate) nodes: HashSet<IpAddr>,
    /// The cluster cookie: with one, a header needs its proof.
    pub(crate) cookie: Option<Cookie>,
}

/// Why a header was not believed. The connection is closed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not a header this module writes.
    #[error("malformed PROXY header: {0}")]
    Malformed(String),
    /// From an address that is no cluster node's.
    #[error("PROXY header from {0}, which is not a cluster node")]
    Untrusted(IpAddr),
    /// No proof, or a proof made with another cookie.
    #[error("PROXY header without a valid cluster-cookie proof")]
    BadProof,
    /// Written too long ago (or by a clock far from ours).
    #[error("PROXY header written {0} ms from now, more than {SKEW_MS} ms")]
    Stale(i64),
    /// The client did not send a whole header in time.
    #[error("PROXY header incomplete after {0:?}")]
    Timeout(Duration),
    /// The socket failed.
    #[error("reading the PROXY header: {0}")]
    Io(String),
}

/// The header a slave writes to the master before `client`'s bytes.
pub(crate) fn header(client: &Forwarded, cookie: Option<&Cookie>, now_ms: u64) -> Vec<u8> {
    let body = serde_json::to_vec(&ClientTlv {
        at_ms: now_ms,
        tls: client.tls.clone(),
    })
    .unwrap_or_default();
    let (peer, local) = same_family(client.peer, client.local);
    let mut b = v2::Builder::with_addresses(
        v2::Version::Two | v2::Command::Proxy,
        v2::Protocol::Stream,
        (peer, local),
    );
    b = match b.write_tlv(TLV_CLIENT, body.as_slice()) {
        Ok(b) => b,
        Err(_) => unreachable!("writing to a Vec does not fail"),
    };
    if let Some(cookie) = cookie {
        let (p, l) = (peer.to_string(), local.to_string());
        let proof = cookie.sign(PROOF_LABEL, &[p.as_bytes(), l.as_bytes(), &body]);
        b = match b.write_tlv(TLV_PROOF, proof.as_slice()) {
            Ok(b) => b,
            Err(_) => unreachable!("writing to a Vec does not fail"),
        };
    }
    match b.build() {
        Ok(bytes) => bytes,
        Err(_) => unreachable!("a header of two addresses and two short TLVs builds"),
    }
}

/// PROXY v2 carries both addresses in one family: an IPv4 address goes as
/// its IPv6-mapped form when the other is IPv6.
fn same_family(a: SocketAddr, b: SocketAddr) -> (SocketAddr, SocketAddr) {
    let v6 = |s: SocketAddr| match s {
        SocketAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.ip().to_ipv6_mapped()), v4.port()),
        v6 => v6,
    };
    if a.is_ipv4() == b.is_ipv4() {
        (a, b)
    } else {
        (v6(a), v6(b))
    }
}

/// How many bytes the header at the start of `head` takes, once its fixed
/// part is there; `None` when `head` does not start with the signature.
fn header_len(head: &[u8; FIXED]) -> Option<usize> {
    if &head[..12] != SIGNATURE {
        return None;
    }
    Some(FIXED + u16::from_be_bytes([head[14], head[15]]) as usize)
}

/// Read and judge the header `bytes` (the whole of it) that arrived from `from`.
pub(crate) fn parse(
    bytes: &[u8],
    from: IpAddr,
    trust: &Trust,
    now_ms: u64,
) -> Result<Forwarded, Refused> {
    if !trust.nodes.contains(&from) {
        return Err(Refused::Untrusted(from));
    }
    let h = v2::Header::try_from(bytes).map_err(|e| Refused::Malformed(e.to_string()))?;
    let (peer, local) = match h.addresses {
        v2::Addresses::IPv4(a) => (
            SocketAddr::new(a.source_address.into(), a.source_port),
            SocketAddr::new(a.destination_address.into(), a.destination_port),
        ),
        v2::Addresses::IPv6(a) => (
            SocketAddr::new(a.source_address.into(), a.source_port),
            SocketAddr::new(a.destination_address.into(), a.destination_port),
        ),
        other => return Err(Refused::Malformed(format!("addresses {other:?}"))),
    };
    let (mut body, mut proof) = (None, None);
    for tlv in h.tlvs() {
        let tlv = tlv.map_err(|e| Refused::Malformed(e.to_string()))?;
        match tlv.kind {
            TLV_CLIENT => body = Some(tlv.value.to_vec()),
            TLV_PROOF => proof = Some(tlv.value.to_vec()),
            _ => {}
        }
    }
    let body = body.ok_or_else(|| Refused::Malformed("no client TLV".into()))?;
    if let Some(cookie) = &trust.cookie {
        let (p, l) = (peer.to_string(), local.to_string());
        let parts = [p.as_bytes(), l.as_bytes(), &body];
        let ok = proof.is_some_and(|tag| cookie.verify(PROOF_LABEL, &parts, &tag));
        if !ok {
            return Err(Refused::BadProof);
        }
    }
    let client: ClientTlv =
        serde_json::from_slice(&body).map_err(|e| Refused::Malformed(e.to_string()))?;
    let skew = client.at_ms as i64 - now_ms as i64;
    if skew.unsigned_abs() > SKEW_MS {
        return Err(Refused::Stale(skew));
    }
    Ok(Forwarded {
        peer: unmapped(peer),
        local: unmapped(local),
        tls: client.tls,
    })
}

/// An IPv6-mapped IPv4 address back in its own family.
fn unmapped(s: SocketAddr) -> SocketAddr {
    match s.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), s.port()),
            None => s,
        },
        IpAddr::V4(_) => s,
    }
}

/// Take a header off the front of `sock`, if it starts with one: `Ok(None)`
/// for an ordinary client (nothing is consumed), `Ok(Some)` for a client a
/// node forwarded, `Err` for a header not to be believed. Bounded by `within`.
pub(crate) async fn take(
    sock: &mut TcpStream,
    from: IpAddr,
    trust: &Trust,
    within: Duration,
) -> Result<Option<Forwarded>, Refused> {
    match tokio::time::timeout(within, take_unbounded(sock, from, trust)).await {
        Ok(r) => r,
        Err(_) => Err(Refused::Timeout(within)),
    }
}

async fn take_unbounded(
    sock: &mut TcpStream,
    from: IpAddr,
    trust: &Trust,
) -> Result<Option<Forwarded>, Refused> {
    use tokio::io::AsyncReadExt;
    let io = |e: std::io::Error| Refused::Io(e.to_string());
    let mut head = [0u8; FIXED];
    // Peek until the bytes so far are not the signature, or the fixed part
    // is all there. An AMQP client's header differs at its first byte.
    loop {
        let n = sock.peek(&mut head).await.map_err(io)?;
        if n == 0 {
            return Ok(None);
        }
        if head[..n.min(12)] != SIGNATURE[..n.min(12)] {
            return Ok(None);
        }
        if n == FIXED {
            break;
        }
        // A partial signature: a slave writes the header in one write, so
        // the rest is on its way.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let len = header_len(&head).ok_or_else(|| Refused::Malformed("signature".into()))?;
    if len > HEADER_MAX {
        return Err(Refused::Malformed(format!("{len} bytes")));
    }
    let mut bytes = vec![0u8; len];
    sock.read_exact(&mut bytes).await.map_err(io)?;
    parse(&bytes, from, trust, super::master_task::now_ms()).map(Some)
}

#[cfg(test)]
mod tests;
