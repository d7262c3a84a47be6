//! Messages as queues hold them.
//!
//! Each queue a publish reached holds its own `Message`, inline in its queue
//! entry, and a delivery carries another: copies whose parts are all shared
//! (names and body are `Bytes`, the properties an `Arc`), so a fanout to N
//! queues stores the body once, and queueing or delivering a message
//! allocates nothing (issue 4). An `Arc<Message>` was one allocation per
//! message.

use bytes::Bytes;
use stablemq_protocol::{BasicProperties, ByteString};
use std::sync::Arc;

/// Published content, immutable once routed. A clone shares every part
/// (names, properties and body are reference-counted): it allocates nothing.
#[derive(Debug, Clone)]
pub struct Message {
    /// Unique, increasing id chosen by the master (the order of publishes).
    pub id: u64,
    /// Exchange it was published to (reported in deliver/get-ok).
    /// A `ByteString`, like the routing key: a publish's strings stay slices of
    /// the frame they arrived in, so routing one allocates no string.
    pub exchange: ByteString,
    /// Routing key it was published with.
    pub routing_key: ByteString,
    /// Content properties as the publisher sent them. Shared: the frame
    /// decoder hands the same `Arc` to every message of a publisher that sends
    /// the same properties, so a publish neither copies nor allocates them.
    pub properties: Arc<BasicProperties>,
    /// Body.
    pub body: Bytes,
    /// Master's clock when it was published (ms since the Unix epoch); TTLs count from here.
    pub timestamp_ms: u64,
}

impl Message {
    /// delivery_mode 2 marks a message that must survive restart in a durable queue.
    pub fn is_persistent(&self) -> bool {
        self.properties.delivery_mode() == &Some(2)
    }

    /// The per-message TTL from the `expiration` property, in ms.
    pub fn expiration_ms(&self) -> Option<u64> {
        expiration_ms(&self.properties)
    }
}

/// The `expiration` property as a TTL in ms (None when absent or not a number).
pub fn expiration_ms(properties: &BasicProperties) -> Option<u64> {
    properties
        .expiration()
        .as_ref()
        .and_then(|e| e.as_str().parse().ok())
}

/// One queue's copy of a message.
#[derive(Debug, Clone)]
pub struct QueuedMessage {
    /// The shared content.
    pub msg: Message,
    /// Set once the message has been delivered and came back.
    pub redelivered: bool,
    /// Log index that must be stable before the master may deliver this message (I1).
    /// Publishes that are not logged wait for the last logged index before them,
    /// so a queue never overtakes its own order.
    pub wait_index: u64,
    /// When the message expires in this queue (ms since the epoch), from the queue's
    /// and the message's TTL, whichever is shorter.
    pub expires_at_ms: Option<u64>,
    /// How often it was returned to the queue (for x-delivery-limit).
    pub delivery_count: u32,
}

impl QueuedMessage {
    /// Whether it has expired at `now_ms`. A message whose TTL ends exactly now
    /// may still go to a consumer that is ready now (TTL 0 means "now or never").
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|t| t < now_ms)
    }
}
