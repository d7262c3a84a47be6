//! AMQP class `basic`: publish, get, consume, cancel, ack/nack/reject, recover and
//! qos, as RabbitMQ does them.

mod ack;
use compat_tests::common;
mod consume;
mod publish;
mod qos;

use std::time::{Duration, Instant};

use common::*;
use futures_lite::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions,
    BasicPublishOptions, BasicQosOptions, BasicRecoverOptions, BasicRejectOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldArray, FieldTable};
use lapin::{BasicProperties, Channel, Consumer};

fn full_properties() -> BasicProperties {
    let mut nested = FieldTable::default();
    nested.insert("inner".into(), AMQPValue::LongString("value".into()));
    let mut h = FieldTable::default();
    h.insert("string".into(), AMQPValue::LongString("text".into()));
    h.insert("int".into(), AMQPValue::LongInt(-42));
    h.insert("long".into(), AMQPValue::LongLongInt(1 << 40));
    h.insert("bool".into(), AMQPValue::Boolean(true));
    h.insert("double".into(), AMQPValue::Double(2.5));
    h.insert("table".into(), AMQPValue::FieldTable(nested));
    h.insert(
        "array".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![
            AMQPValue::LongString("a".into()),
            AMQPValue::LongInt(1),
        ])),
    );
    h.insert("stamp".into(), AMQPValue::Timestamp(1_700_000_000));
    BasicProperties::default()
        .with_headers(h)
        .with_content_type("application/json".into())
        .with_content_encoding("gzip".into())
        .with_correlation_id("corr-1".into())
        .with_reply_to("reply-queue".into())
        .with_delivery_mode(2)
        .with_priority(5)
        .with_message_id("msg-1".into())
        .with_timestamp(1_700_000_123)
        .with_type("order.created".into())
        .with_user_id("guest".into())
        .with_app_id("compat-tests".into())
}

/// Wait until `total` deliveries have arrived across `consumers`, then check that
/// no more arrive for [`QUIET`]. Returns each consumer's deliveries in order.
async fn collect_exactly(consumers: &mut [&mut Consumer], total: usize) -> Vec<Vec<Delivery>> {
    let mut got: Vec<Vec<Delivery>> = consumers.iter().map(|_| Vec::new()).collect();
    let deadline = Instant::now() + WAIT;
    while got.iter().map(Vec::len).sum::<usize>() < total {
        assert!(
            Instant::now() < deadline,
            "only {:?} deliveries within {WAIT:?}, expected {total}",
            got.iter().map(Vec::len).collect::<Vec<_>>()
        );
        for (i, c) in consumers.iter_mut().enumerate() {
            if let Ok(item) = tokio::time::timeout(Duration::from_millis(20), c.next()).await {
                match item {
                    Some(Ok(d)) => got[i].push(d),
                    other => panic!("consumer {i} ended: {other:?}"),
                }
            }
        }
    }
    for (i, c) in consumers.iter_mut().enumerate() {
        assert_no_delivery(c, &format!("consumer {i} beyond {total} total")).await;
    }
    got
}

async fn qos(ch: &Channel, prefetch: u16, global: bool) {
    within(
        "basic.qos",
        ch.basic_qos(prefetch, BasicQosOptions { global }),
    )
    .await
    .expect("basic.qos");
}

async fn ack(ch: &Channel, tag: u64, multiple: bool) {
    within("basic.ack", ch.basic_ack(tag, BasicAckOptions { multiple }))
        .await
        .expect("basic.ack");
}

fn bodies(ds: &[Delivery]) -> Vec<String> {
    ds.iter()
        .map(|d| String::from_utf8_lossy(&d.data).into_owned())
        .collect()
}

async fn publish_n(ch: &Channel, q: &str, n: usize) {
    for i in 0..n {
        publish(ch, "", q, format!("m{i}").as_bytes()).await;
    }
}
