//! Queues: the replicated message set plus the master's delivery bookkeeping.

use super::event::QueueSpec;
use super::message::QueuedMessage;
use std::collections::{BTreeMap, HashMap};

/// A queue.
///
/// `ready` is ordered by message id, so a requeued message goes back to its original
/// position, as RabbitMQ does. `unacked` holds messages delivered and awaiting an ack;
/// only the master fills it (delivery is not an event): after a failover or restart,
/// every unacked message is ready again.
#[derive(Debug, Clone)]
pub struct Queue {
    /// Name.
    pub name: String,
    /// Declared shape.
    pub spec: QueueSpec,
    /// Messages waiting for a consumer.
    pub ready: BTreeMap<u64, QueuedMessage>,
    /// Messages delivered and not yet acked, by message id.
    pub unacked: HashMap<u64, QueuedMessage>,
    /// Total body bytes of `ready` (for metrics).
    pub ready_bytes: u64,
}

impl Queue {
    /// An empty queue.
    pub fn new(name: String, spec: QueueSpec) -> Queue {
        Queue {
            name,
            spec,
            ready: BTreeMap::new(),
            unacked: HashMap::new(),
            ready_bytes: 0,
        }
    }

    /// Add a message at its id's position.
    pub fn push(&mut self, m: QueuedMessage) {
        self.ready_bytes += m.msg.body.len() as u64;
        self.ready.insert(m.msg.id, m);
    }

    /// The first ready message, if its log entry is stable.
    pub fn peek_deliverable(&self, stable_index: u64) -> Option<&QueuedMessage> {
        self.ready
            .first_key_value()
            .map(|(_, m)| m)
            .filter(|m| m.wait_index <= stable_index)
    }

    /// Take the first ready message.
    pub fn pop(&mut self) -> Option<QueuedMessage> {
        let (_, m) = self.ready.pop_first()?;
        self.ready_bytes -= m.msg.body.len() as u64;
        Some(m)
    }

    /// Move a delivered message back to ready, flagged redelivered.
    pub fn requeue(&mut self, msg_id: u64) -> bool {
        match self.unacked.remove(&msg_id) {
            Some(mut m) => {
                m.redelivered = true;
                self.push(m);
                true
            }
            None => false,
        }
    }

    /// Remove a message wherever it is; returns it if it was here.
    pub fn remove(&mut self, msg_id: u64) -> Option<QueuedMessage> {
        if let Some(m) = self.unacked.remove(&msg_id) {
            return Some(m);
        }
        let m = self.ready.remove(&msg_id)?;
        self.ready_bytes -= m.msg.body.len() as u64;
        Some(m)
    }

    /// Whether this queue's messages are written to the log.
    pub fn is_logged(&self) -> bool {
        self.spec.durable && self.spec.exclusive_owner.is_none()
    }

    /// Ready plus unacked.
    pub fn len(&self) -> usize {
        self.ready.len() + self.unacked.len()
    }

    /// No messages at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
