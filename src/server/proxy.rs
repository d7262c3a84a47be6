//! A slave's client connections: forwarded to the master, so clients never need
//! to know which node is master.
//!
//! The proxy copies bytes both ways without decoding AMQP, except that it passes
//! the master's bytes on only in whole frames. That is what lets it close the
//! client cleanly when the master changes or goes away: a Connection.Close with
//! 320 CONNECTION_FORCED after the last whole frame, never in the middle of one,
//! so the client sees what it sees when RabbitMQ closes a connection, and
//! reconnects.
//!
//! Before the client's first byte it writes a PROXY header (`forwarded.rs`)
//! with the client's address and TLS session, so the master applies the
//! loopback rule to the client, not to this node, and can offer SASL
//! EXTERNAL to a client whose certificate this node verified.

use super::forwarded::{self, Forwarded};
use super::socket::{ClientSocket, IntoHalves};
use crate::error::ReplyCode;
use bytes::{Buf, BytesMut};
use stablemq_cluster::driver::BrokerStatus;
use stablemq_cluster::replication::NodeId;
use stablemq_cluster::transport::auth::Cookie;
use stablemq_protocol::methods::connection as mconn;
use stablemq_protocol::types::ShortString;
use stablemq_protocol::{AMQPClass, Frame, encode_frame};
use std::net::SocketAddr;
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
    /// The cluster cookie that signs the forwarding header.
    pub(super) cookie: Option<Cookie>,
}

/// Forward `client` to the master until either side closes, the master
/// changes, or the node shuts down. A TLS client's session ends here: the
/// master is reached over plain AMQP.
pub(super) async fn run<S: IntoHalves>(
    client: ClientSocket<S>,
    to: Upstream,
    mut shutdown: watch::Receiver<bool>,
) {
    let Upstream {
        addr: upstream,
        master: master_id,
        mut status,
        cookie,
    } = to;
    let Some(mut up) = connect_master(upstream).await else {
        return;
    };
    let me = Forwarded {
        peer: client.peer,
        local: client.local.unwrap_or(client.peer),
        tls: client.tls,
    };
    let head = forwarded::header(&me, cookie.as_ref(), super::master_task::now_ms());
    if up.write_all(&head).await.is_err() {
        tracing::warn!(%upstream, "the master closed the connection; dropping client");
        return;
    }
    let (mut crd, mut cwr) = client.stream.into_halves();
    let (mut urd, mut uwr) = up.into_split();
    let mut cbuf = BytesMut::with_capacity(64 * 1024);
    let mut ubuf = BytesMut::with_capacity(64 * 1024);
    let reason = loop {
        tokio::select! {
            r = crd.read_buf(&mut cbuf) => match r {
                Ok(n) if n > 0 => {
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
                        if super::socket::write_out(&mut cwr, &ubuf[..whole]).await.is_err() {
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
    if super::socket::write_out(cwr, &out).await.is_err() {
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
}
