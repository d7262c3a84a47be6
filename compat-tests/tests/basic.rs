//! AMQP class `basic`: publish, get, consume, cancel, ack/nack/reject, recover and
//! qos, as RabbitMQ does them.

mod common;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_get_round_trip_preserves_properties() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("b-props");
    declare_queue(&ch, &q).await;
    let props = full_properties();
    publish_props(&ch, "", &q, b"payload one", props.clone()).await;
    publish_props(&ch, "", &q, b"payload two", props.clone()).await;

    let m = get(&ch, &q).await.expect("a message");
    assert_eq!(m.delivery.data, b"payload one");
    assert_eq!(m.delivery.exchange.as_str(), "");
    assert_eq!(m.delivery.routing_key.as_str(), q);
    assert!(!m.delivery.redelivered);
    assert_eq!(m.message_count, 1, "get-ok message_count: messages left");
    assert_eq!(m.delivery.properties, props, "properties via basic.get");

    // The same through basic.deliver.
    let mut consumer = consume(&ch, &q, "", true).await;
    let d = next_delivery(&mut consumer).await;
    assert_eq!(d.data, b"payload two");
    assert_eq!(d.properties, props, "properties via basic.deliver");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_id_must_match_the_authenticated_user() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let q = unique("b-userid");
    declare_queue(&ch, &q).await;
    let mut watch = ErrorWatch::new(&conn);
    publish_props(
        &ch,
        "",
        &q,
        b"forged",
        BasicProperties::default().with_user_id("somebody-else".into()),
    )
    .await;
    // "user_id property set to 'somebody-else' but authenticated user was 'guest'"
    watch
        .expect(PRECONDITION_FAILED, "publish with a foreign user_id")
        .await;
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
    let ch2 = channel(&conn).await;
    assert_eq!(
        queue_counts(&ch2, &q).await.0,
        0,
        "the forged message is dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_on_empty_queue_is_get_empty() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let q = unique("b-empty");
    declare_queue(&ch, &q).await;
    assert!(get(&ch, &q).await.is_none());
    assert!(get_with(&ch, &q, false).await.is_none());
    // Still usable afterwards.
    publish(&ch, "", &q, b"x").await;
    assert!(get(&ch, &q).await.is_some());
    assert!(get(&ch, &q).await.is_none());
    // basic.get on a queue that does not exist is 404.
    let res = within(
        "basic.get",
        ch.basic_get(unique("b-missing").as_str().into(), Default::default()),
    )
    .await;
    assert_code(res, NOT_FOUND, "basic.get of a missing queue");
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_and_empty_bodies() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    // frame_max is 131072; a body frame carries at most frame_max - 8 bytes.
    let sizes = [0usize, 1, 131_063, 131_064, 131_065, 1 << 20, (1 << 20) + 7];
    let q = unique("b-sizes");
    declare_queue(&ch, &q).await;
    let body = |n: usize| -> Vec<u8> { (0..n).map(|i| (i * 7 % 256) as u8).collect() };
    for &n in &sizes {
        publish(&ch, "", &q, &body(n)).await;
    }
    for &n in &sizes {
        let m = get(&ch, &q).await.expect("a message");
        assert_eq!(m.delivery.data.len(), n, "basic.get body size");
        assert!(
            m.delivery.data == body(n),
            "basic.get body of {n} bytes changed"
        );
    }
    // And through basic.deliver.
    for &n in &sizes {
        publish(&ch, "", &q, &body(n)).await;
    }
    let cch = channel(&conn).await;
    let mut consumer = consume(&cch, &q, "", true).await;
    for &n in &sizes {
        let d = next_delivery(&mut consumer).await;
        assert_eq!(d.data.len(), n, "basic.deliver body size");
        assert!(d.data == body(n), "basic.deliver body of {n} bytes changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mandatory_unroutable_is_returned_with_no_route() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let q = unique("b-routable");
    declare_queue(&ch, &q).await;
    let key = unique("b-nobody");
    let props = BasicProperties::default()
        .with_message_id("returned-1".into())
        .with_content_type("text/plain".into());
    // Not mandatory: dropped silently.
    publish_full(
        &ch,
        "amq.direct",
        &key,
        BasicPublishOptions::default(),
        b"dropped",
        BasicProperties::default(),
    )
    .await;
    // Mandatory but routable: delivered, not returned.
    publish_full(
        &ch,
        "",
        &q,
        BasicPublishOptions {
            mandatory: true,
            ..Default::default()
        },
        b"routable",
        BasicProperties::default(),
    )
    .await;
    // Mandatory and unroutable: basic.return.
    publish_full(
        &ch,
        "amq.direct",
        &key,
        BasicPublishOptions {
            mandatory: true,
            ..Default::default()
        },
        b"returned",
        props.clone(),
    )
    .await;
    let returned = wait_returned(&ch).await;
    assert_eq!(
        returned.len(),
        1,
        "only the mandatory unroutable message: {returned:?}"
    );
    let r = &returned[0];
    assert_eq!(r.reply_code, NO_ROUTE);
    assert_eq!(r.reply_text.as_str(), "NO_ROUTE");
    assert_eq!(r.delivery.exchange.as_str(), "amq.direct");
    assert_eq!(r.delivery.routing_key.as_str(), key);
    assert_eq!(r.delivery.data, b"returned");
    assert_eq!(r.delivery.properties, props);
    // A return is not an error: the channel is open, the routable one arrived.
    assert!(ch.status().connected());
    assert_eq!(get_body(&ch, &q).await.as_deref(), Some(&b"routable"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_to_missing_exchange_closes_the_channel_with_not_found() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let other = confirm_channel(&conn).await;
    let ch = channel(&conn).await;
    let mut watch = ErrorWatch::new(&conn);
    publish(&ch, &unique("b-no-exchange"), "k", b"lost").await;
    // "no exchange 'b-no-exchange-...' in vhost '/'"
    watch
        .expect(NOT_FOUND, "publish to a missing exchange")
        .await;
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
    let q = unique("b-after-404");
    declare_queue(&other, &q).await;
    publish(&other, "", &q, b"fine").await;
    assert!(get(&other, &q).await.is_some());
}

/// RabbitMQ has never implemented immediate=true: it closes the whole connection
/// with 540 NOT_IMPLEMENTED ("immediate=true").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immediate_publish_closes_the_connection_with_not_implemented() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let q = unique("b-immediate");
    declare_queue(&ch, &q).await;
    let mut watch = ErrorWatch::new(&conn);
    publish_full(
        &ch,
        "",
        &q,
        BasicPublishOptions {
            immediate: true,
            ..Default::default()
        },
        b"now",
        BasicProperties::default(),
    )
    .await;
    watch
        .expect(NOT_IMPLEMENTED, "publish with immediate=true")
        .await;
    wait_connection_closed(&conn).await;
    // The message was not enqueued.
    let (_c2, ch2) = open(&broker).await;
    assert_eq!(queue_counts(&ch2, &q).await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_no_ack() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-noack");
    declare_queue(&pch, &q).await;
    publish_n(&pch, &q, 3).await;
    let ch = channel(&conn).await;
    let mut consumer = consume(&ch, &q, "noack", true).await;
    let got = collect_exactly(&mut [&mut consumer], 3).await;
    assert_eq!(bodies(&got[0]), ["m0", "m1", "m2"]);
    assert!(got[0].iter().all(|d| !d.redelivered));
    // Delivery tags start at 1 and increase on the channel.
    let tags: Vec<u64> = got[0].iter().map(|d| d.delivery_tag).collect();
    assert_eq!(tags, [1, 2, 3]);
    // Nothing is held for an ack: closing the channel requeues nothing.
    within("channel.close", ch.close(200, "OK".into()))
        .await
        .expect("channel.close");
    assert_eq!(queue_counts(&pch, &q).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_tags_server_generated_client_chosen_and_duplicate() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let q = unique("b-ctag");
    declare_queue(&ch, &q).await;
    let generated = consume(&ch, &q, "", false).await;
    assert!(
        generated.tag().as_str().starts_with("amq.ctag-"),
        "server-generated tag {:?}",
        generated.tag()
    );
    let generated2 = consume(&ch, &q, "", false).await;
    assert_ne!(generated.tag(), generated2.tag());
    let chosen = consume(&ch, &q, "my-tag", false).await;
    assert_eq!(chosen.tag().as_str(), "my-tag");
    assert_eq!(queue_counts(&ch, &q).await.1, 3);
    // The same tag on another channel is fine: tags are per channel.
    let ch2 = channel(&conn).await;
    let _other = consume(&ch2, &q, "my-tag", false).await;
    // Reusing a tag on the same channel: connection.close 530 NOT_ALLOWED
    // ("attempt to reuse consumer tag 'my-tag'").
    let res = within(
        "basic.consume",
        ch.basic_consume(
            q.as_str().into(),
            "my-tag".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ),
    )
    .await;
    assert_code(res, NOT_ALLOWED, "reuse of a consumer tag");
    wait_connection_closed(&conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_from_missing_queue_is_not_found() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let res = within(
        "basic.consume",
        ch.basic_consume(
            unique("b-missing").as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ),
    )
    .await;
    assert_code(res, NOT_FOUND, "consume from a missing queue");
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_consumer_excludes_others() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let q = unique("b-excl-consume");
    declare_queue(&ch, &q).await;
    let _excl = consume_with(
        &ch,
        &q,
        "sole",
        BasicConsumeOptions {
            exclusive: true,
            ..Default::default()
        },
    )
    .await;
    // Another consumer, even on the same connection: 403 ACCESS_REFUSED
    // ("queue '...' in vhost '/' in exclusive use").
    let ch2 = channel(&conn).await;
    let res = within(
        "basic.consume",
        ch2.basic_consume(
            q.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ),
    )
    .await;
    assert_code(res, ACCESS_REFUSED, "consume beside an exclusive consumer");
    assert!(conn.status().connected());

    // And an exclusive consume beside an existing consumer is refused too.
    let q2 = unique("b-excl-consume2");
    declare_queue(&ch, &q2).await;
    let _plain = consume(&ch, &q2, "plain", false).await;
    let ch3 = channel(&conn).await;
    let res = within(
        "basic.consume",
        ch3.basic_consume(
            q2.as_str().into(),
            "".into(),
            BasicConsumeOptions {
                exclusive: true,
                ..Default::default()
            },
            FieldTable::default(),
        ),
    )
    .await;
    assert_code(res, ACCESS_REFUSED, "exclusive consume beside a consumer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_between_two_consumers() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-rr");
    declare_queue(&pch, &q).await;
    let ch1 = channel(&conn).await;
    let ch2 = channel(&conn).await;
    let mut a = consume(&ch1, &q, "a", true).await;
    let mut b = consume(&ch2, &q, "b", true).await;
    publish_n(&pch, &q, 10).await;
    let got = collect_exactly(&mut [&mut a, &mut b], 10).await;
    let (a_got, b_got) = (bodies(&got[0]), bodies(&got[1]));
    let even: Vec<String> = (0..10).step_by(2).map(|i| format!("m{i}")).collect();
    let odd: Vec<String> = (1..10).step_by(2).map(|i| format!("m{i}")).collect();
    assert!(
        (a_got == even && b_got == odd) || (a_got == odd && b_got == even),
        "not round-robin: a={a_got:?} b={b_got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_cancel_stops_deliveries() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("b-cancel");
    declare_queue(&ch, &q).await;
    let mut consumer = consume(&ch, &q, "to-cancel", true).await;
    publish(&ch, "", &q, b"before").await;
    assert_eq!(next_delivery(&mut consumer).await.data, b"before");
    within(
        "basic.cancel-ok",
        ch.basic_cancel("to-cancel".into(), BasicCancelOptions::default()),
    )
    .await
    .expect("basic.cancel");
    assert!(
        within("the consumer stream to end", consumer.next())
            .await
            .is_none(),
        "cancelled consumer still yields"
    );
    publish(&ch, "", &q, b"after").await;
    assert_eq!(queue_counts(&ch, &q).await, (1, 0));
    // Cancelling an unknown tag is not an error (basic.cancel-ok all the same).
    within(
        "basic.cancel-ok",
        ch.basic_cancel("never-was".into(), BasicCancelOptions::default()),
    )
    .await
    .expect("basic.cancel of an unknown tag");
    assert!(ch.status().connected());
}

/// consumer_cancel_notify: deleting the queue sends basic.cancel to its consumers;
/// lapin ends the consumer's stream. The channel stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_cancels_consumers_of_a_deleted_queue() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let q = unique("b-cancel-notify");
    declare_queue(&ch, &q).await;
    let mut consumer = consume(&ch, &q, "doomed", false).await;
    let other = channel(&conn).await;
    within(
        "queue.delete",
        other.queue_delete(q.as_str().into(), QueueDeleteOptions::default()),
    )
    .await
    .expect("queue.delete");
    assert!(
        within("the consumer stream to end", consumer.next())
            .await
            .is_none(),
        "consumer of a deleted queue still yields"
    );
    assert!(
        ch.status().connected(),
        "basic.cancel is not a channel error"
    );
    declare_queue(&ch, &unique("b-cancel-after")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_removes_the_message() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-ack");
    declare_queue(&pch, &q).await;
    publish_n(&pch, &q, 2).await;
    let ch = channel(&conn).await;
    let mut consumer = consume(&ch, &q, "acker", false).await;
    let got = collect_exactly(&mut [&mut consumer], 2).await;
    assert!(
        within("basic.ack", got[0][0].ack(BasicAckOptions::default()))
            .await
            .expect("ack")
    );
    // Closing the channel requeues only the unacked one.
    within("channel.close", ch.close(200, "OK".into()))
        .await
        .expect("channel.close");
    let back = drain(&pch, &q).await;
    assert_eq!(back, vec![b"m1".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_multiple_acks_up_to_the_tag() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-ack-multi");
    declare_queue(&pch, &q).await;
    publish_n(&pch, &q, 5).await;
    let ch = channel(&conn).await;
    let mut consumer = consume(&ch, &q, "multi", false).await;
    let got = collect_exactly(&mut [&mut consumer], 5).await;
    ack(&ch, got[0][2].delivery_tag, true).await;
    within("channel.close", ch.close(200, "OK".into()))
        .await
        .expect("channel.close");
    let left: Vec<String> = drain(&pch, &q)
        .await
        .into_iter()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .collect();
    assert_eq!(left, ["m3", "m4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_requeue_redelivers_with_redelivered_flag() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("b-nack");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"again").await;
    let mut consumer = consume(&ch, &q, "nacker", false).await;
    let first = next_delivery(&mut consumer).await;
    assert!(!first.redelivered);
    assert!(
        within(
            "basic.nack",
            first.nack(BasicNackOptions {
                requeue: true,
                ..Default::default()
            })
        )
        .await
        .expect("nack")
    );
    let second = next_delivery(&mut consumer).await;
    assert_eq!(second.data, b"again");
    assert!(
        second.redelivered,
        "requeued message must be redelivered=true"
    );
    assert!(second.delivery_tag > first.delivery_tag);
    second.ack(BasicAckOptions::default()).await.expect("ack");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_multiple() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-nack-multi");
    declare_queue(&pch, &q).await;
    publish_n(&pch, &q, 4).await;
    // Pull with basic.get so the requeued messages wait in the queue.
    let ch = channel(&conn).await;
    let mut tags = Vec::new();
    for _ in 0..4 {
        tags.push(
            get_with(&ch, &q, false)
                .await
                .expect("a message")
                .delivery
                .delivery_tag,
        );
    }
    // Requeue the first two in one nack; drop the last two in another.
    within(
        "basic.nack",
        ch.basic_nack(
            tags[1],
            BasicNackOptions {
                multiple: true,
                requeue: true,
            },
        ),
    )
    .await
    .expect("nack");
    within(
        "basic.nack",
        ch.basic_nack(
            tags[3],
            BasicNackOptions {
                multiple: true,
                requeue: false,
            },
        ),
    )
    .await
    .expect("nack");
    let a = get(&ch, &q).await.expect("requeued m0");
    let b = get(&ch, &q).await.expect("requeued m1");
    assert_eq!(
        (a.delivery.data.as_slice(), b.delivery.data.as_slice()),
        (&b"m0"[..], &b"m1"[..])
    );
    assert!(a.delivery.redelivered && b.delivery.redelivered);
    assert!(get(&ch, &q).await.is_none(), "m2 and m3 were dropped");
    assert!(ch.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_without_requeue_drops() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("b-reject");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"unwanted").await;
    publish(&ch, "", &q, b"wanted").await;
    let m = get_with(&ch, &q, false).await.expect("a message");
    assert_eq!(m.delivery.data, b"unwanted");
    within(
        "basic.reject",
        m.delivery.reject(BasicRejectOptions { requeue: false }),
    )
    .await
    .expect("reject");
    let m = get_with(&ch, &q, false).await.expect("a message");
    assert_eq!(m.delivery.data, b"wanted");
    assert!(!m.delivery.redelivered);
    // reject with requeue puts it back.
    within(
        "basic.reject",
        m.delivery.reject(BasicRejectOptions { requeue: true }),
    )
    .await
    .expect("reject");
    let m = get(&ch, &q).await.expect("requeued");
    assert_eq!(m.delivery.data, b"wanted");
    assert!(m.delivery.redelivered);
    assert!(get(&ch, &q).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_requeues_unacked_with_redelivered_flag() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("b-recover");
    declare_queue(&ch, &q).await;
    publish_n(&ch, &q, 3).await;
    // Hold three unacked messages (basic.get, so lapin's consumer buffer plays
    // no part), ack the middle one.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(get_with(&ch, &q, false).await.expect("a message"));
    }
    ack(&ch, held[1].delivery.delivery_tag, false).await;
    within(
        "basic.recover-ok",
        ch.basic_recover(BasicRecoverOptions { requeue: true }),
    )
    .await
    .expect("basic.recover");
    let a = get(&ch, &q).await.expect("m0 again");
    let b = get(&ch, &q).await.expect("m2 again");
    assert_eq!(
        (a.delivery.data.as_slice(), b.delivery.data.as_slice()),
        (&b"m0"[..], &b"m2"[..])
    );
    assert!(a.delivery.redelivered && b.delivery.redelivered);
    assert!(get(&ch, &q).await.is_none(), "the acked one stays acked");
}

/// RabbitMQ does not implement basic.recover with requeue=false: 540
/// NOT_IMPLEMENTED ("requeue=false"), a connection error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_without_requeue_is_not_implemented() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let res = within(
        "basic.recover",
        ch.basic_recover(BasicRecoverOptions { requeue: false }),
    )
    .await;
    assert_code(res, NOT_IMPLEMENTED, "basic.recover requeue=false");
    wait_connection_closed(&conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_messages_return_when_the_channel_closes() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-chclose");
    declare_queue(&pch, &q).await;
    publish_n(&pch, &q, 3).await;
    let ch = channel(&conn).await;
    let mut consumer = consume(&ch, &q, "", false).await;
    collect_exactly(&mut [&mut consumer], 3).await;
    assert_eq!(queue_counts(&pch, &q).await, (0, 1));
    within("channel.close", ch.close(200, "OK".into()))
        .await
        .expect("channel.close");
    let mut back = Vec::new();
    while let Some(m) = get(&pch, &q).await {
        assert!(
            m.delivery.redelivered,
            "requeued on close must be redelivered"
        );
        back.push(String::from_utf8_lossy(&m.delivery.data).into_owned());
    }
    assert_eq!(back, ["m0", "m1", "m2"], "requeued in their original order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_messages_return_when_the_connection_closes() {
    let broker = Broker::start();
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-connclose");
    declare_queue(&pch, &q).await;
    publish_n(&pch, &q, 3).await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    // One via basic.get, two via a consumer.
    let got = get_with(&ch, &q, false).await.expect("m0");
    assert_eq!(got.delivery.data, b"m0");
    let mut consumer = consume(&ch, &q, "", false).await;
    collect_exactly(&mut [&mut consumer], 2).await;
    within("connection.close", conn.close(200, "bye".into()))
        .await
        .expect("connection.close");
    let mut back = Vec::new();
    while let Some(m) = get(&pch, &q).await {
        assert!(m.delivery.redelivered);
        back.push(String::from_utf8_lossy(&m.delivery.data).into_owned());
    }
    assert_eq!(back, ["m0", "m1", "m2"]);
}

/// basic.qos global=false: the limit applies to each consumer created after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos_prefetch_per_consumer() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-qos");
    declare_queue(&pch, &q).await;
    let ch = channel(&conn).await;
    qos(&ch, 2, false).await;
    let mut a = consume(&ch, &q, "a", false).await;
    let mut b = consume(&ch, &q, "b", false).await;
    publish_n(&pch, &q, 10).await;
    let got = collect_exactly(&mut [&mut a, &mut b], 4).await;
    assert_eq!(got[0].len(), 2, "consumer a holds at most 2");
    assert_eq!(got[1].len(), 2, "consumer b holds at most 2");
    assert_eq!(queue_counts(&pch, &q).await, (6, 2));
    // An ack frees one slot for that consumer only.
    ack(&ch, got[0][0].delivery_tag, false).await;
    let more = collect_exactly(&mut [&mut a, &mut b], 1).await;
    assert_eq!((more[0].len(), more[1].len()), (1, 0));
    // Acking everything lets the rest flow.
    let last = got
        .iter()
        .chain(more.iter())
        .flatten()
        .map(|d| d.delivery_tag)
        .max()
        .expect("deliveries");
    ack(&ch, last, true).await;
    let rest = collect_exactly(&mut [&mut a, &mut b], 4).await;
    assert_eq!(rest[0].len() + rest[1].len(), 4);
}

/// basic.qos global=true: the limit is shared by all consumers on the channel.
/// (RabbitMQ 4.3 deprecates this and by default treats global=true as per-consumer
/// unless `deprecated_features.permit.global_qos = true`; this test encodes the
/// behaviour with the feature permitted, as in every release before 4.3.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos_prefetch_per_channel() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q1 = unique("b-qos-global1");
    let q2 = unique("b-qos-global2");
    declare_queue(&pch, &q1).await;
    declare_queue(&pch, &q2).await;
    let ch = channel(&conn).await;
    qos(&ch, 3, true).await;
    let mut a = consume(&ch, &q1, "a", false).await;
    let mut b = consume(&ch, &q2, "b", false).await;
    publish_n(&pch, &q1, 5).await;
    publish_n(&pch, &q2, 5).await;
    let got = collect_exactly(&mut [&mut a, &mut b], 3).await;
    assert_eq!(got[0].len() + got[1].len(), 3, "channel holds at most 3");
    // One ack frees exactly one slot on the channel.
    let first = got.iter().flatten().next().expect("a delivery");
    ack(&ch, first.delivery_tag, false).await;
    collect_exactly(&mut [&mut a, &mut b], 1).await;
    let (r1, _) = queue_counts(&pch, &q1).await;
    let (r2, _) = queue_counts(&pch, &q2).await;
    assert_eq!(r1 + r2, 10 - 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos_prefetch_size_is_not_implemented() {
    let broker = Broker::start();
    let (conn, _ch) = open(&broker).await;
    // lapin has no prefetch_size argument; send it raw.
    let mut raw = RawConn::connect(broker.addr()).await;
    raw.read_start().await;
    let tune = raw.start_ok("guest", "guest").await;
    raw.tune_ok_and_open(tune.channel_max, tune.frame_max, 0, "/")
        .await;
    raw.send_method(1, 20, 10, &[0]).await;
    raw.read_method().await; // channel.open-ok
    let mut args = Vec::new();
    args.extend_from_slice(&4096u32.to_be_bytes()); // prefetch-size
    args.extend_from_slice(&0u16.to_be_bytes()); // prefetch-count
    args.push(0); // global
    raw.send_method(1, 60, 10, &args).await;
    match raw.read_method().await {
        (
            0,
            lapin::protocol::AMQPClass::Connection(lapin::protocol::connection::AMQPMethod::Close(
                c,
            )),
        ) => assert_eq!(c.reply_code, NOT_IMPLEMENTED, "{c:?}"),
        other => panic!("expected connection.close 540, got {other:?}"),
    }
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_of_unknown_delivery_tag_is_precondition_failed() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let mut watch = ErrorWatch::new(&conn);
    ack(&ch, 42, false).await;
    // "unknown delivery tag 42"
    watch
        .expect(PRECONDITION_FAILED, "ack of an unknown delivery tag")
        .await;
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_ack_is_precondition_failed() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-double-ack");
    declare_queue(&pch, &q).await;
    publish_n(&pch, &q, 2).await;
    let ch = channel(&conn).await;
    let m = get_with(&ch, &q, false).await.expect("a message");
    let tag = m.delivery.delivery_tag;
    let mut watch = ErrorWatch::new(&conn);
    ack(&ch, tag, false).await;
    ack(&ch, tag, false).await;
    watch
        .expect(PRECONDITION_FAILED, "second ack of one tag")
        .await;
    wait_channel_closed(&ch).await;
    // The first ack took effect; the untouched message is still there.
    assert_eq!(drain(&pch, &q).await, vec![b"m1".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_consumer_sees_publish_order() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let q = unique("b-order");
    declare_queue(&ch, &q).await;
    let mut consumer = consume(&ch, &q, "ordered", false).await;
    let pch = channel(&conn).await;
    const N: usize = 1000;
    for i in 0..N {
        publish(&pch, "", &q, format!("{i}").as_bytes()).await;
    }
    for i in 0..N {
        let d = next_delivery(&mut consumer).await;
        assert_eq!(
            String::from_utf8_lossy(&d.data),
            format!("{i}"),
            "message {i}"
        );
        assert_eq!(d.delivery_tag, i as u64 + 1);
    }
    ack(&ch, N as u64, true).await;
    assert_no_delivery(&mut consumer, "after all were consumed").await;
    assert_eq!(queue_counts(&ch, &q).await, (0, 1));
}
