//! Queues: the replicated message set plus the master's delivery bookkeeping.

use super::event::QueueSpec;
use super::message::{Message, QueuedMessage};
use super::paging::{Pager, Ready};
use super::policy::AppliedPolicy;
use super::queue_args::QueueArgs;
use super::stream::StreamLog;
use std::collections::HashMap;
use std::sync::Arc;

/// Order of ready messages: higher priority first, then publish order. A requeued
/// message keeps its key, so it returns to its original position, as in RabbitMQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReadyKey {
    /// 255 minus the effective priority (0 for queues without priorities).
    pub inverse_priority: u8,
    /// The message id.
    pub id: u64,
}

/// A queue.
///
/// `unacked` holds messages delivered and awaiting an ack; only the master fills it
/// (delivery is not an event): after a failover or restart every unacked message is
/// ready again. Ready messages beyond the RAM budget are paged out to disk
/// (`broker::paging`); nothing here depends on which ones are.
#[derive(Debug)]
pub struct Queue {
    /// Name, shared (as an `Arc`) with every route and event that names the
    /// queue, so routing a message to it copies no string.
    pub name: Arc<str>,
    /// Declared shape.
    pub spec: QueueSpec,
    /// Behaviour derived from the declared arguments and the policy.
    pub args: QueueArgs,
    /// The policy this queue follows, if any (recomputed by apply).
    pub policy: Option<AppliedPolicy>,
    /// Messages waiting for a consumer, in RAM or paged out.
    pub ready: Ready,
    /// Messages delivered and not yet acked, by message id.
    pub unacked: HashMap<u64, QueuedMessage>,
    /// Total body bytes of `ready`.
    pub ready_bytes: u64,
    /// A stream's entries (`x-queue-type: stream`): its messages go here,
    /// never to `ready`, and acks remove none of them.
    pub stream: Option<StreamLog>,
}

impl Queue {
    /// An empty queue, paging through the process's body store if one is
    /// installed.
    pub fn new(name: impl Into<Arc<str>>, spec: QueueSpec) -> Queue {
        Queue::with_pager(name, spec, super::paging::installed())
    }

    /// An empty queue paging through `pager` (None: everything stays in RAM).
    pub fn with_pager(
        name: impl Into<Arc<str>>,
        spec: QueueSpec,
        pager: Option<Arc<Pager>>,
    ) -> Queue {
        let args = QueueArgs::with_policy(&spec.arguments, None);
        // Priorities come from the declared arguments only (not a policy key),
        // so whether the queue orders by priority is fixed here.
        let stream = args.stream.then(|| StreamLog::new(pager.clone()));
        let ready = Ready::new(pager, args.max_priority.is_some());
        Queue {
            name: name.into(),
            spec,
            args,
            policy: None,
            ready,
            unacked: HashMap::new(),
            ready_bytes: 0,
            stream,
        }
    }

    /// Follow `policy` from now on: the effective arguments change at once.
    /// Priorities are not a policy key, so the ready order stays valid.
    pub fn set_policy(&mut self, policy: Option<AppliedPolicy>) {
        self.args =
            QueueArgs::with_policy(&self.spec.arguments, policy.as_ref().map(|p| &p.definition));
        self.policy = policy;
    }

    fn key_for(&self, m: &QueuedMessage) -> ReadyKey {
        let inverse_priority = match self.args.max_priority {
            Some(max) => {
                let p = m.msg.properties.priority().unwrap_or(0).min(max);
                255 - p
            }
            None => 0,
        };
        ReadyKey {
            inverse_priority,
            id: m.msg.id,
        }
    }

    /// Add a message at its position (a stream appends it at its next offset).
    pub fn push(&mut self, m: QueuedMessage) {
        if let Some(s) = self.stream.as_mut() {
            s.push(m, self.args.segment_bytes());
            return;
        }
        self.ready_bytes += m.msg.body.len() as u64;
        let key = self.key_for(&m);
        self.ready.insert(key, m);
    }

    /// The first ready message.
    pub fn head(&self) -> Option<&QueuedMessage> {
        self.ready.first()
    }

    /// The first ready message, if its log entry is stable.
    pub fn peek_deliverable(&self, stable_index: u64) -> Option<&QueuedMessage> {
        self.head().filter(|m| m.wait_index <= stable_index)
    }

    /// Take the first ready message.
    pub fn pop(&mut self) -> Option<QueuedMessage> {
        let m = self.ready.pop_first()?;
        self.ready_bytes -= m.msg.body.len() as u64;
        Some(m)
    }

    /// Move a delivered message back to ready, flagged redelivered; `counted`
    /// returns count towards the delivery limit. Returns the message's delivery
    /// count, or None when it was not out for delivery.
    pub fn requeue(&mut self, msg_id: u64, counted: bool) -> Option<u32> {
        let mut m = self.unacked.remove(&msg_id)?;
        m.redelivered = true;
        if counted {
            m.delivery_count += 1;
        }
        let count = m.delivery_count;
        self.push(m);
        Some(count)
    }

    /// Remove a message wherever it is; true if it was here.
    pub fn remove(&mut self, msg_id: u64) -> bool {
        if self.unacked.remove(&msg_id).is_some() {
            return true;
        }
        match self.ready.remove(msg_id) {
            Some(len) => {
                self.ready_bytes -= len;
                true
            }
            None => false,
        }
    }

    /// The content of a message, ready (perhaps read from disk) or unacked.
    pub fn message(&self, msg_id: u64) -> Option<Message> {
        match self.unacked.get(&msg_id) {
            Some(m) => Some(m.msg.clone()),
            None => self.ready.get(msg_id),
        }
    }

    /// Whether a message (ready or unacked) is persistent, without reading it
    /// from disk.
    pub fn is_persistent(&self, msg_id: u64) -> Option<bool> {
        match self.unacked.get(&msg_id) {
            Some(m) => Some(m.msg.is_persistent()),
            None => self.ready.is_persistent(msg_id),
        }
    }

    /// Whether any ready message is persistent.
    pub fn any_ready_persistent(&self) -> bool {
        let mut any = false;
        self.ready.visit(|_, _, persistent| {
            any = persistent;
            !any
        });
        any
    }

    /// Ids of the ready messages, in queue order.
    pub fn ready_ids(&self) -> Vec<u64> {
        let mut ids = Vec::with_capacity(self.ready.len());
        self.ready.visit(|id, _, _| {
            ids.push(id);
            true
        });
        ids
    }

    /// Whether this queue's messages are written to the log.
    pub fn is_logged(&self) -> bool {
        self.spec.durable && self.spec.exclusive_owner.is_none()
    }

    /// Whether adding one more message of `bytes` would exceed a length limit
    /// (a stream has retention instead: never).
    pub fn would_overflow(&self, bytes: u64) -> bool {
        self.stream.is_none()
            && (self
                .args
                .max_length
                .is_some_and(|max| self.ready.len() as u64 >= max)
                || self
                    .args
                    .max_length_bytes
                    .is_some_and(|max| self.ready_bytes + bytes > max))
    }

    /// Whether the queue is now over a length limit (a stream: never).
    pub fn is_over_limit(&self) -> bool {
        self.stream.is_none()
            && (self
                .args
                .max_length
                .is_some_and(|max| self.ready.len() as u64 > max)
                || self
                    .args
                    .max_length_bytes
                    .is_some_and(|max| self.ready_bytes > max))
    }

    /// Ready plus unacked (a stream: its entries).
    pub fn len(&self) -> usize {
        match &self.stream {
            Some(s) => s.len(),
            None => self.ready.len() + self.unacked.len(),
        }
    }

    /// No messages at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
