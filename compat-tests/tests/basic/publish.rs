//! basic.publish and basic.get: properties, returns, refusals.

use super::*;

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
