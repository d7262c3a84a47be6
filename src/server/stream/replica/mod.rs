//! Reading from replicas: a slave's stream client, served in part here.
//!
//! RabbitMQ's stream clients read from replicas: `metadata` names a
//! stream's leader and replicas, and a consumer connects to a replica so the
//! leader is left to the publishers. A StableMQ slave holds every stable
//! entry in its replica of the broker state (`server::replica`), so it can
//! serve those reads itself: this task relays the client's frames to the
//! master's stream listener (after a forwarding header with the client's
//! address and TLS session, `server::forwarded`, so the master judges and
//! lists the client, not this node), as a plain proxy would, except for the
//! subscriptions [`split::Split`] takes, whose chunks it reads from the
//! replica (`read`, run in the master task) and writes between the master's
//! frames.
//!
//! Nothing unstable can reach a client this way (I1): a replica is fed only
//! stable entries. A read finds the node serving instead of following (it
//! was elected) and ends the connection; the client reconnects, as it does
//! when the old master's connection ends.
//!
//! What it is not: a second implementation of the stream protocol. The
//! master answers everything else, the handshake and its checks included;
//! a byte stream this cannot split (a frame past the client's frame_max,
//! garbage) is relayed as it comes from there on, for the master to answer.

mod read;
mod split;

use super::super::route::ConnContext;
use super::super::socket::{ClientSocket, IntoHalves};
use crate::management::{CoreView, Query};
use crate::metrics::stream_clients::{self, ReplicaClient};
use crate::server::master_task::MasterMsg;
use bytes::{Buf, BufMut, BytesMut};
use read::{ReadAnswer, ReadRequest};
use split::{ClientStep, Split};
use stablemq_protocol::stream::split_frame;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};

/// How much may wait for one side before this stops reading the other.
const BACKLOG: usize = 4 << 20;
/// How long what one side is owed may take to write once the other ended.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a read of the replica may take before the connection ends.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serve a slave's stream client (which has spoken: the caller waited for
/// its first bytes, so a master probing this node never reaches itself):
/// the master at `to` answers it, except the reads this node serves from
/// its replica. `advertise`: this node's stream address as the client
/// reaches it (its TLS one for a TLS client); `applied`: the replica's
/// applied log index, which wakes subscriptions waiting for more;
/// `header`: written to the master first (the client's forwarding header,
/// `server::forwarded`).
pub(in crate::server) async fn serve<S: IntoHalves>(
    ctx: &ConnContext,
    id: u64,
    sock: ClientSocket<S>,
    to: SocketAddr,
    advertise: (String, u16),
    mut applied: watch::Receiver<u64>,
    header: Vec<u8>,
) {
    let Ok(Ok(mut upstream)) =
        tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(to)).await
    else {
        tracing::info!(%to, "the master's stream listener did not answer; stream client closed");
        return;
    };
    let _ = upstream.set_nodelay(true);
    if upstream.write_all(&header).await.is_err() {
        return;
    }
    let (peer, local) = (Some(sock.peer), sock.local);
    let shown = stream_clients::register_replica(id);
    let (mut crd, mut cwr) = sock.stream.into_halves();
    let (mut mrd, mut mwr) = upstream.into_split();
    // A TLS session may hold the last records of a write until a flush.
    let mut unflushed = false;
    let mut shutdown = ctx.shutdown.clone();
    let mut split = Split::new(advertise);
    let (mut from_client, mut from_master) = (BytesMut::new(), BytesMut::new());
    let (mut to_master, mut to_client) = (BytesMut::new(), BytesMut::new());
    // A byte stream that does not split into frames goes on unsplit.
    let mut unsplit = false;
    loop {
        tokio::select! {
            r = crd.read_buf(&mut from_client), if to_master.len() < BACKLOG => {
                if !matches!(r, Ok(n) if n > 0) {
                    break;
                }
            }
            r = mrd.read_buf(&mut from_master), if to_client.len() < BACKLOG => {
                if !matches!(r, Ok(n) if n > 0) {
                    break;
                }
            }
            r = write_or_flush(&mut cwr, &to_client), if !to_client.is_empty() || unflushed => {
                match r {
                    Ok(0) if to_client.is_empty() => unflushed = false,
                    Ok(n) if n > 0 => {
                        to_client.advance(n);
                        unflushed = S::FLUSHES;
                    }
                    _ => break,
                }
            }
            r = mwr.write(&to_master), if !to_master.is_empty() => match r {
                Ok(n) if n > 0 => to_master.advance(n),
                _ => break,
            },
            r = applied.changed(), if split.has_local() => {
                if r.is_err() {
                    break;
                }
                split.on_applied();
            }
            _ = shutdown.changed() => break,
            // A subscription read less than it may take: on with it, after
            // what else is ready.
            () = std::future::ready(()), if split.wants_read() => {}
        }
        // The client's frames, in order: each relayed or answered here.
        let users = ctx.users.borrow().clone();
        while !unsplit {
            let frame = match split_frame(&mut from_client, split.client_frame_max()) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(_) => {
                    unsplit = true;
                    break;
                }
            };
            let relay = match split.on_client(&frame, &users) {
                ClientStep::Relay => true,
                ClientStep::Done => false,
                ClientStep::Subscribe(p) => {
                    let Some(answer) = read_replica(ctx, p.read.clone()).await else {
                        return;
                    };
                    !split.subscribed(p, answer)
                }
            };
            if relay {
                to_master.put_u32(frame.len() as u32);
                to_master.extend_from_slice(&frame);
            }
        }
        if unsplit {
            to_master.unsplit(from_client.split());
        }
        // The master's frames, each whole, on to the client.
        loop {
            match split_frame(&mut from_master, 0) {
                Ok(Some(frame)) => split.on_master(frame),
                Ok(None) => break,
                Err(_) => {
                    // Not a frame from a StableMQ master: end it.
                    tracing::warn!(%to, "the master's stream frames do not split; closing");
                    return;
                }
            }
        }
        // One read per subscription that wants one per pass.
        for (id, req) in split.reads() {
            let Some(answer) = read_replica(ctx, req).await else {
                return;
            };
            split.on_read(id, answer);
        }
        to_client.unsplit(split.take_output());
        if let Some(consumers) = split.shown() {
            let (user, vhost) = split.session();
            shown.publish(ReplicaClient {
                peer,
                local,
                user: user.unwrap_or_default().to_owned(),
                vhost: vhost.unwrap_or_default().to_owned(),
                consumers,
            });
        }
    }
    // One side ended: what the other is owed still goes (the master's
    // answer to a close comes just before it closes its socket).
    to_client.unsplit(split.take_output());
    let _ = tokio::time::timeout(FLUSH_TIMEOUT, async {
        let _ = mwr.write_all(&to_master).await;
        let _ = cwr.write_all(&to_client).await;
        let _ = cwr.flush().await;
    })
    .await;
    let _ = cwr.shutdown().await;
}

/// Write some of `bytes` (cancel-safe: what was written is counted only
/// when the write returns), or flush when there is nothing to write.
async fn write_or_flush<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8]) -> std::io::Result<usize> {
    if bytes.is_empty() {
        w.flush().await.map(|()| 0)
    } else {
        w.write(bytes).await
    }
}

/// Read the replica in the master task. `None`: the node serves as master
/// now (its state holds unstable entries: not read here), or it stopped.
async fn read_replica(ctx: &ConnContext, req: ReadRequest) -> Option<ReadAnswer> {
    let (tx, rx) = oneshot::channel();
    let q: Query = Box::new(move |view: CoreView<'_>| {
        let answer = match view.master {
            None => Some(read::read(view.broker, &req)),
            Some(_) => None,
        };
        let _ = tx.send(answer);
    });
    ctx.master_tx.send(MasterMsg::Query(q)).await.ok()?;
    tokio::time::timeout(READ_TIMEOUT, rx).await.ok()?.ok()?
}
