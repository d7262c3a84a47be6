//! Durable declarations survive SIGKILL; transient ones do not.

use super::*;

const EXCHANGES: [(&str, ExchangeKind); 4] = [
    ("restart.direct", ExchangeKind::Direct),
    ("restart.fanout", ExchangeKind::Fanout),
    ("restart.topic", ExchangeKind::Topic),
    ("restart.headers", ExchangeKind::Headers),
];

fn queue_args(max_length: i64) -> FieldTable {
    let mut t = FieldTable::default();
    t.insert("x-max-length".into(), AMQPValue::LongLongInt(max_length));
    t.insert(
        "x-stablemq-test".into(),
        AMQPValue::LongString("kept".into()),
    );
    t
}

fn headers_binding() -> FieldTable {
    let mut t = FieldTable::default();
    t.insert("x-match".into(), AMQPValue::LongString("all".into()));
    t.insert("colour".into(), AMQPValue::LongString("blue".into()));
    t
}

fn headers(colour: &str) -> BasicProperties {
    let mut t = FieldTable::default();
    t.insert("colour".into(), AMQPValue::LongString(colour.into()));
    BasicProperties::default().with_headers(t)
}

/// Durable exchanges of each type, a durable queue with arguments, queue and
/// exchange-to-exchange bindings (one removed again), a non-durable exchange and
/// queue, a durable queue deleted again, and a durable queue holding both
/// persistent and transient messages.
pub async fn setup_declarations(uri: &str) -> Connection {
    let conn = connect(uri).await;
    let ch = confirm_channel(&conn).await;
    for (name, kind) in EXCHANGES {
        ch.exchange_declare(name.into(), kind, durable_exchange(), FieldTable::default())
            .await
            .expect("exchange.declare");
    }
    ch.exchange_declare(
        "restart.transient-exchange".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange.declare");

    for q in [
        "restart.q.direct",
        "restart.q.fanout",
        "restart.q.topic",
        "restart.q.headers",
    ] {
        ch.queue_declare(q.into(), durable_queue(), FieldTable::default())
            .await
            .expect("queue.declare");
    }
    ch.queue_declare("restart.q.args".into(), durable_queue(), queue_args(1000))
        .await
        .expect("queue.declare with arguments");
    ch.queue_declare(
        "restart.q.transient".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("queue.declare");
    ch.queue_declare(
        "restart.q.deleted".into(),
        durable_queue(),
        FieldTable::default(),
    )
    .await
    .expect("queue.declare");
    ch.queue_delete("restart.q.deleted".into(), QueueDeleteOptions::default())
        .await
        .expect("queue.delete");

    let bind = |q: &'static str, ex: &'static str, key: &'static str, args: FieldTable| {
        let ch = ch.clone();
        async move {
            ch.queue_bind(
                q.into(),
                ex.into(),
                key.into(),
                QueueBindOptions::default(),
                args,
            )
            .await
            .expect("queue.bind");
        }
    };
    bind(
        "restart.q.direct",
        "restart.direct",
        "k1",
        FieldTable::default(),
    )
    .await;
    bind(
        "restart.q.direct",
        "restart.direct",
        "k2",
        FieldTable::default(),
    )
    .await;
    bind(
        "restart.q.fanout",
        "restart.fanout",
        "",
        FieldTable::default(),
    )
    .await;
    bind(
        "restart.q.topic",
        "restart.topic",
        "a.*",
        FieldTable::default(),
    )
    .await;
    bind(
        "restart.q.headers",
        "restart.headers",
        "",
        headers_binding(),
    )
    .await;
    bind(
        "restart.q.args",
        "restart.direct",
        "args",
        FieldTable::default(),
    )
    .await;
    ch.queue_unbind(
        "restart.q.direct".into(),
        "restart.direct".into(),
        "k2".into(),
        FieldTable::default(),
    )
    .await
    .expect("queue.unbind");
    // restart.topic --e2e.#--> restart.fanout
    ch.exchange_bind(
        "restart.fanout".into(),
        "restart.topic".into(),
        "e2e.#".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange.bind");

    ch.queue_declare(
        "restart.q.mixed".into(),
        durable_queue(),
        FieldTable::default(),
    )
    .await
    .expect("queue.declare");
    for i in 0..10 {
        publish_confirmed(
            &ch,
            "",
            "restart.q.mixed",
            format!("p{i}").as_bytes(),
            persistent(),
        )
        .await;
        publish_confirmed(
            &ch,
            "",
            "restart.q.mixed",
            format!("t{i}").as_bytes(),
            transient(),
        )
        .await;
    }
    conn
}

pub async fn check_declarations(uri: &str) {
    let conn = connect(uri).await;

    // Each durable exchange is back with its type: the same declaration is
    // accepted, another type is refused with 406 PRECONDITION_FAILED.
    for (name, kind) in EXCHANGES {
        let ch = conn.create_channel().await.expect("channel");
        ch.exchange_declare(
            name.into(),
            kind.clone(),
            ExchangeDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("durable exchange {name} is gone: {e}"));
        ch.exchange_declare(
            name.into(),
            kind.clone(),
            durable_exchange(),
            FieldTable::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("redeclare {name}: {e}"));
        let other = if kind == ExchangeKind::Fanout {
            ExchangeKind::Direct
        } else {
            ExchangeKind::Fanout
        };
        let r = ch
            .exchange_declare(
                name.into(),
                other,
                durable_exchange(),
                FieldTable::default(),
            )
            .await;
        assert_soft_error(r, AMQPSoftError::PRECONDITIONFAILED, name);
    }

    // The queue arguments were kept: the same arguments are accepted, a
    // different x-max-length is refused with 406.
    let ch = conn.create_channel().await.expect("channel");
    ch.queue_declare("restart.q.args".into(), durable_queue(), queue_args(1000))
        .await
        .expect("redeclare with the same arguments");
    let r = ch
        .queue_declare("restart.q.args".into(), durable_queue(), queue_args(5))
        .await;
    assert_soft_error(r, AMQPSoftError::PRECONDITIONFAILED, "x-max-length changed");

    // Non-durable and deleted things are gone: 404 NOT_FOUND.
    let ch = conn.create_channel().await.expect("channel");
    let r = ch
        .exchange_declare(
            "restart.transient-exchange".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await;
    assert_soft_error(r, AMQPSoftError::NOTFOUND, "non-durable exchange");
    for q in ["restart.q.transient", "restart.q.deleted"] {
        let ch = conn.create_channel().await.expect("channel");
        let r = ch
            .queue_declare(
                q.into(),
                QueueDeclareOptions::default().passive(),
                FieldTable::default(),
            )
            .await;
        assert_soft_error(r, AMQPSoftError::NOTFOUND, q);
    }

    // Only the persistent messages are left, in order.
    let ch = confirm_channel(&conn).await;
    let want: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
    assert_eq!(
        drain(&ch, "restart.q.mixed").await,
        want,
        "transient messages must be gone"
    );

    // The bindings route as before the crash.
    publish_confirmed(&ch, "restart.direct", "k1", b"direct k1", transient()).await;
    publish_confirmed(
        &ch,
        "restart.direct",
        "k2",
        b"direct k2 (unbound)",
        transient(),
    )
    .await;
    publish_confirmed(&ch, "restart.direct", "args", b"direct args", transient()).await;
    publish_confirmed(&ch, "restart.fanout", "any", b"fanout", transient()).await;
    publish_confirmed(&ch, "restart.topic", "a.b", b"topic a.b", transient()).await;
    publish_confirmed(&ch, "restart.topic", "a.b.c", b"topic a.b.c", transient()).await;
    publish_confirmed(&ch, "restart.topic", "e2e.x", b"via e2e", transient()).await;
    let colour = |c: &str| headers(c);
    let conf = ch
        .basic_publish(
            "restart.headers".into(),
            "".into(),
            BasicPublishOptions::default(),
            b"headers blue",
            colour("blue"),
        )
        .await
        .expect("publish");
    assert!(bounded("confirm", conf).await.expect("confirm").is_ack());
    let conf = ch
        .basic_publish(
            "restart.headers".into(),
            "".into(),
            BasicPublishOptions::default(),
            b"headers red",
            colour("red"),
        )
        .await
        .expect("publish");
    assert!(bounded("confirm", conf).await.expect("confirm").is_ack());

    assert_eq!(drain(&ch, "restart.q.direct").await, vec!["direct k1"]);
    assert_eq!(drain(&ch, "restart.q.args").await, vec!["direct args"]);
    assert_eq!(
        drain(&ch, "restart.q.fanout").await,
        vec!["fanout", "via e2e"]
    );
    assert_eq!(drain(&ch, "restart.q.topic").await, vec!["topic a.b"]);
    assert_eq!(drain(&ch, "restart.q.headers").await, vec!["headers blue"]);
    conn.close(200, "bye".into()).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_declarations_survive_sigkill_and_transient_ones_do_not() {
    let mut broker = Broker::start();
    let before = setup_declarations(&broker.uri()).await;
    blocking(|| {
        broker.kill9();
        broker.start_again();
    });
    drop(before);
    check_declarations(&broker.uri()).await;
}

// ---------------------------------------------------------------------------
// SIGTERM.
