//! The broker state machine: vhosts, exchanges, bindings and queues.
//!
//! It changes only through [`Broker::apply`] (I4): the master applies each event as
//! it appends it, a slave or a restarted node applies the stable log, and both reach
//! the same state. Apply reads no clock and no randomness. Delivery bookkeeping
//! (which messages are out to consumers) is the master's business and lives in
//! [`crate::master`]; apply only ever removes from it.

mod apply;
pub mod event;
pub mod exchange;
pub mod message;
pub mod paging;
pub mod parameters;
pub mod policy;
pub mod queue;
pub mod queue_args;
pub mod routing;
pub mod state;
pub mod stream;
pub mod stream_filter;
pub mod stream_record;

use crate::fastmap::{FastMap, FastSet};
use event::{Binding, Destination, Event, Published};
use exchange::Exchange;
use message::{Message, QueuedMessage};
use policy::Policy;
use queue::Queue;
use stablemq_protocol::FieldTable;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One virtual host.
#[derive(Debug, Default)]
pub struct Vhost {
    /// Exchanges by name ("" is the default exchange).
    pub exchanges: FastMap<String, Exchange>,
    /// Queues by name.
    pub queues: FastMap<String, Queue>,
    /// Policies by name (ordered, so picking one is deterministic: I4).
    pub policies: BTreeMap<String, Policy>,
    /// Runtime parameters by (component, name), ordered so listings and
    /// exports are stable; the vhost limits are one of them.
    pub parameters: BTreeMap<(String, String), serde_json::Value>,
}

impl Vhost {
    /// Re-pick every object's policy after the policy table changed. Only
    /// objects whose policy changed get their arguments recomputed.
    /// The value of the vhost's `max-connections` or `max-queues` limit, if
    /// one is set (RabbitMQ keeps them as the `vhost-limits` parameter).
    pub fn limit(&self, key: &str) -> Option<u64> {
        let k = (
            parameters::VHOST_LIMITS.to_string(),
            parameters::LIMITS_NAME.to_string(),
        );
        parameters::limit(self.parameters.get(&k)?, key)
    }

    fn refresh_policies(&mut self) {
        for (name, q) in &mut self.queues {
            let p = policy::pick(self.policies.values(), name, true);
            if p != q.policy {
                q.set_policy(p);
            }
        }
        for (name, x) in &mut self.exchanges {
            x.policy = policy::pick(self.policies.values(), name, false);
        }
    }
}

/// The queues a message was routed to, in routing order. Nearly every
/// publish goes to one queue, which fits inline: routing and enqueueing
/// allocate nothing for it (the names are the queues' own `Arc<str>`).
pub type QueueList = smallvec::SmallVec<[Arc<str>; 1]>;

/// What applying an event did, for the master to follow up (wake consumers,
/// cancel consumers of deleted queues). Slaves ignore it.
#[derive(Debug, Default)]
pub struct Applied {
    /// Queues (of the event's vhost) that gained ready messages.
    pub filled: QueueList,
    /// Queues that were deleted, with their final state.
    pub deleted_queues: Vec<(String, Queue)>,
}

/// The whole replicated broker state.
#[derive(Debug, Default)]
pub struct Broker {
    /// Vhosts by name.
    pub vhosts: BTreeMap<String, Vhost>,
    /// Highest message id ever published, so ids keep increasing across restarts
    /// and failovers even when every queue is empty.
    pub max_msg_id: u64,
    /// Users, permissions, topic permissions and vhost metadata. Behind an
    /// `Arc` so the master task can hand out read-only snapshots cheaply;
    /// apply copies it on write (`Arc::make_mut`).
    pub access: Arc<crate::users::AccessTable>,
    /// Global runtime parameters by name.
    pub global_parameters: BTreeMap<String, serde_json::Value>,
}

impl Broker {
    /// A broker with no vhosts; `VhostCreated` events add them.
    pub fn new() -> Broker {
        Broker::default()
    }

    /// The state `events` build from nothing (I4: the same events give the
    /// same state). Vhosts and users are events too; a fresh node gets the
    /// config's through [`crate::master::Master::seed_from_config`].
    pub fn replay(events: impl IntoIterator<Item = event::Event>) -> Broker {
        let mut b = Broker::new();
        for e in events {
            b.apply(&e, 0);
        }
        b
    }

    /// Flag every queued message redelivered. A new master calls this on the
    /// state it rebuilt: deliveries are not events, so it cannot tell which
    /// messages the old master had handed out, and AMQP's flag means "may have
    /// been delivered before" (RabbitMQ's quorum queues likewise return a
    /// deposed leader's checked-out messages as redelivered).
    pub fn mark_redelivered(&mut self) {
        for v in self.vhosts.values_mut() {
            for q in v.queues.values_mut() {
                q.ready.mark_redelivered();
                debug_assert!(q.unacked.is_empty(), "only a master delivers");
            }
        }
    }

    /// Look up a vhost.
    pub fn vhost(&self, name: &str) -> Option<&Vhost> {
        self.vhosts.get(name)
    }

    /// Look up a queue.
    pub fn queue(&self, vhost: &str, name: &str) -> Option<&Queue> {
        self.vhosts.get(vhost)?.queues.get(name)
    }

    /// Look up a queue, mutably.
    pub fn queue_mut(&mut self, vhost: &str, name: &str) -> Option<&mut Queue> {
        self.vhosts.get_mut(vhost)?.queues.get_mut(name)
    }

    /// Look up an exchange.
    pub fn exchange(&self, vhost: &str, name: &str) -> Option<&Exchange> {
        self.vhosts.get(vhost)?.exchanges.get(name)
    }

    /// Apply one event. `wait_index` is the log index a published message must wait
    /// for before delivery (its own index when logged). Events that refer to objects
    /// that do not exist are no-ops: a replayed log skips non-durable objects.
    pub fn apply(&mut self, ev: &Event, wait_index: u64) -> Applied {
        let mut out = Applied::default();
        // A dispatcher by kind of event; each kind's arms are in apply.rs
        // (access control in users/apply.rs).
        match ev {
            Event::VhostCreated { .. }
            | Event::ExchangeDeclared { .. }
            | Event::ExchangeDeleted { .. }
            | Event::QueueDeclared { .. }
            | Event::QueueDeleted { .. }
            | Event::Bound { .. }
            | Event::Unbound { .. } => self.apply_topology(ev, &mut out),
            Event::VhostMetadata { .. }
            | Event::VhostDeleted { .. }
            | Event::UserPut { .. }
            | Event::UserDeleted { .. }
            | Event::PermissionSet { .. }
            | Event::PermissionCleared { .. }
            | Event::TopicPermissionSet { .. }
            | Event::TopicPermissionCleared { .. }
            | Event::UserLimitsSet { .. } => self.apply_access(ev, &mut out),
            Event::Published { .. } => {
                // A copy of the event's shared parts (reference counts, and
                // the queue names), moved into the message.
                if let Some(p) = ev.clone().into_published() {
                    out.filled = self.enqueue(&p.vhost, p.msg, p.queues.into_iter(), wait_index);
                }
            }
            Event::PolicySet { .. }
            | Event::PolicyCleared { .. }
            | Event::ParameterSet { .. }
            | Event::ParameterCleared { .. }
            | Event::GlobalParameterSet { .. }
            | Event::GlobalParameterCleared { .. } => self.apply_settings(ev),
            Event::Removed { .. } | Event::StreamTruncated { .. } | Event::StreamTracked { .. } => {
                self.apply_removals(ev)
            }
        }
        out
    }

    /// [`Broker::apply`] of an event the caller gives up: a publish moves its
    /// content into the queued message instead of copying it (the master's
    /// path, once per message). Same effect as `apply(&ev, wait_index)` (I4).
    pub fn apply_owned(&mut self, ev: Event, wait_index: u64) -> Applied {
        if !matches!(ev, Event::Published { .. }) {
            return self.apply(&ev, wait_index);
        }
        match ev.into_published() {
            Some(Published { vhost, msg, queues }) => Applied {
                filled: self.enqueue(&vhost, msg, queues.into_iter(), wait_index),
                deleted_queues: Vec::new(),
            },
            None => Applied::default(),
        }
    }

    /// The body of applying `Published`: one shared message, queued in each
    /// existing target queue. Returns the queues that got it.
    fn enqueue(
        &mut self,
        vhost: &str,
        msg: Message,
        queues: impl Iterator<Item = Arc<str>>,
        wait_index: u64,
    ) -> QueueList {
        self.max_msg_id = self.max_msg_id.max(msg.id);
        let mut filled = QueueList::new();
        let Some(v) = self.vhosts.get_mut(vhost) else {
            return filled;
        };
        let timestamp_ms = msg.timestamp_ms;
        let msg_ttl = msg.expiration_ms();
        // Each queue holds its own copy, which shares every part: no
        // allocation for the message (issue 4), only refcounts. The last
        // queue takes the message itself.
        let mut msg = Some(msg);
        let mut queues = queues.peekable();
        while let Some(qn) = queues.next() {
            if let Some(q) = v.queues.get_mut(&*qn) {
                let ttl = match (q.args.message_ttl, msg_ttl) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                let copy = if queues.peek().is_some() {
                    msg.clone()
                } else {
                    msg.take()
                };
                let Some(msg) = copy else {
                    break;
                };
                q.push(QueuedMessage {
                    msg,
                    redelivered: false,
                    wait_index,
                    expires_at_ms: ttl.map(|t| timestamp_ms.saturating_add(t)),
                    delivery_count: 0,
                });
                filled.push(qn);
            }
        }
        filled
    }

    /// Queues a message published to `exchange` with `routing_key` reaches, following
    /// exchange-to-exchange bindings (each exchange visited once, so cycles end).
    /// The result has no duplicates and keeps first-reached order.
    pub fn route(
        &self,
        vhost: &str,
        exchange: &str,
        routing_key: &str,
        headers: Option<&FieldTable>,
    ) -> QueueList {
        let mut out = QueueList::new();
        self.route_into(vhost, exchange, routing_key, headers, &mut out);
        out
    }

    /// [`Broker::route`], adding to `out` the queues not in it yet. It
    /// allocates nothing for a route through a few exchanges to a few queues:
    /// the usual publish is routed without touching the heap.
    pub fn route_into(
        &self,
        vhost: &str,
        exchange: &str,
        routing_key: &str,
        headers: Option<&FieldTable>,
        out: &mut QueueList,
    ) {
        let Some(v) = self.vhosts.get(vhost) else {
            return;
        };
        if exchange.is_empty() {
            if let Some(q) = v.queues.get(routing_key)
                && !out.contains(&q.name)
            {
                out.push(q.name.clone());
            }
            return;
        }
        // Exchange graphs are small: linear scans beat hashing, and these
        // stay inline. A fanout to many queues switches to a set below.
        let mut seen_x: smallvec::SmallVec<[&str; 4]> = smallvec::SmallVec::new();
        let mut stack: smallvec::SmallVec<[&str; 4]> = smallvec::SmallVec::new();
        let mut seen_q: Option<FastSet<Arc<str>>> = None;
        stack.push(exchange);
        while let Some(xn) = stack.pop() {
            if seen_x.contains(&xn) {
                continue;
            }
            seen_x.push(xn);
            let Some(x) = v.exchanges.get(xn) else {
                continue;
            };
            let mut matched = false;
            for d in x.matches(routing_key, headers) {
                matched = true;
                match d {
                    Destination::Queue(qn) => {
                        if let Some(q) = v.queues.get(qn.as_str()) {
                            push_new(out, &mut seen_q, &q.name);
                        }
                    }
                    Destination::Exchange(e) => stack.push(e),
                }
            }
            // An exchange that routes nowhere hands the message to its alternate
            // exchange (RabbitMQ's `alternate-exchange` argument).
            if !matched
                && let Some(ae) = x.alternate_exchange()
                && let Some(ae) = v.exchanges.get_key_value(ae.as_str())
            {
                stack.push(ae.0.as_str());
            }
        }
    }
}

/// Add `name` to `out` unless it is there; past a few queues the check goes
/// through a set (built on first need), so a wide fanout stays linear.
fn push_new(out: &mut QueueList, seen: &mut Option<FastSet<Arc<str>>>, name: &Arc<str>) {
    const LINEAR: usize = 8;
    if out.len() < LINEAR && seen.is_none() {
        if !out.contains(name) {
            out.push(name.clone());
        }
        return;
    }
    let set = seen.get_or_insert_with(|| out.iter().cloned().collect());
    if set.insert(name.clone()) {
        out.push(name.clone());
    }
}

fn destination_exists(v: &Vhost, d: &Destination) -> bool {
    match d {
        Destination::Queue(q) => v.queues.contains_key(q),
        Destination::Exchange(x) => v.exchanges.contains_key(x),
    }
}

/// Remove one binding; an auto-delete source that loses its last binding goes too.
fn unbind(v: &mut Vhost, b: &Binding) {
    let mut now_unused = None;
    if let Some(x) = v.exchanges.get_mut(&b.source) {
        let before = x.bindings.len();
        x.bindings.retain(|y| y != b);
        if before != x.bindings.len() && x.bindings.is_empty() && x.spec.auto_delete {
            now_unused = Some(x.name.clone());
        }
    }
    if let Some(name) = now_unused {
        v.exchanges.remove(&name);
        remove_bindings_to(v, &Destination::Exchange(name));
    }
}

/// Remove every binding pointing at `dest`, auto-deleting sources left with none.
fn remove_bindings_to(v: &mut Vhost, dest: &Destination) {
    let mut emptied = Vec::new();
    for x in v.exchanges.values_mut() {
        let before = x.bindings.len();
        x.bindings.retain(|b| &b.destination != dest);
        if before != x.bindings.len() && x.bindings.is_empty() && x.spec.auto_delete {
            emptied.push(x.name.clone());
        }
    }
    for name in emptied {
        if v.exchanges.remove(&name).is_some() {
            remove_bindings_to(v, &Destination::Exchange(name));
        }
    }
}

#[cfg(test)]
mod tests;
