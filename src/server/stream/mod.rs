//! One task per stream protocol client (port 5552): read, run the sans-IO
//! `StreamConnection`, speak to the master through the [`bridge`], write.
//!
//! The task only moves bytes, timers and messages: the protocol's state is
//! `stablemq_protocol::stream::conn`, the mapping onto the master's AMQP
//! inputs is `bridge`, and what is stored is the master's.

mod bridge;
mod codecs;
mod out;
mod record;
mod replica;
mod shown;

use super::master_task::MasterMsg;
use super::route::{self, ConnContext, Router};
use super::socket::{ClientSocket, IntoHalves};
use crate::auth;
use crate::master::inout::{ClientProtocol, ConnInfo, Input, ToConn};
use crate::tls::{ServerTls, TlsInfo};
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
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Serve one client of the plain stream port until it closes. In a
/// cluster it may be a client a slave forwards (plain, or TLS that ended on
/// the slave), after a header with its address and TLS session
/// (`server::forwarded`).
pub(super) async fn serve_client(ctx: ConnContext, id: u64, sock: TcpStream, peer: SocketAddr) {
    let Some(_slot) = route::admit(&ctx).await else {
        return;
    };
    let Ok(local) = sock.local_addr() else {
        return;
    };
    let mut client = ClientSocket {
        stream: sock,
        peer,
        local: Some(local),
        tls: None,
    };
    let mut forwarded = false;
    if let Router::Cluster { trust, .. } = &ctx.router {
        let within = Duration::from_millis(ctx.config.handshake_timeout_ms);
        match super::forwarded::take(&mut client.stream, peer.ip(), trust, within).await {
            Ok(None) => {}
            Ok(Some(f)) => {
                (client.peer, client.local, client.tls) = (f.peer, Some(f.local), f.tls);
                forwarded = true;
            }
            Err(e) => {
                tracing::warn!(conn = id, %peer, "stream client closed: {e}");
                return;
            }
        }
        // Nothing comes from a master probing this node (`reachable`):
        // nothing goes on to the master either.
        if matches!(client.stream.peek(&mut [0u8; 1]).await, Ok(0) | Err(_)) {
            return;
        }
    }
    serve(ctx, id, client, forwarded).await;
}

/// Serve a client of the stream protocol's TLS port (`[tls] stream_port`,
/// or the node's `stream_tls_addr` in a cluster) once its TLS handshake is
/// done: as a plain one, metadata naming the nodes' TLS listeners.
pub(super) async fn serve_tls_client(
    tls: Arc<ServerTls>,
    ctx: ConnContext,
    id: u64,
    sock: TcpStream,
    peer: SocketAddr,
) {
    let Some(_slot) = route::admit(&ctx).await else {
        return;
    };
    let Ok(local) = sock.local_addr() else {
        return;
    };
    let Some((stream, info)) = super::amqps::handshake(&tls, id, sock, peer, false).await else {
        return;
    };
    let client = ClientSocket {
        stream,
        peer,
        local: Some(local),
        tls: Some(info),
    };
    serve(ctx, id, client, false).await;
}

/// Serve `sock` here (a single node, or the master), or relay it to the
/// master from this slave (`replica`). A client a slave `forwarded` is not
/// forwarded again: a slave that got one (the master changed meanwhile)
/// closes it, and the client reconnects.
async fn serve<S: IntoHalves>(ctx: ConnContext, id: u64, sock: ClientSocket<S>, forwarded: bool) {
    let (peer, local) = (sock.peer, sock.local.unwrap_or(sock.peer));
    let advertised = match &ctx.router {
        Router::Local => Advertised::this_listener(local),
        Router::Cluster {
            me,
            serving,
            status,
            stream_addrs,
            stream_tls_addrs,
            trust,
            ..
        } => {
            // A TLS client learns the nodes by their TLS listeners.
            let listeners = match sock.tls {
                Some(_) => stream_tls_addrs,
                None => stream_addrs,
            };
            match route::decide(*me, serving, status).await {
                Ok(None) => {
                    // Probed on the plain listeners, named by the client's.
                    let up = reachable(*me, stream_addrs).await;
                    let named: HashMap<NodeId, SocketAddr> = up
                        .keys()
                        .filter_map(|id| Some((*id, *listeners.get(id)?)))
                        .collect();
                    cluster_topology(*me, &named, local)
                }
                Ok(Some(master)) if forwarded => {
                    tracing::info!(master, %peer, "a forwarded stream client reached a slave; closed");
                    return;
                }
                Ok(Some(master)) => {
                    let Some(&addr) = stream_addrs.get(&master) else {
                        tracing::info!(master, %peer, "no stream_addr for the master; stream client closed");
                        return;
                    };
                    // This node as its clients reach it, as metadata names it.
                    let me_at = listeners.get(me).copied().unwrap_or(local);
                    let advertise = (me_at.ip().to_string(), me_at.port());
                    // The client's address (and TLS session) go to the
                    // master with it, as `proxy.rs` forwards an AMQP
                    // client: the loopback rule judges the client, not
                    // this node, and EXTERNAL sees its certificate.
                    let me = super::forwarded::Forwarded {
                        peer,
                        local,
                        tls: sock.tls.clone(),
                    };
                    let now = super::master_task::now_ms();
                    let header = super::forwarded::header(&me, trust.cookie.as_ref(), now);
                    let applied = ctx.replica_applied.clone();
                    replica::serve(&ctx, id, sock, addr, advertise, applied, header).await;
                    return;
                }
                Err(_) => {
                    tracing::warn!(%peer, "no master elected in time; dropping stream client");
                    return;
                }
            }
        }
    };
    run(ctx, id, sock, advertised).await;
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

/// One stream client's connection and what it owes the master and the socket.
struct Task {
    ctx: ConnContext,
    id: u64,
    peer: SocketAddr,
    local: SocketAddr,
    conn: StreamConnection,
    bridge: Bridge,
    /// What the socket is owed (chunks without a copy).
    out: out::Out,
    to_master: Vec<Input>,
    to_conn: Vec<sc::Input>,
    /// The socket is not read: a resource alarm blocks this publishing
    /// connection.
    paused: bool,
    /// Its publishers and subscriptions, for the management API.
    shown: shown::Shown,
    /// The TLS session, on the stream protocol's TLS port.
    tls: Option<TlsInfo>,
    /// The SASL mechanism the client authenticated with.
    mechanism: String,
}

/// The connection's task: register with the master, then move bytes,
/// master messages and ticks through the connection until it closes.
async fn run<S: IntoHalves>(
    ctx: ConnContext,
    id: u64,
    sock: ClientSocket<S>,
    advertised: Advertised,
) {
    let (peer, tls) = (sock.peer, sock.tls);
    let local = sock.local.unwrap_or(peer);
    let (out_tx, mut out_rx) = super::outbox::channel();
    if ctx
        .master_tx
        .send(MasterMsg::Register(id, out_tx))
        .await
        .is_err()
    {
        return;
    }
    // Bytes and reads/writes for `/api/connections` and Prometheus, as an
    // AMQP connection counts them (`server/conn_task.rs`).
    let traffic = crate::metrics::conn_stats::register(id);
    let mut shutdown = ctx.shutdown.clone();
    let mut t = Task::new(ctx, id, (peer, local), advertised, tls);
    let (mut rd, mut wr) = sock.stream.into_halves();
    let mut rbuf = BytesMut::with_capacity(64 * 1024);
    let mut inbox: Vec<Vec<ToConn>> = Vec::with_capacity(64);
    let (mut outbox_open, mut shutting_down) = (true, false);
    let mut shutdown_changed = std::pin::pin!(shutdown.changed());
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        let now = Instant::now();
        tokio::select! {
            // A resource alarm stops reading a publishing connection, as
            // RabbitMQ's stream reader does: its publishes wait in the
            // client's socket (deliveries and confirms still go out).
            r = rd.read_buf(&mut rbuf), if !t.paused => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    traffic.stats().received(n);
                    t.conn.handle_bytes(&mut rbuf, Instant::now());
                }
            },
            n = out_rx.recv_many(&mut inbox, 64), if outbox_open => {
                outbox_open = n > 0;
                t.on_master(&mut inbox);
            }
            _ = tick.tick() => t.conn.tick(now),
            r = &mut shutdown_changed, if !shutting_down => {
                shutting_down = true;
                if r.is_ok() {
                    t.conn.handle(sc::Input::Close {
                        code: stablemq_protocol::stream::ResponseCode::Ok,
                        reason: "node shutting down".into(),
                    }, now);
                }
            }
        }
        t.update_paused();
        let closed = t.settle();
        if !t.to_master.is_empty()
            && super::conn_task::send_inputs(&t.ctx.master_tx, &t.ctx.credit, &mut t.to_master)
                .await
                .is_err()
        {
            break;
        }
        if !t.out.is_empty() {
            let n = t.out.len();
            traffic.stats().sending(n);
            if t.out.write_to(&mut wr).await.is_err() {
                break;
            }
            traffic.stats().sent(n);
        }
        if closed || t.conn.is_closed() {
            break;
        }
    }
    let _ = wr.shutdown().await;
    let _ = t
        .ctx
        .master_tx
        .send(MasterMsg::Input(Input::Disconnected { conn: id }))
        .await;
}

impl Task {
    /// A new client's connection, advertising this node's server properties
    /// and `advertised`'s leader as its host.
    fn new(
        ctx: ConnContext,
        id: u64,
        (peer, local): (SocketAddr, SocketAddr),
        advertised: Advertised,
        tls: Option<TlsInfo>,
    ) -> Task {
        let props = &ctx.config.server_properties;
        // As RabbitMQ's stream reader: the configured `auth_mechanisms`
        // (PLAIN and AMQPLAIN by default), EXTERNAL only over TLS with a
        // verified client certificate that names someone.
        let mechanisms = auth::mechanisms(
            &ctx.config.auth_mechanisms,
            tls.as_ref().and_then(TlsInfo::cert_login),
        )
        .split(' ')
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
        .collect();
        let cluster_name = ctx.cluster_name.borrow().clone();
        let me = advertised.brokers.get(usize::from(advertised.leader));
        let config = StreamConnectionConfig {
            server_properties: server_properties(
                &props.product,
                props.stream_version(),
                &cluster_name,
            ),
            advertised_host: me.map(|b| b.host.clone()),
            advertised_port: me.and_then(|b| u16::try_from(b.port).ok()),
            mechanisms,
            ..StreamConnectionConfig::default()
        };
        Task {
            conn: StreamConnection::new(config, Instant::now()),
            bridge: Bridge::new(id, advertised),
            ctx,
            id,
            peer,
            local,
            out: out::Out::with_capacity(64 * 1024),
            to_master: Vec::new(),
            to_conn: Vec::new(),
            paused: false,
            shown: shown::Shown::new(id),
            tls,
            mechanism: String::new(),
        }
    }

    /// The master's messages received in one go, through the bridge.
    fn on_master(&mut self, inbox: &mut Vec<Vec<ToConn>>) {
        for m in inbox.drain(..).flatten() {
            self.bridge
                .on_master(m, &mut self.to_master, &mut self.to_conn);
        }
        self.bridge.flush(self.conn.frame_max(), &mut self.to_conn);
    }

    /// Stop (or resume) reading the socket as a resource alarm starts (or
    /// ends) for a connection that publishes, and tell the connection.
    fn update_paused(&mut self) {
        let paused = self.bridge.alarmed() && self.conn.is_open() && self.conn.has_publishers();
        if paused != self.paused {
            self.paused = paused;
            let what = match paused {
                true => "blocked by a resource alarm",
                false => "unblocked",
            };
            tracing::info!(conn = self.id, "stream connection {what}");
            self.conn
                .handle(sc::Input::ReadingPaused(paused), Instant::now());
        }
    }

    /// Carry out the connection's actions: they lead to inputs for it
    /// (answers known at once, authentication), which lead to more actions,
    /// until it settles. True once the connection is over.
    fn settle(&mut self) -> bool {
        let mut closed = false;
        for _ in 0..64 {
            for input in self.to_conn.drain(..) {
                self.shown.input(&input);
                self.conn.handle(input, Instant::now());
            }
            for code in self.conn.take_errors_sent() {
                crate::metrics::stream_errors(code, 1);
            }
            let actions = self.conn.take_actions();
            if actions.is_empty() {
                break;
            }
            for a in actions {
                closed |= self.act(a);
            }
            self.bridge.flush(self.conn.frame_max(), &mut self.to_conn);
        }
        self.shown.sync(&self.conn);
        closed
    }

    /// One action; true if it ends the connection.
    fn act(&mut self, a: sc::Action) -> bool {
        self.shown.action(&a);
        match a {
            sc::Action::Write(b) => self.out.extend_from_slice(&b),
            sc::Action::WriteChunk { head, chunk } => {
                self.out.extend_from_slice(&head);
                if let sc::ChunkSource::Bytes(b) = &chunk {
                    self.out.push(b);
                }
                let written = sc::Action::WriteChunk { head, chunk };
                self.bridge
                    .on_action(written, &mut self.to_master, &mut self.to_conn);
            }
            sc::Action::Authenticate { mechanism, data } => {
                self.mechanism.clone_from(&mechanism);
                let cert = self.tls.as_ref().and_then(TlsInfo::cert_login);
                let outcome = authenticate(&self.ctx, &mechanism, data.as_deref(), self.peer, cert);
                self.to_conn.push(sc::Input::Authenticated(outcome))
            }
            sc::Action::OpenVhost { user, vhost } => self.to_master.push(Input::Open {
                conn: self.id,
                user,
                vhost,
                info: Box::new(self.conn_info()),
            }),
            sc::Action::Closed(_) => return true,
            other => self
                .bridge
                .on_action(other, &mut self.to_master, &mut self.to_conn),
        }
        false
    }
}

/// Check a SASL response against the users the master replicates (the
/// connection offered `mechanism`: it refuses the others itself).
fn authenticate(
    ctx: &ConnContext,
    mechanism: &str,
    data: Option<&[u8]>,
    peer: SocketAddr,
    cert_login: Option<&str>,
) -> AuthOutcome {
    let users = ctx.users.borrow().clone();
    if mechanism == auth::EXTERNAL {
        return match auth::authenticate_external(&ctx.config, &users, cert_login, peer.ip()) {
            Ok(u) => AuthOutcome::Ok {
                user: u.name.clone(),
            },
            Err(_) => AuthOutcome::Refused,
        };
    }
    let Some(data) = data else {
        return AuthOutcome::SaslError;
    };
    let Ok((user, password)) = auth::parse_response(mechanism, data) else {
        return AuthOutcome::SaslError;
    };
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

impl Task {
    /// What the management API lists of a stream connection.
    fn conn_info(&self) -> ConnInfo {
        let mut client_properties = FieldTable::default();
        for (k, v) in self.conn.client_properties() {
            client_properties.insert(
                ShortString::from(k.as_str()),
                AMQPValue::LongString(v.as_str().into()),
            );
        }
        ConnInfo {
            peer: Some(self.peer),
            local: Some(self.local),
            client_properties,
            auth_mechanism: self.mechanism.clone(),
            frame_max: self.conn.frame_max(),
            channel_max: 0,
            heartbeat_secs: u16::try_from(self.conn.heartbeat()).unwrap_or(u16::MAX),
            tls: self.tls.clone(),
            protocol: ClientProtocol::Stream,
        }
    }
}
