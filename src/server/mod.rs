//! The tokio runtime around the sans-IO cores: it accepts sockets, runs one task per
//! connection and one master task, moves bytes and timers, and choreographs
//! shutdown. No protocol decision is made here.

mod amqps;
mod cluster_node;
mod conn_task;
mod forwarded;
mod listen;
mod master_task;
mod nodes;
pub(crate) mod outbox;
mod proxy;
mod replica;
mod route;
mod slots;
mod socket;
mod stream;

use crate::config::Config;
use crate::management::{Listener, NodeStatusSource};
use crate::master::Master;
use master_task::Backend;
pub(crate) use master_task::{MasterMsg, now_ms};
use replica::Core;
use route::{ConnContext, Router};
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
    /// AMQP port; 0 = no plain AMQP listener (AMQPS only).
    pub amqp_port: u16,
    /// Stream protocol port; 0 = no stream listener.
    pub stream_port: u16,
    /// The stream port was not asked for: if it is taken, the node runs
    /// without it (a warning), rather than failing.
    pub stream_port_optional: bool,
    /// The stream protocol over TLS (`[tls] stream_port`, or in a cluster
    /// the node's `stream_tls_addr`); None = no such listener.
    pub stream_tls_port: Option<u16>,
    /// What the node listens on, as the management API lists it (filled
    /// in as the listeners are bound).
    pub listeners: crate::management::Listeners,
    /// IPv6 addresses may be skipped when the host has no IPv6 (the default binds).
    pub ipv6_optional: bool,
    /// Address for Prometheus `/metrics` (None = off).
    pub prometheus_addr: Option<SocketAddr>,
    /// Address of the management HTTP API (None = off). In a cluster the
    /// node's `management_addr` is used unless this was given.
    pub management_addr: Option<SocketAddr>,
    /// The API was turned off (`--management-port 0`), in a cluster too.
    pub management_off: bool,
    /// Where the event store lives.
    pub data_dir: PathBuf,
    /// Parsed configuration.
    pub config: Arc<Config>,
    /// A definitions file to import at boot (`--definitions`).
    pub definitions: Option<PathBuf>,
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
    /// The `[tls]` certificate, key or CA cannot be used.
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// Depth of the queue into the master: connections wait when it is full, which
/// pushes back on publishers instead of growing memory.
const MASTER_QUEUE: usize = 8192;

/// Run the broker until SIGTERM or SIGINT.
pub async fn serve(opts: ServeOptions) -> Result<(), ServeError> {
    prepare_node(&opts)?;
    // The master task's queue exists before anything that talks to it: the
    // management API and the Prometheus endpoint read broker state through it.
    let master = mpsc::channel::<MasterMsg>(MASTER_QUEUE);
    let _metrics = start_metrics(&opts, master.0.clone()).await?;
    let Some(cluster) = opts.config.cluster.clone() else {
        return nodes::serve_single(opts, master).await;
    };
    nodes::serve_cluster(opts, &cluster, master).await
}

/// What every node sets up first: its data directory, the body store, the
/// client TLS certificate, and the metrics' start time.
fn prepare_node(opts: &ServeOptions) -> Result<(), ServeError> {
    std::fs::create_dir_all(&opts.data_dir)
        .map_err(|e| ServeError::Other(format!("create {}: {e}", opts.data_dir.display())))?;
    // The body store exists before any broker is built (restore pages too).
    let pages = opts.data_dir.join("pages");
    let pager = crate::broker::paging::Pager::open(&pages, opts.config.message_ram_budget_bytes)
        .map_err(|e| ServeError::Other(format!("body store {}: {e}", pages.display())))?;
    crate::broker::paging::install(pager);
    if let Some(tls) = &opts.config.tls {
        crate::tls::install(crate::tls::ServerTls::load(tls)?);
    }
    crate::metrics::started();
    Ok(())
}

/// Serve the management API on `addr`, if any, and over HTTPS on the
/// `[tls]` section's `management_https_port`; the tasks stop when the
/// returned guards drop. `master` is the master task's queue, which
/// answers the API's queries of broker state.
async fn start_management(
    opts: &ServeOptions,
    addr: Option<SocketAddr>,
    amqp_port: Option<u16>,
    source: NodeStatusSource,
    master: mpsc::Sender<MasterMsg>,
    users: &watch::Sender<Arc<crate::users::AccessTable>>,
) -> Result<Vec<AbortOnDrop>, ServeError> {
    let Some(addr) = addr else {
        return Ok(Vec::new());
    };
    let mut guards = Vec::new();
    // The stream listeners join once bound (`listen::start_acceptors`).
    let listeners = opts.listeners.clone();
    listeners.push(Listener {
        protocol: "http",
        addr,
    });
    let ip = opts.amqp_ips.first().copied().unwrap_or(addr.ip());
    if let Some(port) = amqp_port.filter(|p| *p != 0) {
        listeners.push(Listener {
            protocol: "amqp",
            addr: SocketAddr::new(ip, port),
        });
    }
    if let (Some(_), Some(tls)) = (amqp_port, &opts.config.tls) {
        listeners.push(Listener {
            protocol: "amqp/ssl",
            addr: SocketAddr::new(ip, tls.amqps_port),
        });
    }
    let https = opts
        .config
        .tls
        .as_ref()
        .and_then(|t| t.management_https_port);
    if let Some(port) = https {
        listeners.push(Listener {
            protocol: "https",
            addr: SocketAddr::new(addr.ip(), port),
        });
    }
    if let Some(p) = opts.prometheus_addr {
        listeners.push(Listener {
            protocol: "http/prometheus",
            addr: p,
        });
    }
    let state = crate::management::AppState::new(
        opts.config.clone(),
        source,
        master,
        listeners,
        users.subscribe(),
    );
    if let (Some(port), Some(tls)) = (https, crate::tls::installed()) {
        let https_addr = SocketAddr::new(addr.ip(), port);
        let task = crate::management::serve_https(https_addr, state.clone(), tls)
            .await
            .map_err(|source| ServeError::Listen {
                addr: https_addr,
                source,
            })?;
        guards.push(AbortOnDrop(task));
    }
    let task = crate::management::serve(addr, state)
        .await
        .map_err(|source| ServeError::Listen { addr, source })?;
    guards.push(AbortOnDrop(task));
    Ok(guards)
}

/// Install the metrics recorder, with its upkeep, and serve `/metrics` and
/// `/metrics/per-object`, if a Prometheus address is set; both stop when the
/// returned guards drop.
async fn start_metrics(
    opts: &ServeOptions,
    master: mpsc::Sender<MasterMsg>,
) -> Result<Vec<AbortOnDrop>, ServeError> {
    let Some(addr) = opts.prometheus_addr else {
        return Ok(Vec::new());
    };
    let recorder = crate::metrics::install().map_err(ServeError::Other)?;
    // Histogram samples wait in the recorder until drained: by a scrape, and
    // without one by this (`metrics/upkeep.rs`).
    let upkeep = AbortOnDrop(tokio::spawn(crate::metrics::upkeep::run(recorder.clone())));
    let state = crate::metrics::endpoint::EndpointState {
        recorder,
        master,
        node: crate::metrics::node_name(opts.config.cluster.as_ref().map(|c| c.node)),
        cluster_name: opts.config.default_cluster_name(),
        data_dir: opts.data_dir.clone(),
        disk_free_limit: opts.config.disk_free_limit_bytes,
    };
    let task = crate::metrics::endpoint::serve(addr, state)
        .await
        .map_err(|source| ServeError::Listen { addr, source })?;
    Ok(vec![upkeep, AbortOnDrop(task)])
}

/// Aborts a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Stable entries the single node keeps in its log behind the materialized
/// state. Nobody reads them (there is no follower); a short window keeps the
/// last events inspectable on disk while the log stays bounded.
const LOCAL_LOG_RETENTION: u64 = 64;

/// The embedded single node: recover the broker state from the local log.
fn recover_local(opts: &ServeOptions) -> Result<(Core, Backend), ServeError> {
    // Recover: the materialized state plus the stable log after it, applied
    // in order, is the broker state (I4). The store thread keeps the state up
    // to date and compacts the log behind it, so a restart reads the live
    // backlog rather than every event ever written.
    let store = FjallStore::open(&opts.data_dir.join("store"))?;
    let (stable_tx, stable_rx) = watch::channel(0u64);
    let reducer = crate::broker::state::BrokerReducer::new(opts.config.vhosts.clone());
    // The broker is rebuilt while the store is opened, a page of the state at
    // a time, so a backlog longer than RAM is paged out as it is read instead
    // of being held whole (docs/architecture.md, "Queues longer than RAM").
    let mut restored = None;
    let mut read_state = |state: &dyn stablemq_cluster::store::StateRead| {
        let broker = crate::broker::state::restore(&opts.config.vhosts, state).map_err(|e| {
            stablemq_cluster::StoreError::Corrupt(format!("event store state: {e}"))
        })?;
        restored = Some(broker);
        Ok(())
    };
    let (log, recovered) = LocalLog::open_with_state_reader(
        Box::new(store),
        Box::new(reducer),
        LOCAL_LOG_RETENTION,
        move |index| {
            stable_tx.send_replace(index);
        },
        |err| {
            // With a quorum of one, a failed store means nothing can become stable.
            // Stop rather than serve without durability; nothing unstable was confirmed.
            tracing::error!("event store failed: {err}; stopping");
            std::process::exit(70);
        },
        Some(&mut read_state),
    )?;
    let mut broker =
        restored.ok_or_else(|| ServeError::Other("event store state was not read".into()))?;
    let last_index = recovered
        .suffix
        .last()
        .map_or(recovered.state_index, |e| e.pos.index);
    for e in &recovered.suffix {
        broker.apply(&crate::broker::event::Event::decode(&e.payload)?, 0);
    }
    let recovered = recovered.suffix.len();
    let mut master = Master::new(opts.config.clone(), broker, last_index);
    master.seed_from_config(&opts.config);
    tracing::info!(
        recovered,
        last_index,
        "recovered broker state from the event log"
    );
    let backend = Backend::Local {
        log,
        stable: stable_rx,
    };
    Ok((Core::Serving(Box::new(master)), backend))
}

/// Import the `--definitions` file through the master, as a management
/// write. A single node waits for it before accepting clients, as RabbitMQ
/// loads definitions before it listens; a cluster node cannot (no master
/// may be elected yet), so it keeps offering the import in the background
/// until a master (this node or, once forwarding exists, another) takes it.
async fn boot_import(
    master: &mpsc::Sender<MasterMsg>,
    events: Vec<crate::broker::event::Event>,
    not_imported: Vec<String>,
    wait: bool,
) -> Result<(), ServeError> {
    for n in &not_imported {
        tracing::warn!("definitions: not imported: {n}");
    }
    let master = master.clone();
    let task = async move {
        for _ in 0..120 {
            let (tx, rx) = oneshot::channel();
            let op = crate::master::admin::AdminOp::Import {
                events: events.clone(),
            };
            if master.send(MasterMsg::Admin(op, tx)).await.is_err() {
                return Err("master task stopped".to_string());
            }
            match rx.await {
                Ok(Ok(crate::master::admin::AdminOutcome::Imported { skipped })) => {
                    for s in &skipped {
                        tracing::warn!("definitions: not imported: {s}");
                    }
                    tracing::info!("definitions imported");
                    return Ok(());
                }
                Ok(other) => return Err(format!("definitions import failed: {other:?}")),
                // Not the master (yet): try again.
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
        Err("no master took the definitions import within 2 minutes".to_string())
    };
    if wait {
        return task.await.map_err(ServeError::Other);
    }
    tokio::spawn(async move {
        if let Err(e) = task.await {
            tracing::error!("{e}");
        }
    });
    Ok(())
}

/// SIGHUP: read the client TLS certificate and key again (new handshakes
/// use them; open connections keep theirs). A file that does not load is
/// logged and the old certificate stays.
fn reload_tls() {
    match crate::tls::installed() {
        None => tracing::info!("SIGHUP: no [tls] configured, nothing to reload"),
        Some(tls) => match tls.reload() {
            Ok(fp) => tracing::info!(sha256 = %fp, "SIGHUP: TLS certificate reloaded"),
            Err(e) => {
                tracing::error!("SIGHUP: TLS reload failed, keeping the old certificate: {e}")
            }
        },
    }
}

async fn wait_for_signal() -> Result<(), ServeError> {
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| ServeError::Other(format!("signal handler: {e}")))?;
    tokio::select! {
        _ = sigterm.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
    }
    Ok(())
}

/// Serve AMQP with this core and log backend until a signal.
async fn run_broker(
    opts: ServeOptions,
    core: Core,
    backend: Backend,
    router: Router,
    store: Option<tokio::task::JoinHandle<()>>,
    (master_tx, master_rx): (mpsc::Sender<MasterMsg>, mpsc::Receiver<MasterMsg>),
    users: watch::Sender<Arc<crate::users::AccessTable>>,
) -> Result<(), ServeError> {
    let (acceptors, mut accepted_rx) = listen::start_acceptors(&opts)?;
    let definitions = match &opts.definitions {
        Some(path) => {
            Some(crate::management::definitions::load_file(path).map_err(ServeError::Other)?)
        }
        None => None,
    };

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let cluster_name = watch::channel(opts.config.default_cluster_name());
    let task = master_task::MasterTask::new(
        core,
        backend,
        opts.config.clone(),
        opts.data_dir.clone(),
        (Arc::new(users.clone()), cluster_name.0),
    );
    let replica_applied = task.replica_applied();
    let master_handle = tokio::spawn(task.run(master_rx));
    let ctx = ConnContext {
        config: opts.config.clone(),
        master_tx: master_tx.clone(),
        credit: master_task::InputCredit::default(),
        shutdown: shutdown_rx,
        router,
        users: users.subscribe(),
        cluster_name: cluster_name.1,
        slots: slots::Slots::new(opts.config.connection_max),
        replica_applied,
    };

    if let Some((events, not_imported)) = definitions {
        boot_import(
            &master_tx,
            events,
            not_imported,
            matches!(ctx.router, Router::Local),
        )
        .await?;
    }
    let next_id = Arc::new(AtomicU64::new(1));
    let mut conns = tokio::task::JoinSet::new();
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| ServeError::Other(format!("signal handler: {e}")))?;
    let mut sighup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| ServeError::Other(format!("signal handler: {e}")))?;
    loop {
        tokio::select! {
            Some(listen::Accepted { sock, peer, front }) = accepted_rx.recv() => {
                let _ = sock.set_nodelay(true);
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                match front {
                    listen::Front::Amqp => conns.spawn(route::route_plain(ctx.clone(), id, sock, peer)),
                    listen::Front::Amqps(tls) => conns.spawn(amqps::serve_client(tls, ctx.clone(), id, sock, peer)),
                    listen::Front::Stream => conns.spawn(stream::serve_client(ctx.clone(), id, sock, peer)),
                    listen::Front::StreamTls(tls) => conns.spawn(stream::serve_tls_client(tls, ctx.clone(), id, sock, peer)),
                };
            }
            _ = sighup.recv() => reload_tls(),
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
    if let Some(log) = log {
        // Flush the store: everything appended becomes durable before we exit.
        tokio::task::spawn_blocking(move || log.shutdown())
            .await
            .map_err(|e| ServeError::Other(format!("store shutdown: {e}")))??;
    }
    if let Some(store) = store {
        // The disk thread finishes its current batch and closes the store.
        store.abort();
        let _ = store.await;
    }
    tracing::info!("stopped");
    Ok(())
}
