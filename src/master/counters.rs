//! Handles of the Prometheus counters that every message bumps.
//!
//! `metrics::counter!` builds and hashes its key (name and labels) and asks
//! the recorder for the counter on every call: ~10% of the broker's
//! instructions per message under a 1x1 load. The master takes each handle
//! once, when it is created (after the recorder is installed), and bumps the
//! handle from then on; the exported names, labels and values stay the same.

use crate::metrics as m;
use metrics::Counter;

/// One counter per queue type: index 0 classic, 1 quorum.
pub(super) type ByQueue = [Counter; 2];

fn by_queue(name: &'static str) -> ByQueue {
    [
        m::global_by_queue(name, false),
        m::global_by_queue(name, true),
    ]
}

/// The per-message counters.
pub(super) struct HotCounters {
    /// `rabbitmq_global_messages_received_total`.
    pub received: Counter,
    /// Received on a confirming channel.
    pub received_confirm: Counter,
    /// Routed, once per target queue.
    pub routed: Counter,
    /// Unroutable and dropped.
    pub unroutable_dropped: Counter,
    /// Publisher confirms sent.
    pub confirmed: Counter,
    /// Deliveries, by queue type.
    pub delivered: ByQueue,
    /// Deliveries to consumers without acks.
    pub delivered_auto_ack: ByQueue,
    /// Deliveries to consumers with manual acks.
    pub delivered_manual_ack: ByQueue,
    /// Redeliveries.
    pub redelivered: ByQueue,
    /// Messages acknowledged by consumers.
    pub acknowledged: ByQueue,
    /// basic.get deliveries without acks.
    pub get_auto_ack: ByQueue,
    /// basic.get deliveries with manual acks.
    pub get_manual_ack: ByQueue,
}

impl HotCounters {
    /// Take the handles from the installed recorder (no-ops without one).
    pub(super) fn new() -> HotCounters {
        HotCounters {
            received: m::global(m::RECEIVED),
            received_confirm: m::global(m::RECEIVED_CONFIRM),
            routed: m::global(m::ROUTED),
            unroutable_dropped: m::global(m::UNROUTABLE_DROPPED),
            confirmed: m::global(m::CONFIRMED),
            delivered: by_queue(m::DELIVERED),
            delivered_auto_ack: by_queue(m::DELIVERED_AUTO_ACK),
            delivered_manual_ack: by_queue(m::DELIVERED_MANUAL_ACK),
            redelivered: by_queue(m::REDELIVERED),
            acknowledged: by_queue(m::ACKNOWLEDGED),
            get_auto_ack: by_queue(m::DELIVERED_GET_AUTO_ACK),
            get_manual_ack: by_queue(m::DELIVERED_GET_MANUAL_ACK),
        }
    }

    /// One delivery to a consumer of a (quorum or classic) queue.
    pub(super) fn count_delivery(&self, quorum: bool, no_ack: bool, redelivered: bool) {
        let q = usize::from(quorum);
        self.delivered[q].increment(1);
        if no_ack {
            self.delivered_auto_ack[q].increment(1);
        } else {
            self.delivered_manual_ack[q].increment(1);
        }
        if redelivered {
            self.redelivered[q].increment(1);
        }
    }
}
