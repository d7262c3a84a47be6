//! AMQP class `channel`: open, close, reuse of ids, flow, and isolation of channel
//! errors, as RabbitMQ does them.

use compat_tests::common;

use common::*;
use lapin::options::{BasicQosOptions, ChannelFlowOptions, QueueDeclareOptions};
use lapin::protocol::{AMQPClass, channel as chm, connection as connm};
use lapin::types::FieldTable;

fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..Default::default()
    }
}

/// A raw connection that has completed the handshake on `/` as guest.
async fn raw_open(broker: &Broker) -> RawConn {
    let mut raw = RawConn::connect(broker.addr()).await;
    raw.read_start().await;
    let tune = raw.start_ok("guest", "guest").await;
    raw.tune_ok_and_open(tune.channel_max, tune.frame_max, 0, "/")
        .await;
    raw
}

/// channel.open (20,10) with its one reserved short string.
async fn raw_channel_open(raw: &mut RawConn, channel: u16) {
    raw.send_method(channel, 20, 10, &[0]).await;
}

/// Read the next method and expect a connection.close with `code`.
async fn expect_raw_connection_close(raw: &mut RawConn, code: u16) {
    match raw.read_method().await {
        (0, AMQPClass::Connection(connm::AMQPMethod::Close(c))) => {
            assert_eq!(c.reply_code, code, "connection.close {c:?}")
        }
        other => panic!("expected connection.close {code}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_and_close() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    assert!(ch.status().connected());
    declare_queue(&ch, &unique("chan-open")).await;
    within("channel.close-ok", ch.close(200, "OK".into()))
        .await
        .expect("channel.close");
    assert!(!ch.status().connected());
    // The connection outlives its channel.
    assert!(conn.status().connected());
    let ch2 = channel(&conn).await;
    declare_queue(&ch2, &unique("chan-open")).await;
}

/// lapin allocates ids round-robin up to channel_max; with channel_max=2 the third
/// channel reuses the id of the first, closed one, and the broker must accept it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_channel_id_can_be_reopened() {
    let broker = Broker::start();
    let conn = connect_uri(&format!("{}?channel_max=2", broker.uri())).await;
    assert_eq!(conn.configuration().channel_max(), 2);
    let a = confirm_channel(&conn).await;
    let first_id = a.id();
    let q = unique("chan-reopen");
    declare_queue(&a, &q).await;
    publish(&a, "", &q, b"before").await;
    within("channel.close-ok", a.close(200, "OK".into()))
        .await
        .expect("channel.close");
    let b = confirm_channel(&conn).await;
    assert_ne!(b.id(), first_id);
    let c = confirm_channel(&conn).await;
    assert_eq!(c.id(), first_id, "lapin should reuse the closed id");
    // The reopened channel is fully usable.
    assert_eq!(get_body(&c, &q).await.as_deref(), Some(&b"before"[..]));
    publish(&c, "", &q, b"after").await;
    assert_eq!(get_body(&b, &q).await.as_deref(), Some(&b"after"[..]));
}

/// The same at the frame level: open, close, open again on channel 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_channel_reopen_after_close_ok() {
    let broker = Broker::start();
    let mut raw = raw_open(&broker).await;
    for round in 0..2 {
        raw_channel_open(&mut raw, 1).await;
        match raw.read_method().await {
            (1, AMQPClass::Channel(chm::AMQPMethod::OpenOk(_))) => {}
            other => panic!("round {round}: expected channel.open-ok, got {other:?}"),
        }
        // channel.close (20,40): code 200, text "", class 0, method 0.
        let mut args = Vec::new();
        args.extend_from_slice(&200u16.to_be_bytes());
        put_shortstr(&mut args, "");
        args.extend_from_slice(&[0, 0, 0, 0]);
        raw.send_method(1, 20, 40, &args).await;
        match raw.read_method().await {
            (1, AMQPClass::Channel(chm::AMQPMethod::CloseOk(_))) => {}
            other => panic!("round {round}: expected channel.close-ok, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_on_unopened_channel_is_a_channel_error() {
    let broker = Broker::start();
    let mut raw = raw_open(&broker).await;
    // basic.qos (60,10) on channel 3, never opened.
    let mut args = Vec::new();
    args.extend_from_slice(&0u32.to_be_bytes());
    args.extend_from_slice(&1u16.to_be_bytes());
    args.push(0);
    raw.send_method(3, 60, 10, &args).await;
    // RabbitMQ: connection.close 504 CHANNEL_ERROR "expected 'channel.open'".
    expect_raw_connection_close(&mut raw, CHANNEL_ERROR).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_open_of_an_open_channel_is_a_channel_error() {
    let broker = Broker::start();
    let mut raw = raw_open(&broker).await;
    raw_channel_open(&mut raw, 1).await;
    match raw.read_method().await {
        (1, AMQPClass::Channel(chm::AMQPMethod::OpenOk(_))) => {}
        other => panic!("expected channel.open-ok, got {other:?}"),
    }
    raw_channel_open(&mut raw, 1).await;
    // RabbitMQ: connection.close 504 CHANNEL_ERROR "second 'channel.open' seen".
    expect_raw_connection_close(&mut raw, CHANNEL_ERROR).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_flow_active_true_is_acknowledged() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let active = within(
        "channel.flow-ok",
        ch.channel_flow(ChannelFlowOptions { active: true }),
    )
    .await
    .expect("channel.flow");
    assert!(active, "flow-ok must echo active=true");
    // The channel still works.
    let q = unique("chan-flow");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"x").await;
    assert!(get_body(&ch, &q).await.is_some());
}

/// RabbitMQ does not implement client-requested flow stop: channel.flow
/// active=false closes the connection with 540 NOT_IMPLEMENTED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_flow_active_false_is_not_implemented() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let res = within(
        "channel.flow",
        ch.channel_flow(ChannelFlowOptions { active: false }),
    )
    .await;
    assert_code(res, NOT_IMPLEMENTED, "channel.flow active=false");
    wait_connection_closed(&conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_error_does_not_affect_other_channels() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let bad = channel(&conn).await;
    let good = confirm_channel(&conn).await;
    let q = unique("chan-iso");
    declare_queue(&good, &q).await;
    publish(&good, "", &q, b"one").await;

    let res = bad
        .queue_declare(
            unique("chan-missing").as_str().into(),
            passive(),
            FieldTable::default(),
        )
        .await;
    assert_code(res, NOT_FOUND, "passive declare of a missing queue");
    wait_channel_closed(&bad).await;

    // The connection and the other channel carry on.
    assert!(conn.status().connected());
    assert!(good.status().connected());
    publish(&good, "", &q, b"two").await;
    assert_eq!(
        drain(&good, &q).await,
        vec![b"one".to_vec(), b"two".to_vec()]
    );
    // And new channels open on the same connection.
    let third = channel(&conn).await;
    declare_queue(&third, &unique("chan-iso")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_channel_cannot_be_used() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    // Closed by the broker (404).
    let ch = channel(&conn).await;
    let res = ch
        .queue_declare(
            unique("chan-missing").as_str().into(),
            passive(),
            FieldTable::default(),
        )
        .await;
    assert_code(res, NOT_FOUND, "passive declare of a missing queue");
    wait_channel_closed(&ch).await;
    assert!(
        ch.basic_qos(1, BasicQosOptions::default()).await.is_err(),
        "basic.qos on a channel the broker closed"
    );
    // Closed by the client.
    let ch2 = channel(&conn).await;
    within("channel.close-ok", ch2.close(200, "OK".into()))
        .await
        .expect("channel.close");
    assert!(
        ch2.queue_declare(
            "".into(),
            QueueDeclareOptions::default(),
            FieldTable::default()
        )
        .await
        .is_err(),
        "queue.declare on a closed channel"
    );
    assert!(conn.status().connected());
}
