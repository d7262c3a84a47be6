//! exchange.declare, delete and bind: shapes, reserved names, refusals, auto-delete.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declare_each_builtin_type() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    for (label, kind) in [
        ("direct", ExchangeKind::Direct),
        ("fanout", ExchangeKind::Fanout),
        ("topic", ExchangeKind::Topic),
        ("headers", ExchangeKind::Headers),
    ] {
        let name = unique(&format!("ex-{label}"));
        declare_exchange(&ch, &name, kind.clone()).await;
        // Idempotent: the same declare again succeeds, and so does a passive one.
        declare_exchange(&ch, &name, kind.clone()).await;
        declare_exchange_with(&ch, &name, kind.clone(), passive()).await;
        // A durable one of the same type too, deleted again.
        let durable = unique(&format!("ex-durable-{label}"));
        declare_exchange_with(
            &ch,
            &durable,
            kind,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
        )
        .await;
        within(
            "exchange.delete",
            ch.exchange_delete(durable.as_str().into(), ExchangeDeleteOptions::default()),
        )
        .await
        .expect("exchange.delete");
    }
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_declare_of_missing_exchange_is_not_found() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let res = try_declare(&ch, &unique("ex-missing"), ExchangeKind::Direct, passive()).await;
    assert_code(res, NOT_FOUND, "passive declare of a missing exchange");
    // A channel error, not a connection error.
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclare_with_other_type_is_precondition_failed() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let name = unique("ex-type");
    declare_exchange(&ch, &name, ExchangeKind::Direct).await;
    let res = try_declare(
        &ch,
        &name,
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
    )
    .await;
    assert_code(res, PRECONDITION_FAILED, "redeclare direct as fanout");
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
    // The original is untouched.
    let ch2 = channel(&conn).await;
    declare_exchange(&ch2, &name, ExchangeKind::Direct).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclare_with_other_durability_is_precondition_failed() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let name = unique("ex-durable");
    declare_exchange(&ch, &name, ExchangeKind::Topic).await;
    let res = try_declare(
        &ch,
        &name,
        ExchangeKind::Topic,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
    )
    .await;
    assert_code(res, PRECONDITION_FAILED, "redeclare transient as durable");

    let ch2 = channel(&conn).await;
    let name2 = unique("ex-autodelete");
    declare_exchange(&ch2, &name2, ExchangeKind::Topic).await;
    let res = try_declare(
        &ch2,
        &name2,
        ExchangeKind::Topic,
        ExchangeDeclareOptions {
            auto_delete: true,
            ..Default::default()
        },
    )
    .await;
    assert_code(res, PRECONDITION_FAILED, "redeclare with auto_delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amq_prefix_is_reserved() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let res = try_declare(
        &ch,
        &unique("amq.custom"),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
    )
    .await;
    // "exchange name 'amq.custom...' contains reserved prefix 'amq.*'"
    assert_code(res, ACCESS_REFUSED, "declare of a new amq.* exchange");
    wait_channel_closed(&ch).await;

    // The reservation applies to creation only: redeclaring an existing amq.*
    // exchange with its own properties is fine.
    let ch2 = channel(&conn).await;
    declare_exchange_with(
        &ch2,
        "amq.direct",
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
    )
    .await;

    // Deleting a predeclared exchange is refused.
    let res = within(
        "exchange.delete",
        ch2.exchange_delete("amq.fanout".into(), ExchangeDeleteOptions::default()),
    )
    .await;
    // "deletion of system exchange 'amq.fanout' in vhost '/' not allowed"
    assert_code(res, ACCESS_REFUSED, "delete amq.fanout");
    assert!(exchange_exists(&conn, "amq.fanout").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_exchange_cannot_be_declared_deleted_or_bound() {
    let broker = Broker::start();
    let conn = connect(&broker).await;

    let ch = channel(&conn).await;
    let res = try_declare(
        &ch,
        "",
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
    )
    .await;
    // "operation not permitted on the default exchange"
    assert_code(res, ACCESS_REFUSED, "declare of the default exchange");

    let ch = channel(&conn).await;
    let res = within(
        "exchange.delete",
        ch.exchange_delete("".into(), ExchangeDeleteOptions::default()),
    )
    .await;
    assert_code(res, ACCESS_REFUSED, "delete of the default exchange");

    let ch = channel(&conn).await;
    let q = unique("ex-default-bind");
    declare_queue(&ch, &q).await;
    let res = within(
        "queue.bind",
        ch.queue_bind(
            q.as_str().into(),
            "".into(),
            "whatever".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await;
    assert_code(res, ACCESS_REFUSED, "bind to the default exchange");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predeclared_exchanges_exist() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    for (name, kind) in [
        ("amq.direct", ExchangeKind::Direct),
        ("amq.fanout", ExchangeKind::Fanout),
        ("amq.topic", ExchangeKind::Topic),
        ("amq.headers", ExchangeKind::Headers),
        ("amq.match", ExchangeKind::Headers),
    ] {
        // Passive: the type is not checked.
        declare_exchange_with(&ch, name, ExchangeKind::Direct, passive()).await;
        // Non-passive with the right type and durable=true: equivalent, accepted.
        declare_exchange_with(
            &ch,
            name,
            kind,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
        )
        .await;
    }
    // They route: amq.direct with a queue bound by name.
    let q = unique("ex-amq-direct");
    declare_queue(&ch, &q).await;
    bind(&ch, &q, "amq.direct", &q, FieldTable::default()).await;
    publish(&ch, "amq.direct", &q, b"via amq.direct").await;
    assert_eq!(
        get_body(&ch, &q).await.as_deref(),
        Some(&b"via amq.direct"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_the_exchange_and_its_bindings() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let x = unique("ex-del");
    let q = unique("ex-del-q");
    declare_exchange(&ch, &x, ExchangeKind::Fanout).await;
    declare_queue(&ch, &q).await;
    bind(&ch, &q, &x, "", FieldTable::default()).await;
    within(
        "exchange.delete",
        ch.exchange_delete(x.as_str().into(), ExchangeDeleteOptions::default()),
    )
    .await
    .expect("exchange.delete");
    assert!(!exchange_exists(&conn, &x).await);
    // Recreating it starts without the old binding.
    declare_exchange(&ch, &x, ExchangeKind::Fanout).await;
    let cch = confirm_channel(&conn).await;
    assert_eq!(
        routed_to(&cch, &x, "", BasicProperties::default(), &[q]).await,
        Vec::<usize>::new()
    );
    // Deleting an exchange that does not exist succeeds (RabbitMQ treats
    // exchange.delete as idempotent).
    within(
        "exchange.delete",
        ch.exchange_delete(
            unique("ex-never").as_str().into(),
            ExchangeDeleteOptions::default(),
        ),
    )
    .await
    .expect("exchange.delete of a missing exchange");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_if_unused_with_binding_is_precondition_failed() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let x = unique("ex-inuse");
    let q = unique("ex-inuse-q");
    declare_exchange(&ch, &x, ExchangeKind::Direct).await;
    declare_queue(&ch, &q).await;
    bind(&ch, &q, &x, "k", FieldTable::default()).await;
    let res = within(
        "exchange.delete",
        ch.exchange_delete(
            x.as_str().into(),
            ExchangeDeleteOptions {
                if_unused: true,
                ..Default::default()
            },
        ),
    )
    .await;
    // "exchange '...' in vhost '/' in use"
    assert_code(
        res,
        PRECONDITION_FAILED,
        "delete if-unused of a bound exchange",
    );
    assert!(exchange_exists(&conn, &x).await);

    // Once unbound, if-unused deletes it.
    let ch2 = channel(&conn).await;
    within(
        "queue.unbind",
        ch2.queue_unbind(
            q.as_str().into(),
            x.as_str().into(),
            "k".into(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("queue.unbind");
    within(
        "exchange.delete",
        ch2.exchange_delete(
            x.as_str().into(),
            ExchangeDeleteOptions {
                if_unused: true,
                ..Default::default()
            },
        ),
    )
    .await
    .expect("exchange.delete if-unused");
    assert!(!exchange_exists(&conn, &x).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_to_an_internal_exchange_is_access_refused() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let internal = unique("ex-internal");
    let front = unique("ex-front");
    let q = unique("ex-internal-q");
    declare_exchange_with(
        &ch,
        &internal,
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            internal: true,
            ..Default::default()
        },
    )
    .await;
    declare_exchange(&ch, &front, ExchangeKind::Fanout).await;
    declare_queue(&ch, &q).await;
    bind(&ch, &q, &internal, "", FieldTable::default()).await;
    within(
        "exchange.bind",
        ch.exchange_bind(
            internal.as_str().into(),
            front.as_str().into(),
            "".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("exchange.bind");

    // Reachable through an exchange-to-exchange binding...
    publish(&ch, &front, "", b"through front").await;
    assert_eq!(
        get_body(&ch, &q).await.as_deref(),
        Some(&b"through front"[..])
    );

    // ...but not directly.
    let mut watch = ErrorWatch::new(&conn);
    // A plain channel: on a confirm channel lapin would fail the confirm instead.
    let pch = channel(&conn).await;
    publish(&pch, &internal, "", b"direct").await;
    // "cannot publish to internal exchange '...' in vhost '/'"
    watch
        .expect(ACCESS_REFUSED, "publish to an internal exchange")
        .await;
    wait_channel_closed(&pch).await;
    assert!(conn.status().connected());
    assert!(get_body(&ch, &q).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_to_exchange_bind_and_unbind() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    let src = unique("ex-e2e-src");
    let dst = unique("ex-e2e-dst");
    let q = unique("ex-e2e-q");
    declare_exchange(&ch, &src, ExchangeKind::Direct).await;
    declare_exchange(&ch, &dst, ExchangeKind::Fanout).await;
    declare_queue(&ch, &q).await;
    bind(&ch, &q, &dst, "", FieldTable::default()).await;
    within(
        "exchange.bind",
        ch.exchange_bind(
            dst.as_str().into(),
            src.as_str().into(),
            "k".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("exchange.bind");
    let qs = [q.clone()];
    let none = Vec::<usize>::new();
    assert_eq!(
        routed_to(&ch, &src, "k", BasicProperties::default(), &qs).await,
        vec![0]
    );
    // The source is direct: other keys do not cross the binding.
    assert_eq!(
        routed_to(&ch, &src, "other", BasicProperties::default(), &qs).await,
        none
    );
    within(
        "exchange.unbind",
        ch.exchange_unbind(
            dst.as_str().into(),
            src.as_str().into(),
            "k".into(),
            ExchangeUnbindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("exchange.unbind");
    assert_eq!(
        routed_to(&ch, &src, "k", BasicProperties::default(), &qs).await,
        none
    );
    // The destination still routes on its own.
    assert_eq!(
        routed_to(&ch, &dst, "any", BasicProperties::default(), &qs).await,
        vec![0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_bind_to_missing_exchange_is_not_found() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let dst = unique("ex-e2e-dst");
    declare_exchange(&ch, &dst, ExchangeKind::Fanout).await;
    let res = within(
        "exchange.bind",
        ch.exchange_bind(
            dst.as_str().into(),
            unique("ex-missing").as_str().into(),
            "".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await;
    assert_code(res, NOT_FOUND, "exchange.bind from a missing source");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_delete_exchange_goes_with_its_last_binding() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let x = unique("ex-autodel");
    let q1 = unique("ex-autodel-q1");
    let q2 = unique("ex-autodel-q2");
    declare_exchange_with(
        &ch,
        &x,
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            auto_delete: true,
            ..Default::default()
        },
    )
    .await;
    // Never bound: it stays.
    assert!(exchange_exists(&conn, &x).await);
    declare_queue(&ch, &q1).await;
    declare_queue(&ch, &q2).await;
    bind(&ch, &q1, &x, "a", FieldTable::default()).await;
    bind(&ch, &q2, &x, "b", FieldTable::default()).await;
    within(
        "queue.unbind",
        ch.queue_unbind(
            q1.as_str().into(),
            x.as_str().into(),
            "a".into(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("queue.unbind");
    // One binding left: it stays.
    assert!(exchange_exists(&conn, &x).await);
    // The last binding goes with its queue, and the exchange with it.
    within(
        "queue.delete",
        ch.queue_delete(q2.as_str().into(), QueueDeleteOptions::default()),
    )
    .await
    .expect("queue.delete");
    assert!(!exchange_exists(&conn, &x).await);
}

/// RabbitMQ 4.0+ (commit b6aacb7, "Declaring an exchange with an invalid type is
/// a precondition failure"): a channel error, 406 PRECONDITION_FAILED "unknown
/// exchange type 'x-no-such-type'". RabbitMQ 3.x (e.g. Debian 12's 3.10) instead
/// closed the whole connection with 503 COMMAND_INVALID; this test follows 4.x.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_exchange_type_is_precondition_failed() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let res = try_declare(
        &ch,
        &unique("ex-badtype"),
        ExchangeKind::Custom("x-no-such-type".into()),
        ExchangeDeclareOptions::default(),
    )
    .await;
    assert_code(res, PRECONDITION_FAILED, "declare with an unknown type");
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected(), "must not be a connection error");
}
