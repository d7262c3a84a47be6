//! queue.declare: server-named, passive, reserved names, redeclaration,
//! exclusive and auto-delete queues, quorum queues and declare-ok counts.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_named_queue() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q1 = declare_queue_with(&ch, "", exclusive(), FieldTable::default()).await;
    let q2 = declare_queue_with(&ch, "", exclusive(), FieldTable::default()).await;
    for q in [&q1, &q2] {
        assert!(
            q.name().as_str().starts_with("amq.gen-"),
            "server-named queue {:?}",
            q.name()
        );
        assert_eq!((q.message_count(), q.consumer_count()), (0, 0));
    }
    assert_ne!(q1.name(), q2.name(), "server names must be unique");
    // It is a real queue: the default exchange routes to it by name.
    publish(&ch, "", q1.name().as_str(), b"to generated").await;
    assert_eq!(
        get_body(&ch, q1.name().as_str()).await.as_deref(),
        Some(&b"to generated"[..])
    );
    // Non-exclusive server-named queues work too.
    let q3 = declare_queue(&ch, "").await;
    assert!(q3.name().as_str().starts_with("amq.gen-"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_declare_of_missing_queue_is_not_found() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let res = try_declare(&ch, &unique("q-missing"), passive(), FieldTable::default()).await;
    // "no queue 'q-missing-...' in vhost '/'"
    assert_code(res, NOT_FOUND, "passive declare of a missing queue");
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_declare_ignores_other_flags() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("q-passive");
    declare_queue(&ch, &q).await;
    // Passive checks existence only; durable etc. are not compared.
    let got = try_declare(
        &ch,
        &q,
        QueueDeclareOptions {
            passive: true,
            durable: true,
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("passive declare with other flags");
    assert_eq!(got.name().as_str(), q);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amq_prefix_is_reserved_for_queues() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let res = try_declare(
        &ch,
        &unique("amq.myqueue"),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await;
    // "queue name 'amq.myqueue...' contains reserved prefix 'amq.*'"
    assert_code(res, ACCESS_REFUSED, "declare of an amq.* queue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclare_with_different_properties_is_precondition_failed() {
    let broker = Broker::start();
    let conn = connect(&broker).await;

    // durable
    let ch = channel(&conn).await;
    let q = unique("q-durable");
    declare_queue(&ch, &q).await;
    let res = try_declare(&ch, &q, durable(), FieldTable::default()).await;
    // "inequivalent arg 'durable' for queue '...' in vhost '/': received 'true' but current is 'false'"
    assert_code(res, PRECONDITION_FAILED, "redeclare as durable");

    // auto_delete
    let ch = channel(&conn).await;
    let res = try_declare(
        &ch,
        &q,
        QueueDeclareOptions {
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await;
    assert_code(res, PRECONDITION_FAILED, "redeclare as auto-delete");

    // arguments: added
    let ch = channel(&conn).await;
    let res = try_declare(
        &ch,
        &q,
        QueueDeclareOptions::default(),
        args(&[("x-max-length", AMQPValue::LongInt(10))]),
    )
    .await;
    // "inequivalent arg 'x-max-length' ..."
    assert_code(res, PRECONDITION_FAILED, "redeclare with x-max-length");

    // arguments: changed
    let ch = channel(&conn).await;
    let q2 = unique("q-args");
    declare_queue_with(
        &ch,
        &q2,
        QueueDeclareOptions::default(),
        args(&[("x-max-length", AMQPValue::LongInt(10))]),
    )
    .await;
    declare_queue_with(
        &ch,
        &q2,
        QueueDeclareOptions::default(),
        args(&[("x-max-length", AMQPValue::LongInt(10))]),
    )
    .await;
    let res = try_declare(
        &ch,
        &q2,
        QueueDeclareOptions::default(),
        args(&[("x-max-length", AMQPValue::LongInt(20))]),
    )
    .await;
    assert_code(
        res,
        PRECONDITION_FAILED,
        "redeclare with another x-max-length",
    );

    // The originals are untouched and an identical redeclare still succeeds.
    let ch = channel(&conn).await;
    declare_queue(&ch, &q).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_queue_is_locked_to_its_connection() {
    let broker = Broker::start();
    let owner = connect(&broker).await;
    let och = channel(&owner).await;
    let q = unique("q-exclusive");
    declare_queue_with(&och, &q, exclusive(), FieldTable::default()).await;
    // Every channel of the owning connection may use it.
    let och2 = channel(&owner).await;
    publish(&och2, "", &q, b"mine").await;
    assert_eq!(get_body(&och2, &q).await.as_deref(), Some(&b"mine"[..]));

    let other = connect(&broker).await;
    // "cannot obtain exclusive access to locked queue '...' in vhost '/'. It could
    // be originally declared on another connection or the exclusive property value
    // does not match that of the original declaration."
    let ch = channel(&other).await;
    let res = try_declare(&ch, &q, exclusive(), FieldTable::default()).await;
    assert_code(
        res,
        RESOURCE_LOCKED,
        "exclusive redeclare from another connection",
    );

    let ch = channel(&other).await;
    let res = try_declare(&ch, &q, passive(), FieldTable::default()).await;
    assert_code(
        res,
        RESOURCE_LOCKED,
        "passive declare from another connection",
    );

    let ch = channel(&other).await;
    let res = within(
        "basic.consume",
        ch.basic_consume(
            q.as_str().into(),
            "".into(),
            Default::default(),
            FieldTable::default(),
        ),
    )
    .await;
    assert_code(res, RESOURCE_LOCKED, "consume from another connection");

    let ch = channel(&other).await;
    let res = within(
        "basic.get",
        ch.basic_get(q.as_str().into(), Default::default()),
    )
    .await;
    assert_code(res, RESOURCE_LOCKED, "basic.get from another connection");

    let ch = channel(&other).await;
    let res = delete(&ch, &q, QueueDeleteOptions::default()).await;
    assert_code(res, RESOURCE_LOCKED, "delete from another connection");

    let ch = channel(&other).await;
    let res = within(
        "queue.purge",
        ch.queue_purge(q.as_str().into(), QueuePurgeOptions::default()),
    )
    .await;
    assert_code(res, RESOURCE_LOCKED, "purge from another connection");

    // Publishing to it from elsewhere is allowed.
    let ch = confirm_channel(&other).await;
    publish(&ch, "", &q, b"from other").await;
    assert_eq!(queue_counts(&och, &q).await.0, 1);
    assert!(other.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_queue_is_deleted_when_its_connection_closes() {
    let broker = Broker::start();
    let owner = connect(&broker).await;
    let och = channel(&owner).await;
    let q = unique("q-excl-close");
    declare_queue_with(&och, &q, exclusive(), FieldTable::default()).await;
    publish(&och, "", &q, b"dies with the connection").await;
    let watcher = connect(&broker).await;
    within("connection.close", owner.close(200, "bye".into()))
        .await
        .expect("connection.close");
    assert!(!queue_exists(&watcher, &q).await);
    // The name is free again, for anyone.
    let wch = channel(&watcher).await;
    let again = declare_queue(&wch, &q).await;
    assert_eq!(again.message_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_delete_queue_goes_with_its_last_consumer() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let q = unique("q-autodel");
    declare_queue_with(
        &ch,
        &q,
        QueueDeclareOptions {
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await;
    // Never consumed: it stays.
    assert!(queue_exists(&conn, &q).await);
    let c1 = consume(&ch, &q, "c1", false).await;
    let c2 = consume(&ch, &q, "c2", false).await;
    assert_eq!(queue_counts(&ch, &q).await.1, 2);
    within(
        "basic.cancel",
        ch.basic_cancel(c1.tag(), BasicCancelOptions::default()),
    )
    .await
    .expect("basic.cancel");
    // One consumer left: it stays.
    assert!(queue_exists(&conn, &q).await);
    within(
        "basic.cancel",
        ch.basic_cancel(c2.tag(), BasicCancelOptions::default()),
    )
    .await
    .expect("basic.cancel");
    assert!(!queue_exists(&conn, &q).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_queue_accepted_when_durable() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let q = unique("q-quorum");
    let decl = declare_queue_with(&ch, &q, durable(), queue_type("quorum")).await;
    assert_eq!(decl.name().as_str(), q);
    // Equivalent redeclare is fine.
    declare_queue_with(&ch, &q, durable(), queue_type("quorum")).await;
    // A quorum queue takes a message asynchronously (it is replicated first); the
    // publisher confirm says when it is in, so publish on a confirm channel.
    let pch = confirm_channel(&conn).await;
    let c = publish_full(
        &pch,
        "",
        &q,
        Default::default(),
        b"quorum message",
        Default::default(),
    )
    .await;
    assert!(c.is_ack(), "{c:?}");
    assert_eq!(
        get_body(&ch, &q).await.as_deref(),
        Some(&b"quorum message"[..])
    );
    // Redeclaring it as classic is inequivalent.
    let res = try_declare(&ch, &q, durable(), queue_type("classic")).await;
    // "inequivalent arg 'x-queue-type' for queue '...': received 'classic' but current is 'quorum'"
    assert_code(
        res,
        PRECONDITION_FAILED,
        "redeclare a quorum queue as classic",
    );
    let ch = channel(&conn).await;
    delete(&ch, &q, QueueDeleteOptions::default())
        .await
        .expect("queue.delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_queue_rejects_exclusive_non_durable_and_auto_delete() {
    let broker = Broker::start();
    let conn = connect(&broker).await;

    let ch = channel(&conn).await;
    let res = try_declare(
        &ch,
        &unique("q-quorum-excl"),
        QueueDeclareOptions {
            durable: true,
            exclusive: true,
            ..Default::default()
        },
        queue_type("quorum"),
    )
    .await;
    // "invalid property 'exclusive-owner' for queue '...'"
    assert_code(res, PRECONDITION_FAILED, "quorum + exclusive");

    let ch = channel(&conn).await;
    let res = try_declare(
        &ch,
        &unique("q-quorum-transient"),
        QueueDeclareOptions::default(),
        queue_type("quorum"),
    )
    .await;
    // "invalid property 'non-durable' for queue '...'"
    assert_code(res, PRECONDITION_FAILED, "quorum + non-durable");

    let ch = channel(&conn).await;
    let res = try_declare(
        &ch,
        &unique("q-quorum-autodel"),
        QueueDeclareOptions {
            durable: true,
            auto_delete: true,
            ..Default::default()
        },
        queue_type("quorum"),
    )
    .await;
    // "invalid property 'auto-delete' for queue '...'"
    assert_code(res, PRECONDITION_FAILED, "quorum + auto-delete");
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_queue_type_is_precondition_failed() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let res = try_declare(&ch, &unique("q-foo"), durable(), queue_type("foo")).await;
    assert_code(res, PRECONDITION_FAILED, "x-queue-type=foo");
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declare_ok_reports_ready_messages_and_consumers() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    // Confirms make sure every message is in the queue before it is counted:
    // RabbitMQ answers declare-ok's counts ahead of deliveries still in flight.
    let ch = confirm_channel(&conn).await;
    let q = unique("q-counts");
    let d = declare_queue(&ch, &q).await;
    assert_eq!((d.message_count(), d.consumer_count()), (0, 0));
    for i in 0..3 {
        publish(&ch, "", &q, format!("m{i}").as_bytes()).await;
    }
    let d = declare_queue(&ch, &q).await;
    assert_eq!((d.message_count(), d.consumer_count()), (3, 0));

    // A consumer holding one unacked message: message_count counts ready
    // messages only, consumer_count counts the consumer.
    let cch = channel(&conn).await;
    within("basic.qos", cch.basic_qos(1, BasicQosOptions::default()))
        .await
        .expect("basic.qos");
    let mut consumer = consume(&cch, &q, "counter", false).await;
    let first = next_delivery(&mut consumer).await;
    assert_eq!(first.data, b"m0");
    let d = declare_queue(&ch, &q).await;
    assert_eq!((d.message_count(), d.consumer_count()), (2, 1));
    // Passive declare reports the same.
    assert_eq!(queue_counts(&ch, &q).await, (2, 1));
}

/// Every x-argument RabbitMQ 3.10 knows, on every queue type, and bad
/// values: pika gets the answer RabbitMQ gives, word for word
/// (`compat-tests/python/queue_args.py`, which passes against a RabbitMQ
/// 3.10 node with `--rabbitmq`).
#[test]
fn pika_gets_rabbitmqs_answer_to_every_argument() {
    let broker = Broker::start();
    compat_tests::common::python::run_cases("queue_args.py", broker.amqp_port, 100);
}
