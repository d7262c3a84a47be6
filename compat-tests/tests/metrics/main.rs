//! The Prometheus endpoint: rabbitmq_prometheus's names, types, help texts and
//! labels, fed by real traffic, on `/metrics` (aggregated) and
//! `/metrics/per-object`.

use compat_tests::common;
mod families;
mod streams;

use common::*;
use lapin::BasicProperties;
use lapin::options::{BasicAckOptions, BasicPublishOptions, BasicRejectOptions};
use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use std::time::{Duration, Instant};

/// GET a metrics path of the broker.
fn scrape_path(port: u16, path: &str) -> String {
    let url = format!("http://127.0.0.1:{port}{path}");
    let mut resp = ureq::get(&url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert_eq!(resp.status(), 200, "GET {url}");
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(ctype.starts_with("text/plain"), "content type {ctype}");
    resp.body_mut().read_to_string().expect("metrics text")
}

fn per_object(port: u16) -> String {
    scrape_path(port, "/metrics/per-object")
}

/// Samples of `name` (exact family member, not a longer name) whose line
/// contains `label`, summed: counters are split by protocol and queue type.
fn total(text: &str, name: &str, label: Option<&str>) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter(|l| label.is_none_or(|lab| l.contains(lab)))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// Scrape `path` until `check` holds (queue gauges are read at scrape time,
/// but a message's delivery may still be in flight).
fn scrape_until(port: u16, path: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = scrape_path(port, path);
        if check(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never showed {what}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_and_queue_gauges_use_rabbitmq_names() {
    let broker = Broker::start();
    assert!(
        !broker.is_external(),
        "this test reads StableMQ's own metrics port"
    );
    let (_conn, ch) = open(&broker).await;
    let q = unique("metrics");
    declare_queue(&ch, &q).await;
    for i in 0..5u8 {
        publish(&ch, "", &q, &[i]).await;
    }
    // One mandatory message that no queue takes.
    publish_full(
        &ch,
        "",
        "no-such-queue",
        BasicPublishOptions {
            mandatory: true,
            ..Default::default()
        },
        b"lost",
        BasicProperties::default(),
    )
    .await;
    let m = get_with(&ch, &q, false).await.expect("a message");
    within("ack", m.delivery.acker.ack(BasicAckOptions::default()))
        .await
        .expect("ack");
    let _unacked = get_with(&ch, &q, false).await.expect("a second message");

    let port = broker.prometheus_port;
    let label = format!("queue=\"{q}\"");
    let text = scrape_until(port, "/metrics/per-object", "the queue's gauges", |t| {
        total(t, "rabbitmq_queue_messages_ready", Some(&label)) == Some(3.0)
            && total(t, "rabbitmq_queue_messages_unacked", Some(&label)) == Some(1.0)
    });
    let counter = |name: &str| total(&text, name, None);
    assert_eq!(
        counter("rabbitmq_global_messages_received_total"),
        Some(6.0)
    );
    assert_eq!(counter("rabbitmq_global_messages_routed_total"), Some(5.0));
    assert_eq!(
        counter("rabbitmq_global_messages_confirmed_total"),
        Some(6.0)
    );
    assert_eq!(
        counter("rabbitmq_global_messages_unroutable_returned_total"),
        Some(1.0)
    );
    assert_eq!(
        counter("rabbitmq_global_messages_unroutable_dropped_total"),
        Some(0.0)
    );
    assert_eq!(
        counter("rabbitmq_global_messages_delivered_get_manual_ack_total"),
        Some(2.0)
    );
    // basic.get deliveries count as deliveries, as in RabbitMQ.
    assert_eq!(
        counter("rabbitmq_global_messages_delivered_total"),
        Some(2.0)
    );
    assert_eq!(
        counter("rabbitmq_global_messages_acknowledged_total"),
        Some(1.0)
    );
    assert_eq!(
        total(&text, "rabbitmq_queue_messages", Some(&label)),
        Some(4.0)
    );
    assert_eq!(counter("rabbitmq_connections"), Some(1.0));
    assert_eq!(counter("rabbitmq_channels"), Some(1.0));
    assert_eq!(counter("rabbitmq_global_publishers"), Some(1.0));
    assert_eq!(counter("rabbitmq_message_size_bytes_count"), Some(6.0));
    // 5 one-byte bodies and "lost".
    assert_eq!(counter("rabbitmq_message_size_bytes_sum"), Some(9.0));
    assert!(
        text.contains("rabbitmq_identity_info{"),
        "identity info missing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_gets_and_dead_letters_are_counted_as_rabbitmq_does() {
    let broker = Broker::start();
    assert!(!broker.is_external(), "reads StableMQ's own metrics port");
    let port = broker.prometheus_port;
    let (conn, ch) = open(&broker).await;
    let before = per_object(port);
    let q = unique("churn");

    let extra = channel(&conn).await;
    within("channel.close", extra.close(200, "OK".into()))
        .await
        .expect("channel.close");
    declare_queue(&ch, &q).await; // created
    declare_queue(&ch, &q).await; // declared again, not created
    queue_counts(&ch, &q).await; // passive: RabbitMQ does not count it
    assert!(get_with(&ch, &q, false).await.is_none(), "empty queue");
    for i in 0..3u8 {
        publish(&ch, "", &q, &[i]).await;
    }
    get_with(&ch, &q, true).await.expect("auto-ack get");
    let m = get_with(&ch, &q, false).await.expect("manual-ack get");
    within(
        "reject",
        m.delivery
            .acker
            .reject(BasicRejectOptions { requeue: false }),
    )
    .await
    .expect("reject");
    let label = format!("queue=\"{q}\"");
    let during = scrape_until(port, "/metrics/per-object", "one ready message", |t| {
        total(t, "rabbitmq_queue_messages_ready", Some(&label)) == Some(1.0)
            && total(t, "rabbitmq_queue_messages_unacked", Some(&label)) == Some(0.0)
    });
    within(
        "queue.delete",
        ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default()),
    )
    .await
    .expect("queue.delete");
    let after = per_object(port);

    let delta = |text: &str, name: &str, label: Option<&str>| {
        total(text, name, label).unwrap_or_else(|| panic!("{name} missing"))
            - total(&before, name, label).unwrap_or_else(|| panic!("{name} missing before"))
    };
    assert_eq!(delta(&after, "rabbitmq_channels_opened_total", None), 1.0);
    assert_eq!(delta(&after, "rabbitmq_channels_closed_total", None), 1.0);
    assert_eq!(delta(&after, "rabbitmq_queues_declared_total", None), 2.0);
    assert_eq!(delta(&after, "rabbitmq_queues_created_total", None), 1.0);
    assert_eq!(delta(&after, "rabbitmq_queues_deleted_total", None), 1.0);
    let classic = Some("queue_type=\"rabbit_classic_queue\"");
    assert_eq!(
        delta(&after, "rabbitmq_global_messages_get_empty_total", classic),
        1.0
    );
    assert_eq!(
        delta(
            &after,
            "rabbitmq_global_messages_delivered_get_auto_ack_total",
            classic
        ),
        1.0
    );
    assert_eq!(
        delta(
            &after,
            "rabbitmq_global_messages_delivered_get_manual_ack_total",
            classic
        ),
        1.0
    );
    assert_eq!(
        delta(&after, "rabbitmq_global_messages_delivered_total", classic),
        2.0
    );
    // No dead-letter exchange: counted under the "disabled" strategy.
    assert_eq!(
        delta(
            &after,
            "rabbitmq_global_messages_dead_lettered_rejected_total",
            Some("queue_type=\"rabbit_classic_queue\",dead_letter_strategy=\"disabled\""),
        ),
        1.0
    );
    assert_eq!(
        total(&during, "rabbitmq_global_publishers", None),
        Some(1.0)
    );
    // A deleted queue's series go with it.
    assert!(
        !after.contains(&label),
        "deleted queue still exported:\n{after}"
    );
}

/// In a cluster every node answers, but only the master owns sessions and
/// queues: summing over nodes counts each queue once. Slaves report their
/// role and how far behind the master's stable index they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_only_the_master_reports_queues_and_slaves_report_lag() {
    use compat_tests::cluster::Cluster;
    let blocking = |f: &dyn Fn() -> String| tokio::task::block_in_place(f);
    let cluster = tokio::task::block_in_place(Cluster::start_example);
    let master = tokio::task::block_in_place(|| cluster.wait_master(Duration::from_secs(30)));
    let conn = connect_uri(&cluster.uri(master)).await;
    let ch = confirm_channel(&conn).await;
    let q = unique("clustered");
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    declare_queue_with(&ch, &q, durable, FieldTable::default()).await;
    for i in 0..10u8 {
        let persistent = BasicProperties::default().with_delivery_mode(2);
        publish_props(&ch, "", &q, &[i], persistent).await;
    }

    let label = format!("queue=\"{q}\"");
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..3 {
        // Slaves apply what is stable; give them a moment to catch up.
        let text = loop {
            let text = blocking(&|| cluster.metrics(i));
            let caught_up =
                i == master || total(&text, "stablemq_slave_lag_entries", None) == Some(0.0);
            if caught_up || Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let node = format!("rabbitmq_node=\"stablemq-{}@", i + 1);
        assert!(text.contains(&node), "node {i} names itself:\n{text}");
        assert_eq!(
            total(&text, "stablemq_slave_lag_entries", None),
            Some(0.0),
            "node {i} lag"
        );
        if i == master {
            assert_eq!(
                total(&text, "stablemq_role", Some("role=\"master\"")),
                Some(1.0)
            );
            assert!(total(&text, "rabbitmq_queues", None).is_some_and(|v| v >= 1.0));
            assert_eq!(total(&text, "rabbitmq_connections", None), Some(1.0));
            assert_eq!(
                total(&text, "rabbitmq_queue_messages_ready", None),
                Some(10.0)
            );
            assert!(
                total(&text, "stablemq_quorum_ack_seconds_count", None).is_some_and(|v| v >= 1.0)
            );
        } else {
            assert_eq!(
                total(&text, "stablemq_role", Some("role=\"slave\"")),
                Some(1.0)
            );
            assert_eq!(
                total(&text, "rabbitmq_queues", None),
                Some(0.0),
                "slave {i}"
            );
            assert_eq!(
                total(&text, "rabbitmq_connections", None),
                Some(0.0),
                "slave {i}"
            );
            assert!(
                !text.contains(&label),
                "slave {i} exports the master's queue"
            );
            // Its own store learnt the entries too.
            assert!(total(&text, "stablemq_stable_index", None).is_some_and(|v| v >= 11.0));
        }
    }
}

/// Per-connection series on `/metrics/per-object`, with rabbitmq_prometheus
/// 3.10's names and its `channel` label (3.10 labels connection series with the
/// connection process's id under that name), and their sums on `/metrics`. The
/// management API's internal sessions (its publishes here) are no client's
/// connections: they never show up, neither in the series nor in
/// `rabbitmq_connections`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_connection_series_count_client_traffic_only() {
    let broker = Broker::start();
    assert!(!broker.is_external(), "reads StableMQ's own metrics port");
    let port = broker.prometheus_port;
    let (_conn, ch) = open(&broker).await;
    let _second = channel(&_conn).await;
    let q = unique("conn-metrics");
    declare_queue(&ch, &q).await;
    for _ in 0..10 {
        publish(&ch, "", &q, &[7u8; 1000]).await;
    }

    // The management API publishes through internal sessions, in a loop, while
    // we scrape.
    let mgmt = broker.management_port;
    let body = serde_json::json!({
        "properties": {}, "routing_key": q, "payload": "via-api", "payload_encoding": "string"
    });
    let publisher = std::thread::spawn(move || {
        let url = format!("http://127.0.0.1:{mgmt}/api/exchanges/%2F/amq.default/publish");
        for _ in 0..200 {
            let r = ureq::post(&url)
                .header("authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
                .send_json(&body);
            assert!(r.is_ok(), "API publish: {r:?}");
        }
    });
    let mut scrapes = 0;
    while !publisher.is_finished() {
        let text = per_object(port);
        scrapes += 1;
        assert_eq!(
            total(&text, "rabbitmq_connections", None),
            Some(1.0),
            "internal sessions counted as connections:\n{text}"
        );
        let series = text
            .lines()
            .filter(|l| l.starts_with("rabbitmq_connection_channels{"))
            .count();
        assert_eq!(series, 1, "one client connection:\n{text}");
    }
    publisher.join().expect("publisher thread");
    assert!(scrapes > 0);

    let text = per_object(port);
    let one = |name: &str| -> f64 {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{channel=\"<")))
            .collect();
        assert_eq!(lines.len(), 1, "{name}: {lines:?}");
        lines[0].rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(one("rabbitmq_connection_channels"), 2.0);
    assert!(
        one("rabbitmq_connection_incoming_bytes_total") > 10_000.0,
        "10 KB published"
    );
    assert!(one("rabbitmq_connection_outgoing_bytes_total") > 0.0);
    assert!(one("rabbitmq_connection_incoming_packets_total") >= 1.0);
    assert!(one("rabbitmq_connection_outgoing_packets_total") >= 1.0);
    assert!(one("rabbitmq_connection_process_reductions_total") >= 1.0);
    one("rabbitmq_connection_pending_packets");
    assert!(
        text.contains("# TYPE rabbitmq_connection_incoming_bytes_total counter"),
        "counter type"
    );
    // The aggregated endpoint sums them, unlabelled, as RabbitMQ 3.10 does.
    let agg = scrape_path(port, "/metrics");
    assert_eq!(total(&agg, "rabbitmq_connection_channels", None), Some(2.0));
    assert!(total(&agg, "rabbitmq_connection_incoming_bytes_total", None).unwrap() > 10_000.0);
    assert!(!agg.contains("rabbitmq_connection_channels{"));
}
