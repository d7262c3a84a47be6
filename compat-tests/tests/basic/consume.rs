//! basic.consume and basic.cancel: tags, exclusivity, round robin, cancel notify.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_no_ack() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-noack");
    declare_queue(&pch, &q).await;
    publish_n(&pch, &q, 3).await;
    let ch = channel(&conn).await;
    let mut consumer = consume(&ch, &q, "noack", true).await;
    let got = collect_exactly(&mut [&mut consumer], 3).await;
    assert_eq!(bodies(&got[0]), ["m0", "m1", "m2"]);
    assert!(got[0].iter().all(|d| !d.redelivered));
    // Delivery tags start at 1 and increase on the channel.
    let tags: Vec<u64> = got[0].iter().map(|d| d.delivery_tag).collect();
    assert_eq!(tags, [1, 2, 3]);
    // Nothing is held for an ack: closing the channel requeues nothing.
    within("channel.close", ch.close(200, "OK".into()))
        .await
        .expect("channel.close");
    assert_eq!(queue_counts(&pch, &q).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_tags_server_generated_client_chosen_and_duplicate() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let q = unique("b-ctag");
    declare_queue(&ch, &q).await;
    let generated = consume(&ch, &q, "", false).await;
    assert!(
        generated.tag().as_str().starts_with("amq.ctag-"),
        "server-generated tag {:?}",
        generated.tag()
    );
    let generated2 = consume(&ch, &q, "", false).await;
    assert_ne!(generated.tag(), generated2.tag());
    let chosen = consume(&ch, &q, "my-tag", false).await;
    assert_eq!(chosen.tag().as_str(), "my-tag");
    assert_eq!(queue_counts(&ch, &q).await.1, 3);
    // The same tag on another channel is fine: tags are per channel.
    let ch2 = channel(&conn).await;
    let _other = consume(&ch2, &q, "my-tag", false).await;
    // Reusing a tag on the same channel: connection.close 530 NOT_ALLOWED
    // ("attempt to reuse consumer tag 'my-tag'").
    let res = within(
        "basic.consume",
        ch.basic_consume(
            q.as_str().into(),
            "my-tag".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ),
    )
    .await;
    assert_code(res, NOT_ALLOWED, "reuse of a consumer tag");
    wait_connection_closed(&conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_from_missing_queue_is_not_found() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let res = within(
        "basic.consume",
        ch.basic_consume(
            unique("b-missing").as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ),
    )
    .await;
    assert_code(res, NOT_FOUND, "consume from a missing queue");
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_consumer_excludes_others() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let q = unique("b-excl-consume");
    declare_queue(&ch, &q).await;
    let _excl = consume_with(
        &ch,
        &q,
        "sole",
        BasicConsumeOptions {
            exclusive: true,
            ..Default::default()
        },
    )
    .await;
    // Another consumer, even on the same connection: 403 ACCESS_REFUSED
    // ("queue '...' in vhost '/' in exclusive use").
    let ch2 = channel(&conn).await;
    let res = within(
        "basic.consume",
        ch2.basic_consume(
            q.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ),
    )
    .await;
    assert_code(res, ACCESS_REFUSED, "consume beside an exclusive consumer");
    assert!(conn.status().connected());

    // And an exclusive consume beside an existing consumer is refused too.
    let q2 = unique("b-excl-consume2");
    declare_queue(&ch, &q2).await;
    let _plain = consume(&ch, &q2, "plain", false).await;
    let ch3 = channel(&conn).await;
    let res = within(
        "basic.consume",
        ch3.basic_consume(
            q2.as_str().into(),
            "".into(),
            BasicConsumeOptions {
                exclusive: true,
                ..Default::default()
            },
            FieldTable::default(),
        ),
    )
    .await;
    assert_code(res, ACCESS_REFUSED, "exclusive consume beside a consumer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_between_two_consumers() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let (_pc, pch) = open(&broker).await;
    let q = unique("b-rr");
    declare_queue(&pch, &q).await;
    let ch1 = channel(&conn).await;
    let ch2 = channel(&conn).await;
    let mut a = consume(&ch1, &q, "a", true).await;
    let mut b = consume(&ch2, &q, "b", true).await;
    publish_n(&pch, &q, 10).await;
    let got = collect_exactly(&mut [&mut a, &mut b], 10).await;
    let (a_got, b_got) = (bodies(&got[0]), bodies(&got[1]));
    let even: Vec<String> = (0..10).step_by(2).map(|i| format!("m{i}")).collect();
    let odd: Vec<String> = (1..10).step_by(2).map(|i| format!("m{i}")).collect();
    assert!(
        (a_got == even && b_got == odd) || (a_got == odd && b_got == even),
        "not round-robin: a={a_got:?} b={b_got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_cancel_stops_deliveries() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("b-cancel");
    declare_queue(&ch, &q).await;
    let mut consumer = consume(&ch, &q, "to-cancel", true).await;
    publish(&ch, "", &q, b"before").await;
    assert_eq!(next_delivery(&mut consumer).await.data, b"before");
    within(
        "basic.cancel-ok",
        ch.basic_cancel("to-cancel".into(), BasicCancelOptions::default()),
    )
    .await
    .expect("basic.cancel");
    assert!(
        within("the consumer stream to end", consumer.next())
            .await
            .is_none(),
        "cancelled consumer still yields"
    );
    publish(&ch, "", &q, b"after").await;
    assert_eq!(queue_counts(&ch, &q).await, (1, 0));
    // Cancelling an unknown tag is not an error (basic.cancel-ok all the same).
    within(
        "basic.cancel-ok",
        ch.basic_cancel("never-was".into(), BasicCancelOptions::default()),
    )
    .await
    .expect("basic.cancel of an unknown tag");
    assert!(ch.status().connected());
}

/// consumer_cancel_notify: deleting the queue sends basic.cancel to its consumers;
/// lapin ends the consumer's stream. The channel stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_cancels_consumers_of_a_deleted_queue() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let q = unique("b-cancel-notify");
    declare_queue(&ch, &q).await;
    let mut consumer = consume(&ch, &q, "doomed", false).await;
    let other = channel(&conn).await;
    within(
        "queue.delete",
        other.queue_delete(q.as_str().into(), QueueDeleteOptions::default()),
    )
    .await
    .expect("queue.delete");
    assert!(
        within("the consumer stream to end", consumer.next())
            .await
            .is_none(),
        "consumer of a deleted queue still yields"
    );
    assert!(
        ch.status().connected(),
        "basic.cancel is not a channel error"
    );
    declare_queue(&ch, &unique("b-cancel-after")).await;
}
