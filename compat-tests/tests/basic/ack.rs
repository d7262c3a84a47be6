//! basic.ack, nack, reject and recover, and requeue when a channel or connection goes.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_removes_the_message() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-ack");
    declare_queue(&pch, &q).await;
    publish_n(&pch, &q, 2).await;
    let ch = channel(&conn).await;
    let mut consumer = consume(&ch, &q, "acker", false).await;
    let got = collect_exactly(&mut [&mut consumer], 2).await;
    assert!(
        within("basic.ack", got[0][0].ack(BasicAckOptions::default()))
            .await
            .expect("ack")
    );
    // Closing the channel requeues only the unacked one.
    within("channel.close", ch.close(200, "OK".into()))
        .await
        .expect("channel.close");
    let back = drain(&pch, &q).await;
    assert_eq!(back, vec![b"m1".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_multiple_acks_up_to_the_tag() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-ack-multi");
    declare_queue(&pch, &q).await;
    publish_n(&pch, &q, 5).await;
    let ch = channel(&conn).await;
    let mut consumer = consume(&ch, &q, "multi", false).await;
    let got = collect_exactly(&mut [&mut consumer], 5).await;
    ack(&ch, got[0][2].delivery_tag, true).await;
    within("channel.close", ch.close(200, "OK".into()))
        .await
        .expect("channel.close");
    let left: Vec<String> = drain(&pch, &q)
        .await
        .into_iter()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .collect();
    assert_eq!(left, ["m3", "m4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_requeue_redelivers_with_redelivered_flag() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("b-nack");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"again").await;
    let mut consumer = consume(&ch, &q, "nacker", false).await;
    let first = next_delivery(&mut consumer).await;
    assert!(!first.redelivered);
    assert!(
        within(
            "basic.nack",
            first.nack(BasicNackOptions {
                requeue: true,
                ..Default::default()
            })
        )
        .await
        .expect("nack")
    );
    let second = next_delivery(&mut consumer).await;
    assert_eq!(second.data, b"again");
    assert!(
        second.redelivered,
        "requeued message must be redelivered=true"
    );
    assert!(second.delivery_tag > first.delivery_tag);
    second.ack(BasicAckOptions::default()).await.expect("ack");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_multiple() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-nack-multi");
    declare_queue(&pch, &q).await;
    publish_n(&pch, &q, 4).await;
    // Pull with basic.get so the requeued messages wait in the queue.
    let ch = channel(&conn).await;
    let mut tags = Vec::new();
    for _ in 0..4 {
        tags.push(
            get_with(&ch, &q, false)
                .await
                .expect("a message")
                .delivery
                .delivery_tag,
        );
    }
    // Requeue the first two in one nack; drop the last two in another.
    within(
        "basic.nack",
        ch.basic_nack(
            tags[1],
            BasicNackOptions {
                multiple: true,
                requeue: true,
            },
        ),
    )
    .await
    .expect("nack");
    within(
        "basic.nack",
        ch.basic_nack(
            tags[3],
            BasicNackOptions {
                multiple: true,
                requeue: false,
            },
        ),
    )
    .await
    .expect("nack");
    let a = get(&ch, &q).await.expect("requeued m0");
    let b = get(&ch, &q).await.expect("requeued m1");
    assert_eq!(
        (a.delivery.data.as_slice(), b.delivery.data.as_slice()),
        (&b"m0"[..], &b"m1"[..])
    );
    assert!(a.delivery.redelivered && b.delivery.redelivered);
    assert!(get(&ch, &q).await.is_none(), "m2 and m3 were dropped");
    assert!(ch.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_without_requeue_drops() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("b-reject");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"unwanted").await;
    publish(&ch, "", &q, b"wanted").await;
    let m = get_with(&ch, &q, false).await.expect("a message");
    assert_eq!(m.delivery.data, b"unwanted");
    within(
        "basic.reject",
        m.delivery.reject(BasicRejectOptions { requeue: false }),
    )
    .await
    .expect("reject");
    let m = get_with(&ch, &q, false).await.expect("a message");
    assert_eq!(m.delivery.data, b"wanted");
    assert!(!m.delivery.redelivered);
    // reject with requeue puts it back.
    within(
        "basic.reject",
        m.delivery.reject(BasicRejectOptions { requeue: true }),
    )
    .await
    .expect("reject");
    let m = get(&ch, &q).await.expect("requeued");
    assert_eq!(m.delivery.data, b"wanted");
    assert!(m.delivery.redelivered);
    assert!(get(&ch, &q).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_requeues_unacked_with_redelivered_flag() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("b-recover");
    declare_queue(&ch, &q).await;
    publish_n(&ch, &q, 3).await;
    // Hold three unacked messages (basic.get, so lapin's consumer buffer plays
    // no part), ack the middle one.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(get_with(&ch, &q, false).await.expect("a message"));
    }
    ack(&ch, held[1].delivery.delivery_tag, false).await;
    within(
        "basic.recover-ok",
        ch.basic_recover(BasicRecoverOptions { requeue: true }),
    )
    .await
    .expect("basic.recover");
    let a = get(&ch, &q).await.expect("m0 again");
    let b = get(&ch, &q).await.expect("m2 again");
    assert_eq!(
        (a.delivery.data.as_slice(), b.delivery.data.as_slice()),
        (&b"m0"[..], &b"m2"[..])
    );
    assert!(a.delivery.redelivered && b.delivery.redelivered);
    assert!(get(&ch, &q).await.is_none(), "the acked one stays acked");
}

/// RabbitMQ does not implement basic.recover with requeue=false: 540
/// NOT_IMPLEMENTED ("requeue=false"), a connection error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_without_requeue_is_not_implemented() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let res = within(
        "basic.recover",
        ch.basic_recover(BasicRecoverOptions { requeue: false }),
    )
    .await;
    assert_code(res, NOT_IMPLEMENTED, "basic.recover requeue=false");
    wait_connection_closed(&conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_messages_return_when_the_channel_closes() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-chclose");
    declare_queue(&pch, &q).await;
    publish_n(&pch, &q, 3).await;
    let ch = channel(&conn).await;
    let mut consumer = consume(&ch, &q, "", false).await;
    collect_exactly(&mut [&mut consumer], 3).await;
    assert_eq!(queue_counts(&pch, &q).await, (0, 1));
    within("channel.close", ch.close(200, "OK".into()))
        .await
        .expect("channel.close");
    let mut back = Vec::new();
    while let Some(m) = get(&pch, &q).await {
        assert!(
            m.delivery.redelivered,
            "requeued on close must be redelivered"
        );
        back.push(String::from_utf8_lossy(&m.delivery.data).into_owned());
    }
    assert_eq!(back, ["m0", "m1", "m2"], "requeued in their original order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_messages_return_when_the_connection_closes() {
    let broker = Broker::start();
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-connclose");
    declare_queue(&pch, &q).await;
    publish_n(&pch, &q, 3).await;
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    // One via basic.get, two via a consumer.
    let got = get_with(&ch, &q, false).await.expect("m0");
    assert_eq!(got.delivery.data, b"m0");
    let mut consumer = consume(&ch, &q, "", false).await;
    collect_exactly(&mut [&mut consumer], 2).await;
    within("connection.close", conn.close(200, "bye".into()))
        .await
        .expect("connection.close");
    let mut back = Vec::new();
    while let Some(m) = get(&pch, &q).await {
        assert!(m.delivery.redelivered);
        back.push(String::from_utf8_lossy(&m.delivery.data).into_owned());
    }
    assert_eq!(back, ["m0", "m1", "m2"]);
}
