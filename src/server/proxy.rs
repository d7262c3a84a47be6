//! A slave's client connections: forwarded to the master, so clients never need
//! to know which node is master.
//!
//! The proxy copies bytes both ways without decoding AMQP, except that it passes
//! the master's bytes on only in whole frames. That is what lets it close the
//! client cleanly when the master changes or goes away: a Connection.Close with
//! 320 CONNECTION_FORCED after the last whole frame, never in the middle of one,
//! so the client sees what it sees when RabbitMQ closes a connection, and
//! reconnects.

use crate::error::ReplyCode;
use bytes::{Buf, BytesMut};
use stablemq_cluster::driver::BrokerStatus;
use stablemq_cluster::replication::NodeId;
use stablemq_protocol::methods::connection as mconn;
use stablemq_protocol::types::ShortString;
use stablemq_protocol::{AMQPClass, Frame, encode_frame};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// How long a client has to answer our close before the socket is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// How long to try reaching the master.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Forward `client` to `master` (node id `master_id`, AMQP at `upstream`) until
/// either side closes, the master changes, or the node shuts down.
pub async fn run(
    client: TcpStream,
    upstream: SocketAddr,
    master_id: NodeId,
    mut status: watch::Receiver<BrokerStatus>,
    mut shutdown: watch::Receiver<bool>,
) {
    let up = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(upstream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(err)) => {
            tracing::warn!(%upstream, %err, "cannot reach the master; dropping client");
            return;
        }
        Err(_) => {
            tracing::warn!(%upstream, "master did not answer; dropping client");
            return;
        }
    };
    let _ = up.set_nodelay(true);
    let (mut crd, mut cwr) = client.into_split();
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
    let mut out = BytesMut::new();
    encode_frame(&close_frame(reason), &mut out);
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

fn close_frame(reason: &str) -> Frame {
    Frame::Method {
        channel: 0,
        method: AMQPClass::Connection(mconn::AMQPMethod::Close(mconn::Close {
            reply_code: ReplyCode::ConnectionForced as u16,
            reply_text: ShortString::from(format!("CONNECTION_FORCED - {reason}")),
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
        encode_frame(&close_frame("a"), &mut two);
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
