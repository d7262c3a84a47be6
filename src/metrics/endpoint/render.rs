//! The scrape-time families in rabbitmq_prometheus's names and labels.

use super::snapshot::{ConnectionSample, NodeFacts, QueueSample, Snapshot};
use crate::metrics::text::{Exposition, Kind};

/// Write every scrape-time family.
pub fn render(e: &mut Exposition, s: &Snapshot, n: &NodeFacts, per_object: bool) {
    render_identity(e, n, per_object);
    let consumers: usize = s.channels.iter().map(|c| c.consumers).sum();
    render_totals(e, s, consumers);
    render_queues(e, s, per_object);
    render_streams(e, s, per_object);
    render_connections(e, s, per_object);
    render_channels(e, s, per_object, consumers);
    render_node(e, n);
    render_message_sizes(e, n);
}

/// The identity and build info families, each one sample of value 1.
fn render_identity(e: &mut Exposition, n: &NodeFacts, per_object: bool) {
    use crate::metrics::{BUILD_INFO, IDENTITY};
    let endpoint = if per_object {
        "per-object"
    } else {
        "aggregated"
    };
    e.family(
        IDENTITY,
        Kind::Untyped,
        "RabbitMQ node & cluster identity info",
    )
    .sample(
        IDENTITY,
        &[
            ("rabbitmq_node", &n.node),
            ("rabbitmq_cluster", &n.cluster),
            ("rabbitmq_endpoint", endpoint),
        ],
        1.0,
    );
    e.family(
        BUILD_INFO,
        Kind::Untyped,
        "RabbitMQ & Erlang/OTP version info",
    )
    .sample(
        BUILD_INFO,
        &[
            (
                "rabbitmq_version",
                crate::management::RABBITMQ_COMPAT_VERSION,
            ),
            (
                "prometheus_plugin_version",
                crate::management::RABBITMQ_COMPAT_VERSION,
            ),
            ("product_name", "StableMQ"),
            ("product_version", env!("CARGO_PKG_VERSION")),
        ],
        1.0,
    );
}

/// The node-wide object counts (`consumers` summed over the channels) and the
/// publishers and consumers per protocol.
fn render_totals(e: &mut Exposition, s: &Snapshot, consumers: usize) {
    use crate::metrics::{
        CHANNELS, CONNECTIONS, CONSUMERS, GLOBAL_CONSUMERS, GLOBAL_PUBLISHERS, QUEUES,
    };
    e.single(
        CONNECTIONS,
        Kind::Gauge,
        "Connections currently open",
        s.connections.len() as f64,
    );
    e.single(
        CHANNELS,
        Kind::Gauge,
        "Channels currently open",
        s.channels.len() as f64,
    );
    e.single(
        CONSUMERS,
        Kind::Gauge,
        "Consumers currently connected",
        consumers as f64,
    );
    e.single(
        QUEUES,
        Kind::Gauge,
        "Queues available",
        s.queues.len() as f64,
    );
    e.family(
        GLOBAL_PUBLISHERS,
        Kind::Gauge,
        "Current number of publishers",
    );
    for p in &s.protocols {
        let label = [("protocol", p.protocol.label())];
        e.sample(GLOBAL_PUBLISHERS, &label, p.publishers as f64);
    }
    e.family(GLOBAL_CONSUMERS, Kind::Gauge, "Current number of consumers");
    for p in &s.protocols {
        let label = [("protocol", p.protocol.label())];
        e.sample(GLOBAL_CONSUMERS, &label, p.consumers as f64);
    }
}

/// The queue depth and consumer families: one series per queue, or the sum.
fn render_queues(e: &mut Exposition, s: &Snapshot, per_object: bool) {
    use crate::metrics::{QUEUE_CONSUMERS, QUEUE_MESSAGES, QUEUE_READY, QUEUE_UNACKED};
    type Field = fn(&QueueSample) -> usize;
    let queue_families: [(&str, &str, Field); 4] = [
        (
            QUEUE_READY,
            "Messages ready to be delivered to consumers",
            |q| q.ready,
        ),
        (
            QUEUE_UNACKED,
            "Messages delivered to consumers but not yet acknowledged",
            |q| q.unacked,
        ),
        (
            QUEUE_MESSAGES,
            "Sum of ready and unacknowledged messages - total queue depth",
            |q| q.ready + q.unacked,
        ),
        (QUEUE_CONSUMERS, "Consumers on a queue", |q| q.consumers),
    ];
    for (name, help, field) in queue_families {
        e.family(name, Kind::Gauge, help);
        if per_object {
            for q in &s.queues {
                e.sample(
                    name,
                    &[("vhost", &q.vhost), ("queue", &q.name)],
                    field(q) as f64,
                );
            }
        } else {
            e.sample(name, &[], s.queues.iter().map(field).sum::<usize>() as f64);
        }
    }
}

/// The connection traffic families: one series per connection, or the sum.
fn render_connections(e: &mut Exposition, s: &Snapshot, per_object: bool) {
    use crate::metrics::{
        CONNECTION_CHANNELS, CONNECTION_INCOMING_BYTES, CONNECTION_INCOMING_PACKETS,
        CONNECTION_OUTGOING_BYTES, CONNECTION_OUTGOING_PACKETS, CONNECTION_PENDING_PACKETS,
        CONNECTION_REDUCTIONS,
    };
    type ConnField = fn(&ConnectionSample) -> u64;
    let connection_families: [(&str, Kind, &str, ConnField); 7] = [
        (
            CONNECTION_INCOMING_BYTES,
            Kind::Counter,
            "Total number of bytes received on a connection",
            |c| c.traffic.recv_oct,
        ),
        (
            CONNECTION_OUTGOING_BYTES,
            Kind::Counter,
            "Total number of bytes sent on a connection",
            |c| c.traffic.send_oct,
        ),
        (
            CONNECTION_REDUCTIONS,
            Kind::Counter,
            "Total number of connection process reductions",
            |c| c.traffic.reductions,
        ),
        (
            CONNECTION_INCOMING_PACKETS,
            Kind::Counter,
            "Total number of packets received on a connection",
            |c| c.traffic.recv_cnt,
        ),
        (
            CONNECTION_OUTGOING_PACKETS,
            Kind::Counter,
            "Total number of packets sent on a connection",
            |c| c.traffic.send_cnt,
        ),
        (
            CONNECTION_PENDING_PACKETS,
            Kind::Gauge,
            "Number of packets waiting to be sent on a connection",
            |c| c.traffic.send_pend,
        ),
        (
            CONNECTION_CHANNELS,
            Kind::Gauge,
            "Channels on a connection",
            |c| c.channels as u64,
        ),
    ];
    for (name, kind, help, field) in connection_families {
        e.family(name, kind, help);
        if per_object {
            for c in &s.connections {
                e.sample(name, &[("channel", &c.id)], field(c) as f64);
            }
        } else {
            // As RabbitMQ 3.10's aggregated endpoint: the sum, unlabelled.
            let total: u64 = s.connections.iter().map(field).sum();
            e.sample(name, &[], total as f64);
        }
    }
}

/// The consumers per channel: one series per channel, or `consumers`, their sum.
fn render_channels(e: &mut Exposition, s: &Snapshot, per_object: bool, consumers: usize) {
    use crate::metrics::CHANNEL_CONSUMERS;
    e.family(CHANNEL_CONSUMERS, Kind::Gauge, "Consumers on a channel");
    if per_object {
        for c in &s.channels {
            e.sample(CHANNEL_CONSUMERS, &[("channel", &c.id)], c.consumers as f64);
        }
    } else {
        e.sample(CHANNEL_CONSUMERS, &[], consumers as f64);
    }
}

/// The node's resources (memory, disk, descriptors), its uptime and alarms.
fn render_node(e: &mut Exposition, n: &NodeFacts) {
    use crate::metrics::{
        ALARMS_DISK, ALARMS_FDS, ALARMS_MEMORY, DISK_FREE, DISK_FREE_LIMIT, MAX_FDS,
        MAX_TCP_SOCKETS, MEMORY_LIMIT, OPEN_FDS, OPEN_TCP_SOCKETS, RSS, UPTIME,
    };
    e.single(RSS, Kind::Gauge, "Memory used in bytes", n.rss as f64);
    e.single(
        MEMORY_LIMIT,
        Kind::Gauge,
        "Memory high watermark in bytes",
        n.memory_limit as f64,
    );
    if let Some(free) = n.disk_free {
        e.single(
            DISK_FREE,
            Kind::Gauge,
            "Disk space available in bytes",
            free as f64,
        );
    }
    e.single(
        DISK_FREE_LIMIT,
        Kind::Gauge,
        "Free disk space low watermark in bytes",
        n.disk_free_limit as f64,
    );
    if let Some((fds, sockets)) = n.fds {
        e.single(OPEN_FDS, Kind::Gauge, "Open file descriptors", fds as f64);
        e.single(
            OPEN_TCP_SOCKETS,
            Kind::Gauge,
            "Open TCP sockets",
            sockets as f64,
        );
    }
    if let Some(max) = n.max_fds {
        e.single(
            MAX_FDS,
            Kind::Gauge,
            "Open file descriptors limit",
            max as f64,
        );
        e.single(
            MAX_TCP_SOCKETS,
            Kind::Gauge,
            "Open TCP sockets limit",
            max as f64,
        );
    }
    e.single(UPTIME, Kind::Gauge, "Node uptime", n.uptime);
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    e.single(
        ALARMS_FDS,
        Kind::Untyped,
        "is 1 if file descriptor limit alarm is in effect",
        0.0,
    );
    e.single(
        ALARMS_DISK,
        Kind::Untyped,
        "is 1 if free disk space watermark alarm is in effect",
        flag(n.alarms.1),
    );
    e.single(
        ALARMS_MEMORY,
        Kind::Untyped,
        "is 1 if VM memory watermark alarm is in effect",
        flag(n.alarms.0),
    );
}

/// The message size histogram: cumulative buckets, then the sum and count.
fn render_message_sizes(e: &mut Exposition, n: &NodeFacts) {
    use crate::metrics::{MESSAGE_SIZE, SIZE_BUCKETS};
    e.family(
        MESSAGE_SIZE,
        Kind::Histogram,
        "Size of messages received from publishers",
    );
    let bucket = format!("{MESSAGE_SIZE}_bucket");
    let mut cumulative = 0u64;
    let les = SIZE_BUCKETS.iter().map(|(_, le)| *le).chain(["+Inf"]);
    for (le, count) in les.zip(&n.sizes) {
        cumulative += count;
        e.sample(
            &bucket,
            &[("protocol", "amqp091"), ("le", le)],
            cumulative as f64,
        );
    }
    let sum = n.sizes.get(SIZE_BUCKETS.len() + 1).copied().unwrap_or(0);
    let proto = [("protocol", "amqp091")];
    e.sample(&format!("{MESSAGE_SIZE}_sum"), &proto, sum as f64);
    e.sample(&format!("{MESSAGE_SIZE}_count"), &proto, cumulative as f64);
}

/// The stream families: each stream's highest consumer offset lag (the
/// entries from a consumer's next offset to the end), as rabbitmq_prometheus's
/// `stream_consumer_metrics`.
fn render_streams(e: &mut Exposition, s: &Snapshot, per_object: bool) {
    use crate::metrics::STREAM_CONSUMER_MAX_OFFSET_LAG as LAG;
    e.family(LAG, Kind::Gauge, "Highest consumer offset lag");
    let streams = s
        .queues
        .iter()
        .filter_map(|q| q.stream_max_lag.map(|lag| (q, lag)));
    if per_object {
        for (q, lag) in streams {
            e.sample(LAG, &[("vhost", &q.vhost), ("queue", &q.name)], lag as f64);
        }
    } else {
        e.sample(LAG, &[], streams.map(|(_, lag)| lag).sum::<u64>() as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::inout::ClientProtocol;
    use crate::metrics::endpoint::{ChannelSample, ProtocolSample};

    fn facts() -> NodeFacts {
        let mut sizes = vec![0u64; 10];
        sizes[0] = 2; // two bodies of at most 100 bytes
        sizes[4] = 1; // one of at most 1e6
        sizes[9] = 2 * 10 + 500_000;
        NodeFacts {
            node: "stablemq@h".into(),
            cluster: "c1".into(),
            rss: 1000,
            memory_limit: 4000,
            disk_free: Some(5),
            disk_free_limit: 50_000_000,
            fds: Some((20, 7)),
            max_fds: Some(1024),
            uptime: 1.5,
            alarms: (false, true),
            sizes,
        }
    }

    fn snapshot() -> Snapshot {
        let q = |name: &str, ready, unacked, consumers| QueueSample {
            vhost: "/".into(),
            name: name.into(),
            ready,
            unacked,
            consumers,
            stream_max_lag: None,
        };
        let stream = |name: &str, entries, lag| QueueSample {
            stream_max_lag: Some(lag),
            ..q(name, entries, 0, 2)
        };
        Snapshot {
            cluster_name: None,
            queues: vec![
                q("a", 3, 1, 1),
                q("b\"x", 5, 0, 0),
                stream("s1", 40, 7),
                stream("s2", 10, 0),
            ],
            connections: vec![
                ConnectionSample {
                    id: "<1.0>".into(),
                    channels: 1,
                    traffic: crate::metrics::conn_stats::Traffic {
                        recv_oct: 300,
                        recv_cnt: 3,
                        send_oct: 500,
                        send_cnt: 4,
                        send_pend: 0,
                        reductions: 10,
                    },
                },
                ConnectionSample {
                    id: "<2.0>".into(),
                    channels: 1,
                    traffic: crate::metrics::conn_stats::Traffic {
                        recv_oct: 20,
                        recv_cnt: 1,
                        send_oct: 30,
                        send_cnt: 1,
                        send_pend: 7,
                        reductions: 2,
                    },
                },
            ],
            channels: vec![
                ChannelSample {
                    id: "<1.1>".into(),
                    consumers: 1,
                },
                ChannelSample {
                    id: "<2.1>".into(),
                    consumers: 0,
                },
            ],
            protocols: vec![
                ProtocolSample {
                    protocol: ClientProtocol::Amqp091,
                    publishers: 1,
                    consumers: 1,
                },
                ProtocolSample {
                    protocol: ClientProtocol::Stream,
                    publishers: 2,
                    consumers: 3,
                },
            ],
        }
    }

    fn text(per_object: bool) -> String {
        let mut e = Exposition::default();
        render(&mut e, &snapshot(), &facts(), per_object);
        e.finish()
    }

    #[test]
    fn aggregated_sums_queues_and_has_no_queue_labels() {
        let t = text(false);
        // Two queues and two streams (whose entries are all ready).
        assert!(t.contains("\nrabbitmq_queue_messages_ready 58\n"), "{t}");
        assert!(t.contains("\nrabbitmq_queue_messages_unacked 1\n"));
        assert!(t.contains("\nrabbitmq_queue_messages 59\n"));
        assert!(t.contains("\nrabbitmq_queue_consumers 5\n"));
        assert!(t.contains("\nrabbitmq_queues 4\n"));
        assert!(t.contains("\nrabbitmq_stream_consumer_max_offset_lag 7\n"));
        assert!(t.contains("\nrabbitmq_channels 2\n"));
        assert!(t.contains("\nrabbitmq_consumers 1\n"));
        assert!(t.contains("\nrabbitmq_global_publishers{protocol=\"amqp091\"} 1\n"));
        assert!(t.contains("\nrabbitmq_global_publishers{protocol=\"stream\"} 2\n"));
        assert!(t.contains("\nrabbitmq_global_consumers{protocol=\"stream\"} 3\n"));
        assert!(t.contains("\nrabbitmq_connections 2\n"));
        // Connection traffic summed, as RabbitMQ 3.10's aggregated endpoint does.
        assert!(t.contains("\nrabbitmq_connection_incoming_bytes_total 320\n"));
        assert!(t.contains("\nrabbitmq_connection_outgoing_bytes_total 530\n"));
        assert!(t.contains("\nrabbitmq_connection_channels 2\n"));
        assert!(
            !t.contains("queue=\""),
            "aggregated leaks queue labels:\n{t}"
        );
        assert!(t.contains(
            "rabbitmq_identity_info{rabbitmq_node=\"stablemq@h\",rabbitmq_cluster=\"c1\",rabbitmq_endpoint=\"aggregated\"} 1"
        ));
        assert!(t.contains("\nrabbitmq_alarms_free_disk_space_watermark 1\n"));
        assert!(t.contains("\nrabbitmq_alarms_memory_used_watermark 0\n"));
        // Each family once, with TYPE before its samples.
        let mut seen = std::collections::HashSet::new();
        for line in t.lines().filter(|l| l.starts_with("# TYPE ")) {
            let name = line.split(' ').nth(2).expect("name");
            assert!(seen.insert(name.to_string()), "{name} twice");
        }
    }

    #[test]
    fn per_object_has_one_series_per_queue_and_channel() {
        let t = text(true);
        assert!(t.contains("rabbitmq_queue_messages_ready{vhost=\"/\",queue=\"a\"} 3\n"));
        assert!(t.contains("rabbitmq_queue_messages{vhost=\"/\",queue=\"b\\\"x\"} 5\n"));
        assert!(t.contains("rabbitmq_channel_consumers{channel=\"<1.1>\"} 1\n"));
        assert!(t.contains("rabbitmq_connection_incoming_bytes_total{channel=\"<1.0>\"} 300\n"));
        assert!(t.contains("rabbitmq_connection_outgoing_packets_total{channel=\"<2.0>\"} 1\n"));
        assert!(t.contains("rabbitmq_connection_pending_packets{channel=\"<2.0>\"} 7\n"));
        assert!(t.contains("rabbitmq_connection_process_reductions_total{channel=\"<1.0>\"} 10\n"));
        assert!(t.contains("rabbitmq_connection_channels{channel=\"<1.0>\"} 1\n"));
        assert!(t.contains("rabbitmq_endpoint=\"per-object\""));
        assert!(!t.contains("\nrabbitmq_queue_messages_ready "));
        // One lag series per stream, none for the other queues.
        let lag = "rabbitmq_stream_consumer_max_offset_lag";
        assert!(
            t.contains(&format!("{lag}{{vhost=\"/\",queue=\"s1\"}} 7\n")),
            "{t}"
        );
        assert!(t.contains(&format!("{lag}{{vhost=\"/\",queue=\"s2\"}} 0\n")));
        assert!(!t.contains(&format!("{lag}{{vhost=\"/\",queue=\"a\"}}")));
        assert!(t.contains("rabbitmq_queue_messages_ready{vhost=\"/\",queue=\"s1\"} 40\n"));
    }

    #[test]
    fn message_size_buckets_are_cumulative_with_rabbitmqs_labels() {
        let t = text(false);
        let b = |le: &str| {
            format!("rabbitmq_message_size_bytes_bucket{{protocol=\"amqp091\",le=\"{le}\"}} ")
        };
        assert!(t.contains(&format!("{}2\n", b("100.0"))));
        assert!(t.contains(&format!("{}2\n", b("100000.0"))));
        assert!(t.contains(&format!("{}3\n", b("1e+06"))));
        assert!(t.contains(&format!("{}3\n", b("+Inf"))));
        assert!(t.contains("rabbitmq_message_size_bytes_count{protocol=\"amqp091\"} 3\n"));
        assert!(t.contains("rabbitmq_message_size_bytes_sum{protocol=\"amqp091\"} 500020\n"));
    }
}
