//! Node-to-node TCP: framed [`Envelope`]s between the nodes of a cluster.
//!
//! Each node listens on one address and dials each peer it has something to send
//! to. Connections are one-way: a node writes only on the connections it dialed
//! and reads only on those it accepted, so there is no handshake and no
//! "who dials whom" rule, and a restarted peer is simply dialed again. Every
//! frame names its sender and receiver ([`crate::wire`]).
//!
//! The engine tolerates loss (it resends after `retry_ms`, heartbeats carry the
//! state), so the transport never blocks the engine and never buffers without
//! bound:
//!
//! - per peer, a bounded queue; when it is full, or while the peer cannot be
//!   reached, messages are dropped (counted in the log at `debug`);
//! - a writer task drains the queue: it waits for the first message, then takes
//!   whatever else is already queued (up to `write_batch_bytes`) and writes it in
//!   one `write_all`. The batch is what piled up during the previous write,
//!   never a timer. An Append to a node's broker that repeats one to its store
//!   in the same batch goes in the store's frame, addressed to both
//!   ([`wire::encode_for_both`]), so a co-located node receives each entry
//!   once instead of twice;
//! - an unreachable peer is redialed with exponential backoff, from
//!   `backoff_min` doubling up to `backoff_max`, reset by a successful connect;
//! - received frames go to one bounded inbound queue; a reader waits when it is
//!   full, which pushes back on the sender through TCP.
//!
//! A malformed frame, a frame for another node or from a node other than the
//! one that authenticated, or a wire version mismatch closes that connection
//! (the stream cannot be trusted to be in sync after it); the peer redials.
//!
//! Before any frame, both ends of a new connection prove they hold the
//! cluster cookie ([`auth`]); a connection that fails it carries nothing, and
//! the reason is logged on both nodes.
//!
//! Everything runs in tasks owned by the [`Transport`]: dropping it aborts them,
//! closes every socket and frees the listening port.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::replication::{Append, Endpoint, Message, NodeId, Service};
use crate::wire::{self, Envelope, MAX_FRAME_DEFAULT};

pub mod auth;
mod heard;
pub mod pem;
pub mod tls;
pub use auth::{AuthError, Cookie};
pub use heard::Heard;
pub use tls::{TlsConfig, TlsError};

/// A node-to-node connection once opened: plain TCP, or TLS over it.
trait NodeStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> NodeStream for T {}
type Stream = Box<dyn NodeStream>;

/// Tuning of the transport. The defaults suit a LAN.
#[derive(Debug, Clone)]
pub struct TransportOptions {
    /// First redial delay after a failed connect or a broken connection.
    pub backoff_min: Duration,
    /// Cap of the redial delay: how long a restarted peer may wait to hear from us.
    pub backoff_max: Duration,
    /// A connect that takes longer counts as failed (a peer that is down on a
    /// real network may not answer at all).
    pub connect_timeout: Duration,
    /// Messages queued per peer before new ones are dropped.
    pub peer_queue: usize,
    /// Messages received but not yet taken by the node before readers wait.
    pub inbound_queue: usize,
    /// Largest frame sent or accepted.
    pub max_frame: usize,
    /// A batch stops growing at this many bytes, so one write never holds a
    /// huge buffer (it is still one write of everything queued under load).
    pub write_batch_bytes: usize,
    /// The cluster's shared secret; `None` runs unauthenticated (see [`auth`]).
    pub cookie: Option<Cookie>,
    /// TLS for every node-to-node connection (see [`tls`]); `None` is plain TCP.
    pub tls: Option<TlsConfig>,
}

impl Default for TransportOptions {
    fn default() -> Self {
        TransportOptions {
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(2),
            peer_queue: 16 * 1024,
            inbound_queue: 16 * 1024,
            max_frame: MAX_FRAME_DEFAULT,
            write_batch_bytes: 4 * 1024 * 1024,
            cookie: None,
            tls: None,
        }
    }
}

/// The TCP endpoint of one node; see the module docs.
pub struct Transport {
    me: NodeId,
    peers: HashMap<NodeId, SocketAddr>,
    opts: TransportOptions,
    /// One queue per peer, created on the first message to it.
    outbound: HashMap<NodeId, mpsc::Sender<Envelope>>,
    /// Messages a node sends to itself (a co-located broker and store) skip TCP.
    local: mpsc::Sender<Envelope>,
    /// The listener and the writers; dropped (aborted) with the transport.
    tasks: JoinSet<()>,
    /// When each peer was last heard (see [`heard`]).
    heard: Heard,
}

impl Transport {
    /// Start listening on `listener` (already bound, so a caller can use port 0
    /// and learn the address first) for node `me`, whose peers are at `peers`.
    /// Returns the transport and the queue of received envelopes.
    ///
    /// Must be called inside a tokio runtime.
    pub fn start(
        me: NodeId,
        listener: TcpListener,
        peers: HashMap<NodeId, SocketAddr>,
        opts: TransportOptions,
    ) -> (Transport, mpsc::Receiver<Envelope>) {
        let (inbound_tx, inbound_rx) = mpsc::channel(opts.inbound_queue.max(1));
        let heard = Heard::new(peers.keys().copied());
        let mut tasks = JoinSet::new();
        tasks.spawn(listen(
            me,
            listener,
            inbound_tx.clone(),
            opts.clone(),
            heard.clone(),
        ));
        let transport = Transport {
            me,
            peers,
            opts,
            outbound: HashMap::new(),
            local: inbound_tx,
            tasks,
            heard,
        };
        (transport, inbound_rx)
    }

    /// When each peer was last heard on an authenticated connection.
    pub fn heard(&self) -> Heard {
        self.heard.clone()
    }

    /// Queue `env` for `env.to.node`. Never waits: if the peer's queue is full
    /// (or the peer is unknown) the message is dropped, and the engine's resend
    /// covers it.
    pub fn send(&mut self, env: Envelope) {
        let to = env.to.node;
        if to == self.me {
            if self.local.try_send(env).is_err() {
                tracing::debug!(node = to, "local queue full; message dropped");
            }
            return;
        }
        let queue = match self.outbound.get(&to) {
            Some(queue) => queue,
            None => {
                let Some(&addr) = self.peers.get(&to) else {
                    tracing::warn!(node = to, "no address for node; message dropped");
                    return;
                };
                let (tx, rx) = mpsc::channel(self.opts.peer_queue.max(1));
                self.tasks
                    .spawn(write_to_peer(self.me, to, addr, rx, self.opts.clone()));
                self.outbound.entry(to).or_insert(tx)
            }
        };
        if queue.try_send(env).is_err() {
            tracing::debug!(node = to, "peer queue full or peer gone; message dropped");
        }
    }
}

/// Accept connections and read frames from each, until aborted.
async fn listen(
    me: NodeId,
    listener: TcpListener,
    inbound: mpsc::Sender<Envelope>,
    opts: TransportOptions,
    heard: Heard,
) {
    // Owned here so aborting the listener aborts every reader with it.
    let mut readers = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    readers.spawn(read_from_peer(me, stream, addr, inbound.clone(), opts.clone(), heard.clone()));
                }
                Err(err) => {
                    // Usually out of file descriptors; do not spin on it.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = readers.join_next(), if !readers.is_empty() => {}
        }
    }
}

/// Decode frames from one accepted connection into the inbound queue.
async fn read_from_peer(
    me: NodeId,
    stream: TcpStream,
    addr: SocketAddr,
    inbound: mpsc::Sender<Envelope>,
    opts: TransportOptions,
    heard: Heard,
) {
    let handshake = async {
        let mut stream: Stream = match &opts.tls {
            Some(tls) => Box::new(tls.accept(stream).await.map_err(AuthError::Tls)?),
            None => Box::new(stream),
        };
        let peer = auth::accept(&mut stream, me, opts.cookie.as_ref()).await?;
        Ok::<_, AuthError>((stream, peer))
    };
    let (mut stream, peer) = match tokio::time::timeout(opts.connect_timeout, handshake).await {
        Ok(Ok(opened)) => opened,
        Ok(Err(err)) => {
            report_auth_failure(&err, "refused a connection", None, addr);
            return;
        }
        Err(_) => {
            tracing::debug!(%addr, "node handshake timed out; closing");
            return;
        }
    };
    heard.touch(peer);
    let max = opts.max_frame;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        loop {
            match wire::decode_copies(&mut buf, max) {
                Ok(Some((env, broker))) if env.to.node == me && env.from.node == peer => {
                    if inbound.send(env).await.is_err() {
                        return; // the node is gone
                    }
                    if let Some(env) = broker
                        && inbound.send(env).await.is_err()
                    {
                        return;
                    }
                }
                Ok(Some((env, _))) => {
                    tracing::warn!(
                        %addr, peer, from = env.from.node, to = env.to.node,
                        "frame not from the authenticated peer or not for this node; closing"
                    );
                    return;
                }
                Ok(None) => break,
                Err(err) => {
                    tracing::warn!(%addr, error = %err, "bad frame; closing connection");
                    return;
                }
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 * 1024);
        }
        match stream.read_buf(&mut buf).await {
            Ok(0) => return,
            Ok(_) => heard.touch(peer),
            Err(err) => {
                tracing::debug!(%addr, error = %err, "read failed; closing connection");
                return;
            }
        }
    }
}

/// Dial `addr` and write everything queued for `node`, redialing with backoff,
/// until the transport is dropped.
async fn write_to_peer(
    me: NodeId,
    node: NodeId,
    addr: SocketAddr,
    mut rx: mpsc::Receiver<Envelope>,
    opts: TransportOptions,
) {
    let mut backoff = opts.backoff_min;
    let mut buf = BytesMut::new();
    loop {
        let connected = tokio::time::timeout(opts.connect_timeout, TcpStream::connect(addr)).await;
        let stream = match connected {
            Ok(Ok(stream)) => stream,
            Ok(Err(err)) => {
                tracing::debug!(node, %addr, error = %err, ?backoff, "connect failed");
                if !wait_and_discard(&mut rx, &mut backoff, &opts).await {
                    return;
                }
                continue;
            }
            Err(_) => {
                tracing::debug!(node, %addr, ?backoff, "connect timed out");
                if !wait_and_discard(&mut rx, &mut backoff, &opts).await {
                    return;
                }
                continue;
            }
        };
        if let Err(err) = stream.set_nodelay(true) {
            // We batch ourselves; Nagle would only add latency.
            tracing::debug!(node, error = %err, "set_nodelay failed");
        }
        let handshake = async {
            let mut stream: Stream = match &opts.tls {
                Some(tls) => Box::new(tls.connect(addr, stream).await.map_err(AuthError::Tls)?),
                None => Box::new(stream),
            };
            auth::dial(&mut stream, me, node, opts.cookie.as_ref()).await?;
            Ok::<_, AuthError>(stream)
        };
        let stream = match tokio::time::timeout(opts.connect_timeout, handshake).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(err)) => {
                report_auth_failure(&err, "could not connect", Some(node), addr);
                if !wait_and_discard(&mut rx, &mut backoff, &opts).await {
                    return;
                }
                continue;
            }
            Err(_) => {
                tracing::debug!(node, %addr, "node handshake timed out");
                if !wait_and_discard(&mut rx, &mut backoff, &opts).await {
                    return;
                }
                continue;
            }
        };
        tracing::debug!(node, %addr, "connected");
        backoff = opts.backoff_min;
        match write_batches(node, stream, &mut rx, &mut buf, &opts).await {
            Closed::Queue => return,
            Closed::Connection => {
                if !wait_and_discard(&mut rx, &mut backoff, &opts).await {
                    return;
                }
            }
        }
    }
}

enum Closed {
    /// The transport is gone: stop.
    Queue,
    /// The connection broke: redial.
    Connection,
}

async fn write_batches(
    node: NodeId,
    stream: Stream,
    rx: &mut mpsc::Receiver<Envelope>,
    buf: &mut BytesMut,
    opts: &TransportOptions,
) -> Closed {
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut probe = [0u8; 1];
    let mut batch: Vec<Envelope> = Vec::new();
    loop {
        let first = tokio::select! {
            msg = rx.recv() => match msg {
                Some(env) => env,
                None => return Closed::Queue,
            },
            // The peer never writes on this connection: a read returning means it
            // closed (or restarted). Redial now rather than lose the next batch.
            _ = rd.read(&mut probe) => {
                tracing::debug!(node, "peer closed the connection");
                return Closed::Connection;
            }
        };
        buf.clear();
        batch.clear();
        let mut bytes = approx_len(&first);
        batch.push(first);
        while bytes < opts.write_batch_bytes {
            match rx.try_recv() {
                Ok(env) => {
                    bytes += approx_len(&env);
                    batch.push(env);
                }
                Err(_) => break,
            }
        }
        encode_batch(node, &mut batch, buf, opts.max_frame);
        // flush: a TLS stream holds written records until flushed.
        if let Err(err) = async {
            wr.write_all(buf).await?;
            wr.flush().await
        }
        .await
        {
            tracing::debug!(node, error = %err, "write failed; redialing");
            return Closed::Connection;
        }
    }
}

/// About how many bytes `env` takes on the wire, to bound a batch.
fn approx_len(env: &Envelope) -> usize {
    match &env.msg {
        Message::Append(Append { entries, .. }) => {
            64 + entries.iter().map(|e| 20 + e.payload.len()).sum::<usize>()
        }
        _ => 64,
    }
}

/// Encode a batch for one node, in order, except that an Append to the node's
/// broker that repeats an Append to its store (same sender, epoch, position,
/// entries, stable index and floor: the master sends each batch to every store
/// and every slave, and a co-located node is both) rides in the store's frame
/// ([`wire::encode_for_both`]) instead of crossing the connection again. Only
/// when no other message to the broker comes between the two, so the broker
/// still sees its messages in the order they were sent.
fn encode_batch(node: NodeId, batch: &mut Vec<Envelope>, buf: &mut BytesMut, max: usize) {
    let mut i = 0;
    while i < batch.len() {
        let twin = broker_twin(batch, i);
        let env = &batch[i];
        match twin {
            Some(j) => {
                if let Err(err) = wire::encode_for_both(env, buf, max) {
                    tracing::error!(node, error = %err, "message cannot be framed; dropped");
                }
                batch.remove(j);
            }
            None => encode_into(node, env, buf, max),
        }
        i += 1;
    }
}

/// The index of the first message to the broker of `batch[i]`'s node after
/// `i`, if `batch[i]` is an Append to that node's store and that message
/// repeats it.
fn broker_twin(batch: &[Envelope], i: usize) -> Option<usize> {
    let env = &batch[i];
    if env.to.service != Service::Store {
        return None;
    }
    let Message::Append(Append {
        epoch,
        prev,
        entries,
        stable,
        floor,
    }) = &env.msg
    else {
        return None;
    };
    let broker = Endpoint::broker(env.to.node);
    let j = i + 1 + batch[i + 1..].iter().position(|e| e.to == broker)?;
    let other = &batch[j];
    let Message::Append(Append {
        epoch: epoch2,
        prev: prev2,
        entries: entries2,
        stable: stable2,
        floor: floor2,
    }) = &other.msg
    else {
        return None;
    };
    // Entries are from one sender's log: the same positions are the same
    // entries (log matching), so positions suffice.
    let same = other.from == env.from
        && epoch == epoch2
        && prev == prev2
        && stable == stable2
        && floor == floor2
        && entries.len() == entries2.len()
        && entries.first().map(|e| e.pos) == entries2.first().map(|e| e.pos)
        && entries.last().map(|e| e.pos) == entries2.last().map(|e| e.pos);
    same.then_some(j)
}

fn encode_into(node: NodeId, env: &Envelope, buf: &mut BytesMut, max: usize) {
    if let Err(err) = wire::encode(env, buf, max) {
        // Dropped like a lost message; the engine resends, and will fail the same
        // way, so say so loudly: the batch limits do not fit `max_frame`.
        tracing::error!(node, error = %err, "message cannot be framed; dropped");
    }
}

/// Log a failed node handshake. A configuration mistake (a wrong or missing
/// cookie, a wrong address) repeats at every redial, so it is a warning at
/// most once per [`AUTH_WARN_EVERY`] per process and a debug line otherwise,
/// and it is counted in [`crate::metrics::NODE_AUTH_FAILURES`].
fn report_auth_failure(err: &AuthError, what: &str, node: Option<NodeId>, addr: SocketAddr) {
    if !err.is_config() {
        tracing::debug!(?node, %addr, error = %err, "node handshake failed");
        return;
    }
    metrics::counter!(crate::metrics::NODE_AUTH_FAILURES).increment(1);
    static LAST_WARN: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    let now = std::time::Instant::now();
    let loud = match LAST_WARN.lock() {
        Ok(mut last) => {
            let due = last.is_none_or(|t| now.duration_since(t) >= AUTH_WARN_EVERY);
            if due {
                *last = Some(now);
            }
            due
        }
        Err(_) => true,
    };
    if loud {
        tracing::warn!(?node, %addr, error = %err, "node authentication failed: {what}");
    } else {
        tracing::debug!(?node, %addr, error = %err, "node authentication failed: {what}");
    }
}

/// How often a repeating node authentication failure is logged as a warning.
const AUTH_WARN_EVERY: Duration = Duration::from_secs(10);

/// Sleep for the backoff (doubling it), dropping what is queued meanwhile: the
/// engine resends what matters, and stale messages would only delay it.
/// Returns false once the transport is gone.
async fn wait_and_discard(
    rx: &mut mpsc::Receiver<Envelope>,
    backoff: &mut Duration,
    opts: &TransportOptions,
) -> bool {
    tokio::time::sleep(*backoff).await;
    *backoff = (*backoff * 2).min(opts.backoff_max);
    loop {
        match rx.try_recv() {
            Ok(_) => {}
            Err(mpsc::error::TryRecvError::Empty) => return true,
            Err(mpsc::error::TryRecvError::Disconnected) => return false,
        }
    }
}

#[cfg(test)]
mod tests;
