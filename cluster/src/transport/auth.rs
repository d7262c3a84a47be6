//! Node authentication: when a node-to-node connection opens, both ends prove
//! they hold the cluster's shared secret, the *cookie* (RabbitMQ's nodes do
//! the same with the Erlang cookie).
//!
//! Why both ends: the accepting node must not take replication messages from
//! anyone who can reach its port (a forged `Fence` or `Append` could depose a
//! master or plant entries), and the dialing node must not stream the log,
//! which holds every message body, to whoever answers on a peer's address.
//!
//! The exchange, before any frame (`mac` is HMAC-SHA256 keyed by the cookie):
//!
//! 1. acceptor → dialer, *hello*: magic, version, whether a cookie is
//!    required, and a fresh nonce `na`;
//! 2. dialer → acceptor, *proof*: magic, version, the dialer's and the
//!    intended acceptor's node ids, a fresh nonce `nd`, and
//!    `mac("dialer" | na | nd | from | to)`;
//! 3. acceptor → dialer, *verdict*: a status and
//!    `mac("acceptor" | na | nd | from | to)`.
//!
//! Fresh nonces on both sides mean a recorded exchange cannot be replayed,
//! and the direction label means one side's proof cannot be reflected as the
//! other's. Only MACs cross the wire, never the cookie.
//!
//! A node without a cookie runs unauthenticated (and says so at start-up), so
//! two such nodes still talk; a node *with* a cookie refuses a peer without
//! one in either direction, so a half-configured cluster fails loudly rather
//! than quietly trusting. Frames after the exchange are not encrypted or
//! MAC'd: like Erlang distribution without TLS, this keeps strangers out but
//! does not defend against someone who can rewrite packets on the path.
//!
//! The message layouts and checks are pure functions; [`accept`] and [`dial`]
//! only move their bytes.

use std::fmt;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::replication::NodeId;

const MAGIC: &[u8; 4] = b"SMQA";
/// Version of this exchange (not of the frames after it, see [`crate::wire`]).
const VERSION: u8 = 1;
const NONCE: usize = 32;
/// Bytes of an HMAC-SHA256 proof ([`Cookie::sign`]).
pub const MAC_LEN: usize = 32;
/// The shortest cookie accepted: shorter secrets can be guessed offline from
/// one recorded exchange.
pub const MIN_COOKIE_LEN: usize = 16;

const HELLO_LEN: usize = 4 + 1 + 1 + NONCE;
const PROOF_LEN: usize = 4 + 1 + 8 + 8 + NONCE + MAC_LEN;
const VERDICT_LEN: usize = 1 + MAC_LEN;

const FLAG_COOKIE_REQUIRED: u8 = 1;

/// The cluster's shared secret. Its `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Cookie(Arc<[u8]>);

impl Cookie {
    /// A cookie from the secret's bytes; refused when shorter than
    /// [`MIN_COOKIE_LEN`].
    pub fn new(secret: &[u8]) -> Result<Cookie, AuthError> {
        if secret.len() < MIN_COOKIE_LEN {
            return Err(AuthError::ShortCookie(secret.len()));
        }
        Ok(Cookie(secret.into()))
    }

    fn mac(
        &self,
        label: &[u8],
        na: &[u8; NONCE],
        nd: &[u8; NONCE],
        from: NodeId,
        to: NodeId,
    ) -> HmacSha256 {
        // A key of any length is valid for HMAC; `new_from_slice` cannot fail.
        let mut mac = match HmacSha256::new_from_slice(&self.0) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC takes keys of any length"),
        };
        mac.update(label);
        mac.update(na);
        mac.update(nd);
        mac.update(&from.to_be_bytes());
        mac.update(&to.to_be_bytes());
        mac
    }
}

impl Cookie {
    /// A proof that whoever wrote `parts` (under `label`, which keeps proofs
    /// of one purpose from passing for another) holds this cookie: an
    /// HMAC-SHA256 over the label and each part with its length. The broker
    /// uses it for what a slave tells the master about a client it forwards.
    pub fn sign(&self, label: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
        self.keyed(label, parts).finalize().into_bytes().into()
    }

    /// Whether `tag` is [`Cookie::sign`] of the same label and parts
    /// (compared in constant time).
    pub fn verify(&self, label: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
        self.keyed(label, parts).verify_slice(tag).is_ok()
    }

    fn keyed(&self, label: &[u8], parts: &[&[u8]]) -> HmacSha256 {
        let mut mac = match HmacSha256::new_from_slice(&self.0) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC takes keys of any length"),
        };
        mac.update(&(label.len() as u32).to_be_bytes());
        mac.update(label);
        for p in parts {
            // Lengths first, so that ("ab", "c") and ("a", "bc") differ.
            mac.update(&(p.len() as u32).to_be_bytes());
            mac.update(p);
        }
        mac
    }
}

impl fmt::Debug for Cookie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Cookie(<redacted>)")
    }
}

type HmacSha256 = Hmac<Sha256>;

/// Why a connection was refused during the exchange.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The socket failed or closed mid-exchange.
    #[error("connection failed during node authentication: {0}")]
    Io(#[from] std::io::Error),
    /// The TLS handshake failed: a certificate the other side does not trust,
    /// or TLS on one side only.
    #[error("TLS handshake failed: {0}")]
    Tls(std::io::Error),
    /// The peer is not a StableMQ node of a compatible version.
    #[error("peer did not speak the node handshake (bad magic or version {0})")]
    Protocol(u8),
    /// The peer requires a cookie and this node has none.
    #[error("peer requires a cluster cookie and this node has none ([cluster] cookie_file)")]
    CookieRequired,
    /// This node has a cookie and the peer does not require one: it could be
    /// anybody, so nothing is sent to it.
    #[error("peer has no cluster cookie; refusing to replicate to an unauthenticated node")]
    PeerUnauthenticated,
    /// The proof was computed with another cookie.
    #[error("cluster cookie mismatch")]
    BadCookie,
    /// The dialer meant another node: the addresses in the configs disagree.
    #[error("peer dialed node {wanted} but this is node {me}")]
    WrongNode {
        /// Whom the dialer wanted.
        wanted: NodeId,
        /// This node.
        me: NodeId,
    },
    /// The node at the peer's address says it is not the node we dialed.
    #[error(
        "the node at this address is not node {0}: the cluster addresses in the configs disagree"
    )]
    NotThatNode(NodeId),
    /// The peer answered the exchange with an unknown status.
    #[error("peer refused the connection (status {0})")]
    Refused(u8),
    /// A configured cookie is too short to be a secret.
    #[error("cluster cookie is {0} bytes; at least {MIN_COOKIE_LEN} are required")]
    ShortCookie(usize),
}

impl AuthError {
    /// Whether this is a configuration problem an operator must fix (logged
    /// loudly), rather than a connection that merely broke.
    pub fn is_config(&self) -> bool {
        !matches!(self, AuthError::Io(_))
    }
}

/// Verdict statuses.
const OK: u8 = 0;
const BAD_COOKIE: u8 = 1;
const WRONG_NODE: u8 = 2;
const PROTOCOL: u8 = 3;

fn nonce() -> [u8; NONCE] {
    let mut n = [0u8; NONCE];
    rand::rng().fill_bytes(&mut n);
    n
}

fn hello(cookie: Option<&Cookie>, na: &[u8; NONCE]) -> [u8; HELLO_LEN] {
    let mut out = [0u8; HELLO_LEN];
    out[..4].copy_from_slice(MAGIC);
    out[4] = VERSION;
    out[5] = if cookie.is_some() {
        FLAG_COOKIE_REQUIRED
    } else {
        0
    };
    out[6..].copy_from_slice(na);
    out
}

/// The dialer's reading of a hello: the acceptor's nonce, or why not to go on.
fn read_hello(msg: &[u8; HELLO_LEN], cookie: Option<&Cookie>) -> Result<[u8; NONCE], AuthError> {
    if &msg[..4] != MAGIC || msg[4] != VERSION {
        return Err(AuthError::Protocol(msg[4]));
    }
    let required = msg[5] & FLAG_COOKIE_REQUIRED != 0;
    match (cookie.is_some(), required) {
        (false, true) => return Err(AuthError::CookieRequired),
        (true, false) => return Err(AuthError::PeerUnauthenticated),
        _ => {}
    }
    let mut na = [0u8; NONCE];
    na.copy_from_slice(&msg[6..]);
    Ok(na)
}

fn proof(
    cookie: Option<&Cookie>,
    na: &[u8; NONCE],
    nd: &[u8; NONCE],
    from: NodeId,
    to: NodeId,
) -> [u8; PROOF_LEN] {
    let mut out = [0u8; PROOF_LEN];
    out[..4].copy_from_slice(MAGIC);
    out[4] = VERSION;
    out[5..13].copy_from_slice(&from.to_be_bytes());
    out[13..21].copy_from_slice(&to.to_be_bytes());
    out[21..21 + NONCE].copy_from_slice(nd);
    if let Some(c) = cookie {
        let tag = c.mac(b"dialer", na, nd, from, to).finalize().into_bytes();
        out[21 + NONCE..].copy_from_slice(&tag);
    }
    out
}

/// What the acceptor makes of a proof: the verdict to send back and, when it
/// is `OK`, the authenticated dialer.
struct Checked {
    verdict: [u8; VERDICT_LEN],
    outcome: Result<NodeId, AuthError>,
}

fn check_proof(
    msg: &[u8; PROOF_LEN],
    cookie: Option<&Cookie>,
    me: NodeId,
    na: &[u8; NONCE],
) -> Checked {
    let refuse = |status: u8, err: AuthError| {
        let mut verdict = [0u8; VERDICT_LEN];
        verdict[0] = status;
        Checked {
            verdict,
            outcome: Err(err),
        }
    };
    if &msg[..4] != MAGIC || msg[4] != VERSION {
        return refuse(PROTOCOL, AuthError::Protocol(msg[4]));
    }
    let id = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&msg[at..at + 8]);
        NodeId::from_be_bytes(b)
    };
    let (from, to) = (id(5), id(13));
    let mut nd = [0u8; NONCE];
    nd.copy_from_slice(&msg[21..21 + NONCE]);
    if to != me {
        return refuse(WRONG_NODE, AuthError::WrongNode { wanted: to, me });
    }
    let mut verdict = [0u8; VERDICT_LEN];
    if let Some(c) = cookie {
        // Constant time: a timing difference must not reveal the tag.
        if c.mac(b"dialer", na, &nd, from, to)
            .verify_slice(&msg[21 + NONCE..])
            .is_err()
        {
            return refuse(BAD_COOKIE, AuthError::BadCookie);
        }
        let tag = c
            .mac(b"acceptor", na, &nd, from, to)
            .finalize()
            .into_bytes();
        verdict[1..].copy_from_slice(&tag);
    }
    verdict[0] = OK;
    Checked {
        verdict,
        outcome: Ok(from),
    }
}

/// The dialer's reading of the verdict.
fn read_verdict(
    msg: &[u8; VERDICT_LEN],
    cookie: Option<&Cookie>,
    na: &[u8; NONCE],
    nd: &[u8; NONCE],
    me: NodeId,
    peer: NodeId,
) -> Result<(), AuthError> {
    match msg[0] {
        OK => {}
        BAD_COOKIE => return Err(AuthError::BadCookie),
        WRONG_NODE => return Err(AuthError::NotThatNode(peer)),
        other => return Err(AuthError::Refused(other)),
    }
    if let Some(c) = cookie {
        c.mac(b"acceptor", na, nd, me, peer)
            .verify_slice(&msg[1..])
            .map_err(|_| AuthError::BadCookie)?;
    }
    Ok(())
}

/// Run the acceptor's side on a fresh connection; returns the authenticated
/// dialer's node id. The caller bounds it with a timeout.
pub async fn accept<S>(
    stream: &mut S,
    me: NodeId,
    cookie: Option<&Cookie>,
) -> Result<NodeId, AuthError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let na = nonce();
    stream.write_all(&hello(cookie, &na)).await?;
    stream.flush().await?; // a TLS stream holds what is written until flushed
    let mut msg = [0u8; PROOF_LEN];
    stream.read_exact(&mut msg).await?;
    let checked = check_proof(&msg, cookie, me, &na);
    // Tell the dialer why, so its operator sees the reason in its own log.
    stream.write_all(&checked.verdict).await?;
    stream.flush().await?;
    checked.outcome
}

/// Run the dialer's side on a fresh connection to node `peer`. The caller
/// bounds it with a timeout.
pub async fn dial<S>(
    stream: &mut S,
    me: NodeId,
    peer: NodeId,
    cookie: Option<&Cookie>,
) -> Result<(), AuthError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut msg = [0u8; HELLO_LEN];
    stream.read_exact(&mut msg).await?;
    let na = read_hello(&msg, cookie)?;
    let nd = nonce();
    stream.write_all(&proof(cookie, &na, &nd, me, peer)).await?;
    stream.flush().await?;
    let mut verdict = [0u8; VERDICT_LEN];
    stream.read_exact(&mut verdict).await?;
    read_verdict(&verdict, cookie, &na, &nd, me, peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cookie(s: &str) -> Cookie {
        Cookie::new(s.as_bytes()).unwrap()
    }

    /// Run both sides of the pure exchange; the dialer's and acceptor's results.
    fn exchange(
        dialer: Option<&Cookie>,
        acceptor: Option<&Cookie>,
        from: NodeId,
        to: NodeId,
        me: NodeId,
    ) -> (Result<(), AuthError>, Option<Result<NodeId, AuthError>>) {
        let na = nonce();
        let na_seen = match read_hello(&hello(acceptor, &na), dialer) {
            Ok(na) => na,
            Err(e) => return (Err(e), None),
        };
        let nd = nonce();
        let checked = check_proof(&proof(dialer, &na_seen, &nd, from, to), acceptor, me, &na);
        let dialer_result = read_verdict(&checked.verdict, dialer, &na, &nd, from, to);
        (dialer_result, Some(checked.outcome))
    }

    #[test]
    fn the_same_cookie_authenticates_both_ways() {
        let c = cookie("a-cluster-secret-of-some-length");
        let (d, a) = exchange(Some(&c), Some(&c), 2, 1, 1);
        assert!(d.is_ok(), "{d:?}");
        assert_eq!(a.unwrap().unwrap(), 2);
    }

    #[test]
    fn another_cookie_is_refused_and_the_dialer_learns_why() {
        let (d, a) = exchange(
            Some(&cookie("the-dialers-secret-cookie")),
            Some(&cookie("the-acceptors-secret-cookie")),
            2,
            1,
            1,
        );
        assert!(matches!(a, Some(Err(AuthError::BadCookie))), "{a:?}");
        assert!(matches!(d, Err(AuthError::BadCookie)), "{d:?}");
    }

    #[test]
    fn a_cookie_on_one_side_only_is_refused_by_that_side() {
        let c = cookie("a-cluster-secret-of-some-length");
        let (d, a) = exchange(None, Some(&c), 2, 1, 1);
        assert!(matches!(d, Err(AuthError::CookieRequired)), "{d:?}");
        assert!(a.is_none(), "the dialer sends no proof");
        let (d, a) = exchange(Some(&c), None, 2, 1, 1);
        assert!(matches!(d, Err(AuthError::PeerUnauthenticated)), "{d:?}");
        assert!(a.is_none());
    }

    #[test]
    fn no_cookie_anywhere_still_connects() {
        let (d, a) = exchange(None, None, 3, 1, 1);
        assert!(d.is_ok());
        assert_eq!(a.unwrap().unwrap(), 3);
    }

    #[test]
    fn a_proof_for_another_node_or_nonce_is_refused() {
        let c = cookie("a-cluster-secret-of-some-length");
        let (_, a) = exchange(Some(&c), Some(&c), 2, 3, 1);
        assert!(
            matches!(a, Some(Err(AuthError::WrongNode { wanted: 3, me: 1 }))),
            "{a:?}"
        );
        // A proof recorded for one hello does not pass for the next one.
        let (na1, na2, nd) = (nonce(), nonce(), nonce());
        let recorded = proof(Some(&c), &na1, &nd, 2, 1);
        let checked = check_proof(&recorded, Some(&c), 1, &na2);
        assert!(matches!(checked.outcome, Err(AuthError::BadCookie)));
        // A verdict cannot be forged by reflecting the dialer's own tag.
        let mut reflected = [0u8; VERDICT_LEN];
        reflected[1..].copy_from_slice(&proof(Some(&c), &na1, &nd, 2, 1)[21 + NONCE..]);
        assert!(matches!(
            read_verdict(&reflected, Some(&c), &na1, &nd, 2, 1),
            Err(AuthError::BadCookie)
        ));
    }

    #[test]
    fn garbage_is_not_a_hello_and_short_cookies_are_refused() {
        let junk = [7u8; HELLO_LEN];
        assert!(matches!(
            read_hello(&junk, None),
            Err(AuthError::Protocol(7))
        ));
        assert!(matches!(
            Cookie::new(b"short"),
            Err(AuthError::ShortCookie(5))
        ));
        assert_eq!(
            format!("{:?}", cookie("do-not-print-this-secret")),
            "Cookie(<redacted>)"
        );
    }
}
