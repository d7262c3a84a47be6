//! Quorum-queue poison message handling, as RabbitMQ does it
//! (https://www.rabbitmq.com/docs/quorum-queues#poison-message-handling):
//! `x-delivery-limit`, the `x-delivery-count` header on redeliveries, and
//! dead-lettering with reason `delivery_limit` (or dropping without a DLX) once a
//! message has been returned more times than the limit.
//!
//! Returns are made with basic.reject requeue=true: since RabbitMQ 4.3 only
//! basic.reject counts as a failed delivery, basic.nack requeue=true does not
//! increment the delivery count (https://www.rabbitmq.com/docs/4.3/nack); up to 4.2
//! both counted. Checked against RabbitMQ 3.10, except the two tests marked as
//! encoding 4.x behaviour, which fail on 3.10.

use compat_tests::common;

use common::*;
use lapin::message::BasicGetMessage;
use lapin::options::{BasicNackOptions, BasicQosOptions, BasicRejectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldArray, FieldTable};
use lapin::{BasicProperties, Channel};

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

/// Declare a quorum queue with the given extra arguments.
async fn quorum_queue(ch: &Channel, name: &str, extra: &[(&str, AMQPValue)]) {
    let mut args = vec![("x-queue-type", lstr("quorum"))];
    args.extend(extra.iter().cloned());
    declare_queue_with(ch, name, durable(), ftable(&args)).await;
}

/// A dead-letter queue reached through the default exchange; returns the arguments
/// that point a queue at it.
async fn dead_letter_queue(ch: &Channel, name: &str) -> [(&'static str, AMQPValue); 2] {
    declare_queue_with(ch, name, durable(), FieldTable::default()).await;
    [
        ("x-dead-letter-exchange", lstr("")),
        ("x-dead-letter-routing-key", lstr(name)),
    ]
}

/// The `x-delivery-count` header: RabbitMQ writes it as a signed 64-bit integer.
/// None when absent.
#[track_caller]
fn delivery_count(props: &BasicProperties) -> Option<i64> {
    match header_value(props, "x-delivery-count") {
        None => None,
        Some(AMQPValue::LongLongInt(n)) => Some(*n),
        Some(other) => panic!("x-delivery-count: expected a long ('l'), got {other:?}"),
    }
}

/// A first delivery has not been returned yet: RabbitMQ omits the header on consumer
/// deliveries and writes 0 on basic.get (3.x); either way the count is 0.
#[track_caller]
fn assert_not_yet_returned(props: &BasicProperties) {
    let c = delivery_count(props);
    assert!(
        c.is_none() || c == Some(0),
        "x-delivery-count on a first delivery: {c:?}"
    );
}

async fn reject_requeue(m: &BasicGetMessage) {
    within(
        "basic.reject requeue",
        m.delivery
            .acker
            .reject(BasicRejectOptions { requeue: true }),
    )
    .await
    .expect("basic.reject");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_limit_dead_letters_with_reason_delivery_limit() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let qq = unique("qq-limit");
    let dlq = unique("qq-limit-dlq");
    let mut args = dead_letter_queue(&ch, &dlq).await.to_vec();
    args.push(("x-delivery-limit", AMQPValue::LongInt(2)));
    quorum_queue(&ch, &qq, &args).await;
    publish(&ch, "", &qq, b"poison").await;

    let conn = connect(&broker).await;
    let cch = channel(&conn).await;
    within("basic.qos", cch.basic_qos(1, BasicQosOptions::default()))
        .await
        .expect("basic.qos");
    let mut consumer = consume(&cch, &qq, "qq-limit-consumer", false).await;
    // Limit 2: returned three times (more than 2), so delivered three times.
    for n in 0..=2i64 {
        let d = next_delivery(&mut consumer).await;
        assert_eq!(d.data, b"poison");
        if n == 0 {
            assert!(!d.redelivered);
            assert_not_yet_returned(&d.properties);
        } else {
            assert!(d.redelivered, "delivery {n} is a redelivery");
            assert_eq!(delivery_count(&d.properties), Some(n), "x-delivery-count");
        }
        within(
            "basic.reject requeue",
            d.acker.reject(BasicRejectOptions { requeue: true }),
        )
        .await
        .expect("basic.reject");
    }
    let dead = get_eventually(&ch, &dlq, true).await.delivery;
    assert_eq!(dead.data, b"poison");
    let deaths = x_death(&dead.properties);
    assert_eq!(deaths.len(), 1, "{deaths:?}");
    let e = deaths[0].inner();
    assert_eq!(as_text(e.get("reason")).as_deref(), Some("delivery_limit"));
    assert_eq!(as_text(e.get("queue")).as_deref(), Some(qq.as_str()));
    assert_eq!(as_text(e.get("exchange")).as_deref(), Some(""));
    assert_eq!(e.get("count"), Some(&AMQPValue::LongLongInt(1)));
    assert_eq!(
        e.get("routing-keys"),
        Some(&AMQPValue::FieldArray(FieldArray::from(vec![lstr(&qq)])))
    );
    assert!(matches!(e.get("time"), Some(AMQPValue::Timestamp(_))));
    assert_eq!(
        as_text(header_value(&dead.properties, "x-first-death-reason")).as_deref(),
        Some("delivery_limit")
    );
    assert_no_delivery(&mut consumer, "the dead-lettered message").await;
    assert_eq!(queue_counts(&ch, &qq).await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_limit_without_a_dead_letter_exchange_drops_the_message() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let qq = unique("qq-limit-drop");
    quorum_queue(&ch, &qq, &[("x-delivery-limit", AMQPValue::LongInt(1))]).await;
    publish(&ch, "", &qq, b"poison").await;
    // Limit 1: the poison message may be returned once; the second return drops it.
    for _ in 0..2 {
        let m = get_eventually(&ch, &qq, false).await;
        assert_eq!(m.delivery.data, b"poison");
        reject_requeue(&m).await;
    }
    wait_message_count(&ch, &qq, 0).await;
    assert!(get(&ch, &qq).await.is_none(), "the poison message is gone");
    // The queue itself keeps working.
    publish(&ch, "", &qq, b"healthy").await;
    let m = get_eventually(&ch, &qq, true).await;
    assert_eq!(m.delivery.data, b"healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeliveries_carry_the_x_delivery_count_header() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let qq = unique("qq-count");
    quorum_queue(&ch, &qq, &[("x-delivery-limit", AMQPValue::LongInt(10))]).await;
    publish(&ch, "", &qq, b"counted").await;
    let m = get_eventually(&ch, &qq, false).await;
    assert!(!m.delivery.redelivered);
    assert_not_yet_returned(&m.delivery.properties);
    reject_requeue(&m).await;
    for n in 1..=3i64 {
        let m = get_eventually(&ch, &qq, false).await;
        assert!(m.delivery.redelivered);
        assert_eq!(
            delivery_count(&m.delivery.properties),
            Some(n),
            "x-delivery-count after {n} returns"
        );
        reject_requeue(&m).await;
    }
}

/// RabbitMQ 4.3+: basic.nack requeue=true means "not processed", not a failure, so
/// it does not increment the delivery count and never reaches the delivery limit;
/// basic.reject requeue=true does. FAILS on RabbitMQ 3.10 (and up to 4.2), where
/// every return counted and the third nack below dead-letters the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_requeue_does_not_count_toward_the_delivery_limit() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let qq = unique("qq-nack");
    let dlq = unique("qq-nack-dlq");
    let mut args = dead_letter_queue(&ch, &dlq).await.to_vec();
    args.push(("x-delivery-limit", AMQPValue::LongInt(1)));
    quorum_queue(&ch, &qq, &args).await;
    publish(&ch, "", &qq, b"nacked").await;
    for _ in 0..4 {
        let m = get_eventually(&ch, &qq, false).await;
        assert_eq!(m.delivery.data, b"nacked", "nacks do not exhaust the limit");
        assert_not_yet_returned(&m.delivery.properties);
        within(
            "basic.nack requeue",
            m.delivery.acker.nack(BasicNackOptions {
                requeue: true,
                ..Default::default()
            }),
        )
        .await
        .expect("basic.nack");
    }
    for _ in 0..2 {
        let m = get_eventually(&ch, &qq, false).await;
        reject_requeue(&m).await;
    }
    let dead = get_eventually(&ch, &dlq, true).await.delivery;
    assert_eq!(
        as_text(header_value(&dead.properties, "x-first-death-reason")).as_deref(),
        Some("delivery_limit")
    );
}

/// RabbitMQ 4.0+: quorum queues have a default delivery limit of 20, so a message
/// returned a 21st time is dead-lettered even without `x-delivery-limit`. FAILS on
/// RabbitMQ 3.10, which has no default limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_delivery_limit_is_twenty() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let qq = unique("qq-default-limit");
    let dlq = unique("qq-default-limit-dlq");
    let args = dead_letter_queue(&ch, &dlq).await;
    quorum_queue(&ch, &qq, &args).await;
    publish(&ch, "", &qq, b"stubborn").await;
    for n in 0..=20 {
        let m = get_eventually(&ch, &qq, false).await;
        assert_eq!(m.delivery.data, b"stubborn", "delivery {n}");
        reject_requeue(&m).await;
    }
    let dead = get_eventually(&ch, &dlq, true).await.delivery;
    assert_eq!(dead.data, b"stubborn");
    let deaths = x_death(&dead.properties);
    assert_eq!(
        as_text(deaths[0].inner().get("reason")).as_deref(),
        Some("delivery_limit")
    );
    assert!(get(&ch, &qq).await.is_none());
}
