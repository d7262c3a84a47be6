//! Vhost limits on AMQP (`max-connections`, `max-queues`), checked where
//! RabbitMQ checks them: at connection.open and when a queue.declare would
//! create a queue. The limits are the vhost's `vhost-limits` runtime
//! parameter (`broker/parameters.rs`), replicated like any definition.
//!
//! The checks read the master's own state only (its sessions, the vhost's
//! queues), so they stay sans-IO. Each is one function the AMQP path calls
//! at a single point.

use super::Master;
use super::io::ConnId;
use crate::broker::parameters::{MAX_CONNECTIONS, MAX_QUEUES};
use crate::error::{AmqpError, ReplyCode};

impl Master {
    /// Refuse a connection.open that would exceed the vhost's
    /// `max-connections`: 530 NOT_ALLOWED with RabbitMQ's text. The
    /// management API's internal sessions are neither counted nor refused:
    /// they are the API's own, not client connections.
    pub(super) fn connection_limit_refusal(
        &self,
        conn: ConnId,
        user: &str,
        vhost: &str,
    ) -> Option<AmqpError> {
        if is_internal(conn) {
            return None;
        }
        let limit = self.broker.vhost(vhost)?.limit(MAX_CONNECTIONS)?;
        let open = self
            .sessions
            .iter()
            .filter(|(id, s)| !is_internal(**id) && &*s.vhost == vhost)
            .count() as u64;
        (open >= limit).then(|| {
            AmqpError::new(
                ReplyCode::NotAllowed,
                format!(
                    "access to vhost '{vhost}' refused for user '{user}': connection limit ({limit}) is reached"
                ),
            )
            .on(10, 40)
        })
    }

    /// Refuse a queue.declare that would create one queue more than the
    /// vhost's `max-queues`: 406 PRECONDITION_FAILED with RabbitMQ 3.10's
    /// text. Every queue counts (durable or not, exclusive or not), as in
    /// RabbitMQ.
    pub(super) fn queue_limit_refusal(&self, vhost: &str, queue: &str) -> Option<AmqpError> {
        let v = self.broker.vhost(vhost)?;
        let limit = v.limit(MAX_QUEUES)?;
        (v.queues.len() as u64 >= limit).then(|| {
            AmqpError::precondition(format!(
                "cannot declare queue '{queue}': queue limit in vhost '{vhost}' ({limit}) is reached"
            ))
            .on(50, 10)
        })
    }
}

fn is_internal(id: ConnId) -> bool {
    crate::management::internal::is_internal(id)
}
