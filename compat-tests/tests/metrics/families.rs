//! Each rabbitmq_prometheus family's name, type, help text and labels on
//! both endpoints, as RabbitMQ 3.10 serves them.

use super::{per_object, scrape_path, total};
use crate::common::*;
use lapin::BasicProperties;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use std::collections::{BTreeMap, BTreeSet};

/// What a family looks like in one scrape.
#[derive(Debug, Default)]
struct Family {
    kind: String,
    help: String,
    /// Label names over all samples (`le` left out).
    labels: BTreeSet<String>,
    samples: usize,
}

fn parse(text: &str) -> BTreeMap<String, Family> {
    let mut fams: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            fams.entry(name.into()).or_default().help = help.into();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            let f = fams.entry(name.into()).or_default();
            assert!(f.kind.is_empty(), "{name} typed twice");
            f.kind = kind.into();
        } else {
            let series = line.rsplit_once(' ').expect("sample value").0;
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|base| fams.get(*base).is_some_and(|f| f.kind == "histogram"))
                })
                .unwrap_or(name);
            let f = fams
                .get_mut(family)
                .unwrap_or_else(|| panic!("sample of {name} before its TYPE"));
            f.samples += 1;
            for pair in labels
                .trim_end_matches('}')
                .split("\",")
                .filter(|p| !p.is_empty())
            {
                let key = pair.split_once('=').expect("label=value").0;
                if key != "le" {
                    f.labels.insert(key.to_string());
                }
            }
        }
    }
    fams
}

/// (name, type, label names on /metrics) as RabbitMQ 3.10's
/// rabbitmq_prometheus serves them, and StableMQ's own.
const EXPECTED: &[(&str, &str, &[&str])] = &[
    (
        "rabbitmq_identity_info",
        "untyped",
        &["rabbitmq_cluster", "rabbitmq_endpoint", "rabbitmq_node"],
    ),
    (
        "rabbitmq_build_info",
        "untyped",
        &[
            "product_name",
            "product_version",
            "prometheus_plugin_version",
            "rabbitmq_version",
        ],
    ),
    ("rabbitmq_queue_messages_ready", "gauge", &[]),
    ("rabbitmq_queue_messages_unacked", "gauge", &[]),
    ("rabbitmq_queue_messages", "gauge", &[]),
    ("rabbitmq_queue_consumers", "gauge", &[]),
    ("rabbitmq_queues", "gauge", &[]),
    ("rabbitmq_connections", "gauge", &[]),
    ("rabbitmq_channels", "gauge", &[]),
    ("rabbitmq_consumers", "gauge", &[]),
    ("rabbitmq_channel_consumers", "gauge", &[]),
    ("rabbitmq_connection_incoming_bytes_total", "counter", &[]),
    ("rabbitmq_connection_outgoing_bytes_total", "counter", &[]),
    (
        "rabbitmq_connection_process_reductions_total",
        "counter",
        &[],
    ),
    ("rabbitmq_connection_incoming_packets_total", "counter", &[]),
    ("rabbitmq_connection_outgoing_packets_total", "counter", &[]),
    ("rabbitmq_connection_pending_packets", "gauge", &[]),
    ("rabbitmq_connection_channels", "gauge", &[]),
    ("rabbitmq_global_publishers", "gauge", &["protocol"]),
    ("rabbitmq_global_consumers", "gauge", &["protocol"]),
    (
        "rabbitmq_global_messages_received_total",
        "counter",
        &["protocol"],
    ),
    (
        "rabbitmq_global_stream_error_stream_does_not_exist_total",
        "counter",
        &["protocol"],
    ),
    (
        "rabbitmq_global_stream_error_unknown_frame_total",
        "counter",
        &["protocol"],
    ),
    (
        "rabbitmq_global_messages_received_confirm_total",
        "counter",
        &["protocol"],
    ),
    (
        "rabbitmq_global_messages_routed_total",
        "counter",
        &["protocol"],
    ),
    (
        "rabbitmq_global_messages_unroutable_dropped_total",
        "counter",
        &["protocol"],
    ),
    (
        "rabbitmq_global_messages_unroutable_returned_total",
        "counter",
        &["protocol"],
    ),
    (
        "rabbitmq_global_messages_confirmed_total",
        "counter",
        &["protocol"],
    ),
    (
        "rabbitmq_global_messages_delivered_total",
        "counter",
        &["protocol", "queue_type"],
    ),
    (
        "rabbitmq_global_messages_delivered_consume_manual_ack_total",
        "counter",
        &["protocol", "queue_type"],
    ),
    (
        "rabbitmq_global_messages_delivered_consume_auto_ack_total",
        "counter",
        &["protocol", "queue_type"],
    ),
    (
        "rabbitmq_global_messages_delivered_get_manual_ack_total",
        "counter",
        &["protocol", "queue_type"],
    ),
    (
        "rabbitmq_global_messages_delivered_get_auto_ack_total",
        "counter",
        &["protocol", "queue_type"],
    ),
    (
        "rabbitmq_global_messages_get_empty_total",
        "counter",
        &["protocol", "queue_type"],
    ),
    (
        "rabbitmq_global_messages_redelivered_total",
        "counter",
        &["protocol", "queue_type"],
    ),
    (
        "rabbitmq_global_messages_acknowledged_total",
        "counter",
        &["protocol", "queue_type"],
    ),
    (
        "rabbitmq_global_messages_dead_lettered_expired_total",
        "counter",
        &["dead_letter_strategy", "queue_type"],
    ),
    (
        "rabbitmq_global_messages_dead_lettered_rejected_total",
        "counter",
        &["dead_letter_strategy", "queue_type"],
    ),
    (
        "rabbitmq_global_messages_dead_lettered_maxlen_total",
        "counter",
        &["dead_letter_strategy", "queue_type"],
    ),
    (
        "rabbitmq_global_messages_dead_lettered_delivery_limit_total",
        "counter",
        &["dead_letter_strategy", "queue_type"],
    ),
    (
        "rabbitmq_global_messages_dead_lettered_confirmed_total",
        "counter",
        &["dead_letter_strategy", "queue_type"],
    ),
    ("rabbitmq_connections_opened_total", "counter", &[]),
    ("rabbitmq_connections_closed_total", "counter", &[]),
    ("rabbitmq_channels_opened_total", "counter", &[]),
    ("rabbitmq_channels_closed_total", "counter", &[]),
    ("rabbitmq_queues_declared_total", "counter", &[]),
    ("rabbitmq_queues_created_total", "counter", &[]),
    ("rabbitmq_queues_deleted_total", "counter", &[]),
    ("rabbitmq_process_resident_memory_bytes", "gauge", &[]),
    ("rabbitmq_resident_memory_limit_bytes", "gauge", &[]),
    ("rabbitmq_disk_space_available_bytes", "gauge", &[]),
    ("rabbitmq_disk_space_available_limit_bytes", "gauge", &[]),
    ("rabbitmq_process_open_fds", "gauge", &[]),
    ("rabbitmq_process_max_fds", "gauge", &[]),
    ("rabbitmq_process_open_tcp_sockets", "gauge", &[]),
    ("rabbitmq_process_max_tcp_sockets", "gauge", &[]),
    ("rabbitmq_erlang_uptime_seconds", "gauge", &[]),
    ("rabbitmq_alarms_memory_used_watermark", "untyped", &[]),
    ("rabbitmq_alarms_free_disk_space_watermark", "untyped", &[]),
    ("rabbitmq_alarms_file_descriptor_limit", "untyped", &[]),
    ("rabbitmq_message_size_bytes", "histogram", &["protocol"]),
    ("stablemq_role", "gauge", &["role"]),
    ("stablemq_epoch", "gauge", &[]),
    ("stablemq_stable_index", "gauge", &[]),
    ("stablemq_slave_lag_entries", "gauge", &[]),
    ("stablemq_failovers_total", "counter", &[]),
    ("stablemq_quorum_ack_seconds", "histogram", &[]),
    ("stablemq_store_fsync_seconds", "histogram", &[]),
    ("stablemq_store_fsync_batch_messages", "histogram", &[]),
    ("stablemq_store_fsyncs_total", "counter", &[]),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_serve_rabbitmq_families_aggregated_and_per_object() {
    let broker = Broker::start();
    assert!(!broker.is_external(), "reads StableMQ's own metrics port");
    let (_conn, ch) = open(&broker).await;
    let q = unique("shape");
    // A durable queue and a persistent message: the log, its fsyncs and the
    // quorum ack timer all move.
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    declare_queue_with(&ch, &q, durable, FieldTable::default()).await;
    let persistent = BasicProperties::default().with_delivery_mode(2);
    publish_props(&ch, "", &q, b"kept", persistent).await;

    let port = broker.prometheus_port;
    let agg_text = scrape_path(port, "/metrics");
    let per_text = per_object(port);
    let (agg, per) = (parse(&agg_text), parse(&per_text));
    for (name, kind, labels) in EXPECTED {
        let f = agg
            .get(*name)
            .unwrap_or_else(|| panic!("/metrics lacks {name}:\n{agg_text}"));
        assert_eq!(f.kind, *kind, "type of {name}");
        assert!(!f.help.is_empty(), "{name} has no help text");
        assert!(f.samples > 0, "{name} has no sample on /metrics");
        let want: BTreeSet<String> = labels.iter().map(|s| s.to_string()).collect();
        assert_eq!(f.labels, want, "labels of {name} on /metrics");
        assert!(per.contains_key(*name), "/metrics/per-object lacks {name}");
    }
    assert_eq!(
        agg.keys().collect::<Vec<_>>(),
        per.keys().collect::<Vec<_>>(),
        "both endpoints serve the same families"
    );
    // rabbitmq_prometheus's default endpoint carries no per-object labels.
    assert!(
        !agg_text.contains("queue=\"") && !agg_text.contains("vhost=\""),
        "/metrics leaks per-object labels"
    );
    for name in [
        "rabbitmq_queue_messages_ready",
        "rabbitmq_queue_messages",
        "rabbitmq_queue_consumers",
    ] {
        let want: BTreeSet<String> = ["queue", "vhost"].iter().map(|s| s.to_string()).collect();
        assert_eq!(per[name].labels, want, "labels of {name} per object");
    }
    let label = format!("queue=\"{q}\"");
    assert_eq!(
        total(&per_text, "rabbitmq_queue_messages", Some(&label)),
        Some(1.0)
    );
    assert!(total(&agg_text, "rabbitmq_queue_messages", None).is_some_and(|v| v >= 1.0));
    assert!(agg_text.contains("rabbitmq_endpoint=\"aggregated\""));
    assert!(per_text.contains("rabbitmq_endpoint=\"per-object\""));
    // The single node is its own master, and its log really moved.
    assert_eq!(
        total(&agg_text, "stablemq_role", Some("role=\"master\"")),
        Some(1.0)
    );
    assert!(total(&agg_text, "stablemq_stable_index", None).is_some_and(|v| v >= 2.0));
    assert!(total(&agg_text, "stablemq_quorum_ack_seconds_count", None).is_some_and(|v| v >= 1.0));
    assert!(total(&agg_text, "stablemq_store_fsyncs_total", None).is_some_and(|v| v >= 1.0));
    assert!(total(&agg_text, "rabbitmq_process_open_fds", None).is_some_and(|v| v >= 5.0));
    assert!(total(&agg_text, "rabbitmq_process_open_tcp_sockets", None).is_some_and(|v| v >= 2.0));
}
