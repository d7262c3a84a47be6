//! AMQP class `tx`: transactional publishes and acks, as RabbitMQ does them.

use compat_tests::common;

use common::*;
use lapin::Channel;
use lapin::options::{BasicAckOptions, BasicRejectOptions, ConfirmSelectOptions};

async fn tx_channel(conn: &lapin::Connection) -> Channel {
    let ch = channel(conn).await;
    within("tx.select", ch.tx_select())
        .await
        .expect("tx.select");
    ch
}

async fn commit(ch: &Channel) {
    within("tx.commit", ch.tx_commit())
        .await
        .expect("tx.commit");
}

async fn rollback(ch: &Channel) {
    within("tx.rollback", ch.tx_rollback())
        .await
        .expect("tx.rollback");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_then_commit_delivers() {
    let broker = Broker::start();
    let (conn, obs) = open(&broker).await;
    let q = unique("tx-commit");
    declare_queue(&obs, &q).await;
    let ch = tx_channel(&conn).await;
    // tx.select again is harmless.
    within("tx.select", ch.tx_select())
        .await
        .expect("second tx.select");
    publish(&ch, "", &q, b"one").await;
    publish(&ch, "", &q, b"two").await;
    // Nothing is enqueued before the commit...
    assert_eq!(queue_counts(&obs, &q).await.0, 0);
    commit(&ch).await;
    // ...and everything is once commit-ok has arrived.
    assert_eq!(queue_counts(&obs, &q).await.0, 2);
    assert_eq!(
        drain(&obs, &q).await,
        vec![b"one".to_vec(), b"two".to_vec()]
    );
    // The channel stays transactional: the next publish waits for the next commit.
    publish(&ch, "", &q, b"three").await;
    assert_eq!(queue_counts(&obs, &q).await.0, 0);
    commit(&ch).await;
    assert_eq!(drain(&obs, &q).await, vec![b"three".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_then_rollback_discards() {
    let broker = Broker::start();
    let (conn, obs) = open(&broker).await;
    let q = unique("tx-rollback");
    declare_queue(&obs, &q).await;
    let ch = tx_channel(&conn).await;
    publish(&ch, "", &q, b"discarded").await;
    rollback(&ch).await;
    assert_eq!(queue_counts(&obs, &q).await.0, 0);
    // A commit after the rollback has nothing of the old transaction in it.
    commit(&ch).await;
    assert_eq!(queue_counts(&obs, &q).await.0, 0);
    publish(&ch, "", &q, b"kept").await;
    commit(&ch).await;
    assert_eq!(drain(&obs, &q).await, vec![b"kept".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_inside_tx_takes_effect_on_commit_only() {
    let broker = Broker::start();
    let (conn, obs) = open(&broker).await;
    let q = unique("tx-ack");
    declare_queue(&obs, &q).await;
    publish(&obs, "", &q, b"rolled-back ack").await;
    publish(&obs, "", &q, b"committed ack").await;

    // Rolled back: the ack is forgotten, the message stays unacked and returns
    // when the channel closes.
    let ch = tx_channel(&conn).await;
    let m = get_with(&ch, &q, false).await.expect("first message");
    assert_eq!(m.delivery.data, b"rolled-back ack");
    within("basic.ack", m.delivery.ack(BasicAckOptions::default()))
        .await
        .expect("basic.ack");
    rollback(&ch).await;
    within("channel.close", ch.close(200, "OK".into()))
        .await
        .expect("channel.close");
    let back = get(&obs, &q).await.expect("the un-acked message is back");
    assert_eq!(back.delivery.data, b"rolled-back ack");
    assert!(back.delivery.redelivered);

    // Committed: the ack holds, even though the channel then closes.
    let ch = tx_channel(&conn).await;
    let m = get_with(&ch, &q, false).await.expect("second message");
    assert_eq!(m.delivery.data, b"committed ack");
    within("basic.ack", m.delivery.ack(BasicAckOptions::default()))
        .await
        .expect("basic.ack");
    commit(&ch).await;
    within("channel.close", ch.close(200, "OK".into()))
        .await
        .expect("channel.close");
    assert!(get(&obs, &q).await.is_none(), "the committed ack was lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_inside_tx_takes_effect_on_commit() {
    let broker = Broker::start();
    let (conn, obs) = open(&broker).await;
    let q = unique("tx-reject");
    declare_queue(&obs, &q).await;
    publish(&obs, "", &q, b"bounce").await;
    let ch = tx_channel(&conn).await;
    let m = get_with(&ch, &q, false).await.expect("a message");
    within(
        "basic.reject",
        m.delivery.reject(BasicRejectOptions { requeue: true }),
    )
    .await
    .expect("basic.reject");
    // Not yet requeued.
    assert_eq!(queue_counts(&obs, &q).await.0, 0);
    commit(&ch).await;
    let back = get(&obs, &q).await.expect("requeued on commit");
    assert_eq!(back.delivery.data, b"bounce");
    assert!(back.delivery.redelivered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_or_rollback_without_select_is_precondition_failed() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let res = within("tx.commit", ch.tx_commit()).await;
    // "channel is not transactional"
    assert_code(res, PRECONDITION_FAILED, "tx.commit without tx.select");
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());

    let ch = channel(&conn).await;
    let res = within("tx.rollback", ch.tx_rollback()).await;
    assert_code(res, PRECONDITION_FAILED, "tx.rollback without tx.select");
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tx_select_on_a_confirm_channel_is_precondition_failed() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    within(
        "confirm.select",
        ch.confirm_select(ConfirmSelectOptions::default()),
    )
    .await
    .expect("confirm.select");
    let res = within("tx.select", ch.tx_select()).await;
    // "cannot switch from confirm to tx mode"
    assert_code(res, PRECONDITION_FAILED, "tx.select in confirm mode");
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
}
