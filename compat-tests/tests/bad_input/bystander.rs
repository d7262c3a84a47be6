//! The bystander: a well-behaved lapin client that publishes with confirms and
//! consumes on its own queue while another connection misbehaves, and must end
//! with exactly what it published, in order.

#![allow(
    clippy::unwrap_used,
    reason = "a test: an unwrap that fails is a failure at its line"
)]

use super::*;

pub(crate) struct Bystander {
    pub(crate) conn: Connection,
    /// Held, and closed explicitly at the end: lapin closes a channel when its
    /// last handle drops, and that close would race with the connection's close.
    pub(crate) publish_ch: Channel,
    pub(crate) consume_ch: Channel,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) confirmed: Arc<AtomicU64>,
    /// Bodies received so far, and the consumer's error if its stream failed.
    pub(crate) received: Arc<Mutex<(Vec<u64>, Option<String>)>>,
    pub(crate) publisher: JoinHandle<u64>,
    pub(crate) consumer: JoinHandle<()>,
}

impl Bystander {
    pub(crate) async fn start(uri: &str) -> Bystander {
        let conn = Connection::connect(uri, ConnectionProperties::default())
            .await
            .expect("bystander connect");
        let consume_ch = conn.create_channel().await.expect("channel");
        let queue = consume_ch
            .queue_declare(
                "".into(),
                QueueDeclareOptions::exclusive(),
                FieldTable::default(),
            )
            .await
            .expect("bystander queue.declare");
        let queue_name = queue.name().clone();
        let mut consumer = consume_ch
            .basic_consume(
                queue_name.clone(),
                "bystander".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("bystander basic.consume");
        let received = Arc::new(Mutex::new((Vec::new(), None)));
        let rx = received.clone();
        let consumer = tokio::spawn(async move {
            while let Some(d) = consumer.next().await {
                match d {
                    Ok(d) => {
                        let n: u64 = std::str::from_utf8(&d.data)
                            .expect("utf8")
                            .parse()
                            .expect("number");
                        rx.lock().unwrap().0.push(n);
                    }
                    Err(e) => {
                        rx.lock().unwrap().1 = Some(e.to_string());
                        return;
                    }
                }
            }
        });

        let publish_ch = conn.create_channel().await.expect("channel");
        publish_ch
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm.select");
        let stop = Arc::new(AtomicBool::new(false));
        let confirmed = Arc::new(AtomicU64::new(0));
        let (stop2, confirmed2, ch) = (stop.clone(), confirmed.clone(), publish_ch.clone());
        let publisher = tokio::spawn(async move {
            let mut n = 0u64;
            while !stop2.load(Ordering::SeqCst) {
                let confirm = ch
                    .basic_publish(
                        "".into(),
                        queue_name.clone(),
                        BasicPublishOptions::default(),
                        n.to_string().as_bytes(),
                        BasicProperties::default(),
                    )
                    .await
                    .expect("bystander publish")
                    .await
                    .expect("bystander confirm");
                assert!(confirm.is_ack(), "bystander message {n} was nacked");
                n += 1;
                confirmed2.store(n, Ordering::SeqCst);
            }
            n
        });
        let b = Bystander {
            conn,
            publish_ch,
            consume_ch,
            stop,
            confirmed,
            received,
            publisher,
            consumer,
        };
        b.progress(10).await;
        b
    }

    /// Wait until `n` more messages have been confirmed.
    pub(crate) async fn progress(&self, n: u64) {
        let target = self.confirmed.load(Ordering::SeqCst) + n;
        timeout(WAIT, async {
            while self.confirmed.load(Ordering::SeqCst) < target {
                assert!(!self.publisher.is_finished(), "bystander publisher died");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the bystander's publishing stalled");
    }

    /// Stop publishing; every confirmed message must arrive, in order, once.
    pub(crate) async fn finish(self) {
        self.progress(10).await;
        self.stop.store(true, Ordering::SeqCst);
        let published = timeout(WAIT, self.publisher)
            .await
            .expect("publisher did not stop")
            .expect("bystander publisher panicked");
        let all: Vec<u64> = (0..published).collect();
        let done = timeout(WAIT, async {
            loop {
                {
                    let r = self.received.lock().unwrap();
                    if r.0.len() >= all.len() || r.1.is_some() {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        {
            let r = self.received.lock().unwrap();
            assert!(r.1.is_none(), "bystander consumer failed: {:?}", r.1);
            assert!(
                done.is_ok(),
                "bystander received {} of {published} messages",
                r.0.len()
            );
            assert_eq!(r.0, all);
        }
        for ch in [&self.publish_ch, &self.consume_ch] {
            timeout(WAIT, ch.close(200, "bye".into()))
                .await
                .expect("channel.close timed out")
                .expect("bystander channel.close");
        }
        timeout(WAIT, self.conn.close(200, "bye".into()))
            .await
            .expect("connection.close timed out")
            .expect("bystander connection.close");
        let _ = timeout(WAIT, self.consumer).await;
    }
}

// ---------------------------------------------------------------------------
// The cases.
