//! Vhost limits on AMQP (`max-connections`, `max-queues`) and user limits
//! (`max-connections`, `max-channels`), checked where RabbitMQ checks them:
//! at connection.open, at channel.open, and when a queue.declare would
//! create a queue. The vhost limits are the vhost's `vhost-limits` runtime
//! parameter (`broker/parameters.rs`), the user limits the user's
//! (`users/limits.rs`), both replicated like any definition.
//!
//! The checks read the master's own state only (its sessions, the vhost's
//! queues), so they stay sans-IO. Each is one function the AMQP path calls
//! at a single point.

use super::Master;
use super::inout::ConnId;
use crate::broker::parameters::{MAX_CONNECTIONS, MAX_QUEUES};
use crate::error::{AmqpError, ReplyCode};
use crate::users::limits as user_limits;

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

    /// Refuse a connection.open that would give `user` more connections
    /// than its `max-connections`: 530 with RabbitMQ 3.10's text.
    pub(super) fn user_connection_refusal(&self, conn: ConnId, user: &str) -> Option<AmqpError> {
        if is_internal(conn) {
            return None;
        }
        let limit = self
            .broker
            .access
            .user_limit(user, user_limits::MAX_CONNECTIONS)?;
        let open = self
            .sessions
            .iter()
            .filter(|(id, s)| !is_internal(**id) && s.user == user)
            .count() as u64;
        (open >= limit).then(|| {
            AmqpError::new(
                ReplyCode::NotAllowed,
                format!(
                    "connection refused for user '{user}': user connection limit ({limit}) is reached"
                ),
            )
            .on(10, 40)
        })
    }

    /// Refuse a channel.open that would give the connection's user more
    /// channels (over all its connections) than its `max-channels`: RabbitMQ
    /// 3.10 closes the connection with 530 (class and method 0).
    pub(super) fn user_channel_refusal(&self, conn: ConnId) -> Option<AmqpError> {
        if is_internal(conn) {
            return None;
        }
        let user = &self.sessions.get(conn)?.user;
        let limit = self
            .broker
            .access
            .user_limit(user, user_limits::MAX_CHANNELS)?;
        let open: usize = self
            .sessions
            .iter()
            .filter(|(id, s)| !is_internal(**id) && &s.user == user)
            .map(|(_, s)| s.channels.len())
            .sum();
        (open as u64 >= limit).then(|| {
            AmqpError::new(
                ReplyCode::NotAllowed,
                format!(
                    "number of channels opened for user '{user}' has reached the maximum allowed user limit of ({limit})"
                ),
            )
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
