//! The single node restarts from its materialized state, and its disk follows
//! the live backlog, not the total traffic.
//!
//! The real binary on a real disk (fjall), killed with SIGKILL: a durable
//! backlog and the definitions survive every restart, while rounds of
//! publish-then-consume traffic (many times the size of the backlog) leave the
//! data directory no bigger than a couple of rounds' worth.

use compat_tests::Broker;
use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use std::collections::VecDeque;
use std::future::Future;
use std::path::Path;
use std::time::Duration;
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(120);
const BACKLOG: u64 = 200;
const ROUNDS: u64 = 60;
const ROUND_MESSAGES: u64 = 160;
const CHURN_BODY: usize = 64 * 1024;
const MIB: u64 = 1024 * 1024;

async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {WAIT:?}"))
}

async fn connect(uri: &str) -> (Connection, Channel) {
    let conn = bounded(
        "connect",
        Connection::connect(uri, ConnectionProperties::default()),
    )
    .await
    .expect("connect");
    let ch = conn.create_channel().await.expect("channel.open");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    (conn, ch)
}

/// Publish `bodies` persistent through `exchange`, up to 500 unconfirmed in
/// flight, and wait for every ack.
async fn publish_all(ch: &Channel, exchange: &str, key: &str, bodies: Vec<Vec<u8>>) {
    let mut in_flight = VecDeque::new();
    for body in bodies {
        let confirm = bounded(
            "publish",
            ch.basic_publish(
                exchange.into(),
                key.into(),
                BasicPublishOptions::default(),
                &body,
                BasicProperties::default().with_delivery_mode(2),
            ),
        )
        .await
        .expect("basic.publish");
        in_flight.push_back(confirm);
        if in_flight.len() >= 500 {
            let c = in_flight.pop_front().expect("in flight");
            assert!(bounded("confirm", c).await.expect("confirm").is_ack());
        }
    }
    for c in in_flight {
        assert!(bounded("confirm", c).await.expect("confirm").is_ack());
    }
}

/// Get and ack every message of `queue`; returns the bodies.
async fn consume_all(ch: &Channel, queue: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let got = bounded(
            "basic.get",
            ch.basic_get(queue.into(), BasicGetOptions { no_ack: false }),
        )
        .await
        .expect("basic.get");
        let Some(m) = got else { return out };
        m.delivery
            .ack(BasicAckOptions::default())
            .await
            .expect("basic.ack");
        out.push(m.delivery.data);
    }
}

/// Acks are not confirmed to the client (as in RabbitMQ), so a crash right
/// after them may bring messages back. A durable declare is answered only
/// once its event is stable, and the log is in order: once declare-ok
/// arrives, every ack sent before it is stable too.
async fn barrier(ch: &Channel) {
    ch.queue_declare(
        "state.barrier".into(),
        QueueDeclareOptions::durable(),
        FieldTable::default(),
    )
    .await
    .expect("barrier declare");
    ch.queue_delete("state.barrier".into(), Default::default())
        .await
        .expect("barrier delete");
}

/// An incompressible body (fjall compresses its journal and tables, so a
/// body of one repeated byte would hide what the disk holds).
fn noise(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..CHURN_BODY / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

fn dir_bytes(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    let mut total = 0;
    for entry in entries.flatten() {
        match entry.metadata() {
            Ok(m) if m.is_dir() => total += dir_bytes(&entry.path()),
            Ok(m) => total += m.len(),
            Err(_) => {}
        }
    }
    total
}

/// The backlog is complete and in order, and the exchange still routes to it.
async fn check_backlog(uri: &str) {
    let (conn, ch) = connect(uri).await;
    let q = ch
        .queue_declare(
            "state.backlog".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("the durable backlog queue is gone");
    assert_eq!(
        u64::from(q.message_count()),
        BACKLOG,
        "backlog after restart"
    );
    let churn = ch
        .queue_declare(
            "state.churn".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("the durable churn queue is gone");
    assert_eq!(churn.message_count(), 0, "consumed messages came back");
    // The binding survived: a message through the exchange reaches the queue.
    publish_all(&ch, "state.x", "backlog", vec![b"probe".to_vec()]).await;
    let q = ch
        .queue_declare(
            "state.backlog".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("passive declare");
    assert_eq!(u64::from(q.message_count()), BACKLOG + 1);
    // Take the probe back out without touching the backlog's order: a
    // separate queue would change what is being tested, so consume all,
    // check, and put the backlog back.
    let got = consume_all(&ch, "state.backlog").await;
    let expected: Vec<Vec<u8>> = (0..BACKLOG)
        .map(|n| format!("backlog-{n}").into_bytes())
        .chain([b"probe".to_vec()])
        .collect();
    assert_eq!(got, expected, "backlog content or order");
    publish_all(
        &ch,
        "state.x",
        "backlog",
        expected[..BACKLOG as usize].to_vec(),
    )
    .await;
    conn.close(200, "bye".into()).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_from_state_keeps_the_backlog_and_the_disk_follows_it() {
    let mut broker = Broker::start();
    let uri = broker.uri();
    let data = broker.data_dir().join("data");
    {
        let (conn, ch) = connect(&uri).await;
        ch.exchange_declare(
            "state.x".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("exchange.declare");
        for q in ["state.backlog", "state.churn"] {
            ch.queue_declare(
                q.into(),
                QueueDeclareOptions::durable(),
                FieldTable::default(),
            )
            .await
            .expect("queue.declare");
        }
        ch.queue_bind(
            "state.backlog".into(),
            "state.x".into(),
            "backlog".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("queue.bind");
        let bodies = (0..BACKLOG)
            .map(|n| format!("backlog-{n}").into_bytes())
            .collect();
        publish_all(&ch, "state.x", "backlog", bodies).await;
        conn.close(200, "bye".into()).await.expect("close");
    }
    tokio::task::block_in_place(|| broker.restart());
    check_backlog(&uri).await;

    let mut sizes = Vec::new();
    for round in 0..ROUNDS {
        let (conn, ch) = connect(&uri).await;
        let bodies = (0..ROUND_MESSAGES)
            .map(|n| noise(round * ROUND_MESSAGES + n))
            .collect();
        publish_all(&ch, "", "state.churn", bodies).await;
        let got = consume_all(&ch, "state.churn").await;
        assert_eq!(got.len() as u64, ROUND_MESSAGES, "round {round}");
        barrier(&ch).await;
        conn.close(200, "bye".into()).await.expect("close");
        // Every fourth round, crash and restart from the state.
        if round % 4 == 3 {
            tokio::task::block_in_place(|| broker.restart());
            check_backlog(&uri).await;
        }
        sizes.push(dir_bytes(&data));
    }
    tokio::task::block_in_place(|| broker.restart());
    check_backlog(&uri).await;
    sizes.push(dir_bytes(&data));

    let traffic = ROUNDS * ROUND_MESSAGES * CHURN_BODY as u64;
    eprintln!(
        "traffic {} MiB; data dir after each round (MiB): {:?}",
        traffic / MIB,
        sizes.iter().map(|s| s / MIB).collect::<Vec<_>>()
    );
    let peak = *sizes.iter().max().expect("sizes");
    // Without compaction the log alone would hold all the traffic. With it,
    // the disk holds a constant (fjall's journal, capped at 64 MiB, and
    // tables awaiting compaction) plus the live backlog.
    assert!(
        peak < traffic / 2,
        "data dir peaked at {peak} bytes for {traffic} bytes of traffic: {sizes:?}"
    );
    // And no trend: the last third of the rounds peaks no higher than the
    // first third, give or take one and a half journals.
    let third = sizes.len() / 3;
    let early = sizes[..third].iter().max().expect("sizes");
    let late = sizes[sizes.len() - third..].iter().max().expect("sizes");
    assert!(
        *late <= early + 96 * MIB,
        "data dir keeps growing with traffic: {sizes:?}"
    );
}
