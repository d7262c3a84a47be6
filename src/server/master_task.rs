//! The task that owns the master core and the log.
//!
//! On a single node it always serves. In a cluster it follows the replication
//! engine's role: while a slave it keeps a replica of the broker state from the
//! stable entries it is handed, becomes the master from that replica when the
//! engine wins an election, and falls back to a replica rebuilt from the stable
//! log when deposed.

use super::outbox::{self, OutboxTx, Outboxes};
use super::replica::{self, Core};
use crate::broker::state::RestoreBuilder;
use crate::config::Config;
use crate::error::{AmqpError, ReplyCode};
use crate::management::CoreView;
use crate::master::Master;
use crate::master::io::{ConnId, Input, Output, ToConn};
use crate::metrics as m;
use bytes::Bytes;
use stablemq_cluster::LocalLog;
use stablemq_cluster::driver::{BrokerEvent, BrokerHandle};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// Messages into the master task.
#[allow(clippy::large_enum_variant)] // moved once; boxing would allocate per message
pub enum MasterMsg {
    /// An input for the core.
    Input(Input),
    /// The inputs one socket read produced, in their order. One message for
    /// the whole read: a per-input send moved every input twice more and
    /// took the channel's locks once per frame. `credit` holds their places
    /// in the master's input budget ([`InputCredit`]) until they are handled.
    Inputs(Vec<Input>, tokio::sync::OwnedSemaphorePermit),
    /// A new connection's outbox.
    Register(ConnId, OutboxTx),
    /// Stop and hand back the local log (if any) for flushing.
    Shutdown(oneshot::Sender<Option<LocalLog>>),
    /// A read of the state for the management API, run between two inputs
    /// so it sees a consistent state without locks.
    Query(crate::management::Query),
    /// A management write (users, vhosts, permissions, definitions): the
    /// answer comes once its events are stable. A node that is not the
    /// master drops the sender (the API answers 503).
    Admin(
        crate::master::admin::AdminOp,
        oneshot::Sender<crate::master::admin::AdminResult>,
    ),
}

/// The master's clock tick: TTL, `x-expires` and consumer timeouts.
const TICK: Duration = Duration::from_millis(50);

/// Resource alarms (memory, disk) are checked every this many ticks (1 s).
const GAUGE_TICKS: u32 = 20;

/// How many inputs the master handles before it hands out what they
/// produced, when a pass brings more (the outputs of one pass otherwise go
/// out together at its end).
const DISPATCH_EVERY: usize = 512;

/// How many inputs may wait in [`MasterMsg::Inputs`] batches for the master.
/// A connection takes credit for a batch before it sends it and waits while
/// there is none, so a busy master pushes back on publishers by the number
/// of inputs, as the channel's own bound does for single messages.
pub const MASTER_INPUTS: u32 = 8192;

/// The shared budget of batched inputs (see [`MASTER_INPUTS`]).
#[derive(Clone)]
pub struct InputCredit(Arc<tokio::sync::Semaphore>);

impl Default for InputCredit {
    /// A full budget.
    fn default() -> InputCredit {
        InputCredit(Arc::new(tokio::sync::Semaphore::new(
            MASTER_INPUTS as usize,
        )))
    }
}

impl InputCredit {
    /// Wait for credit for `n` inputs (at most [`MASTER_INPUTS`]); it is given
    /// back when the permit drops, i.e. when the master has handled the batch.
    pub async fn take(&self, n: u32) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.0
            .clone()
            .acquire_many_owned(n.min(MASTER_INPUTS))
            .await
            .ok()
    }
}

/// Where the master's events go, and where stability comes from.
pub enum Backend {
    /// The embedded single node: one local store, a quorum of one.
    Local {
        /// The store thread.
        log: LocalLog,
        /// Its durable index.
        stable: watch::Receiver<u64>,
    },
    /// A cluster: the replication engine's driver.
    Replicated {
        /// Appends and status.
        handle: BrokerHandle,
        /// Stable, Apply, BecameMaster, SteppedDown.
        events: mpsc::UnboundedReceiver<BrokerEvent>,
        /// Whether this node serves clients itself (true from BecameMaster
        /// until SteppedDown); the accept loop proxies to the master otherwise.
        serving: watch::Sender<bool>,
    },
}

impl Backend {
    fn append(&mut self, index: u64, payload: Bytes) {
        match self {
            Backend::Local { log, .. } => {
                let pos = log.append(payload);
                debug_assert_eq!(pos.index, index, "I3: master and log numbering");
            }
            Backend::Replicated { handle, .. } => {
                // Fails only when the driver is gone, i.e. the node is stopping.
                let _ = handle.append_expecting(index, payload);
            }
        }
    }

    /// The next thing the log layer has to say.
    async fn next(&mut self) -> Option<BrokerEvent> {
        match self {
            Backend::Local { stable, .. } => match stable.changed().await {
                Ok(()) => {
                    let index = *stable.borrow_and_update();
                    m::local_stable(index);
                    Some(BrokerEvent::Stable(index))
                }
                Err(_) => std::future::pending().await,
            },
            Backend::Replicated { events, .. } => match events.recv().await {
                Some(e) => Some(e),
                None => std::future::pending().await,
            },
        }
    }
}

/// Run until shutdown.
pub async fn run(
    mut core: Core,
    mut backend: Backend,
    mut rx: mpsc::Receiver<MasterMsg>,
    config: Arc<Config>,
    data_dir: std::path::PathBuf,
    users: watch::Sender<Arc<crate::users::AccessTable>>,
    cluster_name: watch::Sender<String>,
) {
    let users = Arc::new(users);
    let mut outboxes = Outboxes::default();
    let mut batch = Vec::with_capacity(512);
    // The master's output buffer of the previous dispatch, handed back so
    // that a steady load allocates no new one.
    let mut spare: Vec<Output> = Vec::with_capacity(1024);
    // A store's state arriving chunk by chunk (snapshot catch-up), built
    // into a broker as it comes.
    let mut restoring: Option<RestoreBuilder> = None;
    if let Backend::Local { log, .. } = &backend {
        m::single_node_status(log.epoch());
    }
    // Expiry and timeouts are checked this often; a TTL fires at most this
    // late. Every GAUGE_TICKS-th tick also checks the resource alarms: one
    // timer rather than two, since each timer is polled at every pass of the
    // loop (every batch of inputs), not only when it fires.
    let mut tick = tokio::time::interval(TICK);
    // Ticks until the next alarm check.
    let mut gauge_in: u32 = 0;
    let mut alarm: Option<String> = None;
    let memory_limit = config
        .memory_high_watermark_bytes
        .unwrap_or_else(|| crate::metrics::total_memory_bytes().map_or(u64::MAX, |t| t / 10 * 4));
    let mut published = users.borrow().clone();
    let default_name = config.default_cluster_name();
    let mut published_name = cluster_name.borrow().clone();
    loop {
        // Logins and the management API read users from this snapshot; a
        // new one goes out whenever an event changed the table.
        if !Arc::ptr_eq(&published, &core.broker().access) {
            published = core.broker().access.clone();
            publish_users(&users, &published);
        }
        // connection.start reports the stored cluster name, else the default;
        // compared with the last one sent, so a pass takes no lock.
        let name = core
            .broker()
            .global_parameters
            .get(crate::broker::parameters::CLUSTER_NAME)
            .and_then(|v| v.as_str())
            .unwrap_or(&default_name);
        if name != published_name {
            published_name = name.to_string();
            cluster_name.send_replace(published_name.clone());
        }
        tokio::select! {
            n = rx.recv_many(&mut batch, 512) => {
                if n == 0 {
                    return;
                }
                // One clock read and one dispatch per batch: the outputs of
                // many inputs go out together (in order), and the connection
                // tasks are woken once per batch rather than once per input.
                let mut dirty = false;
                if let Core::Serving(master) = &mut core {
                    master.set_now(now_ms());
                }
                let mut handled = 0usize;
                for msg in batch.drain(..) {
                    match msg {
                        MasterMsg::Input(i) => {
                            handled += 1;
                            on_input(i, &mut core, &mut dirty, &mut backend, &mut outboxes, &mut spare);
                        }
                        MasterMsg::Inputs(mut inputs, credit) => {
                            handled += inputs.len();
                            for i in inputs.drain(..) {
                                on_input(i, &mut core, &mut dirty, &mut backend, &mut outboxes, &mut spare);
                            }
                            // The budget is given back once they are handled.
                            drop(credit);
                        }
                        MasterMsg::Register(id, tx) => {
                            if matches!(core, Core::Following(_)) {
                                outbox::send_one(&tx, ToConn::CloseConnection(not_master()));
                                continue;
                            }
                            if alarm.is_some() {
                                outbox::send_one(&tx, ToConn::Alarm(alarm.clone()));
                            }
                            outboxes.insert(id, tx);
                        }
                        MasterMsg::Admin(op, tx) => {
                            flush(&mut core, &mut dirty, &mut backend, &mut outboxes, &mut spare);
                            if let Core::Serving(master) = &mut core {
                                let users = users.clone();
                                let reply = crate::master::admin::AdminReply::new(
                                    move |result, table| {
                                        publish_users(&users, table);
                                        let _ = tx.send(result);
                                    },
                                );
                                master.handle(Input::Admin { op, reply });
                                dirty = true;
                            }
                        }
                        MasterMsg::Query(q) => {
                            flush(&mut core, &mut dirty, &mut backend, &mut outboxes, &mut spare);
                            q(CoreView {
                                broker: core.broker(),
                                master: core.master(),
                                alarm: alarm.as_deref(),
                            })
                        }
                        MasterMsg::Shutdown(done) => {
                            flush(&mut core, &mut dirty, &mut backend, &mut outboxes, &mut spare);
                            let _ = done.send(match backend {
                                Backend::Local { log, .. } => Some(log),
                                Backend::Replicated { .. } => None,
                            });
                            return;
                        }
                    }
                    // Batched reads can bring thousands of inputs at once:
                    // what they produced goes out every so often, not only
                    // after the last one.
                    if handled >= DISPATCH_EVERY {
                        handled = 0;
                        flush(&mut core, &mut dirty, &mut backend, &mut outboxes, &mut spare);
                    }
                }
                flush(&mut core, &mut dirty, &mut backend, &mut outboxes, &mut spare);
            }
            Some(event) = backend.next() => {
                core = on_log_event(
                    core,
                    event,
                    &config,
                    &mut backend,
                    &mut outboxes,
                    &mut spare,
                    &mut restoring,
                );
            }
            _ = tick.tick() => {
                if let Core::Serving(master) = &mut core {
                    master.set_now(now_ms());
                    master.handle(Input::Tick);
                    dispatch(master, &mut backend, &mut outboxes, &mut spare);
                }
                // The first tick (at once) checks too, as the separate 1 s
                // timer's first tick did.
                if gauge_in == 0 {
                    gauge_in = GAUGE_TICKS;
                    let limit = crate::management::alarms::effective_limit(memory_limit);
                    let now = check_alarms(&config, &data_dir, limit);
                    if now != alarm {
                        match &now {
                            Some(r) => tracing::warn!("resource alarm: {r}; blocking publishers"),
                            None => tracing::info!("resource alarm cleared"),
                        }
                        alarm = now;
                        outboxes.broadcast(|| ToConn::Alarm(alarm.clone()));
                    }
                }
                gauge_in -= 1;
            }
        }
    }
}

/// Hand one input to the core (a following node has none to serve).
fn on_input(
    i: Input,
    core: &mut Core,
    dirty: &mut bool,
    backend: &mut Backend,
    outboxes: &mut Outboxes,
    spare: &mut Vec<Output>,
) {
    let gone = match &i {
        Input::Disconnected { conn } => Some(*conn),
        _ => None,
    };
    match core {
        Core::Serving(master) => {
            master.handle(i);
            *dirty = true;
        }
        // A connection accepted just before this node stepped down: it was
        // told to close already.
        Core::Following(_) => {}
    }
    if let Some(c) = gone {
        // Whatever the master still had for it goes out before its outbox
        // is forgotten.
        flush(core, dirty, backend, outboxes, spare);
        outboxes.remove(c);
    }
}

/// Hand out a new users snapshot unless it is the one already out.
fn publish_users(
    users: &watch::Sender<Arc<crate::users::AccessTable>>,
    table: &Arc<crate::users::AccessTable>,
) {
    users.send_if_modified(|cur| {
        if Arc::ptr_eq(cur, table) {
            false
        } else {
            *cur = table.clone();
            true
        }
    });
}

/// The close a client gets when the node it talks to is no longer the master.
fn not_master() -> AmqpError {
    AmqpError::new(
        ReplyCode::ConnectionForced,
        "this node is no longer the master; reconnect",
    )
}

/// React to the log layer: stability, or (in a cluster) a role change.
fn on_log_event(
    core: Core,
    event: BrokerEvent,
    config: &Arc<Config>,
    backend: &mut Backend,
    outboxes: &mut Outboxes,
    spare: &mut Vec<Output>,
    restoring: &mut Option<RestoreBuilder>,
) -> Core {
    if !matches!(
        event,
        BrokerEvent::Restore { .. } | BrokerEvent::Campaign { .. }
    ) {
        // A transfer the engine abandoned (it caught up otherwise, or its
        // role changed): its partial state goes.
        *restoring = None;
    }
    match (core, event) {
        (Core::Serving(mut master), BrokerEvent::Stable(index)) => {
            master.set_now(now_ms());
            master.handle(Input::Stable { index });
            dispatch(&mut master, backend, outboxes, spare);
            Core::Serving(master)
        }
        (Core::Following(mut broker), BrokerEvent::Apply(entries)) => {
            replica::apply_entries(&mut broker, &entries);
            Core::Following(broker)
        }
        (
            Core::Following(broker),
            BrokerEvent::Restore {
                base,
                first,
                pairs,
                done,
            },
        ) => {
            // A store compacted the entries this replica needed: its state
            // of the stable log up to `base` replaces ours wholesale, and
            // `Apply` continues after it (state + suffix == full replay, I4).
            // It arrives in chunks, in key order, each built into the new
            // broker as it comes, so the whole state is never held twice.
            // No configured vhosts: a replica starts from nothing and gets
            // them from the log, as the store's reducer did.
            if first {
                *restoring = Some(RestoreBuilder::new(&[]));
            }
            let Some(builder) = restoring.as_mut() else {
                // The engine takes a later chunk only after the first.
                tracing::error!(%base, "a snapshot chunk without its start; exiting");
                std::process::exit(70);
            };
            if let Err(err) = builder.feed(pairs) {
                // The stores' state does not decode: serving from a
                // guess would break I4. Stop; another node can serve.
                tracing::error!(%base, "snapshot state does not decode: {err}; exiting");
                std::process::exit(70);
            }
            if !done {
                return Core::Following(broker);
            }
            let Some(builder) = restoring.take() else {
                return Core::Following(broker);
            };
            drop(broker);
            tracing::info!(%base, "replica restored from a store's snapshot");
            Core::Following(builder.finish())
        }
        (Core::Following(mut broker), BrokerEvent::BecameMaster { epoch, stable }) => {
            if epoch > 1 {
                // Epoch 1 is the cluster's first master: nothing failed over.
                metrics::counter!(m::FAILOVERS).increment(1);
            }
            broker.mark_redelivered();
            let mut master = Master::new(config.clone(), broker, stable);
            // The cluster's first master seeds users and vhosts from the
            // config; later ones find them in the log.
            master.seed_from_config(config);
            tracing::info!(epoch, stable, "serving clients as master");
            set_serving(backend, true);
            Core::Serving(Box::new(master))
        }
        (core, BrokerEvent::SteppedDown { epoch }) => {
            // I2: nothing past the last stable index may be shown to anyone.
            // Pending confirms are neither acked nor nacked: the clients see
            // their connection close (320) and republish.
            tracing::warn!(epoch, "deposed: closing every client connection (320)");
            set_serving(backend, false);
            outboxes.close_all(|| ToConn::CloseConnection(not_master()));
            drop(core);
            // The engine restarts as a fresh slave: the stable state arrives
            // again through Apply, from index 1.
            Core::Following(Master::recover(config, []))
        }
        (core, BrokerEvent::Campaign { epoch }) => {
            tracing::info!(epoch, "campaigning for mastership");
            core
        }
        (core, event) => {
            // Apply while serving, Stable while following: the engine never
            // does this; a debug build says so.
            debug_assert!(false, "log event {event:?} does not fit the current role");
            core
        }
    }
}

fn set_serving(backend: &Backend, on: bool) {
    if let Backend::Replicated { serving, .. } = backend {
        serving.send_replace(on);
    }
}

/// Dispatch what the master produced, if anything was handled since the last
/// dispatch.
fn flush(
    core: &mut Core,
    dirty: &mut bool,
    backend: &mut Backend,
    outboxes: &mut Outboxes,
    spare: &mut Vec<Output>,
) {
    if !std::mem::take(dirty) {
        return;
    }
    if let Core::Serving(master) = core {
        dispatch(master, backend, outboxes, spare);
    }
}

/// Carry out the core's outputs; `spare` is an empty buffer the master gets
/// to fill next, and gets the drained one back.
fn dispatch(
    master: &mut Master,
    backend: &mut Backend,
    outboxes: &mut Outboxes,
    spare: &mut Vec<Output>,
) {
    let mut outputs = master.swap_outputs(std::mem::take(spare));
    let appends = outputs
        .iter()
        .filter(|o| matches!(o, Output::Append(_)))
        .count() as u64;
    // The master numbered these appends already, consecutively up to its last.
    let mut index = master.last_appended() + 1 - appends;
    for o in outputs.drain(..) {
        match o {
            Output::Append(payload) => {
                backend.append(index, payload);
                index += 1;
            }
            Output::ToConn(conn, msg) => outboxes.push(conn, msg),
        }
    }
    // Each connection gets what this dispatch has for it in one send.
    outboxes.send_all();
    *spare = outputs;
    if appends > 0 && matches!(backend, Backend::Local { .. }) {
        // The replication driver times its own appends; the single node's
        // quorum of one is timed here.
        m::local_appended(index - 1);
    }
}

/// The active resource alarm, if any, with RabbitMQ's reason text.
fn check_alarms(config: &Config, data_dir: &std::path::Path, memory_limit: u64) -> Option<String> {
    let rss = crate::metrics::resident_memory_bytes();
    let free = crate::metrics::disk_free_bytes(data_dir);
    let memory = rss > memory_limit;
    let disk = free.is_some_and(|f| f < config.disk_free_limit_bytes);
    // The Prometheus endpoint reports the decision made here.
    crate::metrics::set_alarm_state(memory_limit, memory, disk);
    if memory {
        Some("low on memory".into())
    } else if disk {
        Some("low on disk".into())
    } else {
        None
    }
}

/// Wall-clock time in ms since the Unix epoch: the master's only clock.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
