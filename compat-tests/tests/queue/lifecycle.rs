//! queue.bind, queue.unbind, queue.purge and queue.delete.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_and_unbind() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let x = unique("q-bind-x");
    let q = unique("q-bind");
    within(
        "exchange.declare",
        ch.exchange_declare(
            x.as_str().into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("exchange.declare");
    declare_queue(&ch, &q).await;
    within(
        "queue.bind",
        ch.queue_bind(
            q.as_str().into(),
            x.as_str().into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("queue.bind");
    publish(&ch, &x, "k", b"bound").await;
    assert_eq!(get_body(&ch, &q).await.as_deref(), Some(&b"bound"[..]));
    within(
        "queue.unbind",
        ch.queue_unbind(
            q.as_str().into(),
            x.as_str().into(),
            "k".into(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("queue.unbind");
    publish(&ch, &x, "k", b"unbound").await;
    assert!(get_body(&ch, &q).await.is_none());
    // Unbinding a binding that does not exist is not an error.
    within(
        "queue.unbind",
        ch.queue_unbind(
            q.as_str().into(),
            x.as_str().into(),
            "never-bound".into(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("queue.unbind of a missing binding");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_to_missing_exchange_or_queue_is_not_found() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let q = unique("q-bind-missing");
    declare_queue(&ch, &q).await;
    let res = within(
        "queue.bind",
        ch.queue_bind(
            q.as_str().into(),
            unique("x-missing").as_str().into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await;
    assert_code(res, NOT_FOUND, "bind to a missing exchange");

    let ch = channel(&conn).await;
    let res = within(
        "queue.bind",
        ch.queue_bind(
            unique("q-missing").as_str().into(),
            "amq.direct".into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await;
    assert_code(res, NOT_FOUND, "bind of a missing queue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_returns_the_count_and_spares_unacked() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    // Confirms make sure every message is in the queue before it is counted.
    let ch = confirm_channel(&conn).await;
    let q = unique("q-purge");
    declare_queue(&ch, &q).await;
    for i in 0..5 {
        publish(&ch, "", &q, format!("m{i}").as_bytes()).await;
    }
    // One message out and unacked: purge only removes ready messages.
    let held = get_with(&ch, &q, false).await.expect("a message");
    assert_eq!(held.delivery.data, b"m0");
    let n = within(
        "queue.purge-ok",
        ch.queue_purge(q.as_str().into(), QueuePurgeOptions::default()),
    )
    .await
    .expect("queue.purge");
    assert_eq!(n, 4);
    assert_eq!(queue_counts(&ch, &q).await.0, 0);
    // Purging an empty queue returns 0.
    let n = within(
        "queue.purge-ok",
        ch.queue_purge(q.as_str().into(), QueuePurgeOptions::default()),
    )
    .await
    .expect("queue.purge");
    assert_eq!(n, 0);
    // The unacked message survives and comes back when rejected.
    within(
        "basic.reject",
        held.delivery
            .acker
            .reject(lapin::options::BasicRejectOptions { requeue: true }),
    )
    .await
    .expect("basic.reject");
    let back = get(&ch, &q).await.expect("requeued message");
    assert_eq!(back.delivery.data, b"m0");
    assert!(back.delivery.redelivered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_returns_the_count() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let q = unique("q-delete");
    declare_queue(&ch, &q).await;
    for _ in 0..3 {
        publish(&ch, "", &q, b"x").await;
    }
    let n = delete(&ch, &q, QueueDeleteOptions::default())
        .await
        .expect("queue.delete");
    assert_eq!(n, 3);
    assert!(!queue_exists(&conn, &q).await);
    // Deleting a queue that does not exist succeeds with count 0.
    let n = delete(&ch, &unique("q-never"), QueueDeleteOptions::default())
        .await
        .expect("queue.delete of a missing queue");
    assert_eq!(n, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_if_unused_with_a_consumer_is_precondition_failed() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let cch = channel(&conn).await;
    let q = unique("q-inuse");
    declare_queue(&cch, &q).await;
    let _consumer = consume(&cch, &q, "holder", false).await;
    let ch = channel(&conn).await;
    let res = delete(
        &ch,
        &q,
        QueueDeleteOptions {
            if_unused: true,
            ..Default::default()
        },
    )
    .await;
    // "queue '...' in vhost '/' in use"
    assert_code(res, PRECONDITION_FAILED, "delete if-unused with a consumer");
    assert!(queue_exists(&conn, &q).await);
    // The consumer's channel is unaffected.
    assert!(cch.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_if_empty_with_messages_is_precondition_failed() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let q = unique("q-notempty");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"x").await;
    let res = delete(
        &ch,
        &q,
        QueueDeleteOptions {
            if_empty: true,
            ..Default::default()
        },
    )
    .await;
    // "queue '...' in vhost '/' is not empty"
    assert_code(res, PRECONDITION_FAILED, "delete if-empty with a message");
    assert!(queue_exists(&conn, &q).await);
    // Emptied, it deletes.
    let ch = channel(&conn).await;
    assert!(get_body(&ch, &q).await.is_some());
    let n = delete(
        &ch,
        &q,
        QueueDeleteOptions {
            if_empty: true,
            if_unused: true,
            ..Default::default()
        },
    )
    .await
    .expect("queue.delete if-empty");
    assert_eq!(n, 0);
    assert!(!queue_exists(&conn, &q).await);
}
