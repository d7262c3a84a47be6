//! Messages as queues hold them.
//!
//! The content is one `Arc<Message>` shared by every queue a publish reached, so a
//! fanout to N queues stores the body once (`Bytes` is never copied per queue).

use bytes::Bytes;
use stablemq_protocol::BasicProperties;
use std::sync::Arc;

/// Published content, immutable once routed.
#[derive(Debug)]
pub struct Message {
    /// Unique, increasing id chosen by the master (the order of publishes).
    pub id: u64,
    /// Exchange it was published to (reported in deliver/get-ok).
    pub exchange: String,
    /// Routing key it was published with.
    pub routing_key: String,
    /// Content properties as the publisher sent them.
    pub properties: BasicProperties,
    /// Body.
    pub body: Bytes,
}

impl Message {
    /// delivery_mode 2 marks a message that must survive restart in a durable queue.
    pub fn is_persistent(&self) -> bool {
        self.properties.delivery_mode() == &Some(2)
    }
}

/// One queue's copy of a message.
#[derive(Debug, Clone)]
pub struct QueuedMessage {
    /// The shared content.
    pub msg: Arc<Message>,
    /// Set once the message has been delivered and came back.
    pub redelivered: bool,
    /// Log index that must be stable before the master may deliver this message (I1).
    /// Publishes that are not logged wait for the last logged index before them,
    /// so a queue never overtakes its own order.
    pub wait_index: u64,
}
