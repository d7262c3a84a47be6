//! Consumer extensions, as RabbitMQ does them (https://www.rabbitmq.com/docs/consumers,
//! https://www.rabbitmq.com/docs/consumer-priority): consumer priorities
//! (`x-priority` on basic.consume), single active consumer
//! (`x-single-active-consumer`) and the consumer (delivery acknowledgement) timeout
//! (`x-consumer-timeout`).
//!
//! Consumer priorities and single active consumer were checked against RabbitMQ 3.10.
//! The consumer timeout test encodes RabbitMQ 3.12+ (see there) and fails on 3.10.

use compat_tests::common;

use std::time::Duration;

use common::*;
use lapin::options::{BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Consumer};

async fn qos(ch: &Channel, prefetch: u16) {
    within(
        "basic.qos",
        ch.basic_qos(prefetch, BasicQosOptions::default()),
    )
    .await
    .expect("basic.qos");
}

async fn consume_with_priority(ch: &Channel, q: &str, tag: &str, prio: i32) -> Consumer {
    consume_args(
        ch,
        q,
        tag,
        BasicConsumeOptions::default(),
        ftable(&[("x-priority", AMQPValue::LongInt(prio))]),
    )
    .await
}

fn text(d: &lapin::message::Delivery) -> String {
    String::from_utf8(d.data.clone()).expect("utf-8 body")
}

/// The higher-priority consumer gets every message while it has prefetch capacity;
/// the lower one gets them only while the higher one is full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_priority_consumer_gets_messages_while_it_has_capacity() {
    let broker = Broker::start();
    let (_conn, publisher) = open(&broker).await;
    let q = unique("cons-prio");
    declare_queue(&publisher, &q).await;

    let conn_hi = connect(&broker).await;
    let ch_hi = channel(&conn_hi).await;
    qos(&ch_hi, 2).await;
    let conn_lo = connect(&broker).await;
    let ch_lo = channel(&conn_lo).await;
    qos(&ch_lo, 10).await;
    // The low-priority consumer subscribes first, so registration order cannot explain
    // the result.
    let mut lo = consume_with_priority(&ch_lo, &q, "low", 1).await;
    let mut hi = consume_with_priority(&ch_hi, &q, "high", 10).await;

    for i in 1..=5 {
        publish(&publisher, "", &q, format!("m{i}").as_bytes()).await;
    }
    let h1 = next_delivery(&mut hi).await;
    let h2 = next_delivery(&mut hi).await;
    assert_eq!([text(&h1), text(&h2)], ["m1", "m2"]);
    assert_no_delivery(&mut hi, "high-priority consumer at its prefetch limit").await;
    let mut low_got = Vec::new();
    for _ in 0..3 {
        low_got.push(text(&next_delivery(&mut lo).await));
    }
    assert_eq!(low_got, ["m3", "m4", "m5"]);

    // Capacity again: the next message goes to the high-priority consumer, although
    // the low one has room too.
    within("basic.ack", h1.acker.ack(BasicAckOptions::default()))
        .await
        .expect("basic.ack");
    // basic.ack has no reply, and the publish travels on another connection:
    // a round trip on the acking channel makes sure the broker has the ack
    // before the message arrives (otherwise the low consumer rightly gets it).
    qos(&ch_hi, 2).await;
    publish(&publisher, "", &q, b"m6").await;
    assert_eq!(text(&next_delivery(&mut hi).await), "m6");
    assert_no_delivery(&mut lo, "low-priority consumer while high has capacity").await;
}

/// `x-single-active-consumer`: only the first consumer gets messages; when it
/// cancels, the next registered one becomes active.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_active_consumer_delivers_to_one_consumer_at_a_time() {
    let broker = Broker::start();
    let (_conn, publisher) = open(&broker).await;
    let q = unique("cons-sac");
    declare_queue_with(
        &publisher,
        &q,
        Default::default(),
        ftable(&[("x-single-active-consumer", AMQPValue::Boolean(true))]),
    )
    .await;
    let conn1 = connect(&broker).await;
    let ch1 = channel(&conn1).await;
    let conn2 = connect(&broker).await;
    let ch2 = channel(&conn2).await;
    let mut first = consume(&ch1, &q, "sac-first", false).await;
    let mut second = consume(&ch2, &q, "sac-second", false).await;
    assert_eq!(
        queue_counts(&publisher, &q).await.1,
        2,
        "both are registered"
    );

    for i in 1..=4 {
        publish(&publisher, "", &q, format!("m{i}").as_bytes()).await;
    }
    for i in 1..=4 {
        let d = next_delivery(&mut first).await;
        assert_eq!(
            text(&d),
            format!("m{i}"),
            "in order, all to the active consumer"
        );
        within("basic.ack", d.acker.ack(BasicAckOptions::default()))
            .await
            .expect("basic.ack");
    }
    assert_no_delivery(&mut second, "the waiting consumer").await;

    within(
        "basic.cancel",
        ch1.basic_cancel("sac-first".into(), BasicCancelOptions::default()),
    )
    .await
    .expect("basic.cancel");
    publish(&publisher, "", &q, b"m5").await;
    let d = next_delivery(&mut second).await;
    assert_eq!(text(&d), "m5", "the next consumer took over");
}

/// `x-consumer-timeout` (a queue argument since RabbitMQ 3.12; the broker-wide
/// `consumer_timeout` works the same way): a delivery left unacknowledged for longer
/// closes its channel with 406 PRECONDITION_FAILED, and the message goes back to the
/// queue.
///
/// RabbitMQ checks the timeout on its channel tick (`channel_tick_interval`, 60 s by
/// default), so the wait allows for one tick. RabbitMQ 3.10 ignores the queue
/// argument, so this test FAILS on 3.10; its broker-wide `consumer_timeout` (1000 ms,
/// with a 1 s tick) was checked to close the channel with 406 the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_delivery_past_x_consumer_timeout_closes_the_channel() {
    let broker = Broker::start();
    let (_conn, admin) = open(&broker).await;
    let q = unique("cons-timeout");
    let args: FieldTable = ftable(&[("x-consumer-timeout", AMQPValue::LongInt(1000))]);
    declare_queue_with(&admin, &q, Default::default(), args).await;
    publish(&admin, "", &q, b"slow").await;

    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let mut watch = ErrorWatch::new(&conn);
    let mut consumer = consume(&ch, &q, "cons-timeout-consumer", false).await;
    let d = next_delivery(&mut consumer).await;
    assert_eq!(d.data, b"slow");
    let code = watch.next_code_within(Duration::from_secs(90)).await;
    assert_eq!(code, PRECONDITION_FAILED, "consumer timeout reply code");
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected(), "only the channel is closed");
    let m = get_eventually(&admin, &q, true).await;
    assert_eq!(m.delivery.data, b"slow", "the unacked message is requeued");
    assert!(m.delivery.redelivered);
}
