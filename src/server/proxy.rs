//! A slave's client connections: forwarded to the master, so clients never need
//! to know which node is master.
//!
//! The proxy copies bytes both ways without decoding AMQP, except that it passes
//! the master's bytes on only in whole frames. That is what lets it close the
//! client cleanly when the master changes or goes away: a Connection.Close with
//! 320 CONNECTION_FORCED after the last whole frame, never in the middle of one,
//! so the client sees what it sees when RabbitMQ closes a connection, and
//! reconnects.

use super::socket::{ClientSocket, IntoHalves};
use crate::config::Config;
use crate::error::ReplyCode;
use bytes::{Buf, BytesMut};
use stablemq_cluster::driver::BrokerStatus;
use stablemq_cluster::replication::NodeId;
use stablemq_protocol::methods::connection as mconn;
use stablemq_protocol::types::ShortString;
use stablemq_protocol::{AMQPClass, Frame, decode_frame, encode_frame};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// How long a client has to answer our close before the socket is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// How long to try reaching the master.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Where a slave forwards a client: the master's node and AMQP address, and
/// the status that says when the master changes.
pub(super) struct Upstream {
    /// The master's AMQP address.
    pub(super) addr: SocketAddr,
    /// The master's node id.
    pub(super) master: NodeId,
    /// The broker driver's status.
    pub(super) status: watch::Receiver<BrokerStatus>,
}

/// Forward `client` to the master until either side closes, the master
/// changes, or the node shuts down. A TLS client's session ends here: the
/// master is reached over plain AMQP.
pub(super) async fn run<S: IntoHalves>(
    client: ClientSocket<S>,
    to: Upstream,
    mut shutdown: watch::Receiver<bool>,
    config: Arc<Config>,
) {
    let Upstream {
        addr: upstream,
        master: master_id,
        mut status,
    } = to;
    let client_ip = Some(client.peer.ip());
    let Some(up) = connect_master(upstream).await else {
        return;
    };
    let (mut crd, mut cwr) = client.stream.into_halves();
    let (mut urd, mut uwr) = up.into_split();
    let mut cbuf = BytesMut::with_capacity(64 * 1024);
    let mut ubuf = BytesMut::with_capacity(64 * 1024);
    // Until the client's start-ok is seen, its bytes are held back: the master
    // sees the proxy's address, not the client's, so the loopback-only rule
    // for users like guest is applied here, as RabbitMQ applies it.
    let mut login_checked = false;
    let reason = loop {
        tokio::select! {
            r = crd.read_buf(&mut cbuf) => match r {
                Ok(n) if n > 0 => {
                    if !login_checked {
                        match check_login(&config, client_ip, &cbuf) {
                            Login::NeedMore => continue,
                            Login::Pass => login_checked = true,
                            Login::Refuse(text) => return refuse_login(&mut cwr, &text).await,
                        }
                    }
                    if uwr.write_all(&cbuf).await.is_err() {
                        break Some("the master closed the connection");
                    }
                    cbuf.clear();
                }
                // The client left: nothing to tell it.
                _ => break None,
            },
            r = urd.read_buf(&mut ubuf) => match r {
                Ok(n) if n > 0 => {
                    let whole = whole_frames(&ubuf);
                    if whole > 0 {
                        if cwr.write_all(&ubuf[..whole]).await.is_err() {
                            break None;
                        }
                        ubuf.advance(whole);
                    }
                }
                // A clean close from the master was forwarded whole already;
                // anything else is the master going away under us.
                _ => break Some("the master went away; reconnect"),
            },
            r = status.changed() => {
                let moved = r.is_err() || status.borrow_and_update().master != Some(master_id);
                if moved {
                    break Some("the master changed; reconnect");
                }
            }
            _ = shutdown.changed() => break Some("broker shutdown"),
        }
    };
    drop(uwr);
    drop(urd);
    let Some(reason) = reason else { return };
    close_forced(&mut crd, &mut cwr, reason).await;
}

/// Connect to the master's AMQP address, or log why not (the client is then
/// dropped).
async fn connect_master(upstream: SocketAddr) -> Option<TcpStream> {
    let up = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(upstream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(err)) => {
            tracing::warn!(%upstream, %err, "cannot reach the master; dropping client");
            return None;
        }
        Err(_) => {
            tracing::warn!(%upstream, "master did not answer; dropping client");
            return None;
        }
    };
    let _ = up.set_nodelay(true);
    Some(up)
}

/// Close a client the loopback rule refuses: 403 with `text`, then hang up.
async fn refuse_login<W: AsyncWrite + Unpin>(cwr: &mut W, text: &str) {
    let mut out = BytesMut::new();
    encode_frame(&close_frame(ReplyCode::AccessRefused, text), &mut out);
    let _ = cwr.write_all(&out).await;
    let _ = cwr.shutdown().await;
}

/// Close the client with 320 CONNECTION_FORCED and `reason`, after the last
/// whole frame it was sent.
async fn close_forced<R, W>(crd: &mut R, cwr: &mut W, reason: &str)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut out = BytesMut::new();
    encode_frame(
        &close_frame(
            ReplyCode::ConnectionForced,
            &format!("CONNECTION_FORCED - {reason}"),
        ),
        &mut out,
    );
    if cwr.write_all(&out).await.is_err() {
        return;
    }
    // Give the client a moment to answer close-ok (or hang up) so it sees a
    // clean close rather than a reset.
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        let mut sink = [0u8; 4096];
        while let Ok(n) = crd.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
    let _ = cwr.shutdown().await;
}

/// How many leading bytes of `buf` are whole AMQP frames (or the 8-byte
/// protocol header a server sends back when it refuses the client's).
fn whole_frames(buf: &[u8]) -> usize {
    if buf.starts_with(b"AMQP") {
        return if buf.len() >= 8 { 8 } else { 0 };
    }
    let mut at = 0;
    while buf.len() - at >= 7 {
        let size = u32::from_be_bytes([buf[at + 3], buf[at + 4], buf[at + 5], buf[at + 6]]);
        let end = at + 7 + size as usize + 1;
        if end > buf.len() {
            break;
        }
        at = end;
    }
    at
}

fn close_frame(code: ReplyCode, text: &str) -> Frame {
    Frame::Method {
        channel: 0,
        method: AMQPClass::Connection(mconn::AMQPMethod::Close(mconn::Close {
            reply_code: code as u16,
            reply_text: ShortString::from(text.to_string()),
            class_id: 0,
            method_id: 0,
        })),
    }
}

/// What the proxy does with a client's first bytes.
#[derive(Debug, PartialEq)]
enum Login {
    /// The protocol header and start-ok are not all here yet.
    NeedMore,
    /// Forward everything from now on.
    Pass,
    /// Close the client with 403 and this text.
    Refuse(String),
}

/// Apply `loopback_users` to a client the master cannot see: look at the
/// protocol header and the first frame (start-ok). Anything unexpected passes,
/// and the master answers it as it would any client.
fn check_login(config: &Config, client: Option<std::net::IpAddr>, buf: &[u8]) -> Login {
    let Some(ip) = client else { return Login::Pass };
    if crate::auth::is_loopback(ip) || config.loopback_users.is_empty() {
        return Login::Pass;
    }
    if buf.len() < 8 {
        return Login::NeedMore;
    }
    if &buf[..4] != b"AMQP" {
        return Login::Pass;
    }
    let mut rest = BytesMut::from(&buf[8..]);
    let frame = match decode_frame(&mut rest, 1 << 20) {
        Ok(Some(f)) => f,
        Ok(None) => return Login::NeedMore,
        Err(_) => return Login::Pass,
    };
    let Frame::Method {
        method: AMQPClass::Connection(mconn::AMQPMethod::StartOk(s)),
        ..
    } = frame
    else {
        return Login::Pass;
    };
    match crate::auth::parse_response(s.mechanism.as_str(), s.response.as_bytes()) {
        Ok((user, _)) if config.loopback_users.contains(&user) => Login::Refuse(format!(
            "ACCESS_REFUSED - user '{user}' can only connect via localhost"
        )),
        _ => Login::Pass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_frames_pass() {
        let mut two = BytesMut::new();
        encode_frame(&close_frame(ReplyCode::ConnectionForced, "a"), &mut two);
        let one = two.len();
        encode_frame(&Frame::Heartbeat { channel: 0 }, &mut two);
        assert_eq!(whole_frames(&two), two.len());
        assert_eq!(whole_frames(&two[..two.len() - 1]), one);
        assert_eq!(whole_frames(&two[..one - 1]), 0);
        assert_eq!(whole_frames(&two[..3]), 0);
        assert_eq!(whole_frames(b"AMQP\x00\x00\x09\x01"), 8);
        assert_eq!(whole_frames(b"AMQP\x00"), 0);
    }

    fn start_ok(user: &str) -> BytesMut {
        let mut out = BytesMut::from(&b"AMQP\x00\x00\x09\x01"[..]);
        let start_ok = mconn::StartOk {
            client_properties: Default::default(),
            mechanism: "PLAIN".into(),
            response: format!("\0{user}\0secret").into(),
            locale: "en_US".into(),
        };
        let method = AMQPClass::Connection(mconn::AMQPMethod::StartOk(start_ok));
        encode_frame(&Frame::Method { channel: 0, method }, &mut out);
        out
    }

    #[test]
    fn loopback_users_are_refused_from_afar_even_through_a_slave() {
        let config = Config::default();
        let far: std::net::IpAddr = "192.0.2.7".parse().unwrap();
        let near: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        let guest = start_ok("guest");
        assert_eq!(
            check_login(&config, Some(far), &guest),
            Login::Refuse("ACCESS_REFUSED - user 'guest' can only connect via localhost".into())
        );
        assert_eq!(check_login(&config, Some(near), &guest), Login::Pass);
        assert_eq!(
            check_login(&config, Some(far), &start_ok("alice")),
            Login::Pass
        );
        assert_eq!(
            check_login(&config, Some(far), &guest[..guest.len() - 1]),
            Login::NeedMore
        );
        assert_eq!(
            check_login(&config, Some(far), &guest[..5]),
            Login::NeedMore
        );
        assert_eq!(
            check_login(&config, Some(far), b"GET / HTTP/1.1\r\n"),
            Login::Pass
        );
    }
}
