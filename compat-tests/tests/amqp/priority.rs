//! Priority queues (`x-max-priority`), as RabbitMQ does them
//! (https://www.rabbitmq.com/docs/priority): higher `priority` first, FIFO within a
//! priority, no priority counts as 0, priorities above the maximum count as the
//! maximum, and a maximum outside 0..=255 is refused with 406.
//!
//! Checked against RabbitMQ 3.10.

use compat_tests::common;

use common::*;
use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

fn max_priority(n: i32) -> FieldTable {
    ftable(&[("x-max-priority", AMQPValue::LongInt(n))])
}

async fn publish_prio(ch: &Channel, q: &str, body: &[u8], prio: Option<u8>) {
    let props = match prio {
        Some(p) => BasicProperties::default().with_priority(p),
        None => BasicProperties::default(),
    };
    publish_props(ch, "", q, body, props).await;
}

fn strings(bodies: Vec<Vec<u8>>) -> Vec<String> {
    bodies
        .into_iter()
        .map(|b| String::from_utf8(b).expect("utf-8 body"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_priority_messages_are_delivered_first() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("prio-order");
    declare_queue_with(&ch, &q, Default::default(), max_priority(10)).await;
    publish_prio(&ch, &q, b"p1", Some(1)).await;
    publish_prio(&ch, &q, b"p5-a", Some(5)).await;
    publish_prio(&ch, &q, b"none", None).await;
    publish_prio(&ch, &q, b"p9", Some(9)).await;
    publish_prio(&ch, &q, b"p5-b", Some(5)).await;
    publish_prio(&ch, &q, b"p0", Some(0)).await;
    assert_eq!(
        strings(drain(&ch, &q).await),
        ["p9", "p5-a", "p5-b", "p1", "none", "p0"]
    );

    // The same order for a consumer that attaches after the messages are in.
    for (body, p) in [("low", 2), ("high", 8), ("mid", 4)] {
        publish_prio(&ch, &q, body.as_bytes(), Some(p)).await;
    }
    let mut consumer = consume(&ch, &q, "prio-consumer", true).await;
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(String::from_utf8(next_delivery(&mut consumer).await.data).unwrap());
    }
    assert_eq!(got, ["high", "mid", "low"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priorities_above_the_maximum_count_as_the_maximum() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("prio-cap");
    declare_queue_with(&ch, &q, Default::default(), max_priority(5)).await;
    publish_prio(&ch, &q, b"at-max", Some(5)).await;
    publish_prio(&ch, &q, b"above-max", Some(200)).await;
    publish_prio(&ch, &q, b"below", Some(4)).await;
    publish_prio(&ch, &q, b"also-above", Some(6)).await;
    // 200 and 6 are treated as 5: FIFO with the other priority-5 message.
    assert_eq!(
        strings(drain(&ch, &q).await),
        ["at-max", "above-max", "also-above", "below"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_max_priority_is_refused_with_precondition_failed() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    for bad in [AMQPValue::LongInt(256), AMQPValue::LongInt(-1), lstr("ten")] {
        let ch = channel(&conn).await;
        let q = unique("prio-bad");
        let res = within(
            "queue.declare",
            ch.queue_declare(
                q.as_str().into(),
                QueueDeclareOptions::default(),
                ftable(&[("x-max-priority", bad.clone())]),
            ),
        )
        .await;
        assert_code(res, PRECONDITION_FAILED, &format!("x-max-priority {bad:?}"));
        wait_channel_closed(&ch).await;
        let probe = channel(&conn).await;
        let res = within(
            "passive queue.declare",
            probe.queue_declare(
                q.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            ),
        )
        .await;
        assert_code(res, NOT_FOUND, "the refused queue was not created");
    }
    assert!(conn.status().connected());
}
