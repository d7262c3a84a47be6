//! Confirmed persistent messages survive SIGKILL.

use super::*;

const BULK_QUEUE: &str = "restart.bulk";

/// Publish `MESSAGES` persistent messages (body = sequence number) with confirms,
/// keeping up to 1,000 unconfirmed in flight, and wait for every confirm.
pub async fn setup_bulk(uri: &str) -> Connection {
    let conn = connect(uri).await;
    let ch = confirm_channel(&conn).await;
    ch.queue_declare(BULK_QUEUE.into(), durable_queue(), FieldTable::default())
        .await
        .expect("queue.declare");
    let mut in_flight = VecDeque::new();
    for n in 0..MESSAGES {
        let confirm = bounded(
            "publish",
            ch.basic_publish(
                "".into(),
                BULK_QUEUE.into(),
                BasicPublishOptions::default(),
                n.to_string().as_bytes(),
                persistent(),
            ),
        )
        .await
        .expect("basic.publish");
        in_flight.push_back((n, confirm));
        if in_flight.len() >= 1_000 {
            let (n, c) = in_flight.pop_front().expect("in flight");
            assert!(
                bounded("confirm", c).await.expect("confirm").is_ack(),
                "nack {n}"
            );
        }
    }
    for (n, c) in in_flight {
        assert!(
            bounded("confirm", c).await.expect("confirm").is_ack(),
            "nack {n}"
        );
    }
    // Still open: the broker is killed with its clients connected.
    conn
}

/// All `MESSAGES` are there, in publish order.
pub async fn check_bulk(uri: &str) {
    let conn = connect(uri).await;
    let ch = conn.create_channel().await.expect("channel");
    let q = ch
        .queue_declare(
            BULK_QUEUE.into(),
            durable_queue().passive(),
            FieldTable::default(),
        )
        .await
        .expect("the durable queue is gone");
    assert_eq!(q.message_count() as u64, MESSAGES, "messages after restart");

    ch.basic_qos(500, BasicQosOptions::default())
        .await
        .expect("basic.qos");
    let mut consumer = ch
        .basic_consume(
            BULK_QUEUE.into(),
            "restart-check".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("basic.consume");
    for n in 0..MESSAGES {
        let d = bounded("delivery", consumer.next())
            .await
            .unwrap_or_else(|| panic!("consumer ended after {n} messages"))
            .expect("delivery");
        let body = String::from_utf8(d.data.clone()).expect("utf8");
        assert_eq!(body, n.to_string(), "message {n} out of order");
        d.ack(Default::default()).await.expect("basic.ack");
    }
    conn.close(200, "bye".into()).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_persistent_messages_survive_sigkill() {
    let mut broker = Broker::start();
    let before = setup_bulk(&broker.uri()).await;
    blocking(|| {
        broker.kill9();
        broker.start_again();
    });
    drop(before);
    check_bulk(&broker.uri()).await;
}

// ---------------------------------------------------------------------------
// Declarations.
