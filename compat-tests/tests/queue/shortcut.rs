//! An empty queue name means the channel's last declared queue (AMQP 0-9-1,
//! queue.bind/unbind/purge/delete, basic.consume/get), and with none
//! declared on that channel RabbitMQ closes the channel with 404 "no
//! previously declared queue". Checked against RabbitMQ 3.10.8.

use super::*;
use lapin::options::BasicGetOptions;

const NO_PREVIOUS: &str = "NOT_FOUND - no previously declared queue";

fn assert_no_previous<T: std::fmt::Debug>(res: lapin::Result<T>, what: &str) {
    let err = res.expect_err(what);
    let e = amqp_error(&err).unwrap_or_else(|| panic!("{what}: not an AMQP error: {err:?}"));
    assert_eq!(e.get_id(), NOT_FOUND, "{what}");
    assert_eq!(e.get_message().as_str(), NO_PREVIOUS, "{what}");
}

/// basic.consume("") and basic.get("") after a server-named queue.declare
/// use that queue (the report: consume got 404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_and_get_with_an_empty_name_use_the_server_named_queue() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let q = declare_queue_with(&ch, "", exclusive(), FieldTable::default()).await;
    let name = q.name().as_str().to_string();
    assert!(name.starts_with("amq.gen-"), "{name}");
    publish(&ch, "", &name, b"one").await;
    let got = within(
        "basic.get ''",
        ch.basic_get("".into(), BasicGetOptions { no_ack: true }),
    )
    .await
    .expect("basic.get '' after declare");
    assert_eq!(got.map(|m| m.delivery.data), Some(b"one".to_vec()));
    let mut consumer = consume(&ch, "", "c", true).await;
    publish(&ch, "", &name, b"two").await;
    assert_eq!(next_delivery(&mut consumer).await.data, b"two");
    conn.close(200, "bye".into()).await.expect("close");
}

/// queue.bind("", x, "") binds the last declared queue with its own name as
/// the key; unbind, purge and delete with "" act on it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_unbind_purge_and_delete_with_an_empty_name() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let q = declare_queue_with(&ch, "", exclusive(), FieldTable::default()).await;
    let name = q.name().as_str().to_string();
    within(
        "queue.bind '' amq.direct ''",
        ch.queue_bind(
            "".into(),
            "amq.direct".into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("bind with the empty name");
    // Routed by the queue's name: the empty key became it.
    publish(&ch, "amq.direct", &name, b"routed").await;
    wait_message_count(&ch, &name, 1).await;
    let purged = within(
        "queue.purge ''",
        ch.queue_purge("".into(), QueuePurgeOptions::default()),
    )
    .await
    .expect("purge with the empty name");
    assert_eq!(purged, 1);
    within(
        "queue.unbind '' amq.direct ''",
        ch.queue_unbind(
            "".into(),
            "amq.direct".into(),
            "".into(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("unbind with the empty name");
    publish(&ch, "amq.direct", &name, b"not routed").await;
    // A publish on the same channel is handled in order: the count after it is
    // what the queue holds.
    assert_eq!(queue_counts(&ch, &name).await.0, 0);
    within(
        "queue.delete ''",
        ch.queue_delete("".into(), QueueDeleteOptions::default()),
    )
    .await
    .expect("delete with the empty name");
    assert!(!queue_exists(&conn, &name).await);
    conn.close(200, "bye".into()).await.expect("close");
}

/// Every declare-ok sets the channel's queue: a named one and a passive one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_or_passive_declare_sets_the_channels_queue() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let a = unique("shortcut-a");
    let b = unique("shortcut-b");
    declare_queue_with(&ch, &a, exclusive(), FieldTable::default()).await;
    declare_queue_with(&ch, &b, exclusive(), FieldTable::default()).await;
    declare_queue_with(&ch, &a, passive(), FieldTable::default()).await;
    within(
        "queue.delete ''",
        ch.queue_delete("".into(), QueueDeleteOptions::default()),
    )
    .await
    .expect("delete with the empty name");
    assert!(
        !queue_exists(&conn, &a).await,
        "the passive declare's queue goes"
    );
    assert!(queue_exists(&conn, &b).await);
    // Another channel has its own: none yet.
    let other = channel(&conn).await;
    assert_no_previous(
        within(
            "purge '' elsewhere",
            other.queue_purge("".into(), QueuePurgeOptions::default()),
        )
        .await,
        "purge '' on a channel that declared nothing",
    );
    conn.close(200, "bye".into()).await.expect("close");
}

/// With no queue declared on the channel, each method with "" is refused
/// with RabbitMQ's 404, and the connection stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_declared_queue_each_method_gets_404() {
    let broker = Broker::start();
    let (conn, _ch) = open(&broker).await;
    let ch = channel(&conn).await;
    assert_no_previous(
        within(
            "consume ''",
            ch.basic_consume(
                "".into(),
                "t".into(),
                lapin::options::BasicConsumeOptions::default(),
                FieldTable::default(),
            ),
        )
        .await,
        "basic.consume ''",
    );
    let ch = channel(&conn).await;
    assert_no_previous(
        within(
            "get ''",
            ch.basic_get("".into(), BasicGetOptions::default()),
        )
        .await,
        "basic.get ''",
    );
    let ch = channel(&conn).await;
    assert_no_previous(
        within(
            "purge ''",
            ch.queue_purge("".into(), QueuePurgeOptions::default()),
        )
        .await,
        "queue.purge ''",
    );
    let ch = channel(&conn).await;
    assert_no_previous(
        within(
            "delete ''",
            ch.queue_delete("".into(), QueueDeleteOptions::default()),
        )
        .await,
        "queue.delete ''",
    );
    let ch = channel(&conn).await;
    assert_no_previous(
        within(
            "bind ''",
            ch.queue_bind(
                "".into(),
                "amq.direct".into(),
                "k".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            ),
        )
        .await,
        "queue.bind ''",
    );
    let ch = channel(&conn).await;
    assert_no_previous(
        within(
            "unbind ''",
            ch.queue_unbind(
                "".into(),
                "amq.direct".into(),
                "k".into(),
                FieldTable::default(),
            ),
        )
        .await,
        "queue.unbind ''",
    );
    // The connection is fine.
    let ch = channel(&conn).await;
    declare_queue_with(&ch, "", exclusive(), FieldTable::default()).await;
    conn.close(200, "bye".into()).await.expect("close");
}
