//! Handles of the Prometheus counters that every message bumps.
//!
//! `metrics::counter!` builds and hashes its key (name and labels) and asks
//! the recorder for the counter on every call: ~10% of the broker's
//! instructions per message under a 1x1 load. The master takes each handle
//! once, when it is created (after the recorder is installed), and bumps the
//! handle from then on; the exported names, labels and values stay the same.
//!
//! The stream protocol's traffic goes through the master as the stream
//! bridge's publishes and deliveries; it is counted under
//! `protocol="stream"`, as rabbitmq_stream counts it, not as AMQP 0-9-1.

use super::inout::ClientProtocol;
use crate::metrics::{self as m, QueueKind};
use metrics::Counter;

/// One counter per queue type, indexed by [`QueueKind`].
pub(super) type ByQueue = [Counter; 3];

fn by_queue(name: &'static str) -> ByQueue {
    QueueKind::ALL.map(|kind| m::global_by_queue(name, kind))
}

/// The counters labelled with the protocol only, of one protocol.
pub(super) struct ProtocolCounters {
    /// `rabbitmq_global_messages_received_total`.
    pub received: Counter,
    /// Received on a confirming channel.
    pub received_confirm: Counter,
    /// Routed, once per target queue (AMQP 0-9-1 only: rabbitmq_stream
    /// writes to its stream without routing, and leaves it at 0).
    pub routed: Counter,
    /// Unroutable and dropped.
    pub unroutable_dropped: Counter,
    /// Publisher confirms sent.
    pub confirmed: Counter,
}

impl ProtocolCounters {
    fn new(global: fn(&'static str) -> Counter) -> ProtocolCounters {
        ProtocolCounters {
            received: global(m::RECEIVED),
            received_confirm: global(m::RECEIVED_CONFIRM),
            routed: global(m::ROUTED),
            unroutable_dropped: global(m::UNROUTABLE_DROPPED),
            confirmed: global(m::CONFIRMED),
        }
    }
}

/// The per-message counters.
pub(super) struct HotCounters {
    /// By protocol, indexed by [`ClientProtocol::index`].
    protocols: [ProtocolCounters; 2],
    /// Deliveries to AMQP 0-9-1 clients, by queue type.
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
    /// Stream entries delivered over the stream protocol (the only
    /// per-queue-type series rabbitmq_stream bumps).
    pub stream_delivered: Counter,
}

impl HotCounters {
    /// Take the handles from the installed recorder (no-ops without one).
    pub(super) fn new() -> HotCounters {
        HotCounters {
            protocols: [
                ProtocolCounters::new(m::global),
                ProtocolCounters::new(m::global_stream),
            ],
            delivered: by_queue(m::DELIVERED),
            delivered_auto_ack: by_queue(m::DELIVERED_AUTO_ACK),
            delivered_manual_ack: by_queue(m::DELIVERED_MANUAL_ACK),
            redelivered: by_queue(m::REDELIVERED),
            acknowledged: by_queue(m::ACKNOWLEDGED),
            get_auto_ack: by_queue(m::DELIVERED_GET_AUTO_ACK),
            get_manual_ack: by_queue(m::DELIVERED_GET_MANUAL_ACK),
            stream_delivered: m::global_stream_by_queue(m::DELIVERED),
        }
    }

    /// The protocol-labelled counters of `protocol`.
    pub(super) fn of(&self, protocol: ClientProtocol) -> &ProtocolCounters {
        &self.protocols[protocol.index()]
    }

    /// One delivery to a consumer: of an AMQP 0-9-1 client, by queue type;
    /// of a stream-protocol client (always a stream), one entry delivered.
    pub(super) fn count_delivery(
        &self,
        protocol: ClientProtocol,
        kind: QueueKind,
        no_ack: bool,
        redelivered: bool,
    ) {
        if protocol == ClientProtocol::Stream {
            self.stream_delivered.increment(1);
            return;
        }
        let q = kind as usize;
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
