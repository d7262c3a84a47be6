//! Tokio drivers: run the sans-IO engine over the TCP [`transport`](crate::transport)
//! and a real disk.
//!
//! A driver decides nothing. It feeds the engine its inputs (received messages,
//! finished disk jobs, timer ticks with a monotonic millisecond clock, the
//! owner's appends) and carries out the commands it returns. Everything the
//! protocol means lives in [`crate::replication`], which the simulator checks;
//! this layer only moves bytes and fsyncs.
//!
//! - [`run_store_node`]: an event-store node over [`FjallStore`], its disk work
//!   on a [`DiskRunner`] thread.
//! - [`BrokerNodeDriver`]: a broker's replication role, with an `append` API, a
//!   channel of [`BrokerEvent`]s and its status, for the broker to build on.

mod broker;
mod net;
mod pacing;

pub use broker::{BrokerEvent, BrokerHandle, BrokerNodeDriver, BrokerStatus, DriverAppendError};
pub use net::{NodeNet, Outbox};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::position::LogPosition;
use crate::replication::{
    Config, DiskOp, Endpoint, NodeId, Service, StoreCommand, StoreInput, StoreNode,
};
use crate::store::{DiskRunner, FjallStore, RecoveredStore, Reducer, StoreError};
use crate::transport::TransportOptions;
use crate::wire::Envelope;

/// A store node's state, for status pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStatus {
    /// The epoch it promised (a fence it answered).
    pub promised: u64,
    /// Its last durable entry.
    pub last: LogPosition,
    /// The highest stable index it has learnt.
    pub stable: u64,
    /// Whether it joined: false while a new or wiped disk catches up from
    /// its peers before it votes (`replication/store_node/join.rs`).
    pub joined: bool,
    /// Whether its log is open: until then (a restart reading its disk) the
    /// fields above are defaults, not its progress.
    pub opened: bool,
}

impl StoreStatus {
    fn of(node: &StoreNode) -> Self {
        StoreStatus {
            promised: node.promised(),
            last: node.last(),
            stable: node.stable(),
            joined: node.joined(),
            opened: true,
        }
    }
}

/// Why a driver stopped.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// Binding the listening address failed.
    #[error("network: {0}")]
    Io(#[from] std::io::Error),
    /// The store could not be opened or recovered.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The store failed while running; the node stopped answering (see
    /// [`StoreInput::DiskFailed`]).
    #[error("the store failed; the node stopped")]
    DiskFailed,
    /// The node is not listed in the config for this role.
    #[error("node {0} is not a {1} in the cluster config")]
    NotAMember(NodeId, &'static str),
}

/// Milliseconds since the driver started, from a monotonic clock: the engine's
/// `now`. Wall-clock jumps must not fire (or delay) elections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock(Instant);

impl Clock {
    pub(crate) fn start() -> Self {
        Clock(Instant::now())
    }

    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Run event-store node `node_id`: listen on `listen_addr`, keep the log in
/// fjall under `data_dir`, answer `peers` (every other node's address). Returns
/// only on failure; abort the task to stop it (the disk thread then finishes its
/// current batch and closes the store).
pub async fn run_store_node(
    config: Config,
    node_id: NodeId,
    listen_addr: SocketAddr,
    peers: HashMap<NodeId, SocketAddr>,
    data_dir: PathBuf,
) -> Result<(), DriverError> {
    let listener = TcpListener::bind(listen_addr).await?;
    run_store_node_on(
        config,
        node_id,
        listener,
        peers,
        data_dir,
        TransportOptions::default(),
    )
    .await
}

/// [`run_store_node`] on an already bound listener (so a caller can bind port 0
/// and hand out the address before the node starts), with transport options.
pub async fn run_store_node_on(
    config: Config,
    node_id: NodeId,
    listener: TcpListener,
    peers: HashMap<NodeId, SocketAddr>,
    data_dir: PathBuf,
    opts: TransportOptions,
) -> Result<(), DriverError> {
    let net = NodeNet::start(node_id, listener, peers, opts);
    let (status, _) = watch::channel(StoreStatus::default());
    run_store_node_with(
        config,
        node_id,
        net.outbox,
        net.store_inbound,
        data_dir,
        None,
        status,
    )
    .await
}

/// [`run_store_node`] on a node network shared with a co-located broker
/// ([`NodeNet`]): `inbound` is the node's store queue. `status` is kept
/// current after every step. `reducer` materializes the state the log is
/// compacted into; without one the store keeps its whole log, whatever
/// `config.store_retention` says.
pub async fn run_store_node_with(
    mut config: Config,
    node_id: NodeId,
    outbox: Outbox,
    mut inbound: mpsc::Receiver<Envelope>,
    data_dir: PathBuf,
    reducer: Option<Box<dyn Reducer>>,
    status: watch::Sender<StoreStatus>,
) -> Result<(), DriverError> {
    if !config.stores.contains(&node_id) {
        return Err(DriverError::NotAMember(node_id, "store"));
    }
    if reducer.is_none() && config.store_retention.is_some() {
        tracing::info!(node = node_id, "no reducer: this store keeps its whole log");
        config.store_retention = None;
    }
    // Compaction off: no state to follow (the reducer would only cost CPU).
    let reducer = reducer.filter(|_| config.store_retention.is_some());
    let (disk_tx, mut disk_rx) = mpsc::unbounded_channel();
    // Opening and recovery read the disk: not on a runtime thread.
    let (runner, recovered) = tokio::task::spawn_blocking(move || {
        let store = FjallStore::open(&data_dir)?;
        DiskRunner::start_with(Box::new(store), reducer, move |done| {
            // The receiver is gone only when the node task is: nothing to tell.
            let _ = disk_tx.send(done);
        })
    })
    .await
    .map_err(|err| StoreError::Stopped(format!("store open task: {err}")))??;
    let mut store_loop = StoreLoop::new(&config, node_id, runner, recovered, outbox);
    // Published once opened: a store nobody talks to (a node kept out by
    // its cookie) would otherwise look unopened and show no lag.
    status.send_replace(StoreStatus::of(&store_loop.node));
    loop {
        let input = tokio::select! {
            Some(env) = inbound.recv() => {
                if env.to.service != Service::Store {
                    continue; // a store-only node hosts no broker
                }
                StoreInput::Receive { from: env.from, msg: env.msg }
            }
            Some(done) = disk_rx.recv() => done,
            else => return Err(DriverError::DiskFailed),
        };
        let stepped = store_loop.step(input);
        let now = StoreStatus::of(&store_loop.node);
        status.send_if_modified(|s| std::mem::replace(s, now) != now);
        stepped?;
    }
}

/// A running store node and what carries out its commands: the disk
/// thread, the network and the commit pacing.
struct StoreLoop {
    node: StoreNode,
    runner: DiskRunner,
    outbox: Outbox,
    pacer: pacing::CommitPacer,
    clock: Clock,
    /// The node's store endpoint, the `from` of what it sends.
    me: Endpoint,
}

impl StoreLoop {
    /// The node of what its disk recovered, with the cluster's settings.
    fn new(
        config: &Config,
        node_id: NodeId,
        runner: DiskRunner,
        recovered: RecoveredStore,
        outbox: Outbox,
    ) -> Self {
        tracing::info!(
            node = node_id,
            promised = recovered.promised,
            stable = recovered.stable,
            last = %recovered.runs.last(),
            joined = recovered.joined,
            incarnation = recovered.incarnation,
            "store node starting"
        );
        let node = StoreNode::new(
            node_id,
            recovered.promised,
            recovered.stable,
            recovered.runs,
        )
        .with_config(config)
        .with_identity(recovered.joined, recovered.incarnation);
        let clock = Clock::start();
        let me = Endpoint::store(node_id);
        let pacer =
            pacing::CommitPacer::new(std::time::Duration::from_micros(config.commit_interval_us));
        StoreLoop {
            node,
            runner,
            outbox,
            pacer,
            clock,
            me,
        }
    }

    /// Step the node by `input` and carry out its commands. Fails once the
    /// disk failed (the node is silent from then on).
    fn step(&mut self, mut input: StoreInput) -> Result<(), DriverError> {
        // A commit window already open when asked for is reported at once,
        // in the same pass: no timer, no wake-up.
        loop {
            let failed = matches!(input, StoreInput::DiskFailed);
            let mut window_now = false;
            for cmd in self.node.step(self.clock.now_ms(), input) {
                window_now |= self.carry_out(cmd);
            }
            if failed {
                return Err(DriverError::DiskFailed);
            }
            if !window_now {
                return Ok(());
            }
            input = StoreInput::CommitWindow;
        }
    }

    /// Carry out one command of the node; true if it asked for a commit
    /// window that is open already.
    fn carry_out(&mut self, cmd: StoreCommand) -> bool {
        match cmd {
            StoreCommand::Send { to, msg } => self.outbox.send(Envelope {
                from: self.me,
                to,
                msg,
            }),
            StoreCommand::AwaitCommitWindow { queued_entries } => {
                match self.pacer.window(Instant::now(), queued_entries) {
                    Some(at) => self.runner.commit_window(at),
                    None => return true,
                }
            }
            StoreCommand::Persist(ops) => {
                self.pacer.started(Instant::now(), DiskOp::entries_in(&ops));
                for op in &ops {
                    if let DiskOp::InstallSnapshot { base } = op {
                        tracing::info!(
                            node = self.me.node,
                            %base,
                            "store caught up by snapshot from a peer"
                        );
                        metrics::counter!(crate::metrics::SNAPSHOTS_INSTALLED, "role" => "store")
                            .increment(1);
                    }
                }
                self.runner.persist(ops)
            }
            StoreCommand::Read(req) => self.runner.read(req),
            StoreCommand::ReadSnapshot(req) => self.runner.read_snapshot(req),
        }
        false
    }
}
