//! One task per stream protocol client (port 5552): read, run the sans-IO
//! `StreamConnection`, speak to the master through the [`bridge`], write.
//!
//! The task only moves bytes, timers and messages: the protocol's state is
//! `stablemq_protocol::stream::conn`, the mapping onto the master's AMQP
//! inputs is `bridge`, and what is stored is the master's.

mod bridge;
mod record;

use super::master_task::MasterMsg;
use super::route::{self, ConnContext, Router};
use crate::auth;
use crate::master::inout::{ConnInfo, Input, ToConn};
use bridge::{Advertised, Bridge};
use bytes::BytesMut;
use stablemq_cluster::replication::NodeId;
use stablemq_protocol::stream::Broker;
use stablemq_protocol::stream::StreamConnection;
use stablemq_protocol::stream::conn::{
    self as sc, AuthOutcome, StreamConnectionConfig, server_properties,
};
use stablemq_protocol::{AMQPValue, FieldTable, ShortString};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Serve one stream protocol client until it closes.
pub(super) async fn serve_client(ctx: ConnContext, id: u64, sock: TcpStream, peer: SocketAddr) {
    let mut stop = ctx.shutdown.clone();
    let _slot = tokio::select! {
        s = ctx.slots.admit() => match s {
            Some(s) => s,
            None => return,
        },
        _ = stop.changed() => return,
    };
    let Ok(local) = sock.local_addr() else {
        return;
    };
    let advertised = match &ctx.router {
        Router::Local => Advertised {
            brokers: vec![Broker {
                reference: 0,
                host: local.ip().to_string(),
                port: u32::from(local.port()),
            }],
            leader: 0,
        },
        Router::Cluster {
            me,
            serving,
            status,
            stream_addrs,
            ..
        } => match route::decide(*me, serving, status).await {
            Ok(None) => cluster_topology(*me, &reachable(*me, stream_addrs).await, local),
            Ok(Some(master)) => {
                match stream_addrs.get(&master) {
                    Some(&addr) => forward(sock, addr, ctx.shutdown.clone()).await,
                    None => {
                        tracing::info!(master, %peer, "no stream_addr for the master; stream client closed")
                    }
                }
                return;
            }
            Err(_) => {
                tracing::warn!(%peer, "no master elected in time; dropping stream client");
                return;
            }
        },
    };
    run(ctx, id, sock, peer, local, advertised).await;
}

/// The other nodes whose stream listener accepts a connection now (within
/// 300 ms): a client told of a replica connects to it, so a node that is
/// down is not named. Probed at each connection, all at once.
async fn reachable(
    me: NodeId,
    stream_addrs: &HashMap<NodeId, SocketAddr>,
) -> HashMap<NodeId, SocketAddr> {
    let mut probes = tokio::task::JoinSet::new();
    for (&id, &addr) in stream_addrs {
        probes.spawn(async move {
            let up = id == me
                || matches!(
                    tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr))
                        .await,
                    Ok(Ok(_))
                );
            up.then_some((id, addr))
        });
    }
    let mut out = HashMap::new();
    while let Some(r) = probes.join_next().await {
        if let Ok(Some((id, addr))) = r {
            out.insert(id, addr);
        }
    }
    out
}

/// The brokers of a cluster as stream clients see them: every node with a
/// `stream_addr` that is up, by node id; this node (the master) leads every
/// stream.
fn cluster_topology(
    me: NodeId,
    stream_addrs: &HashMap<NodeId, SocketAddr>,
    local: SocketAddr,
) -> Advertised {
    let mut ids: Vec<NodeId> = stream_addrs.keys().copied().collect();
    if !ids.contains(&me) {
        ids.push(me);
    }
    ids.sort_unstable();
    let brokers = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let addr = stream_addrs.get(id).copied().unwrap_or(local);
            Broker {
                reference: u16::try_from(i).unwrap_or(u16::MAX),
                host: addr.ip().to_string(),
                port: u32::from(addr.port()),
            }
        })
        .collect();
    let leader = ids.iter().position(|id| *id == me).unwrap_or(0);
    Advertised {
        brokers,
        leader: u16::try_from(leader).unwrap_or(0),
    }
}

/// A slave's stream client: its bytes go to the master's stream listener
/// and back, unchanged, until either side closes (the master's going ends
/// it; the client reconnects and finds the new one).
async fn forward(
    mut sock: TcpStream,
    to: SocketAddr,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    // Nothing goes upstream before the client speaks: a master probing
    // this node (`reachable`) sends nothing, so it never reaches itself.
    let mut first = [0u8; 1];
    match tokio::time::timeout(Duration::from_secs(10), sock.peek(&mut first)).await {
        Ok(Ok(n)) if n > 0 => {}
        _ => return,
    }
    let Ok(Ok(mut upstream)) =
        tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(to)).await
    else {
        tracing::info!(%to, "the master's stream listener did not answer; stream client closed");
        return;
    };
    let _ = upstream.set_nodelay(true);
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut sock, &mut upstream) => {}
        _ = shutdown.changed() => {}
    }
}

async fn run(
    ctx: ConnContext,
    id: u64,
    sock: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    advertised: Advertised,
) {
    let (out_tx, mut out_rx) = super::outbox::channel();
    if ctx
        .master_tx
        .send(MasterMsg::Register(id, out_tx))
        .await
        .is_err()
    {
        return;
    }
    let props = &ctx.config.server_properties;
    let cluster_name = ctx.cluster_name.borrow().clone();
    let me = advertised.brokers.get(usize::from(advertised.leader));
    let config = StreamConnectionConfig {
        server_properties: server_properties(&props.product, &props.version, &cluster_name),
        advertised_host: me.map(|b| b.host.clone()),
        advertised_port: me.and_then(|b| u16::try_from(b.port).ok()),
        ..StreamConnectionConfig::default()
    };
    let mut conn = StreamConnection::new(config, Instant::now());
    let mut bridge = Bridge::new(id, advertised);
    let (mut rd, mut wr) = sock.into_split();
    let mut rbuf = BytesMut::with_capacity(64 * 1024);
    let mut wbuf = BytesMut::with_capacity(64 * 1024);
    let mut to_master: Vec<Input> = Vec::new();
    let mut to_conn: Vec<sc::Input> = Vec::new();
    let mut inbox: Vec<Vec<ToConn>> = Vec::with_capacity(64);
    let mut reading = true;
    let mut outbox_open = true;
    let mut shutting_down = false;
    let mut shutdown = ctx.shutdown.clone();
    let mut shutdown_changed = std::pin::pin!(shutdown.changed());
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        let now = Instant::now();
        tokio::select! {
            r = rd.read_buf(&mut rbuf), if reading => match r {
                Ok(0) | Err(_) => reading = false,
                Ok(_) => conn.handle_bytes(&mut rbuf, Instant::now()),
            },
            n = out_rx.recv_many(&mut inbox, 64), if outbox_open => {
                if n == 0 {
                    outbox_open = false;
                }
                for batch in inbox.drain(..) {
                    for m in batch {
                        bridge.on_master(m, &mut to_master, &mut to_conn);
                    }
                }
                bridge.flush(conn.frame_max(), &mut to_conn);
            }
            _ = tick.tick() => conn.tick(now),
            r = &mut shutdown_changed, if !shutting_down => {
                shutting_down = true;
                if r.is_ok() {
                    conn.handle(sc::Input::Close {
                        code: stablemq_protocol::stream::ResponseCode::Ok,
                        reason: "node shutting down".into(),
                    }, now);
                }
            }
        }
        if !reading {
            break;
        }
        let mut closed = false;
        // Actions lead to inputs for the connection (answers known at once,
        // authentication) which lead to more actions: until it settles.
        for _ in 0..64 {
            for input in to_conn.drain(..) {
                conn.handle(input, Instant::now());
            }
            let actions = conn.take_actions();
            if actions.is_empty() {
                break;
            }
            for a in actions {
                match a {
                    sc::Action::Write(b) => wbuf.extend_from_slice(&b),
                    sc::Action::WriteChunk { head, chunk } => {
                        wbuf.extend_from_slice(&head);
                        if let sc::ChunkSource::Bytes(b) = &chunk {
                            wbuf.extend_from_slice(b);
                        }
                        bridge.on_action(
                            sc::Action::WriteChunk { head, chunk },
                            &mut to_master,
                            &mut to_conn,
                        );
                    }
                    sc::Action::Authenticate { mechanism, data } => {
                        to_conn.push(sc::Input::Authenticated(authenticate(
                            &ctx,
                            &mechanism,
                            data.as_deref(),
                            peer,
                        )))
                    }
                    sc::Action::OpenVhost { user, vhost } => to_master.push(Input::Open {
                        conn: id,
                        user,
                        vhost,
                        info: Box::new(conn_info(&conn, peer, local)),
                    }),
                    sc::Action::Closed(_) => closed = true,
                    other => bridge.on_action(other, &mut to_master, &mut to_conn),
                }
            }
            bridge.flush(conn.frame_max(), &mut to_conn);
        }
        if !to_master.is_empty() {
            let batch = std::mem::take(&mut to_master);
            let permit = match ctx.credit.take(batch.len() as u32).await {
                Some(p) => p,
                None => break,
            };
            if ctx
                .master_tx
                .send(MasterMsg::Inputs(batch, permit))
                .await
                .is_err()
            {
                break;
            }
        }
        if !wbuf.is_empty() {
            if wr.write_all(&wbuf).await.is_err() {
                break;
            }
            wbuf.clear();
        }
        if closed || conn.is_closed() {
            break;
        }
    }
    let _ = wr.shutdown().await;
    let _ = ctx
        .master_tx
        .send(MasterMsg::Input(Input::Disconnected { conn: id }))
        .await;
}

/// Check a SASL response against the users the master replicates.
fn authenticate(
    ctx: &ConnContext,
    mechanism: &str,
    data: Option<&[u8]>,
    peer: SocketAddr,
) -> AuthOutcome {
    let Some(data) = data else {
        return AuthOutcome::SaslError;
    };
    let Ok((user, password)) = auth::parse_response(mechanism, data) else {
        return AuthOutcome::SaslError;
    };
    let users = ctx.users.borrow().clone();
    match auth::authenticate(&ctx.config, &users, &user, &password, peer.ip()) {
        Ok(u) => AuthOutcome::Ok {
            user: u.name.clone(),
        },
        Err(_) if ctx.config.loopback_users.contains(&user) && !auth::is_loopback(peer.ip()) => {
            AuthOutcome::LoopbackOnly
        }
        Err(_) => AuthOutcome::Refused,
    }
}

/// What the management API lists of a stream connection.
fn conn_info(conn: &StreamConnection, peer: SocketAddr, local: SocketAddr) -> ConnInfo {
    let mut client_properties = FieldTable::default();
    for (k, v) in conn.client_properties() {
        client_properties.insert(
            ShortString::from(k.as_str()),
            AMQPValue::LongString(v.as_str().into()),
        );
    }
    ConnInfo {
        peer: Some(peer),
        local: Some(local),
        client_properties,
        auth_mechanism: "PLAIN".into(),
        frame_max: conn.frame_max(),
        channel_max: 0,
        heartbeat_secs: u16::try_from(conn.heartbeat()).unwrap_or(u16::MAX),
        tls: None,
    }
}
