//! Streams on the Prometheus endpoint: a stream's entries count as ready
//! messages (as the management API counts them) and each stream reports its
//! highest consumer offset lag, rabbitmq_prometheus's
//! `rabbitmq_stream_consumer_max_offset_lag`.

use super::{scrape_path, scrape_until, total};
use crate::common::*;
use futures_lite::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reports_its_entries_and_its_consumers_offset_lag() {
    let broker = Broker::start();
    assert!(
        !broker.is_external(),
        "this test reads StableMQ's own metrics port"
    );
    let (conn, ch) = open(&broker).await;
    let s = unique("metrics.stream");
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    declare_queue_with(
        &ch,
        &s,
        durable,
        ftable(&[("x-queue-type", lstr("stream"))]),
    )
    .await;
    for i in 0..30u8 {
        publish(&ch, "", &s, &[i]).await;
    }
    // A consumer with a prefetch of 10 that never acks stops at offset 10.
    let reader = channel(&conn).await;
    reader
        .basic_qos(10, BasicQosOptions::default())
        .await
        .expect("basic.qos");
    let mut consumer = consume_args(
        &reader,
        &s,
        "lagging",
        BasicConsumeOptions::default(),
        ftable(&[("x-stream-offset", lstr("first"))]),
    )
    .await;
    for _ in 0..10 {
        within("delivery", consumer.next())
            .await
            .expect("consumer ended")
            .expect("delivery");
    }
    let port = broker.prometheus_port;
    let label = format!("queue=\"{s}\"");
    let lag = "rabbitmq_stream_consumer_max_offset_lag";
    scrape_until(port, "/metrics/per-object", "the stream's lag", |t| {
        total(t, lag, Some(&label)) == Some(20.0)
            && total(t, "rabbitmq_queue_messages_ready", Some(&label)) == Some(30.0)
    });
    // The aggregated endpoint sums over streams, with no queue label.
    let text = scrape_path(port, "/metrics");
    assert_eq!(total(&text, lag, None), Some(20.0), "{text}");
    assert!(!text.contains(&label));
}
