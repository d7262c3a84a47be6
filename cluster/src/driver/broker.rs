//! The tokio driver of a [`BrokerNode`].
//!
//! One task owns the node and sends through the node's [`Outbox`]; everyone else talks to it
//! through a [`BrokerHandle`]: `append` goes over a channel (answered with the
//! assigned position), engine events come out on another, and the status is a
//! `watch` the task updates after every step. The task drains every append
//! already queued before it steps `Flush`, so a burst leaves as one Append
//! message per peer: the batch is what the clients produced meanwhile.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::position::{Entry, LogPosition};
use crate::replication::{
    AppendError, BrokerCommand, BrokerInput, BrokerNode, Config, Endpoint, NodeId, RoleKind,
    Service,
};
use crate::transport::TransportOptions;
use crate::wire::Envelope;

use super::{Clock, DriverError, NodeNet, Outbox};

/// What the engine tells the broker; see [`BrokerCommand`] for each meaning.
#[derive(Debug, Clone, PartialEq)]
pub enum BrokerEvent {
    /// Master: everything up to this index is stable; release confirms.
    Stable(u64),
    /// Slave, or a candidate taking over: apply these stable entries in order
    /// (skip epoch markers, [`crate::replication::is_epoch_marker`]).
    Apply(Vec<Entry>),
    /// Slave, or a candidate taking over: one chunk of a store's state of
    /// the stable log up to `base` (a store compacted the entries this node
    /// needed), in key order. `first` starts it (drop a partial one); once
    /// `done`, the state replaces the whole broker state, and `Apply`
    /// continues from `base.index + 1`.
    Restore {
        /// The last entry the state covers.
        base: crate::position::LogPosition,
        /// These pairs start the state.
        first: bool,
        /// The chunk's pairs, in key order, after every earlier chunk's.
        pairs: Vec<(bytes::Bytes, bytes::Bytes)>,
        /// The last chunk.
        done: bool,
    },
    /// This node started an election.
    Campaign {
        /// Its epoch.
        epoch: u64,
    },
    /// This node is master of `epoch` and may serve clients; everything up to
    /// `stable` was applied first.
    BecameMaster {
        /// The new epoch.
        epoch: u64,
        /// The stable index the mastership starts from.
        stable: u64,
    },
    /// This node was master and was deposed: close clients (320) and drop the
    /// whole broker state. The node restarts its replication as a fresh slave,
    /// so the stable state arrives again through `Apply`, from index 1 (its
    /// own entries left memory once the stores held them).
    SteppedDown {
        /// The epoch that deposed it.
        epoch: u64,
    },
}

/// A snapshot for status pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerStatus {
    /// Master, slave or candidate.
    pub role: RoleKind,
    /// Highest epoch seen.
    pub epoch: u64,
    /// Highest index handed to the broker as stable.
    pub stable: u64,
    /// The master this node follows (itself while master); `None` during an
    /// election.
    pub master: Option<NodeId>,
}

/// Why [`BrokerHandle::append`] failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DriverAppendError {
    /// The engine refused (not master, or an empty payload).
    #[error(transparent)]
    Engine(#[from] AppendError),
    /// The driver task is gone (aborted, or the driver dropped).
    #[error("broker node driver stopped")]
    Stopped,
}

struct AppendRequest {
    payload: Bytes,
    reply: Reply,
}

/// How an append is answered.
enum Reply {
    /// With the position, or why not.
    Position(oneshot::Sender<Result<LogPosition, AppendError>>),
    /// Not at all: the caller numbered it itself (`expected_index`) and learns
    /// of stability, or of losing mastership, from the events.
    Expect(u64),
}

/// A cheap, cloneable way to talk to a running broker node.
#[derive(Clone)]
pub struct BrokerHandle {
    requests: mpsc::UnboundedSender<AppendRequest>,
    status: watch::Receiver<BrokerStatus>,
}

impl BrokerHandle {
    /// Master only: give `payload` the next log position. It is sent with
    /// whatever else is queued; a later [`BrokerEvent::Stable`] at or beyond the
    /// returned index says it is on a quorum.
    pub async fn append(&self, payload: Bytes) -> Result<LogPosition, DriverAppendError> {
        let (reply, rx) = oneshot::channel();
        self.requests
            .send(AppendRequest {
                payload,
                reply: Reply::Position(reply),
            })
            .map_err(|_| DriverAppendError::Stopped)?;
        Ok(rx.await.map_err(|_| DriverAppendError::Stopped)??)
    }

    /// Master only: append `payload`, which the caller numbers `expected_index`
    /// (the index after its previous append). Never waits, and appends keep
    /// their call order, so a single-threaded owner can append from a
    /// synchronous loop. A refusal (this node is no longer master) is not
    /// reported here: [`BrokerEvent::SteppedDown`] says so. A different index
    /// than expected means the owner and the log disagree, a bug: it is logged
    /// (and a debug build stops).
    pub fn append_expecting(
        &self,
        expected_index: u64,
        payload: Bytes,
    ) -> Result<(), DriverAppendError> {
        self.requests
            .send(AppendRequest {
                payload,
                reply: Reply::Expect(expected_index),
            })
            .map_err(|_| DriverAppendError::Stopped)
    }

    /// The current status.
    pub fn status(&self) -> BrokerStatus {
        *self.status.borrow()
    }

    /// Master, slave or candidate.
    pub fn role(&self) -> RoleKind {
        self.status().role
    }

    /// Highest epoch seen.
    pub fn epoch(&self) -> u64 {
        self.status().epoch
    }

    /// Highest index handed to the broker as stable.
    pub fn stable(&self) -> u64 {
        self.status().stable
    }

    /// A receiver that sees every status change (to wait for a role, say).
    pub fn watch_status(&self) -> watch::Receiver<BrokerStatus> {
        self.status.clone()
    }
}

/// A running broker node; dropping it stops the node (the task is aborted, its
/// sockets closed). See the module docs.
pub struct BrokerNodeDriver {
    handle: BrokerHandle,
    task: JoinHandle<()>,
}

impl BrokerNodeDriver {
    /// Bind `listen_addr` and start broker node `node_id`. `peers` maps every
    /// other node to its address; `seed` seeds the election jitter (use
    /// different seeds on different nodes). Events arrive on the returned
    /// channel, which the owner must keep draining.
    pub async fn start(
        config: Config,
        node_id: NodeId,
        listen_addr: SocketAddr,
        peers: HashMap<NodeId, SocketAddr>,
        seed: u64,
    ) -> Result<(BrokerNodeDriver, mpsc::UnboundedReceiver<BrokerEvent>), DriverError> {
        let listener = TcpListener::bind(listen_addr).await?;
        Self::start_on(
            config,
            node_id,
            listener,
            peers,
            seed,
            TransportOptions::default(),
        )
    }

    /// [`BrokerNodeDriver::start`] on an already bound listener, with transport
    /// options. Must be called inside a tokio runtime.
    pub fn start_on(
        config: Config,
        node_id: NodeId,
        listener: TcpListener,
        peers: HashMap<NodeId, SocketAddr>,
        seed: u64,
        opts: TransportOptions,
    ) -> Result<(BrokerNodeDriver, mpsc::UnboundedReceiver<BrokerEvent>), DriverError> {
        let net = NodeNet::start(node_id, listener, peers, opts);
        Self::start_with(config, node_id, net.outbox, net.broker_inbound, seed)
    }

    /// [`BrokerNodeDriver::start`] on a node network shared with a co-located
    /// store ([`NodeNet`]): `inbound` is the node's broker queue. Must be called
    /// inside a tokio runtime.
    pub fn start_with(
        config: Config,
        node_id: NodeId,
        outbox: Outbox,
        inbound: mpsc::Receiver<Envelope>,
        seed: u64,
    ) -> Result<(BrokerNodeDriver, mpsc::UnboundedReceiver<BrokerEvent>), DriverError> {
        if !config.brokers.contains(&node_id) {
            return Err(DriverError::NotAMember(node_id, "broker"));
        }
        // Several ticks per heartbeat and per retry, so neither is late by much.
        let tick = Duration::from_millis((config.heartbeat_ms.min(config.retry_ms) / 5).max(1));
        let clock = Clock::start();
        let node = BrokerNode::new(node_id, config.clone(), seed, clock.now_ms());
        let (status_tx, status) = watch::channel(status_of(&node));
        let (requests_tx, requests) = mpsc::unbounded_channel();
        let (events_tx, events) = mpsc::unbounded_channel();
        let state = Running {
            config,
            seed,
            unstable: std::collections::VecDeque::new(),
            appended_to: 0,
            node,
            outbox,
            clock,
            events: events_tx,
            status: status_tx,
        };
        let task = tokio::spawn(state.run(inbound, requests, tick));
        let handle = BrokerHandle {
            requests: requests_tx,
            status,
        };
        Ok((BrokerNodeDriver { handle, task }, events))
    }

    /// A handle to append and read the status; it outlives nothing: once the
    /// driver is dropped, its appends fail with `Stopped`.
    pub fn handle(&self) -> BrokerHandle {
        self.handle.clone()
    }

    /// See [`BrokerHandle::append`].
    pub async fn append(&self, payload: Bytes) -> Result<LogPosition, DriverAppendError> {
        self.handle.append(payload).await
    }

    /// Master, slave or candidate.
    pub fn role(&self) -> RoleKind {
        self.handle.role()
    }

    /// Highest epoch seen.
    pub fn epoch(&self) -> u64 {
        self.handle.epoch()
    }

    /// Highest index handed to the broker as stable.
    pub fn stable(&self) -> u64 {
        self.handle.stable()
    }

    /// Stop the node now, as a crash would: nothing is flushed (a broker holds
    /// nothing durable; the stores do).
    pub fn abort(&self) {
        self.task.abort();
    }
}

impl Drop for BrokerNodeDriver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn status_of(node: &BrokerNode) -> BrokerStatus {
    BrokerStatus {
        role: node.role(),
        epoch: node.epoch(),
        stable: node.applied(),
        master: node.master(),
    }
}

/// Everything the driver task owns.
struct Running {
    /// Membership and timings, to restart the node after a step-down.
    config: Config,
    /// Seeds the restarted node's election jitter (mixed with the epoch).
    seed: u64,
    /// Batches appended and not yet stable: the last index of each and when
    /// it was appended, for the quorum-ack latency histogram.
    unstable: std::collections::VecDeque<(u64, std::time::Instant)>,
    /// The highest index appended during the current drain of requests.
    appended_to: u64,
    node: BrokerNode,
    outbox: Outbox,
    clock: Clock,
    events: mpsc::UnboundedSender<BrokerEvent>,
    status: watch::Sender<BrokerStatus>,
}

impl Running {
    async fn run(
        mut self,
        mut inbound: mpsc::Receiver<Envelope>,
        mut requests: mpsc::UnboundedReceiver<AppendRequest>,
        tick: Duration,
    ) {
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let input = tokio::select! {
                Some(env) = inbound.recv() => {
                    if env.to.service != Service::Broker {
                        continue; // a broker-only node hosts no store
                    }
                    BrokerInput::Receive { from: env.from, msg: env.msg }
                }
                request = requests.recv() => {
                    let Some(first) = request else {
                        return; // every handle is gone: nobody can use the node
                    };
                    self.append(first);
                    while let Ok(next) = requests.try_recv() {
                        self.append(next);
                    }
                    if self.appended_to > self.unstable.back().map_or(0, |b| b.0) {
                        self.unstable
                            .push_back((self.appended_to, std::time::Instant::now()));
                    }
                    BrokerInput::Flush
                }
                _ = ticker.tick() => BrokerInput::Tick,
            };
            let commands = self.node.step(self.clock.now_ms(), input);
            self.carry_out(commands);
            let now = status_of(&self.node);
            self.status.send_if_modified(|status| {
                let changed = *status != now;
                *status = now;
                changed
            });
        }
    }

    fn append(&mut self, request: AppendRequest) {
        let result = self.node.append(request.payload);
        if let Ok(pos) = &result {
            self.appended_to = pos.index;
        }
        match request.reply {
            // The requester may have given up (dropped its future): nothing to do.
            Reply::Position(reply) => {
                let _ = reply.send(result);
            }
            Reply::Expect(expected) => match result {
                Ok(pos) if pos.index == expected => {}
                Ok(pos) => {
                    // I3 depends on the broker and the log numbering alike.
                    tracing::error!(
                        expected,
                        got = pos.index,
                        "append landed at an unexpected index"
                    );
                    debug_assert_eq!(pos.index, expected, "I3: broker and log numbering");
                }
                // Deposed between the owner's append and this one: the owner
                // hears SteppedDown next and drops everything unstable.
                Err(err) => tracing::debug!(%err, "append refused"),
            },
        }
    }

    fn carry_out(&mut self, commands: Vec<BrokerCommand>) {
        let me = Endpoint::broker(self.node.id());
        let mut restart_at = None;
        for cmd in commands {
            let event = match cmd {
                BrokerCommand::Send { to, msg } => {
                    self.outbox.send(Envelope { from: me, to, msg });
                    continue;
                }
                BrokerCommand::Apply(entries) => BrokerEvent::Apply(entries),
                BrokerCommand::Restore {
                    base,
                    first,
                    pairs,
                    done,
                } => {
                    if done {
                        tracing::info!(
                            node = me.node,
                            %base,
                            "caught up by snapshot: restoring the broker state"
                        );
                        metrics::counter!(crate::metrics::SNAPSHOTS_INSTALLED, "role" => "broker")
                            .increment(1);
                    }
                    BrokerEvent::Restore {
                        base,
                        first,
                        pairs,
                        done,
                    }
                }
                BrokerCommand::Stable(index) => {
                    while let Some(&(last, at)) = self.unstable.front() {
                        if last > index {
                            break;
                        }
                        metrics::histogram!(crate::metrics::QUORUM_ACK_SECONDS)
                            .record(at.elapsed().as_secs_f64());
                        self.unstable.pop_front();
                    }
                    BrokerEvent::Stable(index)
                }
                BrokerCommand::Campaign { epoch } => {
                    tracing::info!(node = me.node, epoch, "campaigning");
                    BrokerEvent::Campaign { epoch }
                }
                BrokerCommand::BecameMaster { epoch, stable } => {
                    tracing::info!(node = me.node, epoch, stable, "became master");
                    BrokerEvent::BecameMaster { epoch, stable }
                }
                BrokerCommand::SteppedDown { epoch } => {
                    // Nothing appended as master will be stable under our name.
                    self.unstable.clear();
                    tracing::warn!(node = me.node, epoch, "stepped down; restarting as a slave");
                    restart_at = Some(epoch);
                    BrokerEvent::SteppedDown { epoch }
                }
            };
            // The owner dropped its receiver: it no longer cares; keep serving
            // the cluster (a slave's acks still matter to the master).
            let _ = self.events.send(event);
        }
        if let Some(epoch) = restart_at {
            // The deposed master's log is partly gone from memory, and what
            // remains ran ahead of the stable index: start over as a fresh
            // slave that catches up from the stores.
            self.node = BrokerNode::after_step_down(
                me.node,
                self.config.clone(),
                self.seed ^ epoch.rotate_left(17),
                self.clock.now_ms(),
                epoch,
            );
        }
    }
}
