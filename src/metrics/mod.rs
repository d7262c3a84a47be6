//! Metric names and the Prometheus exporter.
//!
//! Names follow RabbitMQ's rabbitmq_prometheus plugin, so dashboards built for
//! RabbitMQ (Grafana 10991) read StableMQ unchanged. Replication metrics carry the
//! `stablemq_` prefix.

use std::net::SocketAddr;

/// Messages published by clients (RabbitMQ: received).
pub const RECEIVED: &str = "rabbitmq_global_messages_received_total";
/// Messages published in confirm mode.
pub const RECEIVED_CONFIRM: &str = "rabbitmq_global_messages_received_confirm_total";
/// Messages routed to at least one queue.
pub const ROUTED: &str = "rabbitmq_global_messages_routed_total";
/// Publisher confirms sent.
pub const CONFIRMED: &str = "rabbitmq_global_messages_confirmed_total";
/// Messages delivered to consumers (acked mode and auto-ack together).
pub const DELIVERED: &str = "rabbitmq_global_messages_delivered_total";
/// Messages delivered to consumers in auto-ack mode.
pub const DELIVERED_AUTO_ACK: &str = "rabbitmq_global_messages_delivered_consume_auto_ack_total";
/// Messages delivered to consumers in manual-ack mode.
pub const DELIVERED_MANUAL_ACK: &str =
    "rabbitmq_global_messages_delivered_consume_manual_ack_total";
/// Messages fetched with basic.get (both modes).
pub const DELIVERED_GET: &str = "rabbitmq_global_messages_delivered_get_manual_ack_total";
/// Messages redelivered.
pub const REDELIVERED: &str = "rabbitmq_global_messages_redelivered_total";
/// Messages acknowledged by consumers.
pub const ACKNOWLEDGED: &str = "rabbitmq_global_messages_acknowledged_total";
/// Mandatory messages returned as unroutable.
pub const UNROUTABLE_RETURNED: &str = "rabbitmq_global_messages_unroutable_returned_total";
/// Non-mandatory messages dropped as unroutable.
pub const UNROUTABLE_DROPPED: &str = "rabbitmq_global_messages_unroutable_dropped_total";
/// Ready messages per queue.
pub const QUEUE_READY: &str = "rabbitmq_queue_messages_ready";
/// Unacked messages per queue.
pub const QUEUE_UNACKED: &str = "rabbitmq_queue_messages_unacked";
/// Ready plus unacked per queue.
pub const QUEUE_MESSAGES: &str = "rabbitmq_queue_messages";
/// Consumers per queue.
pub const QUEUE_CONSUMERS: &str = "rabbitmq_queue_consumers";
/// Open connections.
pub const CONNECTIONS: &str = "rabbitmq_connections";
/// Connections opened since start.
pub const CONNECTIONS_OPENED: &str = "rabbitmq_connections_opened_total";
/// Connections closed since start.
pub const CONNECTIONS_CLOSED: &str = "rabbitmq_connections_closed_total";
/// Open channels.
pub const CHANNELS: &str = "rabbitmq_channels";
/// Queues.
pub const QUEUES: &str = "rabbitmq_queues";
/// The node's identity, as rabbitmq_prometheus exports it.
pub const IDENTITY: &str = "rabbitmq_identity_info";
/// Resident memory of the process.
pub const RSS: &str = "rabbitmq_process_resident_memory_bytes";
/// The stable index of the log.
pub const STABLE_INDEX: &str = "stablemq_stable_index";
/// Gauge: this node's broker role (1 on the series of the current role: label
/// `role` = master, slave or candidate).
pub const ROLE: &str = "stablemq_role";
/// Gauge: the highest epoch this node has seen.
pub const EPOCH: &str = "stablemq_epoch";
/// Counter: times this node took over as master from an earlier one (won an
/// election in an epoch above 1).
pub const FAILOVERS: &str = "stablemq_failovers_total";

/// Install the global recorder and serve `/metrics` on `addr`.
pub fn install(addr: SocketAddr) -> Result<(), String> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| format!("prometheus exporter on {addr}: {e}"))?;
    describe();
    Ok(())
}

fn describe() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(RECEIVED, "Messages published by clients");
    describe_counter!(ROUTED, "Messages routed to at least one queue");
    describe_counter!(CONFIRMED, "Publisher confirms sent");
    describe_counter!(DELIVERED, "Messages delivered to consumers");
    describe_counter!(ACKNOWLEDGED, "Messages acknowledged by consumers");
    describe_counter!(
        UNROUTABLE_RETURNED,
        "Unroutable mandatory messages returned"
    );
    describe_gauge!(QUEUE_READY, "Messages ready for delivery, per queue");
    describe_gauge!(
        QUEUE_UNACKED,
        "Messages delivered and not yet acked, per queue"
    );
    describe_gauge!(
        STABLE_INDEX,
        "Highest log index stable on a quorum of stores"
    );
    describe_gauge!(ROLE, "1 for this node's current broker role");
    describe_gauge!(EPOCH, "Highest replication epoch this node has seen");
    describe_counter!(FAILOVERS, "Times this node became master by election");
}

/// This node's name, RabbitMQ style: `stablemq@host` for the single node,
/// `stablemq-N@host` for cluster node N (several may share a host).
pub fn node_name(cluster_node: Option<u64>) -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into());
    match cluster_node {
        None => format!("stablemq@{host}"),
        Some(id) => format!("stablemq-{id}@{host}"),
    }
}

/// Resident set size of this process in bytes, from /proc (0 where unavailable).
pub fn resident_memory_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

/// Total memory of the machine in bytes, from /proc/meminfo (None where unavailable).
pub fn total_memory_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Free bytes on the filesystem holding `path` (None where unavailable).
pub fn disk_free_bytes(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we own; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Free disk space of the data directory.
pub const DISK_FREE: &str = "rabbitmq_disk_space_available_bytes";
/// The memory alarm threshold.
pub const MEMORY_LIMIT: &str = "rabbitmq_resident_memory_limit_bytes";
/// 1 while a resource alarm blocks publishers.
pub const ALARMS_MEMORY: &str = "rabbitmq_alarms_memory_used_watermark";
/// 1 while the disk alarm blocks publishers.
pub const ALARMS_DISK: &str = "rabbitmq_alarms_free_disk_space_watermark";
