//! basic.qos prefetch, delivery-tag errors and delivery order.

use super::*;

/// basic.qos global=false: the limit applies to each consumer created after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos_prefetch_per_consumer() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-qos");
    declare_queue(&pch, &q).await;
    let ch = channel(&conn).await;
    qos(&ch, 2, false).await;
    let mut a = consume(&ch, &q, "a", false).await;
    let mut b = consume(&ch, &q, "b", false).await;
    publish_n(&pch, &q, 10).await;
    let got = collect_exactly(&mut [&mut a, &mut b], 4).await;
    assert_eq!(got[0].len(), 2, "consumer a holds at most 2");
    assert_eq!(got[1].len(), 2, "consumer b holds at most 2");
    assert_eq!(queue_counts(&pch, &q).await, (6, 2));
    // An ack frees one slot for that consumer only.
    ack(&ch, got[0][0].delivery_tag, false).await;
    let more = collect_exactly(&mut [&mut a, &mut b], 1).await;
    assert_eq!((more[0].len(), more[1].len()), (1, 0));
    // Acking everything lets the rest flow.
    let last = got
        .iter()
        .chain(more.iter())
        .flatten()
        .map(|d| d.delivery_tag)
        .max()
        .expect("deliveries");
    ack(&ch, last, true).await;
    let rest = collect_exactly(&mut [&mut a, &mut b], 4).await;
    assert_eq!(rest[0].len() + rest[1].len(), 4);
}

/// basic.qos global=true: the limit is shared by all consumers on the channel.
/// (RabbitMQ 4.3 deprecates this and by default treats global=true as per-consumer
/// unless `deprecated_features.permit.global_qos = true`; this test encodes the
/// behaviour with the feature permitted, as in every release before 4.3.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos_prefetch_per_channel() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q1 = unique("b-qos-global1");
    let q2 = unique("b-qos-global2");
    declare_queue(&pch, &q1).await;
    declare_queue(&pch, &q2).await;
    let ch = channel(&conn).await;
    qos(&ch, 3, true).await;
    let mut a = consume(&ch, &q1, "a", false).await;
    let mut b = consume(&ch, &q2, "b", false).await;
    publish_n(&pch, &q1, 5).await;
    publish_n(&pch, &q2, 5).await;
    let got = collect_exactly(&mut [&mut a, &mut b], 3).await;
    assert_eq!(got[0].len() + got[1].len(), 3, "channel holds at most 3");
    // One ack frees exactly one slot on the channel.
    let first = got.iter().flatten().next().expect("a delivery");
    ack(&ch, first.delivery_tag, false).await;
    collect_exactly(&mut [&mut a, &mut b], 1).await;
    let (r1, _) = queue_counts(&pch, &q1).await;
    let (r2, _) = queue_counts(&pch, &q2).await;
    assert_eq!(r1 + r2, 10 - 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos_prefetch_size_is_not_implemented() {
    let broker = Broker::start();
    let (conn, _ch) = open(&broker).await;
    // lapin has no prefetch_size argument; send it raw.
    let mut raw = RawConn::connect(broker.addr()).await;
    raw.read_start().await;
    let tune = raw.start_ok("guest", "guest").await;
    raw.tune_ok_and_open(tune.channel_max, tune.frame_max, 0, "/")
        .await;
    raw.send_method(1, 20, 10, &[0]).await;
    raw.read_method().await; // channel.open-ok
    let mut args = Vec::new();
    args.extend_from_slice(&4096u32.to_be_bytes()); // prefetch-size
    args.extend_from_slice(&0u16.to_be_bytes()); // prefetch-count
    args.push(0); // global
    raw.send_method(1, 60, 10, &args).await;
    match raw.read_method().await {
        (
            0,
            lapin::protocol::AMQPClass::Connection(lapin::protocol::connection::AMQPMethod::Close(
                c,
            )),
        ) => assert_eq!(c.reply_code, NOT_IMPLEMENTED, "{c:?}"),
        other => panic!("expected connection.close 540, got {other:?}"),
    }
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_of_unknown_delivery_tag_is_precondition_failed() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let mut watch = ErrorWatch::new(&conn);
    ack(&ch, 42, false).await;
    // "unknown delivery tag 42"
    watch
        .expect(PRECONDITION_FAILED, "ack of an unknown delivery tag")
        .await;
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_ack_is_precondition_failed() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-double-ack");
    declare_queue(&pch, &q).await;
    publish_n(&pch, &q, 2).await;
    let ch = channel(&conn).await;
    let m = get_with(&ch, &q, false).await.expect("a message");
    let tag = m.delivery.delivery_tag;
    let mut watch = ErrorWatch::new(&conn);
    ack(&ch, tag, false).await;
    ack(&ch, tag, false).await;
    watch
        .expect(PRECONDITION_FAILED, "second ack of one tag")
        .await;
    wait_channel_closed(&ch).await;
    // The first ack took effect; the untouched message is still there.
    assert_eq!(drain(&pch, &q).await, vec![b"m1".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_consumer_sees_publish_order() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let q = unique("b-order");
    declare_queue(&ch, &q).await;
    let mut consumer = consume(&ch, &q, "ordered", false).await;
    let pch = channel(&conn).await;
    const N: usize = 1000;
    for i in 0..N {
        publish(&pch, "", &q, format!("{i}").as_bytes()).await;
    }
    for i in 0..N {
        let d = next_delivery(&mut consumer).await;
        assert_eq!(
            String::from_utf8_lossy(&d.data),
            format!("{i}"),
            "message {i}"
        );
        assert_eq!(d.delivery_tag, i as u64 + 1);
    }
    ack(&ch, N as u64, true).await;
    assert_no_delivery(&mut consumer, "after all were consumed").await;
    assert_eq!(queue_counts(&ch, &q).await, (0, 1));
}
