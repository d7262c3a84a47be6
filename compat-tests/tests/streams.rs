//! Stream queues over AMQP 0-9-1 (`x-queue-type: stream`), as RabbitMQ
//! documents them (https://www.rabbitmq.com/docs/streams) and as RabbitMQ
//! 3.10 answers (checked side by side with pika against
//! `scripts/rabbitmq-node.sh`): declare rules, `x-stream-offset`, the
//! `x-stream-offset` header, acks that remove nothing, independent
//! consumers, what streams refuse, retention by whole segments, and entries
//! and offsets that survive a SIGKILL restart and a failover of the master
//! of a 3-node cluster.

use compat_tests::common;
mod http;

use common::confirmed::blocking;
use common::*;
use compat_tests::cluster::Cluster;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicQosOptions,
    QueueDeclareOptions, QueuePurgeOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection};
use std::time::Duration;

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

fn stream_args(extra: &[(&str, AMQPValue)]) -> FieldTable {
    let mut args = vec![("x-queue-type", lstr("stream"))];
    args.extend(extra.iter().cloned());
    ftable(&args)
}

async fn declare_stream(ch: &Channel, name: &str, extra: &[(&str, AMQPValue)]) {
    declare_queue_with(ch, name, durable(), stream_args(extra)).await;
}

/// Publish `bodies` with confirms (transient: a stream keeps them anyway).
async fn publish_confirmed(conn: &Connection, queue: &str, bodies: &[String]) {
    let ch = confirm_channel(conn).await;
    for b in bodies {
        let confirm = ch
            .basic_publish(
                "".into(),
                queue.into(),
                Default::default(),
                b.as_bytes(),
                BasicProperties::default(),
            )
            .await
            .expect("publish")
            .await
            .expect("confirm");
        assert!(confirm.is_ack(), "{b}: nacked");
    }
}

/// The `x-stream-offset` header of a delivery.
fn offset(d: &lapin::message::Delivery) -> i64 {
    match header_value(&d.properties, "x-stream-offset") {
        Some(AMQPValue::LongLongInt(n)) => *n,
        other => panic!("x-stream-offset: expected a long, got {other:?}"),
    }
}

/// Consume `n` entries of `queue` from `start` with prefetch 10, acking
/// each; returns (offset, body) pairs.
async fn read(conn: &Connection, queue: &str, start: AMQPValue, n: usize) -> Vec<(i64, String)> {
    let ch = channel(conn).await;
    ch.basic_qos(10, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut c = consume_args(
        &ch,
        queue,
        &unique("reader"),
        BasicConsumeOptions::default(),
        ftable(&[("x-stream-offset", start)]),
    )
    .await;
    let mut got = Vec::new();
    while got.len() < n {
        let d = next_delivery(&mut c).await;
        got.push((offset(&d), String::from_utf8_lossy(&d.data).into_owned()));
        d.ack(BasicAckOptions::default()).await.expect("ack");
    }
    let _ = ch.close(200, "done".into()).await;
    got
}

fn bodies(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[tokio::test]
async fn declare_is_refused_as_rabbitmq_refuses_it() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let cases: [(&str, QueueDeclareOptions, FieldTable, &str); 5] = [
        (
            "nd",
            QueueDeclareOptions::default(),
            stream_args(&[]),
            "invalid property 'non-durable'",
        ),
        (
            "ex",
            QueueDeclareOptions {
                durable: true,
                exclusive: true,
                ..Default::default()
            },
            stream_args(&[]),
            "invalid property 'exclusive-owner'",
        ),
        (
            "ad",
            QueueDeclareOptions {
                durable: true,
                auto_delete: true,
                ..Default::default()
            },
            stream_args(&[]),
            "invalid property 'auto-delete'",
        ),
        (
            "ml",
            durable(),
            stream_args(&[("x-max-length", AMQPValue::LongInt(10))]),
            "invalid arg 'x-max-length' for queue 'ml' in vhost '/' of queue type rabbit_stream_queue",
        ),
        (
            "age",
            durable(),
            stream_args(&[("x-max-age", lstr("10X"))]),
            "invalid arg 'x-max-age' for queue 'age' in vhost '/': invalid_max_age",
        ),
    ];
    for (name, opts, args, text) in cases {
        let ch = channel(&conn).await;
        let err = ch
            .queue_declare(name.into(), opts, args)
            .await
            .expect_err(name);
        assert_eq!(reply_code(&err), Some(406), "{name}: {err:?}");
        assert!(format!("{err:?}").contains(text), "{name}: {err:?}");
    }
    // A good declare answers message_count 0, as RabbitMQ 3.10 does, even
    // with entries in it.
    let ch = channel(&conn).await;
    declare_stream(&ch, "ok", &[("x-max-age", lstr("7D"))]).await;
    publish_confirmed(&conn, "ok", &bodies("m", 3)).await;
    let q = declare_queue_with(&ch, "ok", durable(), stream_args(&[])).await;
    assert_eq!(q.message_count(), 0);
}

#[tokio::test]
async fn consumers_read_independently_from_every_offset_spec() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_stream(&ch, "s", &[]).await;
    publish_confirmed(&conn, "s", &bodies("m", 5)).await;
    let want: Vec<(i64, String)> = (0..5).map(|i| (i, format!("m-{i}"))).collect();
    assert_eq!(read(&conn, "s", lstr("first"), 5).await, want);
    // Acks removed nothing: a second reader gets the same entries.
    assert_eq!(read(&conn, "s", lstr("first"), 5).await, want);
    assert_eq!(
        read(&conn, "s", AMQPValue::LongLongInt(2), 3).await,
        want[2..]
    );
    assert_eq!(read(&conn, "s", AMQPValue::LongInt(-1), 5).await, want);
    assert_eq!(read(&conn, "s", lstr("last"), 1).await, want[4..]);
    assert_eq!(read(&conn, "s", lstr("1h"), 5).await, want);
    let epoch_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    assert_eq!(
        read(&conn, "s", AMQPValue::Timestamp(epoch_secs - 3600), 5).await,
        want
    );

    // "next" (and no offset at all) waits for what comes next.
    let ch = channel(&conn).await;
    ch.basic_qos(10, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut next = consume_args(
        &ch,
        "s",
        "next",
        BasicConsumeOptions::default(),
        ftable(&[("x-stream-offset", lstr("next"))]),
    )
    .await;
    let mut default = consume(&ch, "s", "default", false).await;
    assert_no_delivery(&mut next, "nothing new yet").await;
    publish_confirmed(&conn, "s", &["m-5".to_string()]).await;
    for c in [&mut next, &mut default] {
        let d = next_delivery(c).await;
        assert_eq!((offset(&d), &d.data[..]), (5, &b"m-5"[..]));
    }

    // The prefetch is a credit window: without acks, 2 and no more.
    let ch = channel(&conn).await;
    ch.basic_qos(2, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut c = consume_args(
        &ch,
        "s",
        "window",
        BasicConsumeOptions::default(),
        ftable(&[("x-stream-offset", lstr("first"))]),
    )
    .await;
    let first = next_delivery(&mut c).await;
    let second = next_delivery(&mut c).await;
    assert_eq!((offset(&first), offset(&second)), (0, 1));
    assert_no_delivery(&mut c, "the window is full").await;
    second
        .ack(BasicAckOptions { multiple: true })
        .await
        .expect("ack");
    assert_eq!(offset(&next_delivery(&mut c).await), 2);
}

#[tokio::test]
async fn what_streams_do_not_support_is_refused_with_rabbitmqs_codes() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_stream(&ch, "s", &[]).await;
    publish_confirmed(&conn, "s", &bodies("m", 2)).await;

    // No prefetch: 406 on the channel.
    let ch = channel(&conn).await;
    let err = ch
        .basic_consume(
            "s".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect_err("consume without qos");
    assert_eq!(reply_code(&err), Some(406), "{err:?}");
    // A bad offset: 406.
    let ch = channel(&conn).await;
    ch.basic_qos(1, BasicQosOptions::default())
        .await
        .expect("qos");
    let err = ch
        .basic_consume(
            "s".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            ftable(&[("x-stream-offset", lstr("bad"))]),
        )
        .await
        .expect_err("bad offset");
    assert_eq!(reply_code(&err), Some(406), "{err:?}");

    // Each of these closes the connection with 540 NOT_IMPLEMENTED, and a
    // bystander connection goes on.
    let bystander = connect(&broker).await;
    let refused: [(&str, u8); 4] = [("get", 0), ("purge", 1), ("auto-ack", 2), ("nack", 3)];
    for (what, case) in refused {
        let conn = connect(&broker).await;
        let ch = channel(&conn).await;
        ch.basic_qos(1, BasicQosOptions::default())
            .await
            .expect("qos");
        let err = match case {
            0 => ch
                .basic_get("s".into(), BasicGetOptions::default())
                .await
                .map(|_| ())
                .expect_err(what),
            1 => ch
                .queue_purge("s".into(), QueuePurgeOptions::default())
                .await
                .map(|_| ())
                .expect_err(what),
            2 => ch
                .basic_consume(
                    "s".into(),
                    "c".into(),
                    BasicConsumeOptions {
                        no_ack: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await
                .map(|_| ())
                .expect_err(what),
            _ => {
                let mut c = consume_args(
                    &ch,
                    "s",
                    "c",
                    BasicConsumeOptions::default(),
                    ftable(&[("x-stream-offset", lstr("first"))]),
                )
                .await;
                let d = next_delivery(&mut c).await;
                let _ = d.nack(BasicNackOptions::default()).await;
                wait_connection_closed(&conn).await;
                assert!(
                    format!("{:?}", conn.status()).contains("Closed") || !conn.status().connected(),
                    "nack: the connection is closed"
                );
                continue;
            }
        };
        assert_eq!(reply_code(&err), Some(540), "{what}: {err:?}");
        assert!(
            format!("{err:?}").contains("not supported by stream queues queue 's'"),
            "{what}: {err:?}"
        );
    }
    assert_eq!(read(&bystander, "s", lstr("first"), 2).await.len(), 2);
}

#[tokio::test]
async fn retention_drops_whole_segments_oldest_first_and_survives_a_restart() {
    let mut broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    // Segments close at 100 bytes (ten 10-byte entries); keep about 250.
    declare_stream(
        &ch,
        "r",
        &[
            ("x-stream-max-segment-size-bytes", AMQPValue::LongInt(100)),
            ("x-max-length-bytes", AMQPValue::LongInt(250)),
        ],
    )
    .await;
    let all: Vec<String> = (0..45).map(|i| format!("entry-{i:04}")).collect();
    assert!(all.iter().all(|b| b.len() == 10));
    publish_confirmed(&conn, "r", &all).await;
    // 45 entries: segments [0,10) [10,20) [20,30) [30,40) [40,45); 450 bytes
    // is over 250, so the two oldest closed segments went: the first kept
    // entry is 20, and the newest are all there.
    let first = read(&conn, "r", lstr("first"), 25).await;
    assert_eq!(first[0], (20, "entry-0020".to_string()));
    assert_eq!(first.last(), Some(&(44, "entry-0044".to_string())));
    drop(conn);
    broker.restart();
    let conn = connect(&broker).await;
    let again = read(&conn, "r", lstr("first"), 25).await;
    assert_eq!(
        again, first,
        "the same entries at the same offsets after kill -9"
    );
    // New entries continue the numbering.
    publish_confirmed(&conn, "r", &["entry-0045".to_string()]).await;
    assert_eq!(
        read(&conn, "r", AMQPValue::LongLongInt(45), 1).await,
        [(45, "entry-0045".to_string())]
    );
}

/// A consumer whose next entries are cut by retention while it holds its
/// prefetch goes on from the oldest entry kept once it acks, instead of
/// waiting for an offset that no longer exists.
#[tokio::test]
async fn a_consumer_behind_a_retention_cut_goes_on_from_the_oldest_kept() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_stream(
        &ch,
        "cut",
        &[
            ("x-stream-max-segment-size-bytes", AMQPValue::LongInt(100)),
            ("x-max-length-bytes", AMQPValue::LongInt(250)),
        ],
    )
    .await;
    publish_confirmed(&conn, "cut", &["entry-0000".to_string()]).await;
    let reader = channel(&conn).await;
    reader
        .basic_qos(1, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut c = consume_args(
        &reader,
        "cut",
        "slow",
        BasicConsumeOptions::default(),
        ftable(&[("x-stream-offset", lstr("first"))]),
    )
    .await;
    let d = next_delivery(&mut c).await;
    assert_eq!(offset(&d), 0);
    // 45 more: the segments [0,10) and [10,20) go (as in the test above).
    let more: Vec<String> = (1..45).map(|i| format!("entry-{i:04}")).collect();
    publish_confirmed(&conn, "cut", &more).await;
    d.ack(BasicAckOptions::default()).await.expect("ack");
    let d = next_delivery(&mut c).await;
    assert_eq!(
        (offset(&d), String::from_utf8_lossy(&d.data).into_owned()),
        (20, "entry-0020".to_string()),
        "the next delivery is the oldest entry kept"
    );
}

/// Stream `name` with 100-byte segments and `extra`, filled with 25 entries
/// of 10 bytes: closed segments [0,10) and [10,20), the open one [20,25).
async fn stream_of_three_segments(conn: &Connection, name: &str, extra: &[(&str, AMQPValue)]) {
    let ch = channel(conn).await;
    let mut args = vec![("x-stream-max-segment-size-bytes", AMQPValue::LongInt(100))];
    args.extend(extra.iter().cloned());
    declare_stream(&ch, name, &args).await;
    let all: Vec<String> = (0..25).map(|i| format!("entry-{i:04}")).collect();
    publish_confirmed(conn, name, &all).await;
}

/// The management API's count of `queue`'s entries, once it is `n`.
fn wait_messages(broker: &Broker, queue: &str, n: u64) {
    http::Api::new(broker).get_until(
        &format!("/api/queues/%2F/{queue}"),
        &format!("{n} messages"),
        |b| b["messages"] == n,
    );
}

/// `x-max-age` removes old segments of a stream nobody publishes to (as
/// osiris 1.4+ does, hourly; here every `stream_retention_interval_ms`,
/// a minute by default, half a second in this test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_age_cuts_a_stream_nobody_publishes_to() {
    let broker = Broker::start_with(BrokerOptions {
        config_toml: Some("stream_retention_interval_ms = 500\n".into()),
        ..Default::default()
    });
    let conn = connect(&broker).await;
    stream_of_three_segments(&conn, "aged", &[("x-max-age", lstr("3s"))]).await;
    // No publish from here on: only the clock cuts (publishing cut nothing:
    // the entries were younger than 3 s then).
    blocking(|| wait_messages(&broker, "aged", 5));
    let kept = read(&conn, "aged", lstr("first"), 5).await;
    assert_eq!(
        kept[0],
        (20, "entry-0020".to_string()),
        "the open segment stays"
    );
    assert_eq!(kept[4], (24, "entry-0024".to_string()));
}

/// A policy that brings in (or lowers) `max-length-bytes` cuts a stream at
/// once, without waiting for a publish, as Osiris evaluates retention when
/// it is updated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_cuts_a_stream_at_once() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    stream_of_three_segments(&conn, "ruled", &[]).await;
    blocking(|| {
        let api = http::Api::new(&broker);
        api.put_ok(
            "/api/policies/%2F/small",
            serde_json::json!({"pattern": "^ruled$", "apply-to": "queues",
                               "definition": {"max-length-bytes": 100}}),
        );
        wait_messages(&broker, "ruled", 5);
    });
    let kept = read(&conn, "ruled", lstr("first"), 5).await;
    assert_eq!(kept[0], (20, "entry-0020".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_management_api_reports_a_stream() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    declare_stream(&ch, "m", &[]).await;
    publish_confirmed(&conn, "m", &bodies("m", 4)).await;
    let body = blocking(|| http::Api::new(&broker).get_ok("/api/queues/%2F/m"));
    assert_eq!(body["type"], "stream", "{body}");
    assert_eq!(body["messages"], 4, "{body}");
    assert_eq!(body["messages_ready"], 4, "{body}");
    assert_eq!(body["durable"], true, "{body}");
    assert_eq!(body["stream"]["first_offset"], 0, "{body}");
    assert_eq!(body["stream"]["last_offset"], 3, "{body}");
    assert_eq!(body["stream"]["next_offset"], 4, "{body}");
    assert_eq!(body["stream"]["segments"], 1, "{body}");
    // A consumer that took 2 of the 4 (prefetch 2, no ack) from `first`:
    // it reads offset 2 next and is 2 behind.
    let reader = channel(&conn).await;
    reader
        .basic_qos(2, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut consumer = reader
        .basic_consume(
            "m".into(),
            "reader".into(),
            BasicConsumeOptions::default(),
            ftable(&[("x-stream-offset", lstr("first"))]),
        )
        .await
        .expect("consume");
    use futures_lite::StreamExt;
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(10), consumer.next())
            .await
            .expect("a delivery in time")
            .expect("a delivery")
            .expect("not an error");
    }
    let body = blocking(|| http::Api::new(&broker).get_ok("/api/queues/%2F/m"));
    let reader = &body["consumer_details"][0];
    assert_eq!(reader["offset"], 2, "{body}");
    assert_eq!(reader["offset_lag"], 2, "{body}");
    assert_eq!(
        body["readers"].as_object().map(|m| m.len()),
        Some(1),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn confirmed_entries_keep_their_offsets_across_a_master_kill() {
    let mut cluster = blocking(Cluster::start_example);
    let master = blocking(|| cluster.wait_master(Duration::from_secs(30)));
    let conn = connect_uri(&cluster.uri(master)).await;
    let ch = channel(&conn).await;
    declare_stream(&ch, "f", &[]).await;
    let all = bodies("f", 200);
    publish_confirmed(&conn, "f", &all).await;
    let before = read(&conn, "f", lstr("first"), 200).await;
    drop(conn);
    blocking(|| cluster.kill9(master));
    let new_master =
        blocking(|| cluster.wait_master_other_than(Some(master), Duration::from_secs(30)));
    let conn = connect_uri(&cluster.uri(new_master)).await;
    let after = read(&conn, "f", lstr("first"), 200).await;
    assert_eq!(after, before, "every confirmed entry, at the same offset");
    let want: Vec<(i64, String)> = all
        .iter()
        .enumerate()
        .map(|(i, b)| (i as i64, b.clone()))
        .collect();
    assert_eq!(after, want);
    // The new master goes on numbering from the last entry.
    publish_confirmed(&conn, "f", &["f-200".to_string()]).await;
    assert_eq!(
        read(&conn, "f", lstr("last"), 1).await,
        [(200, "f-200".to_string())]
    );
}

/// The same cases with pika, each checked against the answer RabbitMQ 3.10
/// gives (`compat-tests/python/stream/amqp_streams.py`, which passes against
/// a RabbitMQ 3.10 node with `--rabbitmq`: there a bad offset is a 541).
#[test]
fn pika_gets_the_answers_rabbitmq_3_10_gives() {
    let broker = Broker::start();
    compat_tests::common::python::run_cases("stream/amqp_streams.py", broker.amqp_port, 30);
}
