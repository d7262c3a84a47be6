//! The tokio runtime around the sans-IO cores: it accepts sockets, runs one task per
//! connection and one master task, moves bytes and timers, and choreographs
//! shutdown. No protocol decision is made here.

mod conn_task;
mod listen;
mod master_task;

use crate::config::Config;
use crate::master::Master;
use master_task::MasterMsg;
use stablemq_cluster::{FjallStore, LocalLog};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// How the server was asked to run.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Addresses for AMQP.
    pub amqp_ips: Vec<std::net::IpAddr>,
    /// AMQP port.
    pub amqp_port: u16,
    /// IPv6 addresses may be skipped when the host has no IPv6 (the default binds).
    pub ipv6_optional: bool,
    /// Address for Prometheus `/metrics` (None = off).
    pub prometheus_addr: Option<SocketAddr>,
    /// Where the event store lives.
    pub data_dir: PathBuf,
    /// Parsed configuration.
    pub config: Arc<Config>,
}

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The store could not be opened or recovered.
    #[error("event store: {0}")]
    Store(#[from] stablemq_cluster::StoreError),
    /// An event in the log does not decode.
    #[error("event log: {0}")]
    Event(#[from] crate::broker::event::EventCodecError),
    /// A socket could not be bound.
    #[error("listen on {addr}: {source}")]
    Listen {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// Depth of the queue into the master: connections wait when it is full, which
/// pushes back on publishers instead of growing memory.
const MASTER_QUEUE: usize = 8192;

/// Run the broker until SIGTERM or SIGINT.
pub async fn serve(opts: ServeOptions) -> Result<(), ServeError> {
    std::fs::create_dir_all(&opts.data_dir)
        .map_err(|e| ServeError::Other(format!("create {}: {e}", opts.data_dir.display())))?;
    if let Some(addr) = opts.prometheus_addr {
        crate::metrics::install(addr).map_err(ServeError::Other)?;
        stablemq_cluster::metrics::describe();
    }

    // Recover: the stable log, applied in order, is the broker state (I4).
    let store = FjallStore::open(&opts.data_dir.join("store"))?;
    let (stable_tx, stable_rx) = watch::channel(0u64);
    let (log, entries) = LocalLog::open(
        Box::new(store),
        move |index| {
            stable_tx.send_replace(index);
        },
        |err| {
            // With a quorum of one, a failed store means nothing can become stable.
            // Stop rather than serve without durability; nothing unstable was confirmed.
            tracing::error!("event store failed: {err}; stopping");
            std::process::exit(70);
        },
    )?;
    let last_index = entries.last().map_or(0, |e| e.pos.index);
    let mut events = Vec::with_capacity(entries.len());
    for e in &entries {
        events.push(crate::broker::event::Event::decode(&e.payload)?);
    }
    let recovered = events.len();
    let broker = Master::recover(&opts.config, events);
    drop(entries);
    let master = Master::new(opts.config.clone(), broker, last_index);
    tracing::info!(
        recovered,
        last_index,
        "recovered broker state from the event log"
    );

    let listeners = listen::bind_all(&opts.amqp_ips, opts.amqp_port, opts.ipv6_optional)
        .map_err(|(addr, source)| ServeError::Listen { addr, source })?;
    if listeners.is_empty() {
        return Err(ServeError::Other("no AMQP listener could be bound".into()));
    }
    // One accept task per listener feeds one queue of new sockets.
    let (accepted_tx, mut accepted_rx) = mpsc::channel::<(tokio::net::TcpStream, SocketAddr)>(64);
    let mut acceptors = Vec::new();
    for l in listeners {
        if let Ok(a) = l.local_addr() {
            tracing::info!("AMQP listening on {a}");
        }
        let tx = accepted_tx.clone();
        acceptors.push(tokio::spawn(async move {
            loop {
                match l.accept().await {
                    Ok(pair) => {
                        if tx.send(pair).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        // EMFILE and friends: back off briefly instead of spinning.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }));
    }
    drop(accepted_tx);

    let (master_tx, master_rx) = mpsc::channel::<MasterMsg>(MASTER_QUEUE);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let master_handle = tokio::spawn(master_task::run(
        master,
        log,
        master_rx,
        stable_rx,
        opts.config.clone(),
        opts.data_dir.clone(),
    ));

    let next_id = Arc::new(AtomicU64::new(1));
    let mut conns = tokio::task::JoinSet::new();
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| ServeError::Other(format!("signal handler: {e}")))?;
    loop {
        tokio::select! {
            Some((sock, peer)) = accepted_rx.recv() => {
                let _ = sock.set_nodelay(true);
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                conns.spawn(conn_task::run(
                    id, sock, peer, opts.config.clone(), master_tx.clone(), shutdown_rx.clone(),
                ));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = sigterm.recv() => { tracing::info!("SIGTERM: shutting down"); break; }
            _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: shutting down"); break; }
        }
    }
    for a in acceptors {
        a.abort();
    }
    // Close every client with 320 and give them a moment to answer close-ok.
    let _ = shutdown_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    conns.abort_all();
    let (done_tx, done_rx) = oneshot::channel();
    let _ = master_tx.send(MasterMsg::Shutdown(done_tx)).await;
    let log = done_rx
        .await
        .map_err(|_| ServeError::Other("master task ended early".into()))?;
    let _ = master_handle.await;
    // Flush the store: everything appended becomes durable before we exit.
    tokio::task::spawn_blocking(move || log.shutdown())
        .await
        .map_err(|e| ServeError::Other(format!("store shutdown: {e}")))??;
    tracing::info!("stopped");
    Ok(())
}
