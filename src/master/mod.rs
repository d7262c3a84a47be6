//! The master: the one place that orders operations into events.
//!
//! Connections hand it [`Input`]s. It validates each operation against the broker
//! state, turns it into an [`Event`], applies the event at once (so later operations
//! see it) and appends durable events to the log. What a client may observe waits
//! for the log (I1): replies and confirms queue in `waiting` until the stable index
//! reaches the log index they depend on, and a queue delivers a message only once
//! the message's own `wait_index` is stable. Nothing here does I/O: the result of
//! every step is a list of [`Output`]s.

pub mod admin;
pub mod inout;
pub mod session;

mod acks;
mod authz;
mod basic;
mod counters;
mod dead_letter;
mod declare;
mod deliver;
mod limits;
mod publish;
mod queue_key;
mod reply_to;
mod sac;
mod stable;
pub mod stats;
mod stream;
mod super_stream;
pub(crate) use super_stream::PARTITION_ORDER;
mod timers;

use crate::broker::event::Event;
use crate::broker::{Applied, Broker};
use crate::config::Config;
use crate::error::{AmqpError, AmqpResult, ReplyCode};
use crate::fastmap::FastMap;
use inout::{ConnId, Input, Output, ToConn};
use queue_key::{QueueKey, qkey};
use session::{Channel, QueueConsumers, Session, Sessions};
use stable::{Completion, StableGate};
use stablemq_protocol::AMQPClass;
use stablemq_protocol::methods::{basic as mbasic, channel as mchannel};
use std::collections::BTreeSet;
use std::sync::Arc;

/// The master core. See the module docs.
///
/// Its state is split into parts that own what they hold, so a handler
/// borrows only the parts it needs:
/// - `broker`: the replicated state, changed only through [`Event`]s;
/// - `sessions` ([`Sessions`]): connections, channels and consumers;
/// - `gate` (`StableGate`): the log position and everything waiting for
///   the stable index; the only part that releases confirms, deferred
///   replies and stalled deliveries (I1);
/// - `expiry` (`timers::Expiry`): what the tick may expire;
/// - `out` (`inout::Outputs`): what the steps produced, for the server.
pub struct Master {
    /// The replicated broker state.
    pub broker: Broker,
    sessions: Sessions,
    gate: StableGate,
    expiry: timers::Expiry,
    out: inout::Outputs,
    /// The next message id: ids grow with the log, and recovery starts above
    /// the highest one the log holds.
    next_msg_id: u64,
    /// The master's clock (ms since the Unix epoch), set by the runtime before each
    /// step: time is an input, never read here.
    now_ms: u64,
    /// Nesting of dead-lettering in progress (bounded, see `dead_letter`).
    dead_letter_depth: u32,
    /// Management writes whose answers wait for the log (`admin`).
    admin_waiting: admin::AdminWaiting,
    /// Message counters for the management API's `message_stats`.
    stats: stats::Stats,
    /// Handles of the Prometheus counters bumped per message.
    counters: counters::HotCounters,
    /// The stream protocol's single active consumer groups (`sac`; not
    /// replicated).
    sac: sac::Groups,
    /// Stream queues (vhost, name) whose filtered consumers passed over
    /// `stream::SCAN_MAX` entries in one visit and go on at the next
    /// (`resume_stream_scans`).
    stream_rescans: Vec<(String, String)>,
}

impl Master {
    /// A master over an already recovered broker state whose log ends (stably) at
    /// `last_index`. A fresh node's vhosts and users come from
    /// [`Master::seed_from_config`], which the server calls next.
    pub fn new(config: Arc<Config>, broker: Broker, last_index: u64) -> Master {
        Master {
            next_msg_id: broker.max_msg_id + 1,
            expiry: timers::Expiry::new(&config, &broker),
            broker,
            sessions: Sessions::default(),
            gate: StableGate::new(last_index),
            out: inout::Outputs::default(),
            now_ms: 0,
            dead_letter_depth: 0,
            admin_waiting: admin::AdminWaiting::default(),
            stats: stats::Stats::default(),
            counters: counters::HotCounters::new(),
            sac: sac::Groups::default(),
            stream_rescans: Vec::new(),
        }
    }

    /// Set the master's clock (ms since the Unix epoch) before handling inputs.
    pub fn set_now(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
    }

    /// Index of the last appended event.
    pub fn last_appended(&self) -> u64 {
        self.gate.last_appended()
    }

    /// Highest stable index seen.
    pub fn stable_index(&self) -> u64 {
        self.gate.stable()
    }

    /// Outputs produced since the last call.
    pub fn take_outputs(&mut self) -> Vec<Output> {
        self.out.take()
    }

    /// Outputs produced since the last call; `empty` (an already drained
    /// buffer) collects the next ones, so a steady load reuses two buffers
    /// instead of growing a new one per step.
    pub fn swap_outputs(&mut self, empty: Vec<Output>) -> Vec<Output> {
        self.out.swap(empty)
    }

    /// Connections currently open.
    pub fn connection_ids(&self) -> Vec<ConnId> {
        self.sessions.conns.keys().copied().collect()
    }

    /// Number of open channels, for metrics.
    pub fn channel_count(&self) -> usize {
        self.sessions.conns.values().map(|s| s.channels.len()).sum()
    }

    /// Consumers of a queue, for metrics and declare-ok.
    pub fn consumer_count(&self, vhost: &str, queue: &str) -> usize {
        self.sessions
            .consumers
            .get(&(vhost.to_string(), queue.to_string()))
            .map_or(0, |c| c.list.len())
    }

    /// The next offset each consumer of stream `queue` reads, for metrics.
    pub fn stream_consumer_offsets<'a>(
        &'a self,
        vhost: &str,
        queue: &str,
    ) -> impl Iterator<Item = u64> + 'a {
        let conns = &self.sessions.conns;
        self.sessions
            .consumers
            .get(qkey(&(vhost, queue)))
            .into_iter()
            .flat_map(|qc| qc.list.iter())
            .filter_map(move |k| {
                conns
                    .get(&k.conn)?
                    .channels
                    .get(&k.ch)?
                    .consumers
                    .get(&k.tag)?
                    .stream_offset
            })
    }

    /// Open connections and their channels, for the management API.
    pub fn sessions(&self) -> impl Iterator<Item = (ConnId, &Session)> {
        self.sessions.conns.iter().map(|(id, s)| (*id, s))
    }

    /// Every queue's consumers, in delivery order, for the management API:
    /// ((vhost, queue), consumers).
    pub fn queue_consumers(&self) -> impl Iterator<Item = ((&str, &str), &QueueConsumers)> {
        self.sessions
            .consumers
            .iter()
            .map(|((v, q), c)| ((v.as_str(), q.as_str()), c))
    }

    /// Message counters, for the management API's `message_stats`.
    pub fn stats(&self) -> &stats::Stats {
        &self.stats
    }

    /// Handle one input.
    pub fn handle(&mut self, input: Input) {
        self.handle_inner(input);
        self.flush_cancels();
    }

    fn handle_inner(&mut self, input: Input) {
        match input {
            Input::Open {
                conn,
                user,
                vhost,
                info,
            } => self.open(conn, user, vhost, info),
            Input::Disconnected { conn } => self.disconnect(conn),
            Input::Stable { index } => self.on_stable(index),
            Input::Tick => self.tick(),
            Input::Admin { op, reply } => self.admin(op, reply),
            Input::ForceClose { conn, reason } => self.force_close(conn, &reason),
            Input::ChannelOpen { conn, ch } => self.channel_open(conn, ch),
            Input::ChannelError { conn, ch, error } => self.fail(conn, ch, error),
            Input::SingleActive { conn, op } => self.single_active(conn, op),
            other => {
                let (conn, ch) = match &other {
                    Input::ChannelClose { conn, ch }
                    | Input::Method { conn, ch, .. }
                    | Input::StreamTrack { conn, ch, .. }
                    | Input::Publish { conn, ch, .. } => (*conn, *ch),
                    _ => return,
                };
                let Some(chan) = self.sessions.channel_mut(conn, ch) else {
                    // The channel was closed by us and frames were still in flight: drop them.
                    return;
                };
                if chan.pending_replies > 0 || chan.deferred_inputs > 0 {
                    chan.deferred_inputs += 1;
                    let index = self.gate.last_appended();
                    self.push_waiting(index, conn, ch, Completion::Rerun(other));
                    return;
                }
                self.channel_input(conn, ch, other);
            }
        }
    }

    pub(super) fn channel_input(&mut self, conn: ConnId, ch: u16, input: Input) {
        let result = match input {
            Input::ChannelClose { .. } => {
                self.close_channel_state(conn, ch);
                self.send(
                    conn,
                    ToConn::Method(
                        ch,
                        AMQPClass::Channel(mchannel::AMQPMethod::CloseOk(mchannel::CloseOk {})),
                    ),
                );
                Ok(())
            }
            Input::Method { method, .. } => self.method(conn, ch, method),
            Input::Publish {
                publish,
                properties,
                body,
                ..
            } => self.publish(conn, ch, publish, properties, body),
            Input::StreamTrack { op, .. } => {
                self.stream_track(conn, ch, op);
                Ok(())
            }
            _ => Ok(()),
        };
        if let Err(e) = result {
            self.fail(conn, ch, e);
        }
    }

    /// Turn a refusal into a channel or connection close.
    fn fail(&mut self, conn: ConnId, ch: u16, e: AmqpError) {
        if e.connection_level {
            self.send(conn, ToConn::CloseConnection(e));
            self.disconnect(conn);
        } else if self.sessions.channel_mut(conn, ch).is_some() {
            self.close_channel_state(conn, ch);
            self.send(conn, ToConn::CloseChannel(ch, e));
        }
    }

    fn open(&mut self, conn: ConnId, user: String, vhost: String, info: Box<inout::ConnInfo>) {
        if self.broker.vhost(&vhost).is_none() {
            let e = AmqpError::new(ReplyCode::NotAllowed, format!("vhost {vhost} not found"))
                .on(10, 40);
            self.send(conn, ToConn::CloseConnection(e));
            return;
        }
        if !self.may_open(&user, &vhost) {
            let e = AmqpError::new(
                ReplyCode::NotAllowed,
                format!("access to vhost '{vhost}' refused for user '{user}'"),
            )
            .on(10, 40);
            self.send(conn, ToConn::CloseConnection(e));
            return;
        }
        if let Some(e) = self
            .connection_limit_refusal(conn, &user, &vhost)
            .or_else(|| self.user_connection_refusal(conn, &user))
        {
            self.send(conn, ToConn::CloseConnection(e));
            return;
        }
        self.sessions.conns.insert(
            conn,
            Session {
                user,
                vhost: vhost.into(),
                channels: FastMap::default(),
                exclusive_queues: Vec::new(),
                info,
                connected_at_ms: self.now_ms,
            },
        );
        metrics::counter!(crate::metrics::CONNECTIONS_OPENED).increment(1);
        self.send(conn, ToConn::Opened);
    }

    fn channel_open(&mut self, conn: ConnId, ch: u16) {
        if let Some(e) = self.user_channel_refusal(conn) {
            self.send(conn, ToConn::CloseConnection(e));
            self.disconnect(conn);
            return;
        }
        if !self.sessions.open_channel(conn, ch) {
            return;
        }
        metrics::counter!(crate::metrics::CHANNELS_OPENED).increment(1);
        self.send(
            conn,
            ToConn::Method(
                ch,
                AMQPClass::Channel(mchannel::AMQPMethod::OpenOk(mchannel::OpenOk {})),
            ),
        );
    }

    /// Forget a channel: cancel its consumers and requeue its unacked deliveries.
    fn close_channel_state(&mut self, conn: ConnId, ch: u16) {
        let Some((vhost, chan)) = self.sessions.remove_channel(conn, ch) else {
            return;
        };
        metrics::counter!(crate::metrics::CHANNELS_CLOSED).increment(1);
        let mut touched = BTreeSet::new();
        for (tag, c) in chan.consumers {
            self.unregister_consumer(&vhost, &c.queue, conn, ch, &tag);
            touched.insert(c.queue);
        }
        for q in &touched {
            self.try_deliver(&vhost, q);
        }
        self.requeue_unacked(&vhost, chan.unacked.into_values());
    }

    fn disconnect(&mut self, conn: ConnId) {
        let Some(s) = self.sessions.get(conn) else {
            return;
        };
        let chans: Vec<u16> = s.channels.keys().copied().collect();
        for ch in chans {
            self.close_channel_state(conn, ch);
        }
        let Some(s) = self.sessions.conns.remove(&conn) else {
            return;
        };
        self.single_active_disconnect(conn);
        metrics::counter!(crate::metrics::CONNECTIONS_CLOSED).increment(1);
        for q in s.exclusive_queues {
            if self.broker.queue(&s.vhost, &q).is_some() {
                self.delete_queue(&s.vhost, &q);
            }
        }
    }

    fn channel_mut(&mut self, conn: ConnId, ch: u16) -> Option<&mut Channel> {
        self.sessions.channel_mut(conn, ch)
    }

    fn vhost_of(&self, conn: ConnId) -> AmqpResult<Arc<str>> {
        self.sessions
            .get(conn)
            .map(|s| s.vhost.clone())
            .ok_or_else(|| AmqpError::command_invalid("connection not open"))
    }

    fn send(&mut self, conn: ConnId, m: ToConn) {
        self.out.send(conn, m);
    }

    /// Apply an event now and, if `logged`, append it to the log. Returns what the
    /// apply did. Unlogged events still wait, for delivery, behind logged ones.
    fn emit(&mut self, ev: Event, logged: bool) -> Applied {
        if logged {
            let (index, entry) = self.gate.append(&ev);
            self.out.append(index, entry);
        }
        let policy_vhost = match &ev {
            Event::PolicySet { vhost, .. } | Event::PolicyCleared { vhost, .. } => {
                Some(vhost.clone())
            }
            _ => None,
        };
        let declared = self.expiry.note_event(&ev);
        let applied = self.broker.apply_owned(ev, self.gate.last_appended());
        if let Some((vhost, name)) = declared {
            self.expiry.note_declared(&self.broker, &vhost, &name);
        }
        let applied = self.after_apply(applied);
        if let Some(v) = policy_vhost {
            self.after_policy_change(&v);
        }
        applied
    }

    /// Master-side follow-up of an apply: cancel consumers of deleted queues.
    fn after_apply(&mut self, applied: Applied) -> Applied {
        for (vhost, q) in &applied.deleted_queues {
            let key = (vhost.clone(), q.name.to_string());
            if let Some(qc) = self.sessions.consumers.remove(&key) {
                for ck in qc.list {
                    if let Some(chan) = self.sessions.channel_mut(ck.conn, ck.ch) {
                        chan.consumers.remove(&ck.tag);
                        self.out.cancel(ck.conn, ck.ch, ck.tag);
                    }
                }
            }
            self.sac.remove_stream(&key.0, &key.1);
            self.expiry.forget(&key);
            self.gate.forget_queue(&key);
        }
        applied
    }

    /// Tell consumers of deleted queues they are cancelled (consumer_cancel_notify).
    /// It goes after the reply to the operation that deleted the queue, as in
    /// RabbitMQ, so a client deleting a queue it consumes from sees delete-ok first.
    fn flush_cancels(&mut self) {
        for (conn, ch, tag) in self.out.take_cancels() {
            let cancel = AMQPClass::Basic(mbasic::AMQPMethod::Cancel(mbasic::Cancel {
                consumer_tag: tag.as_ref().into(),
                nowait: true,
            }));
            if self.gate.clear() {
                self.send(conn, ToConn::Method(ch, cancel));
            } else {
                let index = self.gate.last_appended();
                self.push_waiting(index, conn, ch, Completion::Notify(cancel));
            }
        }
    }

    /// A fresh server-chosen name: `prefix` + 22 URL-safe characters, as RabbitMQ's
    /// `amq.gen-` and `amq.ctag-` names look. Randomness is fine here: the name goes
    /// into the event, so apply stays deterministic (I4).
    fn server_name(&mut self, prefix: &str) -> String {
        use rand::Rng;
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut rng = rand::rng();
        let mut s = String::with_capacity(prefix.len() + 22);
        s.push_str(prefix);
        for _ in 0..22 {
            s.push(ALPHABET[rng.random_range(0..ALPHABET.len())] as char);
        }
        s
    }

    fn method(&mut self, conn: ConnId, ch: u16, method: AMQPClass) -> AmqpResult<()> {
        let (cid, mid) = (method.get_amqp_class_id(), method.get_amqp_method_id());
        let r = match method {
            AMQPClass::Channel(mchannel::AMQPMethod::Flow(f)) => {
                self.channel_flow(conn, ch, f.active)
            }
            AMQPClass::Channel(mchannel::AMQPMethod::FlowOk(_)) => Ok(()),
            AMQPClass::Exchange(m) => self.exchange_method(conn, ch, m),
            AMQPClass::Queue(m) => self.queue_method(conn, ch, m),
            AMQPClass::Basic(m) => self.basic_method(conn, ch, m),
            AMQPClass::Confirm(m) => self.confirm_method(conn, ch, m),
            AMQPClass::Tx(m) => self.tx_method(conn, ch, m),
            other => Err(AmqpError::command_invalid(format!(
                "unexpected method {}.{} on channel {ch}",
                other.get_amqp_class_id(),
                other.get_amqp_method_id()
            ))),
        };
        r.map_err(|e| if e.class_id == 0 { e.on(cid, mid) } else { e })
    }

    fn channel_flow(&mut self, conn: ConnId, ch: u16, active: bool) -> AmqpResult<()> {
        if !active {
            // RabbitMQ refuses to pause deliveries this way (use basic.qos instead).
            return Err(AmqpError::new(ReplyCode::NotImplemented, "active=false"));
        }
        let vhost = self.vhost_of(conn)?;
        let chan = self
            .channel_mut(conn, ch)
            .ok_or_else(|| AmqpError::command_invalid("no channel"))?;
        chan.flow_active = active;
        let queues: Vec<String> = chan.consumers.values().map(|c| c.queue.clone()).collect();
        self.send(
            conn,
            ToConn::Method(
                ch,
                AMQPClass::Channel(mchannel::AMQPMethod::FlowOk(mchannel::FlowOk { active })),
            ),
        );
        if active {
            for q in queues {
                self.try_deliver(&vhost, &q);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
