//! Time-to-live, as RabbitMQ does it (https://www.rabbitmq.com/docs/ttl): per-queue
//! message TTL (`x-message-ttl`), per-message TTL (the `expiration` property, a
//! string of milliseconds), the lower of the two wins, expired messages are never
//! delivered, TTL 0, invalid expirations, and queue expiry (`x-expires`).
//!
//! Checked against RabbitMQ 3.10.

use compat_tests::common;

use std::time::Duration;

use common::*;
use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection};

/// Longer than every TTL these tests use, so the messages have surely expired.
const PAST_TTL: Duration = Duration::from_millis(200);
const TTL_MS: i32 = 50;

fn ttl_args(ms: i32) -> FieldTable {
    ftable(&[("x-message-ttl", AMQPValue::LongInt(ms))])
}

fn expiring(ms: &str) -> BasicProperties {
    BasicProperties::default().with_expiration(ms.into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_ttl_expired_messages_are_never_delivered() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("ttl-queue");
    declare_queue_with(&ch, &q, Default::default(), ttl_args(TTL_MS)).await;
    publish(&ch, "", &q, b"one").await;
    publish(&ch, "", &q, b"two").await;
    tokio::time::sleep(PAST_TTL).await;
    assert!(
        get(&ch, &q).await.is_none(),
        "basic.get after the TTL returns get-empty"
    );
    let mut consumer = consume(&ch, &q, "ttl-late", false).await;
    assert_no_delivery(&mut consumer, "consumer attached after expiry").await;
    assert_eq!(queue_counts(&ch, &q).await.0, 0, "message count");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_ttl_leaves_fresh_messages_alone() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("ttl-fresh");
    declare_queue_with(&ch, &q, Default::default(), ttl_args(60_000)).await;
    publish(&ch, "", &q, b"fresh").await;
    tokio::time::sleep(PAST_TTL).await;
    assert_eq!(get_body(&ch, &q).await.as_deref(), Some(&b"fresh"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_message_expiration_expires_only_that_message() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("ttl-msg");
    declare_queue(&ch, &q).await;
    publish_props(&ch, "", &q, b"short", expiring("50")).await;
    publish(&ch, "", &q, b"forever").await;
    publish_props(&ch, "", &q, b"long", expiring("60000")).await;
    tokio::time::sleep(PAST_TTL).await;
    let m = get(&ch, &q).await.expect("the unexpired messages remain");
    assert_eq!(m.delivery.data, b"forever");
    let m = get(&ch, &q).await.expect("the long-lived message remains");
    assert_eq!(m.delivery.data, b"long");
    assert_eq!(
        m.delivery
            .properties
            .expiration()
            .as_ref()
            .map(|s| s.as_str()),
        Some("60000"),
        "expiration is delivered unchanged"
    );
    assert!(get(&ch, &q).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lower_of_queue_and_message_ttl_wins() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    // Long queue TTL, short message TTL.
    let q1 = unique("ttl-lower-msg");
    declare_queue_with(&ch, &q1, Default::default(), ttl_args(60_000)).await;
    publish_props(&ch, "", &q1, b"msg-ttl-short", expiring("50")).await;
    publish(&ch, "", &q1, b"control").await;
    // Short queue TTL, long message TTL.
    let q2 = unique("ttl-lower-queue");
    declare_queue_with(&ch, &q2, Default::default(), ttl_args(TTL_MS)).await;
    publish_props(&ch, "", &q2, b"queue-ttl-short", expiring("60000")).await;
    tokio::time::sleep(PAST_TTL).await;
    assert_eq!(drain(&ch, &q1).await, vec![b"control".to_vec()]);
    assert!(
        get(&ch, &q2).await.is_none(),
        "queue TTL beat the message's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_zero_delivers_to_a_waiting_consumer_and_otherwise_expires() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("ttl-zero");
    declare_queue_with(&ch, &q, Default::default(), ttl_args(0)).await;
    // Nobody waiting: expires at once.
    publish(&ch, "", &q, b"lost").await;
    assert!(get(&ch, &q).await.is_none(), "TTL 0 without a consumer");
    let conn2 = connect(&broker).await;
    let ch2 = channel(&conn2).await;
    let mut consumer = consume(&ch2, &q, "ttl-zero-consumer", true).await;
    publish(&ch, "", &q, b"caught").await;
    let d = next_delivery(&mut consumer).await;
    assert_eq!(d.data, b"caught", "TTL 0 with a waiting consumer delivers");
    assert_no_delivery(&mut consumer, "the expired message").await;

    // Per-message expiration "0" behaves the same.
    let q2 = unique("ttl-zero-msg");
    declare_queue(&ch, &q2).await;
    publish_props(&ch, "", &q2, b"lost", expiring("0")).await;
    assert!(
        get(&ch, &q2).await.is_none(),
        "expiration 0 without a consumer"
    );
    let mut consumer2 = consume(&ch2, &q2, "ttl-zero-msg-consumer", true).await;
    publish_props(&ch, "", &q2, b"caught", expiring("0")).await;
    assert_eq!(next_delivery(&mut consumer2).await.data, b"caught");
}

/// RabbitMQ parses `expiration` as a non-negative integer and closes the channel with
/// 406 PRECONDITION_FAILED otherwise ("invalid expiration 'abc': no_integer").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_expiration_closes_the_channel_with_precondition_failed() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let admin = confirm_channel(&conn).await;
    let q = unique("ttl-invalid");
    declare_queue(&admin, &q).await;
    for bad in ["abc", "-1", "100ms"] {
        let ch = channel(&conn).await;
        let mut watch = ErrorWatch::new(&conn);
        publish_props(&ch, "", &q, b"bad", expiring(bad)).await;
        watch
            .expect(PRECONDITION_FAILED, &format!("expiration {bad:?}"))
            .await;
        wait_channel_closed(&ch).await;
        assert!(conn.status().connected(), "only the channel is closed");
    }
    assert_eq!(queue_counts(&admin, &q).await.0, 0, "nothing was enqueued");
}

async fn queue_exists(conn: &Connection, name: &str) -> bool {
    // A failed passive declare closes its channel, so use a throwaway one.
    let ch = channel(conn).await;
    let res = within(
        "passive queue.declare",
        ch.queue_declare(
            name.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        ),
    )
    .await;
    match res {
        Ok(_) => true,
        Err(e) if reply_code(&e) == Some(NOT_FOUND) => false,
        Err(e) => panic!("passive queue.declare {name}: {e:?}"),
    }
}

/// `x-expires`: a queue unused (no consumers, no basic.get, no redeclare) for that
/// long is deleted, messages and all; a queue with a consumer is not. A passive
/// declare counts as a redeclare in RabbitMQ (it renews the lease), so the probes
/// below are spaced well beyond the expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_expires_deletes_an_unused_queue() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let expires = ftable(&[("x-expires", AMQPValue::LongInt(150))]);
    let unused = unique("ttl-expires");
    let used = unique("ttl-expires-used");
    declare_queue_with(&ch, &unused, Default::default(), expires.clone()).await;
    declare_queue_with(&ch, &used, Default::default(), expires).await;
    publish(&ch, "", &unused, b"goes with the queue").await;
    let _consumer = consume(&ch, &used, "ttl-expires-keeper", false).await;
    within("the unused queue to expire", async {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if !queue_exists(&conn, &unused).await {
                return;
            }
        }
    })
    .await;
    let probe = channel(&conn).await;
    assert_code(
        within(
            "passive queue.declare",
            probe.queue_declare(
                unused.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            ),
        )
        .await,
        NOT_FOUND,
        "passive declare of the expired queue",
    );
    assert!(
        queue_exists(&conn, &used).await,
        "a queue with a consumer does not expire"
    );
}

/// `x-expires` counts from the last use: a redeclare renews the lease (as
/// RabbitMQ 3.10 does: declared with 3 s, redeclared at 2 s, still there at
/// 4 s), and a queue deleted and declared again under the same name gets a
/// lease of its own (it inherited the deleted queue's last use and expired
/// at the next tick, under the client that had just declared it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_expires_is_renewed_by_a_redeclare_and_fresh_for_a_reused_name() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let expires = ftable(&[("x-expires", AMQPValue::LongInt(3_000))]);
    let q = unique("ttl-lease");
    declare_queue_with(&ch, &q, Default::default(), expires.clone()).await;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    declare_queue_with(&ch, &q, Default::default(), expires.clone()).await;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(
        queue_exists(&conn, &q).await,
        "4 s after its first declare, 2 s after the redeclare"
    );
    within(
        "queue.delete",
        ch.queue_delete(q.as_str().into(), Default::default()),
    )
    .await
    .expect("queue.delete");
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    declare_queue_with(&ch, &q, Default::default(), expires).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(
        queue_exists(&conn, &q).await,
        "declared again 1 s ago under the name of a queue deleted 3.5 s before"
    );
}
