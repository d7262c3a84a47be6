//! The Prometheus endpoint: RabbitMQ's metric names, fed by real traffic.

mod common;

use common::*;
use lapin::BasicProperties;
use lapin::options::{BasicAckOptions, BasicPublishOptions};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// GET /metrics over a plain socket (no HTTP client dependency needed).
fn scrape(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .expect("write request");
    let mut body = String::new();
    s.read_to_string(&mut body).expect("read response");
    assert!(
        body.starts_with("HTTP/1.1 200"),
        "unexpected response: {body:.200}"
    );
    body
}

/// The value of the first sample whose line starts with `series` (name plus labels).
fn sample(text: &str, name: &str, label: Option<&str>) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter(|l| label.is_none_or(|lab| l.contains(lab)))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Scrape until `check` holds (gauges are refreshed once a second).
fn scrape_until(port: u16, what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = scrape(port);
        if check(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "metrics never showed {what}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
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
    let text = scrape_until(port, "the queue's gauges", |t| {
        sample(t, "rabbitmq_queue_messages_ready", Some(&label)) == Some(3.0)
            && sample(t, "rabbitmq_queue_messages_unacked", Some(&label)) == Some(1.0)
    });
    assert_eq!(
        sample(&text, "rabbitmq_global_messages_received_total", None),
        Some(6.0)
    );
    assert_eq!(
        sample(&text, "rabbitmq_global_messages_routed_total", None),
        Some(5.0)
    );
    assert_eq!(
        sample(&text, "rabbitmq_global_messages_confirmed_total", None),
        Some(6.0)
    );
    assert_eq!(
        sample(
            &text,
            "rabbitmq_global_messages_unroutable_returned_total",
            None
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "rabbitmq_global_messages_delivered_get_manual_ack_total",
            None
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "rabbitmq_global_messages_acknowledged_total", None),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "rabbitmq_queue_messages", Some(&label)),
        Some(4.0)
    );
    assert!(sample(&text, "rabbitmq_connections", None).is_some_and(|v| v >= 1.0));
    assert!(
        text.contains("rabbitmq_identity_info{"),
        "identity info missing"
    );
}
