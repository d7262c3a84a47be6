//! Confirmed-publish accounting against a real cluster, shared by the
//! failover tests: a publisher that reconnects to any node and republishes
//! a round whose confirms it lost, a consumer that reads a queue back from
//! any node, and the check that every confirmed id came back.

use crate::cluster::Cluster;
use futures_lite::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::time::timeout;

/// Messages published per round of confirms.
pub const WINDOW: u64 = 200;
/// Bound on any single wait for the broker.
pub const WAIT: Duration = Duration::from_secs(60);

pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// What the publisher saw.
#[derive(Default)]
pub struct Record {
    /// Ids whose publish was acked.
    pub confirmed: BTreeSet<u64>,
    /// When each round of confirms completed.
    pub confirm_times: Vec<Instant>,
    /// Nacks received (a confirm that says "lost"): must stay 0 here.
    pub nacks: u64,
}

/// Connect to any node, starting at `start`, retrying for up to `WAIT`.
pub async fn connect_any(uris: &[String], start: usize) -> (Connection, Channel, usize) {
    let deadline = Instant::now() + WAIT;
    let mut i = start;
    loop {
        let uri = &uris[i % uris.len()];
        let attempt = timeout(Duration::from_secs(5), async {
            let conn = Connection::connect(uri, ConnectionProperties::default()).await?;
            let ch = conn.create_channel().await?;
            ch.confirm_select(ConfirmSelectOptions::default()).await?;
            Ok::<_, lapin::Error>((conn, ch))
        })
        .await;
        if let Ok(Ok((conn, ch))) = attempt {
            return (conn, ch, i % uris.len());
        }
        assert!(
            Instant::now() < deadline,
            "no node accepted a client within {WAIT:?}"
        );
        i += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn declare(ch: &Channel, queue: &str) -> lapin::Result<u32> {
    let q = ch
        .queue_declare(
            queue.into(),
            QueueDeclareOptions::durable(),
            FieldTable::default(),
        )
        .await?;
    Ok(q.message_count())
}

/// Publish `WINDOW` messages and wait for every confirm; Err on any failure
/// (the caller reconnects and republishes the same ids).
pub async fn publish_round(
    ch: &Channel,
    queue: &str,
    ids: std::ops::Range<u64>,
) -> Result<u64, String> {
    let mut confirms = Vec::with_capacity(WINDOW as usize);
    for id in ids {
        let c = ch
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                &id.to_be_bytes(),
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .map_err(|e| e.to_string())?;
        confirms.push(c);
    }
    let mut nacks = 0;
    for c in confirms {
        match timeout(WAIT, c).await {
            Ok(Ok(conf)) if conf.is_ack() => {}
            Ok(Ok(_)) => nacks += 1,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("confirm timed out".into()),
        }
    }
    Ok(nacks)
}

/// Publish rounds until `stop`, reconnecting to any node after a failure.
/// Returns the record once stopped.
pub async fn publisher(
    uris: Vec<String>,
    queue: String,
    start: usize,
    stop: Arc<AtomicBool>,
    record: Arc<Mutex<Record>>,
) {
    let (mut _conn, mut ch, mut at) = connect_any(&uris, start).await;
    declare(&ch, &queue).await.expect("queue.declare");
    let mut next = 0u64;
    while !stop.load(Ordering::Relaxed) {
        match publish_round(&ch, &queue, next..next + WINDOW).await {
            Ok(nacks) => {
                let mut r = record.lock().expect("record");
                if nacks == 0 {
                    r.confirmed.extend(next..next + WINDOW);
                }
                r.nacks += nacks;
                r.confirm_times.push(Instant::now());
                drop(r);
                next += WINDOW;
            }
            Err(_) => {
                // The node or its master went away: reconnect anywhere and
                // republish the round (its confirms are unknown).
                let (c, h, i) = connect_any(&uris, at + 1).await;
                (_conn, ch, at) = (c, h, i);
            }
        }
    }
}

/// Everything in `queue`, read from any node: the ids, with repeats.
pub async fn consume_all(uris: &[String], queue: &str) -> Vec<u64> {
    let (_conn, ch, _) = connect_any(uris, 0).await;
    let count = declare(&ch, queue).await.expect("passive declare");
    ch.basic_qos(1000, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            "check".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("basic.consume");
    let mut ids = Vec::with_capacity(count as usize);
    while ids.len() < count as usize {
        let d = timeout(WAIT, consumer.next())
            .await
            .expect("delivery within the bound")
            .expect("consumer open")
            .expect("delivery");
        let bytes: [u8; 8] = d.data.as_slice().try_into().expect("8-byte body");
        ids.push(u64::from_be_bytes(bytes));
    }
    ids
}

/// Every confirmed id is in `ids`; returns the duplicate count.
pub fn assert_no_loss(confirmed: &BTreeSet<u64>, ids: &[u64], what: &str) -> usize {
    let have: BTreeSet<u64> = ids.iter().copied().collect();
    let lost: Vec<u64> = confirmed.difference(&have).copied().collect();
    assert!(
        lost.is_empty(),
        "{what}: {} confirmed messages lost (first: {:?}) of {} confirmed",
        lost.len(),
        &lost[..lost.len().min(10)],
        confirmed.len()
    );
    ids.len() - have.len()
}

/// Wait until the publisher has `n` more confirmed than now.
pub async fn wait_confirms(record: &Arc<Mutex<Record>>, n: usize) {
    let target = record.lock().expect("record").confirmed.len() + n;
    let deadline = Instant::now() + WAIT;
    while record.lock().expect("record").confirmed.len() < target {
        assert!(
            Instant::now() < deadline,
            "publishing did not progress within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub struct Running {
    pub stop: Arc<AtomicBool>,
    pub record: Arc<Mutex<Record>>,
    pub task: tokio::task::JoinHandle<()>,
}

pub fn start_publisher(cluster: &Cluster, queue: &str, start: usize) -> Running {
    let stop = Arc::new(AtomicBool::new(false));
    let record = Arc::new(Mutex::new(Record::default()));
    let task = tokio::spawn(publisher(
        cluster.uris(),
        queue.to_string(),
        start,
        stop.clone(),
        record.clone(),
    ));
    Running { stop, record, task }
}

impl Running {
    pub async fn finish(self) -> Record {
        self.stop.store(true, Ordering::Relaxed);
        timeout(WAIT, self.task)
            .await
            .expect("publisher stops")
            .expect("publisher task");
        into_record(self.record)
    }

    /// Stop a publisher whose brokers are all dead: it is retrying connects.
    pub async fn finish_after_crash(self) -> Record {
        self.stop.store(true, Ordering::Relaxed);
        self.task.abort();
        let _ = self.task.await;
        into_record(self.record)
    }
}

pub fn into_record(record: Arc<Mutex<Record>>) -> Record {
    Arc::try_unwrap(record)
        .ok()
        .expect("sole owner once the publisher stopped")
        .into_inner()
        .expect("record")
}
