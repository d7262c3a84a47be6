//! Queue length limits, as RabbitMQ does them
//! (https://www.rabbitmq.com/docs/maxlength): `x-max-length` and
//! `x-max-length-bytes` (message bodies only) with `x-overflow` drop-head (the
//! default: the oldest messages are dropped or dead-lettered with reason `maxlen`),
//! reject-publish (confirming publishers get a basic.nack, nothing is dead-lettered)
//! and reject-publish-dlx (nack, and the rejected message is dead-lettered).
//!
//! Checked against RabbitMQ 3.10.

use compat_tests::common;

use common::*;
use lapin::options::BasicPublishOptions;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Confirmation, ExchangeKind};

/// A dead-letter fanout exchange with one queue bound; returns (dlx, dlq).
async fn dead_letter_target(ch: &Channel, prefix: &str) -> (String, String) {
    let dlx = unique(&format!("{prefix}-dlx"));
    let dlq = unique(&format!("{prefix}-dlq"));
    declare_exchange_args(ch, &dlx, ExchangeKind::Fanout, FieldTable::default()).await;
    declare_queue(ch, &dlq).await;
    bind_queue(ch, &dlq, &dlx, "").await;
    (dlx, dlq)
}

async fn publish_confirmed(ch: &Channel, queue: &str, body: &[u8]) -> Confirmation {
    publish_full(
        ch,
        "",
        queue,
        BasicPublishOptions::default(),
        body,
        BasicProperties::default(),
    )
    .await
}

#[track_caller]
fn assert_ack(c: &Confirmation, what: &str) {
    assert!(
        matches!(c, Confirmation::Ack(None)),
        "{what}: expected basic.ack, got {c:?}"
    );
}

#[track_caller]
fn assert_nack(c: &Confirmation, what: &str) {
    assert!(
        matches!(c, Confirmation::Nack(_)),
        "{what}: expected basic.nack, got {c:?}"
    );
}

#[track_caller]
fn assert_maxlen_death(props: &BasicProperties, queue: &str) {
    let deaths = x_death(props);
    assert_eq!(deaths.len(), 1, "{deaths:?}");
    let d = &deaths[0];
    assert_eq!(as_text(d.inner().get("reason")).as_deref(), Some("maxlen"));
    assert_eq!(as_text(d.inner().get("queue")).as_deref(), Some(queue));
    assert_eq!(d.inner().get("count"), Some(&AMQPValue::LongLongInt(1)));
    assert_eq!(
        as_text(header_value(props, "x-first-death-reason")).as_deref(),
        Some("maxlen")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_length_drop_head_dead_letters_the_oldest_with_reason_maxlen() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let (dlx, dlq) = dead_letter_target(&ch, "len-drop").await;
    let q = unique("len-drop");
    declare_queue_with(
        &ch,
        &q,
        Default::default(),
        ftable(&[
            ("x-max-length", AMQPValue::LongInt(2)),
            ("x-dead-letter-exchange", lstr(&dlx)),
        ]),
    )
    .await;
    for body in [&b"m1"[..], b"m2", b"m3", b"m4"] {
        assert_ack(&publish_confirmed(&ch, &q, body).await, "drop-head publish");
    }
    assert_eq!(queue_counts(&ch, &q).await.0, 2);
    assert_eq!(drain(&ch, &q).await, vec![b"m3".to_vec(), b"m4".to_vec()]);
    let first = get_eventually(&ch, &dlq, true).await.delivery;
    assert_eq!(first.data, b"m1", "the oldest is dead-lettered first");
    assert_maxlen_death(&first.properties, &q);
    let second = get_eventually(&ch, &dlq, true).await.delivery;
    assert_eq!(second.data, b"m2");
    assert_maxlen_death(&second.properties, &q);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_length_bytes_drop_head_counts_body_bytes() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("len-bytes");
    declare_queue_with(
        &ch,
        &q,
        Default::default(),
        ftable(&[("x-max-length-bytes", AMQPValue::LongInt(10))]),
    )
    .await;
    // Headers do not count: only the 4-byte bodies do.
    let props = BasicProperties::default().with_headers(headers(&[("padding", &"x".repeat(200))]));
    for body in [&b"aaaa"[..], b"bbbb", b"cccc"] {
        publish_props(&ch, "", &q, body, props.clone()).await;
    }
    assert_eq!(
        drain(&ch, &q).await,
        vec![b"bbbb".to_vec(), b"cccc".to_vec()],
        "12 bytes > 10: the oldest is dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_publish_nacks_and_leaves_the_queue_unchanged() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let (dlx, dlq) = dead_letter_target(&ch, "len-reject").await;
    let q = unique("len-reject");
    declare_queue_with(
        &ch,
        &q,
        Default::default(),
        ftable(&[
            ("x-max-length", AMQPValue::LongInt(1)),
            ("x-overflow", lstr("reject-publish")),
            ("x-dead-letter-exchange", lstr(&dlx)),
        ]),
    )
    .await;
    assert_ack(&publish_confirmed(&ch, &q, b"first").await, "first publish");
    assert_nack(
        &publish_confirmed(&ch, &q, b"second").await,
        "over the limit",
    );
    assert!(ch.status().connected(), "a nack, not a channel error");
    assert_eq!(queue_counts(&ch, &q).await.0, 1);
    assert_eq!(drain(&ch, &q).await, vec![b"first".to_vec()]);
    assert!(
        get(&ch, &dlq).await.is_none(),
        "reject-publish does not dead-letter"
    );
    // Room again: accepted.
    assert_ack(
        &publish_confirmed(&ch, &q, b"third").await,
        "after draining",
    );
    assert_eq!(drain(&ch, &q).await, vec![b"third".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_publish_with_max_length_bytes() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("len-reject-bytes");
    declare_queue_with(
        &ch,
        &q,
        Default::default(),
        ftable(&[
            ("x-max-length-bytes", AMQPValue::LongInt(5)),
            ("x-overflow", lstr("reject-publish")),
        ]),
    )
    .await;
    assert_ack(
        &publish_confirmed(&ch, &q, b"12345").await,
        "exactly at the limit",
    );
    assert_nack(&publish_confirmed(&ch, &q, b"6").await, "one byte over");
    assert_eq!(drain(&ch, &q).await, vec![b"12345".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_publish_dlx_nacks_and_dead_letters_the_rejected_message() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let (dlx, dlq) = dead_letter_target(&ch, "len-rpdlx").await;
    let q = unique("len-rpdlx");
    declare_queue_with(
        &ch,
        &q,
        Default::default(),
        ftable(&[
            ("x-max-length", AMQPValue::LongInt(1)),
            ("x-overflow", lstr("reject-publish-dlx")),
            ("x-dead-letter-exchange", lstr(&dlx)),
        ]),
    )
    .await;
    assert_ack(&publish_confirmed(&ch, &q, b"kept").await, "first publish");
    assert_nack(
        &publish_confirmed(&ch, &q, b"refused").await,
        "over the limit",
    );
    assert_eq!(drain(&ch, &q).await, vec![b"kept".to_vec()]);
    let d = get_eventually(&ch, &dlq, true).await.delivery;
    assert_eq!(d.data, b"refused", "the rejected message is dead-lettered");
    assert_maxlen_death(&d.properties, &q);
    assert!(get(&ch, &dlq).await.is_none(), "only the rejected one");
}
