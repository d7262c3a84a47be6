//! Routing extensions, as RabbitMQ does them: alternate exchanges
//! (https://www.rabbitmq.com/docs/ae) and direct reply-to
//! (https://www.rabbitmq.com/docs/direct-reply-to).
//!
//! Checked against RabbitMQ 3.10.

use compat_tests::common;

use common::*;
use lapin::options::{BasicConsumeOptions, BasicPublishOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Confirmation, ExchangeKind};

const REPLY_TO: &str = "amq.rabbitmq.reply-to";

fn mandatory() -> BasicPublishOptions {
    BasicPublishOptions {
        mandatory: true,
        ..Default::default()
    }
}

/// Messages the exchange cannot route go to its `alternate-exchange`, keeping their
/// original exchange and routing key; a mandatory publish routed that way is not
/// returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternate_exchange_receives_unroutable_messages() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let ae = unique("ae-alt");
    let main = unique("ae-main");
    let routed = unique("ae-routed");
    let unrouted = unique("ae-unrouted");
    declare_exchange_args(&ch, &ae, ExchangeKind::Fanout, FieldTable::default()).await;
    declare_exchange_args(
        &ch,
        &main,
        ExchangeKind::Direct,
        ftable(&[("alternate-exchange", lstr(&ae))]),
    )
    .await;
    declare_queue(&ch, &routed).await;
    declare_queue(&ch, &unrouted).await;
    bind_queue(&ch, &routed, &main, "known").await;
    bind_queue(&ch, &unrouted, &ae, "").await;

    publish(&ch, &main, "known", b"routed").await;
    let c = publish_full(
        &ch,
        &main,
        "unknown",
        mandatory(),
        b"via-ae",
        BasicProperties::default(),
    )
    .await;
    assert!(
        matches!(c, Confirmation::Ack(None)),
        "mandatory publish routed by the AE is acked and not returned: {c:?}"
    );
    assert_eq!(drain(&ch, &routed).await, vec![b"routed".to_vec()]);
    let m = get(&ch, &unrouted)
        .await
        .expect("message in the AE's queue");
    assert_eq!(m.delivery.data, b"via-ae");
    assert_eq!(
        m.delivery.exchange.as_str(),
        main,
        "original exchange is kept"
    );
    assert_eq!(m.delivery.routing_key.as_str(), "unknown");
    assert!(
        get(&ch, &unrouted).await.is_none(),
        "routable messages skip the AE"
    );
    assert!(
        ch.wait_for_confirms().await.expect("confirms").is_empty(),
        "no basic.return"
    );
}

/// When the alternate exchange cannot route the message either, a mandatory publish
/// is returned with 312 NO_ROUTE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mandatory_publish_is_returned_when_the_alternate_exchange_routes_nowhere() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let ae = unique("ae-empty");
    let main = unique("ae-main-empty");
    declare_exchange_args(&ch, &ae, ExchangeKind::Fanout, FieldTable::default()).await;
    declare_exchange_args(
        &ch,
        &main,
        ExchangeKind::Direct,
        ftable(&[("alternate-exchange", lstr(&ae))]),
    )
    .await;
    let c = publish_full(
        &ch,
        &main,
        "nowhere",
        mandatory(),
        b"lost",
        BasicProperties::default(),
    )
    .await;
    match c {
        Confirmation::Ack(Some(ret)) => {
            assert_eq!(ret.reply_code, NO_ROUTE);
            assert_eq!(ret.exchange.as_str(), main);
            assert_eq!(ret.routing_key.as_str(), "nowhere");
        }
        other => panic!("expected a basic.return then basic.ack, got {other:?}"),
    }
}

/// Direct reply-to: the requester consumes from the pseudo-queue
/// `amq.rabbitmq.reply-to` (no-ack) and publishes with reply_to set to it; the broker
/// rewrites reply_to to `amq.rabbitmq.reply-to.<token>`, and a reply published to
/// the default exchange with that routing key reaches the requester.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_reply_to_round_trip() {
    let broker = Broker::start();
    let (_server_conn, server) = open(&broker).await;
    let rpc = unique("rpc-requests");
    declare_queue(&server, &rpc).await;

    let (_client_conn, client) = open(&broker).await;
    let mut replies = consume(&client, REPLY_TO, "reply-consumer", true).await;
    publish_props(
        &client,
        "",
        &rpc,
        b"ping",
        BasicProperties::default()
            .with_reply_to(REPLY_TO.into())
            .with_correlation_id("c-1".into()),
    )
    .await;

    let req = get_eventually(&server, &rpc, true).await.delivery;
    assert_eq!(req.data, b"ping");
    let reply_to = req
        .properties
        .reply_to()
        .as_ref()
        .expect("request carries reply_to")
        .as_str()
        .to_string();
    assert!(
        reply_to.starts_with("amq.rabbitmq.reply-to.") && reply_to.len() > REPLY_TO.len() + 1,
        "reply_to rewritten to amq.rabbitmq.reply-to.<token>, got {reply_to:?}"
    );
    publish_props(
        &server,
        "",
        &reply_to,
        b"pong",
        BasicProperties::default().with_correlation_id("c-1".into()),
    )
    .await;

    let d = next_delivery(&mut replies).await;
    assert_eq!(d.data, b"pong");
    assert_eq!(d.exchange.as_str(), "");
    assert_eq!(d.routing_key.as_str(), reply_to);
    assert_eq!(
        d.properties.correlation_id().as_ref().map(|s| s.as_str()),
        Some("c-1")
    );
    assert_no_delivery(&mut replies, "only the one reply").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_reply_to_consumer_must_be_no_ack() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let res = within(
        "basic.consume",
        ch.basic_consume(
            REPLY_TO.into(),
            "acking-reply-consumer".into(),
            BasicConsumeOptions {
                no_ack: false,
                ..Default::default()
            },
            FieldTable::default(),
        ),
    )
    .await;
    // "reply consumer cannot acknowledge"
    assert_code(
        res,
        PRECONDITION_FAILED,
        "reply-to consumer with no_ack=false",
    );
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_with_direct_reply_to_requires_a_reply_consumer() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let admin = confirm_channel(&conn).await;
    let rpc = unique("rpc-noconsumer");
    declare_queue(&admin, &rpc).await;
    let ch = channel(&conn).await;
    let mut watch = ErrorWatch::new(&conn);
    publish_props(
        &ch,
        "",
        &rpc,
        b"orphan",
        BasicProperties::default().with_reply_to(REPLY_TO.into()),
    )
    .await;
    // "fast reply consumer does not exist"
    watch
        .expect(PRECONDITION_FAILED, "reply_to without a reply consumer")
        .await;
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
    assert_eq!(
        queue_counts(&admin, &rpc).await.0,
        0,
        "the request was dropped"
    );
}
