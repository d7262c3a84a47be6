//! What the master does for management writes beyond applying their events:
//! trimming queues when a policy brings in a length limit, and closing a
//! connection an operator asked to close.

use super::Master;
use super::io::{ConnId, ToConn};
use crate::error::{AmqpError, ReplyCode};

impl Master {
    /// Trim every queue of `vhost` that is now over a length limit, as
    /// RabbitMQ does when a policy brings one in: the master drops (or
    /// dead-letters) the excess heads, and those removals are events of
    /// their own, so replicas follow without deciding anything (I4).
    pub(super) fn after_policy_change(&mut self, vhost: &str) {
        let Some(v) = self.broker.vhost(vhost) else {
            return;
        };
        let mut over: Vec<String> = v
            .queues
            .iter()
            .filter(|(_, q)| q.is_over_limit())
            .map(|(name, _)| name.clone())
            .collect();
        // Sorted, so the removals are appended in the same order whatever
        // the hash map's order.
        over.sort();
        for q in over {
            self.enforce_length_limit(vhost, &q);
        }
    }

    /// Close a client's connection with 320 CONNECTION_FORCED and the
    /// operator's reason (`DELETE /api/connections/{name}`).
    pub(super) fn force_close(&mut self, conn: ConnId, reason: &str) {
        if self.sessions.get(conn).is_none() {
            return;
        }
        let e = AmqpError::new(ReplyCode::ConnectionForced, reason.to_string());
        self.send(conn, ToConn::CloseConnection(e));
        self.disconnect(conn);
    }
}
