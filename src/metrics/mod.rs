//! Metric names and the Prometheus endpoint.
//!
//! Names, types, help texts and labels follow RabbitMQ 3.10's
//! rabbitmq_prometheus plugin, so that dashboards and alerts built for RabbitMQ
//! (the RabbitMQ-Overview dashboard, Grafana 10991) read StableMQ unchanged.
//! Replication metrics carry the `stablemq_` prefix.
//!
//! Two kinds of series exist:
//! - counters of events (`rabbitmq_global_*`, churn, replication) are counted
//!   where the event happens, through the `metrics` facade, into the recorder
//!   installed here;
//! - gauges of state (queue depths, totals, node facts) are computed at scrape
//!   time from the master task's state ([`endpoint`]), so a deleted queue's
//!   series goes away with it and a slave reports none of the master's queues.

pub mod conn_stats;
pub mod endpoint;
mod process;
mod stream;
pub mod stream_clients;
pub mod text;
pub mod upkeep;

pub use stream::{global_stream, global_stream_by_queue, stream_errors};

pub use process::{
    disk_free_bytes, max_fds, node_name, open_fds, resident_memory_bytes, started,
    total_memory_bytes, uptime_seconds,
};

use std::sync::atomic::{AtomicU64, Ordering};

// --- Counters labelled {protocol="amqp091"} (RabbitMQ's PROTOCOL_COUNTERS).

/// Messages published by clients.
pub const RECEIVED: &str = "rabbitmq_global_messages_received_total";
/// Messages published on a channel in confirm mode.
pub const RECEIVED_CONFIRM: &str = "rabbitmq_global_messages_received_confirm_total";
/// Messages routed, counted once per target queue.
pub const ROUTED: &str = "rabbitmq_global_messages_routed_total";
/// Non-mandatory messages dropped as unroutable.
pub const UNROUTABLE_DROPPED: &str = "rabbitmq_global_messages_unroutable_dropped_total";
/// Mandatory messages returned as unroutable.
pub const UNROUTABLE_RETURNED: &str = "rabbitmq_global_messages_unroutable_returned_total";
/// Publisher confirms sent.
pub const CONFIRMED: &str = "rabbitmq_global_messages_confirmed_total";

// --- Counters labelled {protocol, queue_type} (PROTOCOL_QUEUE_TYPE_COUNTERS).

/// Messages delivered to clients, by basic.consume and basic.get alike.
pub const DELIVERED: &str = "rabbitmq_global_messages_delivered_total";
/// Deliveries to consumers in manual-ack mode.
pub const DELIVERED_MANUAL_ACK: &str =
    "rabbitmq_global_messages_delivered_consume_manual_ack_total";
/// Deliveries to consumers in auto-ack mode.
pub const DELIVERED_AUTO_ACK: &str = "rabbitmq_global_messages_delivered_consume_auto_ack_total";
/// Messages fetched with basic.get in manual-ack mode.
pub const DELIVERED_GET_MANUAL_ACK: &str =
    "rabbitmq_global_messages_delivered_get_manual_ack_total";
/// Messages fetched with basic.get in auto-ack mode.
pub const DELIVERED_GET_AUTO_ACK: &str = "rabbitmq_global_messages_delivered_get_auto_ack_total";
/// basic.get answered with get-empty.
pub const GET_EMPTY: &str = "rabbitmq_global_messages_get_empty_total";
/// Deliveries (consume or get) of messages flagged redelivered.
pub const REDELIVERED: &str = "rabbitmq_global_messages_redelivered_total";
/// Messages acknowledged by clients (basic.ack).
pub const ACKNOWLEDGED: &str = "rabbitmq_global_messages_acknowledged_total";

// --- Counters labelled {queue_type, dead_letter_strategy}.

/// Dead-lettered because their TTL ran out.
pub const DEAD_LETTERED_EXPIRED: &str = "rabbitmq_global_messages_dead_lettered_expired_total";
/// Dead-lettered by basic.reject or basic.nack without requeue.
pub const DEAD_LETTERED_REJECTED: &str = "rabbitmq_global_messages_dead_lettered_rejected_total";
/// Dead-lettered by a length limit (drop-head, reject-publish-dlx).
pub const DEAD_LETTERED_MAXLEN: &str = "rabbitmq_global_messages_dead_lettered_maxlen_total";
/// Dead-lettered past the delivery limit.
pub const DEAD_LETTERED_DELIVERY_LIMIT: &str =
    "rabbitmq_global_messages_dead_lettered_delivery_limit_total";
/// Dead-lettered at-least-once and confirmed by the target queues (RabbitMQ's
/// quorum queues; StableMQ dead-letters at most once, so this stays 0).
pub const DEAD_LETTERED_CONFIRMED: &str = "rabbitmq_global_messages_dead_lettered_confirmed_total";

// --- Churn counters, unlabelled (RabbitMQ's connection_churn_metrics).

/// Connections opened since start.
pub const CONNECTIONS_OPENED: &str = "rabbitmq_connections_opened_total";
/// Connections closed since start.
pub const CONNECTIONS_CLOSED: &str = "rabbitmq_connections_closed_total";
/// Channels opened since start.
pub const CHANNELS_OPENED: &str = "rabbitmq_channels_opened_total";
/// Channels closed since start.
pub const CHANNELS_CLOSED: &str = "rabbitmq_channels_closed_total";
/// Successful queue.declare calls (new or existing queue).
pub const QUEUES_DECLARED: &str = "rabbitmq_queues_declared_total";
/// Queues created.
pub const QUEUES_CREATED: &str = "rabbitmq_queues_created_total";
/// Queues deleted (by queue.delete, auto-delete, exclusive owner gone, x-expires).
pub const QUEUES_DELETED: &str = "rabbitmq_queues_deleted_total";

// --- Gauges computed at scrape time (see `endpoint`).

/// Ready messages (per queue on /metrics/per-object, summed on /metrics).
pub const QUEUE_READY: &str = "rabbitmq_queue_messages_ready";
/// Unacked messages.
pub const QUEUE_UNACKED: &str = "rabbitmq_queue_messages_unacked";
/// Ready plus unacked.
pub const QUEUE_MESSAGES: &str = "rabbitmq_queue_messages";
/// Consumers on a queue.
pub const QUEUE_CONSUMERS: &str = "rabbitmq_queue_consumers";
/// A stream's highest consumer offset lag (per stream on
/// /metrics/per-object, summed on /metrics).
pub const STREAM_CONSUMER_MAX_OFFSET_LAG: &str = "rabbitmq_stream_consumer_max_offset_lag";
/// Open connections.
pub const CONNECTIONS: &str = "rabbitmq_connections";
/// Bytes received, per connection (`/metrics/per-object`, label `channel`).
pub const CONNECTION_INCOMING_BYTES: &str = "rabbitmq_connection_incoming_bytes_total";
/// Bytes sent, per connection.
pub const CONNECTION_OUTGOING_BYTES: &str = "rabbitmq_connection_outgoing_bytes_total";
/// Work units of the connection task, per connection (RabbitMQ: reductions).
pub const CONNECTION_REDUCTIONS: &str = "rabbitmq_connection_process_reductions_total";
/// Socket reads, per connection (RabbitMQ: TCP packets received).
pub const CONNECTION_INCOMING_PACKETS: &str = "rabbitmq_connection_incoming_packets_total";
/// Socket writes, per connection (RabbitMQ: TCP packets sent).
pub const CONNECTION_OUTGOING_PACKETS: &str = "rabbitmq_connection_outgoing_packets_total";
/// Bytes waiting to be written, per connection.
pub const CONNECTION_PENDING_PACKETS: &str = "rabbitmq_connection_pending_packets";
/// Channels open on a connection.
pub const CONNECTION_CHANNELS: &str = "rabbitmq_connection_channels";
/// Open channels.
pub const CHANNELS: &str = "rabbitmq_channels";
/// Consumers.
pub const CONSUMERS: &str = "rabbitmq_consumers";
/// Queues.
pub const QUEUES: &str = "rabbitmq_queues";
/// Consumers on a channel.
pub const CHANNEL_CONSUMERS: &str = "rabbitmq_channel_consumers";
/// Channels that have published at least once and are still open.
pub const GLOBAL_PUBLISHERS: &str = "rabbitmq_global_publishers";
/// Consumers, as the global counters count them.
pub const GLOBAL_CONSUMERS: &str = "rabbitmq_global_consumers";
/// The node's identity.
pub const IDENTITY: &str = "rabbitmq_identity_info";
/// Version information.
pub const BUILD_INFO: &str = "rabbitmq_build_info";
/// Resident memory of the process.
pub const RSS: &str = "rabbitmq_process_resident_memory_bytes";
/// The memory alarm threshold.
pub const MEMORY_LIMIT: &str = "rabbitmq_resident_memory_limit_bytes";
/// Free disk space of the data directory.
pub const DISK_FREE: &str = "rabbitmq_disk_space_available_bytes";
/// The free disk alarm threshold.
pub const DISK_FREE_LIMIT: &str = "rabbitmq_disk_space_available_limit_bytes";
/// Open file descriptors.
pub const OPEN_FDS: &str = "rabbitmq_process_open_fds";
/// File descriptor limit.
pub const MAX_FDS: &str = "rabbitmq_process_max_fds";
/// Open sockets.
pub const OPEN_TCP_SOCKETS: &str = "rabbitmq_process_open_tcp_sockets";
/// Socket limit (the file descriptor limit: nothing else bounds sockets).
pub const MAX_TCP_SOCKETS: &str = "rabbitmq_process_max_tcp_sockets";
/// Node uptime (RabbitMQ names it after the Erlang VM).
pub const UPTIME: &str = "rabbitmq_erlang_uptime_seconds";
/// 1 while the memory alarm blocks publishers.
pub const ALARMS_MEMORY: &str = "rabbitmq_alarms_memory_used_watermark";
/// 1 while the disk alarm blocks publishers.
pub const ALARMS_DISK: &str = "rabbitmq_alarms_free_disk_space_watermark";
/// 1 while the file descriptor alarm is in effect (StableMQ has none).
pub const ALARMS_FDS: &str = "rabbitmq_alarms_file_descriptor_limit";
/// Histogram of published body sizes (RabbitMQ 4's, queried by the current
/// revision of the Overview dashboard).
pub const MESSAGE_SIZE: &str = "rabbitmq_message_size_bytes";

// --- Replication.

/// Gauge: the highest log index stable on a quorum of stores, as this node knows it.
pub const STABLE_INDEX: &str = "stablemq_stable_index";
/// Gauge: this node's broker role (1 on the series of the current role: label
/// `role` = master, slave or candidate).
pub const ROLE: &str = "stablemq_role";
/// Gauge: the highest epoch this node has seen.
pub const EPOCH: &str = "stablemq_epoch";
/// Counter: times this node took over as master from an earlier one (won an
/// election in an epoch above 1).
pub const FAILOVERS: &str = "stablemq_failovers_total";
/// Counter: stream chunks this node delivered from its replica (a slave's
/// stream clients read there: `server/stream/replica`).
pub const STREAM_REPLICA_CHUNKS: &str = "stablemq_stream_replica_chunks_delivered_total";
/// Counter: stream entries in the chunks of [`STREAM_REPLICA_CHUNKS`].
pub const STREAM_REPLICA_RECORDS: &str = "stablemq_stream_replica_records_delivered_total";
/// Gauge: log entries this slave's applied state trails the stable index the
/// master last told it (0 on the master).
pub const SLAVE_LAG: &str = "stablemq_slave_lag_entries";

/// RabbitMQ's protocol label value for AMQP 0-9-1.
const PROTOCOL: &str = "amqp091";
/// The queue type labels, in the order of [`QueueKind`].
const QUEUE_TYPES: [&str; 3] = [
    "rabbit_classic_queue",
    "rabbit_quorum_queue",
    stream::STREAM_QUEUE,
];

/// A queue's kind, as RabbitMQ's `queue_type` label tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// A classic queue.
    Classic = 0,
    /// `x-queue-type: quorum`.
    Quorum = 1,
    /// `x-queue-type: stream`.
    Stream = 2,
}

impl QueueKind {
    /// The kind of a queue with these arguments.
    pub fn of(quorum: bool, stream: bool) -> QueueKind {
        match (stream, quorum) {
            (true, _) => QueueKind::Stream,
            (false, true) => QueueKind::Quorum,
            (false, false) => QueueKind::Classic,
        }
    }

    /// Every kind, in label order.
    pub const ALL: [QueueKind; 3] = [QueueKind::Classic, QueueKind::Quorum, QueueKind::Stream];
}

/// RabbitMQ's queue type label of a queue: StableMQ's queues are all
/// replicated through the same log, but a queue declared with
/// `x-queue-type: quorum` behaves as a quorum queue and is reported as one.
pub fn queue_type(quorum: bool) -> &'static str {
    if quorum {
        "rabbit_quorum_queue"
    } else {
        "rabbit_classic_queue"
    }
}

/// A `rabbitmq_global_*` counter labelled with the protocol only.
pub fn global(name: &'static str) -> metrics::Counter {
    metrics::counter!(name, "protocol" => PROTOCOL)
}

/// A `rabbitmq_global_*` counter labelled with protocol and queue type.
pub fn global_by_queue(name: &'static str, kind: QueueKind) -> metrics::Counter {
    metrics::counter!(name, "protocol" => PROTOCOL, "queue_type" => QUEUE_TYPES[kind as usize])
}

/// Count `n` messages dead-lettered from a queue for `reason` (the x-death
/// reason: expired, rejected, maxlen, delivery_limit). As in RabbitMQ, a
/// queue without a dead-letter exchange counts them too, under the
/// `disabled` strategy: they were dropped.
pub fn dead_lettered(reason: &str, quorum: bool, has_dlx: bool, n: u64) {
    let name = match reason {
        "expired" => DEAD_LETTERED_EXPIRED,
        "rejected" => DEAD_LETTERED_REJECTED,
        "maxlen" => DEAD_LETTERED_MAXLEN,
        "delivery_limit" => DEAD_LETTERED_DELIVERY_LIMIT,
        _ => return,
    };
    let strategy = if has_dlx { "at_most_once" } else { "disabled" };
    metrics::counter!(name, "queue_type" => queue_type(quorum), "dead_letter_strategy" => strategy)
        .increment(n);
}

/// Upper bounds of the message size buckets, and their `le` labels as
/// Prometheus 3 normalises them (which is how the dashboard selects them;
/// Prometheus 2 keeps them as written).
const SIZE_BUCKETS: [(u64, &str); 8] = [
    (100, "100.0"),
    (1_000, "1000.0"),
    (10_000, "10000.0"),
    (100_000, "100000.0"),
    (1_000_000, "1e+06"),
    (10_000_000, "1e+07"),
    (50_000_000, "5e+07"),
    (100_000_000, "1e+08"),
];

/// The message size histogram: per-bucket counts (the last one +Inf), then
/// the sum. Plain atomics: it is recorded once per publish on the master's
/// hot path, and rendered with RabbitMQ's own bucket labels.
static SIZES: [AtomicU64; SIZE_BUCKETS.len() + 2] = [const { AtomicU64::new(0) }; 10];

/// Record one published body of `bytes`.
pub fn observe_message_size(bytes: usize) {
    let b = bytes as u64;
    let i = SIZE_BUCKETS
        .iter()
        .position(|(le, _)| b <= *le)
        .unwrap_or(SIZE_BUCKETS.len());
    SIZES[i].fetch_add(1, Ordering::Relaxed);
    SIZES[SIZE_BUCKETS.len() + 1].fetch_add(b, Ordering::Relaxed);
}

/// The memory alarm threshold and the alarm flags, as the master task last
/// computed them (it owns the alarm decision; the endpoint only reports).
static MEMORY_LIMIT_BYTES: AtomicU64 = AtomicU64::new(0);
static ALARM_FLAGS: AtomicU64 = AtomicU64::new(0);

/// Called by the master task each time it checks the resource alarms.
pub fn set_alarm_state(memory_limit: u64, memory_alarm: bool, disk_alarm: bool) {
    MEMORY_LIMIT_BYTES.store(memory_limit, Ordering::Relaxed);
    ALARM_FLAGS.store(
        u64::from(memory_alarm) | (u64::from(disk_alarm) << 1),
        Ordering::Relaxed,
    );
}

/// The memory alarm threshold and whether the memory and disk alarms are in
/// effect, as the master task last set them.
pub fn alarm_state() -> (u64, bool, bool) {
    let flags = ALARM_FLAGS.load(Ordering::Relaxed);
    (
        MEMORY_LIMIT_BYTES.load(Ordering::Relaxed),
        flags & 1 != 0,
        flags & 2 != 0,
    )
}

/// Install the global recorder (the endpoint renders it), describe every
/// counter, and create them at zero so that `rate()` over a counter that has
/// not moved yet gives 0 rather than no series, as with RabbitMQ. The caller
/// runs [`upkeep::run`] beside it: the recorder buffers histogram samples
/// until they are drained.
pub fn install() -> Result<metrics_exporter_prometheus::PrometheusHandle, String> {
    let handle = builder()?
        .install_recorder()
        .map_err(|e| format!("prometheus recorder: {e}"))?;
    describe();
    stablemq_cluster::metrics::describe();
    register_zeroes();
    Ok(handle)
}

/// The recorder's configuration: the histograms' buckets.
fn builder() -> Result<metrics_exporter_prometheus::PrometheusBuilder, String> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    let seconds = [
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        5.0,
    ];
    let batch = [
        1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
    ];
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &seconds)
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(stablemq_cluster::metrics::FSYNC_BATCH_MESSAGES.into()),
                &batch,
            )
        })
        .map_err(|e| format!("prometheus buckets: {e}"))
}

fn describe() {
    use metrics::{describe_counter, describe_gauge};
    for (name, help) in COUNTER_HELP {
        describe_counter!(*name, *help);
    }
    describe_gauge!(
        STABLE_INDEX,
        "Highest log index stable on a quorum of event stores"
    );
    describe_gauge!(ROLE, "1 for this node's current broker role");
    describe_gauge!(EPOCH, "Highest replication epoch this node has seen");
    describe_gauge!(
        SLAVE_LAG,
        "Log entries this slave's applied state trails the master's stable index"
    );
    describe_counter!(FAILOVERS, "Times this node became master by election");
    describe_counter!(
        STREAM_REPLICA_CHUNKS,
        "Stream chunks this node delivered from its replica"
    );
    describe_counter!(
        STREAM_REPLICA_RECORDS,
        "Stream entries in the chunks this node delivered from its replica"
    );
    stream::describe_errors();
}

/// Help texts of the counters, RabbitMQ's where RabbitMQ has the counter.
const COUNTER_HELP: &[(&str, &str)] = &[
    (
        RECEIVED,
        "Total number of messages received from publishers",
    ),
    (
        RECEIVED_CONFIRM,
        "Total number of messages received from publishers expecting confirmations",
    ),
    (
        ROUTED,
        "Total number of messages routed to queues or streams",
    ),
    (
        UNROUTABLE_DROPPED,
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
    ),
    (
        UNROUTABLE_RETURNED,
        "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
    ),
    (
        CONFIRMED,
        "Total number of messages confirmed to publishers",
    ),
    (DELIVERED, "Total number of messages delivered to consumers"),
    (
        DELIVERED_MANUAL_ACK,
        "Total number of messages delivered to consumers using basic.consume with manual acknowledgment",
    ),
    (
        DELIVERED_AUTO_ACK,
        "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment",
    ),
    (
        DELIVERED_GET_MANUAL_ACK,
        "Total number of messages delivered to consumers using basic.get with manual acknowledgment",
    ),
    (
        DELIVERED_GET_AUTO_ACK,
        "Total number of messages delivered to consumers using basic.get with automatic acknowledgment",
    ),
    (
        GET_EMPTY,
        "Total number of times basic.get operations fetched no message",
    ),
    (
        REDELIVERED,
        "Total number of messages redelivered to consumers",
    ),
    (
        ACKNOWLEDGED,
        "Total number of messages acknowledged by consumers",
    ),
    (
        DEAD_LETTERED_EXPIRED,
        "Total number of messages dead-lettered due to message TTL exceeded",
    ),
    (
        DEAD_LETTERED_REJECTED,
        "Total number of messages dead-lettered due to basic.reject or basic.nack",
    ),
    (
        DEAD_LETTERED_MAXLEN,
        "Total number of messages dead-lettered due to overflow drop-head or reject-publish-dlx",
    ),
    (
        DEAD_LETTERED_DELIVERY_LIMIT,
        "Total number of messages dead-lettered due to delivery-limit exceeded",
    ),
    (
        DEAD_LETTERED_CONFIRMED,
        "Total number of messages dead-lettered and confirmed by target queues",
    ),
    (CONNECTIONS_OPENED, "Total number of connections opened"),
    (
        CONNECTIONS_CLOSED,
        "Total number of connections closed or terminated",
    ),
    (CHANNELS_OPENED, "Total number of channels opened"),
    (CHANNELS_CLOSED, "Total number of channels closed"),
    (QUEUES_DECLARED, "Total number of queues declared"),
    (QUEUES_CREATED, "Total number of queues created"),
    (QUEUES_DELETED, "Total number of queues deleted"),
];

/// Create every counter RabbitMQ 3.10 creates at boot, at zero, with the
/// same label sets.
fn register_zeroes() {
    for name in [
        RECEIVED,
        RECEIVED_CONFIRM,
        ROUTED,
        UNROUTABLE_DROPPED,
        UNROUTABLE_RETURNED,
        CONFIRMED,
    ] {
        global(name).increment(0);
        stream::global_stream(name).increment(0);
    }
    for name in [
        DELIVERED,
        DELIVERED_MANUAL_ACK,
        DELIVERED_AUTO_ACK,
        DELIVERED_GET_MANUAL_ACK,
        DELIVERED_GET_AUTO_ACK,
        GET_EMPTY,
        REDELIVERED,
        ACKNOWLEDGED,
    ] {
        for kind in QueueKind::ALL {
            global_by_queue(name, kind).increment(0);
        }
        stream::global_stream_by_queue(name).increment(0);
    }
    stream::register_error_zeroes();
    // (queue type, strategy, the counters RabbitMQ creates for that pair)
    let dead_letter: [(&str, &str, &[&str]); 5] = [
        (
            "rabbit_classic_queue",
            "disabled",
            &[
                DEAD_LETTERED_EXPIRED,
                DEAD_LETTERED_REJECTED,
                DEAD_LETTERED_MAXLEN,
            ],
        ),
        (
            "rabbit_classic_queue",
            "at_most_once",
            &[
                DEAD_LETTERED_EXPIRED,
                DEAD_LETTERED_REJECTED,
                DEAD_LETTERED_MAXLEN,
            ],
        ),
        (
            "rabbit_quorum_queue",
            "disabled",
            &[
                DEAD_LETTERED_EXPIRED,
                DEAD_LETTERED_REJECTED,
                DEAD_LETTERED_MAXLEN,
                DEAD_LETTERED_DELIVERY_LIMIT,
            ],
        ),
        (
            "rabbit_quorum_queue",
            "at_most_once",
            &[
                DEAD_LETTERED_EXPIRED,
                DEAD_LETTERED_REJECTED,
                DEAD_LETTERED_MAXLEN,
                DEAD_LETTERED_DELIVERY_LIMIT,
            ],
        ),
        (
            "rabbit_quorum_queue",
            "at_least_once",
            &[
                DEAD_LETTERED_EXPIRED,
                DEAD_LETTERED_REJECTED,
                DEAD_LETTERED_CONFIRMED,
                DEAD_LETTERED_DELIVERY_LIMIT,
            ],
        ),
    ];
    for (qt, strategy, names) in dead_letter {
        for name in names {
            metrics::counter!(*name, "queue_type" => qt, "dead_letter_strategy" => strategy)
                .increment(0);
        }
    }
    for name in [
        CONNECTIONS_OPENED,
        CONNECTIONS_CLOSED,
        CHANNELS_OPENED,
        CHANNELS_CLOSED,
        QUEUES_DECLARED,
        QUEUES_CREATED,
        QUEUES_DELETED,
        FAILOVERS,
        STREAM_REPLICA_CHUNKS,
        STREAM_REPLICA_RECORDS,
    ] {
        metrics::counter!(name).increment(0);
    }
    metrics::counter!(stablemq_cluster::metrics::FSYNCS_TOTAL).increment(0);
}

/// The single node's appends not yet stable: (last index of a batch, when
/// it was handed to the log). The cluster's driver keeps its own; this one
/// gives the single node the same `stablemq_quorum_ack_seconds` (a quorum of
/// one: the local fsync plus the queueing before it).
static LOCAL_UNSTABLE: std::sync::Mutex<std::collections::VecDeque<(u64, std::time::Instant)>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

/// The master task handed a batch ending at `last` to the local log.
pub fn local_appended(last: u64) {
    if let Ok(mut q) = LOCAL_UNSTABLE.lock() {
        q.push_back((last, std::time::Instant::now()));
    }
}

/// The local log reports `index` durable (stable, with one store).
pub fn local_stable(index: u64) {
    let Ok(mut q) = LOCAL_UNSTABLE.lock() else {
        return;
    };
    while let Some(&(last, at)) = q.front() {
        if last > index {
            break;
        }
        metrics::histogram!(stablemq_cluster::metrics::QUORUM_ACK_SECONDS)
            .record(at.elapsed().as_secs_f64());
        q.pop_front();
    }
}

/// The single node is the master of its own epoch, with nobody to lag.
pub fn single_node_status(epoch: u64) {
    for role in ["master", "slave", "candidate"] {
        let on = if role == "master" { 1.0 } else { 0.0 };
        metrics::gauge!(ROLE, "role" => role).set(on);
    }
    metrics::gauge!(EPOCH).set(epoch as f64);
    metrics::gauge!(SLAVE_LAG).set(0.0);
}
