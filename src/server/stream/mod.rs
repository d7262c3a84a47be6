//! One task per stream protocol client (port 5552): read, run the sans-IO
//! `StreamConnection`, speak to the master through the [`bridge`], write.
//!
//! The task only moves bytes, timers and messages: the protocol's state is
//! `stablemq_protocol::stream::conn`, the mapping onto the master's AMQP
//! inputs is `bridge`, and what is stored is the master's.

mod bridge;
mod record;

use super::master_task::MasterMsg;
use super::route::{ConnContext, Router};
use crate::auth;
use crate::master::inout::{ConnInfo, Input, ToConn};
use bridge::{Advertised, Bridge};
use bytes::BytesMut;
use stablemq_protocol::stream::StreamConnection;
use stablemq_protocol::stream::conn::{
    self as sc, AuthOutcome, StreamConnectionConfig, server_properties,
};
use stablemq_protocol::{AMQPValue, FieldTable, ShortString};
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
    if let Router::Cluster { serving, .. } = &ctx.router
        && !*serving.borrow()
    {
        // A slave does not serve the stream protocol yet (docs/streams.md):
        // the client's metadata query would name the master.
        tracing::info!(%peer, "stream client on a node that is not the master; closed");
        return;
    }
    let Ok(local) = sock.local_addr() else {
        return;
    };
    run(ctx, id, sock, peer, local).await;
}

async fn run(ctx: ConnContext, id: u64, sock: TcpStream, peer: SocketAddr, local: SocketAddr) {
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
    let advertised = Advertised {
        host: local.ip().to_string(),
        port: local.port(),
    };
    let config = StreamConnectionConfig {
        server_properties: server_properties(&props.product, &props.version, &cluster_name),
        advertised_host: Some(advertised.host.clone()),
        advertised_port: Some(advertised.port),
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
