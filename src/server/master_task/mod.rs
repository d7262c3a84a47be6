//! The task that owns the master core and the log.
//!
//! On a single node it always serves. In a cluster it follows the replication
//! engine's role: while a slave it keeps a replica of the broker state from the
//! stable entries it is handed, becomes the master from that replica when the
//! engine wins an election, and falls back to a replica rebuilt from the stable
//! log when deposed.

mod alarms;
mod backend;
mod peer_alarms;
mod roles;

pub use backend::Backend;

use super::outbox::{self, OutboxTx, Outboxes};
use super::replica::Core;
use crate::broker::state::RestoreBuilder;
use crate::config::Config;
use crate::error::{AmqpError, ReplyCode};
use crate::management::CoreView;
use crate::master::inout::{ConnId, Input, Output, ToConn};
use crate::metrics as m;
use crate::users::AccessTable;
use stablemq_cluster::LocalLog;
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

/// The snapshots the rest of the server reads without asking the master:
/// the users table (logins, the management API) and the cluster name
/// (connection.start). Each goes out only when it changed.
pub type Published = (Arc<watch::Sender<Arc<AccessTable>>>, watch::Sender<String>);

/// The master task: the core (serving or following), where its events go,
/// and the connections' outboxes. Tokio only moves bytes and timers here;
/// every decision is the core's.
pub struct MasterTask {
    core: Core,
    backend: Backend,
    outboxes: Outboxes,
    config: Arc<Config>,
    /// Inputs were handled since the last dispatch.
    dirty: bool,
    /// The master's output buffer of the previous dispatch, handed back so
    /// that a steady load allocates no new one.
    spare: Vec<Output>,
    /// A store's state arriving chunk by chunk (snapshot catch-up), built
    /// into a broker as it comes.
    restoring: Option<RestoreBuilder>,
    alarms: alarms::Alarms,
    published: Published,
    /// The users table last published.
    users_out: Arc<AccessTable>,
    /// The cluster name last published, and the default when none is stored.
    name_out: String,
    default_name: String,
    /// The last log index applied to the replica while following.
    applied: watch::Sender<u64>,
}

/// Whether the task goes on after a message.
enum Flow {
    Go,
    /// Shut down, handing the local log (if any) to this sender.
    Stop(oneshot::Sender<Option<LocalLog>>),
}

impl MasterTask {
    /// A task over `core`, appending to `backend`; `data_dir`'s filesystem
    /// is watched for the disk alarm.
    pub fn new(
        core: Core,
        backend: Backend,
        config: Arc<Config>,
        data_dir: std::path::PathBuf,
        published: Published,
    ) -> MasterTask {
        if let Some(epoch) = backend.local_epoch() {
            m::single_node_status(epoch);
        }
        let users_out = published.0.borrow().clone();
        let name_out = published.1.borrow().clone();
        MasterTask {
            core,
            backend,
            outboxes: Outboxes::default(),
            alarms: alarms::Alarms::new(config.clone(), data_dir),
            default_name: config.default_cluster_name(),
            config,
            dirty: false,
            spare: Vec::with_capacity(1024),
            restoring: None,
            users_out,
            name_out,
            published,
            applied: watch::Sender::new(0),
        }
    }

    /// The last log index applied to the replica (it grows while this
    /// node follows): what a stream read from the replica waits on.
    pub fn replica_applied(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// Run until shutdown (or until every sender of `rx` is gone).
    pub async fn run(mut self, mut rx: mpsc::Receiver<MasterMsg>) {
        let mut batch = Vec::with_capacity(512);
        // Expiry and timeouts are checked this often; a TTL fires at most this
        // late. The same tick paces the resource alarms: one timer rather than
        // two, since each timer is polled at every pass of the loop (every
        // batch of inputs), not only when it fires.
        let mut tick = tokio::time::interval(TICK);
        loop {
            self.publish_snapshots();
            tokio::select! {
                n = rx.recv_many(&mut batch, 512) => {
                    if n == 0 {
                        return;
                    }
                    if let Flow::Stop(done) = self.on_batch(&mut batch) {
                        let _ = done.send(self.backend.into_local_log());
                        return;
                    }
                }
                Some(event) = self.backend.next() => self.on_log_event(event),
                _ = tick.tick() => self.on_tick(),
                // A filtered stream consumer stopped part way through a long
                // stream (master/stream.rs, SCAN_MAX): on with it, between
                // batches of inputs, so nobody else waits for the whole scan.
                () = std::future::ready(()), if self.stream_rescans_pending() => {
                    self.on_stream_rescans();
                }
            }
        }
    }

    /// Logins and the management API read users from a snapshot; a new one
    /// goes out whenever an event changed the table. connection.start reports
    /// the stored cluster name, else the default; compared with the last one
    /// sent, so a pass takes no lock.
    fn publish_snapshots(&mut self) {
        let broker = self.core.broker();
        if !Arc::ptr_eq(&self.users_out, &broker.access) {
            self.users_out = broker.access.clone();
            publish_users(&self.published.0, &self.users_out);
        }
        let name = broker
            .global_parameters
            .get(crate::broker::parameters::CLUSTER_NAME)
            .and_then(|v| v.as_str())
            .unwrap_or(&self.default_name);
        if name != self.name_out {
            self.name_out = name.to_string();
            self.published.1.send_replace(self.name_out.clone());
        }
    }

    /// One receive's worth of messages. One clock read and one dispatch per
    /// batch: the outputs of many inputs go out together (in order), and the
    /// connection tasks are woken once per batch rather than once per input.
    fn on_batch(&mut self, batch: &mut Vec<MasterMsg>) -> Flow {
        if let Core::Serving(master) = &mut self.core {
            master.set_now(now_ms());
        }
        let mut handled = 0usize;
        for msg in batch.drain(..) {
            handled += match &msg {
                MasterMsg::Input(_) => 1,
                MasterMsg::Inputs(inputs, _) => inputs.len(),
                _ => 0,
            };
            if let stop @ Flow::Stop(_) = self.on_msg(msg) {
                return stop;
            }
            // Batched reads can bring thousands of inputs at once: what they
            // produced goes out every so often, not only after the last one.
            if handled >= DISPATCH_EVERY {
                handled = 0;
                self.flush();
            }
        }
        self.flush();
        Flow::Go
    }

    fn on_msg(&mut self, msg: MasterMsg) -> Flow {
        match msg {
            MasterMsg::Input(i) => self.on_input(i),
            MasterMsg::Inputs(mut inputs, credit) => {
                for i in inputs.drain(..) {
                    self.on_input(i);
                }
                // The budget is given back once they are handled.
                drop(credit);
            }
            MasterMsg::Register(id, tx) => self.register(id, tx),
            MasterMsg::Admin(op, tx) => {
                self.flush();
                if let Core::Serving(master) = &mut self.core {
                    let users = self.published.0.clone();
                    let reply = crate::master::admin::AdminReply::new(move |result, table| {
                        publish_users(&users, table);
                        let _ = tx.send(result);
                    });
                    master.handle(Input::Admin { op, reply });
                    self.dirty = true;
                }
            }
            MasterMsg::Query(q) => {
                self.flush();
                q(CoreView {
                    broker: self.core.broker(),
                    master: self.core.master(),
                    alarm: self.alarms.current(),
                })
            }
            MasterMsg::Shutdown(done) => {
                self.flush();
                return Flow::Stop(done);
            }
        }
        Flow::Go
    }

    /// A new connection's outbox: a following node closes it at once.
    fn register(&mut self, id: ConnId, tx: OutboxTx) {
        if matches!(self.core, Core::Following(_)) {
            outbox::send_one(&tx, ToConn::CloseConnection(not_master()));
            return;
        }
        if let Some(alarm) = self.alarms.current() {
            outbox::send_one(&tx, ToConn::Alarm(Some(alarm.to_string())));
        }
        self.outboxes.insert(id, tx);
    }

    /// Hand one input to the core (a following node has none to serve).
    fn on_input(&mut self, i: Input) {
        let gone = match &i {
            Input::Disconnected { conn } => Some(*conn),
            _ => None,
        };
        match &mut self.core {
            Core::Serving(master) => {
                master.handle(i);
                self.dirty = true;
            }
            // A connection accepted just before this node stepped down: it was
            // told to close already.
            Core::Following(_) => {}
        }
        if let Some(c) = gone {
            // Whatever the master still had for it goes out before its outbox
            // is forgotten.
            self.flush();
            self.outboxes.remove(c);
        }
    }

    /// The clock: TTLs, expiry and consumer timeouts, and the resource alarms.
    fn stream_rescans_pending(&self) -> bool {
        matches!(&self.core, Core::Serving(master) if master.has_stream_rescans())
    }

    fn on_stream_rescans(&mut self) {
        if let Core::Serving(master) = &mut self.core {
            master.set_now(now_ms());
            master.resume_stream_scans();
            self.dirty = true;
            self.flush();
        }
    }

    fn on_tick(&mut self) {
        if let Core::Serving(master) = &mut self.core {
            master.set_now(now_ms());
            master.handle(Input::Tick);
            self.dirty = true;
            self.flush();
        }
        if let Some(alarm) = self.alarms.on_tick() {
            self.outboxes.broadcast(|| ToConn::Alarm(alarm.clone()));
        }
    }

    /// Carry out what the core produced, if anything was handled since the
    /// last dispatch. The master gets an empty buffer to fill next and the
    /// drained one is kept, so a steady load allocates none.
    fn flush(&mut self) {
        if !std::mem::take(&mut self.dirty) {
            return;
        }
        let Core::Serving(master) = &mut self.core else {
            return;
        };
        // After the inputs: what, of the log, anything they left waits for.
        let needed = master.stable_needed();
        let mut outputs = master.swap_outputs(std::mem::take(&mut self.spare));
        let mut last_append = None;
        for o in outputs.drain(..) {
            match o {
                Output::Append { index, entry } => {
                    self.backend.append(index, entry, index <= needed);
                    last_append = Some(index);
                }
                Output::ToConn(conn, msg) => self.outboxes.push(conn, msg),
            }
        }
        // Also what earlier dispatches deferred, when only now a reply or
        // delivery waits for it.
        self.backend.sync_to(needed);
        // Each connection gets what this dispatch has for it in one send.
        self.outboxes.send_all();
        self.spare = outputs;
        if let Some(index) = last_append.filter(|&i| i <= needed) {
            // What nothing waits for is not timed: its wait is by design.
            self.backend.appended_up_to(index);
        }
    }
}

/// Hand out a new users snapshot unless it is the one already out.
fn publish_users(users: &watch::Sender<Arc<AccessTable>>, table: &Arc<AccessTable>) {
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

/// Wall-clock time in ms since the Unix epoch: the master's only clock.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
