//! `stablemq shovel` between two real StableMQ processes (the source stands
//! in for the RabbitMQ being retired; scripts/migration-check.sh runs the
//! shovel from a real RabbitMQ 3.10): every message arrives with its
//! properties, a refused message stays at the source, and a shovel killed
//! with SIGKILL part-way loses nothing when run again.

use compat_tests::common;

use common::*;
use lapin::options::{BasicAckOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel};
use serde_json::Value;
use std::collections::HashMap;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Run `stablemq shovel ARGS... --json` to completion.
fn shovel(args: &[&str]) -> Output {
    Command::new(compat_tests::binary_path())
        .arg("shovel")
        .args(args)
        .arg("--json")
        .output()
        .expect("run stablemq shovel")
}

/// The JSON report of a successful run.
fn report(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "shovel failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("shovel --json report")
}

/// Declare a durable queue.
async fn durable(ch: &Channel, q: &str) {
    declare_queue_with(
        ch,
        q,
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await;
}

/// The properties message `i` is published with: every field set.
fn props(i: u32) -> BasicProperties {
    let mut h = FieldTable::default();
    h.insert(ShortString::from("n"), AMQPValue::LongUInt(i));
    h.insert(
        ShortString::from("origin"),
        AMQPValue::LongString(LongString::from("old-broker")),
    );
    BasicProperties::default()
        .with_content_type("text/plain".into())
        .with_content_encoding("identity".into())
        .with_headers(h)
        .with_delivery_mode(2)
        .with_priority(3)
        .with_correlation_id(format!("c-{i}").into())
        .with_reply_to("replies".into())
        .with_expiration("600000".into())
        .with_message_id(format!("m-{i}").into())
        .with_timestamp(1_700_000_000 + u64::from(i))
        .with_type("order".into())
        .with_user_id("guest".into())
        .with_app_id("shop".into())
}

/// Publish messages `0..n` (body `msg-i`) to `q` with confirms.
async fn fill(ch: &Channel, q: &str, n: u32) {
    for i in 0..n {
        publish_props(ch, "", q, format!("msg-{i}").as_bytes(), props(i)).await;
    }
}

/// Take every message off `q`: body -> (properties, how many times seen).
async fn take_all(ch: &Channel, q: &str) -> HashMap<String, (BasicProperties, u32)> {
    let mut seen: HashMap<String, (BasicProperties, u32)> = HashMap::new();
    loop {
        let Some(m) = get_with(ch, q, false).await else {
            return seen;
        };
        let body = String::from_utf8(m.delivery.data.clone()).expect("utf-8 body");
        within(
            "basic.ack",
            m.delivery.acker.ack(BasicAckOptions::default()),
        )
        .await
        .expect("ack");
        seen.entry(body)
            .and_modify(|e| e.1 += 1)
            .or_insert((m.delivery.properties.clone(), 1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_arrives_once_with_its_properties() {
    let (src, dest) = (Broker::start(), Broker::start());
    let (_sc, sch) = open(&src).await;
    let (_dc, dch) = open(&dest).await;
    let q = unique("orders");
    durable(&sch, &q).await;
    durable(&dch, &q).await;
    fill(&sch, &q, 500).await;

    let out = shovel(&[
        "--src-uri",
        &src.uri(),
        "--src-queue",
        &q,
        "--dest-uri",
        &dest.uri(),
        "--prefetch",
        "50",
        "--confirm-window",
        "20",
        "--exit-when-empty",
    ]);
    let r = report(&out);
    assert_eq!(
        (r["published"].as_u64(), r["moved"].as_u64()),
        (Some(500), Some(500)),
        "{r}"
    );
    assert_eq!(r["source_remaining"].as_u64(), Some(0), "{r}");
    assert_eq!(queue_counts(&sch, &q).await.0, 0);

    let got = take_all(&dch, &q).await;
    assert_eq!(got.len(), 500);
    for i in 0..500 {
        let (p, count) = got
            .get(&format!("msg-{i}"))
            .unwrap_or_else(|| panic!("msg-{i} is missing"));
        assert_eq!(*count, 1, "msg-{i} arrived {count} times");
        assert_eq!(p, &props(i), "msg-{i}'s properties changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_targets_and_max_messages() {
    let (src, dest) = (Broker::start(), Broker::start());
    let (_sc, sch) = open(&src).await;
    let (_dc, dch) = open(&dest).await;
    let q = unique("src");
    durable(&sch, &q).await;
    let (a, b, all) = (unique("a"), unique("b"), unique("all"));
    for x in [&a, &b, &all] {
        durable(&dch, x).await;
    }
    bind_queue(&dch, &a, "amq.topic", "a.*").await;
    bind_queue(&dch, &b, "amq.topic", "b.*").await;
    bind_queue(&dch, &all, "amq.direct", "everything").await;
    // Messages reach the source queue with routing keys a.N and b.N.
    bind_queue(&sch, &q, "amq.topic", "#").await;
    for i in 0..40u32 {
        let key = if i % 2 == 0 {
            format!("a.{i}")
        } else {
            format!("b.{i}")
        };
        publish_props(
            &sch,
            "amq.topic",
            &key,
            format!("msg-{i}").as_bytes(),
            props(i),
        )
        .await;
    }

    // The first 10, to amq.topic with their own routing keys.
    let base = [
        "--src-uri",
        &src.uri(),
        "--src-queue",
        &q,
        "--dest-uri",
        &dest.uri(),
        "--prefetch",
        "25",
    ];
    let mut args = base.to_vec();
    args.extend(["--dest-exchange", "amq.topic", "--max-messages", "10"]);
    let r = report(&shovel(&args));
    assert_eq!(r["moved"].as_u64(), Some(10), "{r}");
    assert_eq!(r["source_remaining"].as_u64(), Some(30), "{r}");
    let got_a = take_all(&dch, &a).await;
    let got_b = take_all(&dch, &b).await;
    let mut want_a: Vec<String> = (0..10).step_by(2).map(|i| format!("msg-{i}")).collect();
    let mut want_b: Vec<String> = (1..10).step_by(2).map(|i| format!("msg-{i}")).collect();
    let mut have_a: Vec<String> = got_a.into_keys().collect();
    let mut have_b: Vec<String> = got_b.into_keys().collect();
    for v in [&mut want_a, &mut want_b, &mut have_a, &mut have_b] {
        v.sort();
    }
    assert_eq!((have_a, have_b), (want_a, want_b));

    // The other 30, all to one queue by a fixed routing key.
    let mut args = base.to_vec();
    args.extend([
        "--dest-exchange",
        "amq.direct",
        "--dest-routing-key",
        "everything",
        "--exit-when-empty",
    ]);
    let r = report(&shovel(&args));
    assert_eq!(r["moved"].as_u64(), Some(30), "{r}");
    let rest = take_all(&dch, &all).await;
    assert_eq!(rest.len(), 30);
    assert!((10..40).all(|i| rest.contains_key(&format!("msg-{i}"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_message_stays_at_the_source() {
    let (src, dest) = (Broker::start(), Broker::start());
    let (_sc, sch) = open(&src).await;
    let q = unique("orders");
    durable(&sch, &q).await;
    fill(&sch, &q, 50).await;
    let base = [
        "--src-uri",
        &src.uri(),
        "--src-queue",
        &q,
        "--dest-uri",
        &dest.uri(),
    ];

    // No such queue at the destination: refused before anything moves.
    let mut args = base.to_vec();
    args.push("--exit-when-empty");
    let out = shovel(&args);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("import the definitions"), "{err}");

    // Unroutable at the destination (mandatory, returned): the shovel stops
    // and acks none of what it published.
    let mut args = base.to_vec();
    args.extend([
        "--dest-exchange",
        "amq.direct",
        "--dest-routing-key",
        "nowhere",
    ]);
    let out = shovel(&args);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("could not route"), "{err}");
    wait_message_count(&sch, &q, 50).await;
    let left = take_all(&sch, &q).await;
    assert!((0..50).all(|i| left.contains_key(&format!("msg-{i}"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_shovel_loses_nothing() {
    const N: u32 = 2000;
    let (src, dest) = (Broker::start(), Broker::start());
    let (_sc, sch) = open(&src).await;
    let (_dc, dch) = open(&dest).await;
    let q = unique("orders");
    durable(&sch, &q).await;
    durable(&dch, &q).await;
    fill(&sch, &q, N).await;
    let base = [
        "--src-uri",
        &src.uri(),
        "--src-queue",
        &q,
        "--dest-uri",
        &dest.uri(),
    ];

    // One message at a time, so that the kill lands mid-way.
    let mut slow = Command::new(compat_tests::binary_path())
        .arg("shovel")
        .args(base)
        .args([
            "--prefetch",
            "1",
            "--confirm-window",
            "1",
            "--exit-when-empty",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn shovel");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let moved = queue_counts(&dch, &q).await.0;
        if moved >= 100 {
            break;
        }
        if let Ok(Some(status)) = slow.try_wait() {
            panic!("the shovel ended ({status}) after {moved} messages, before the kill");
        }
        assert!(
            Instant::now() < deadline,
            "the shovel moved only {moved} in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    slow.kill().expect("SIGKILL the shovel");
    let _ = slow.wait();
    let after_kill = queue_counts(&dch, &q).await.0;
    assert!(after_kill < N, "the shovel finished before the kill");

    // Run it again to the end: every message is at the destination.
    let r = report(&shovel(&[&base[..], &["--exit-when-empty"]].concat()));
    assert_eq!(r["source_remaining"].as_u64(), Some(0), "{r}");
    let got = take_all(&dch, &q).await;
    let missing: Vec<u32> = (0..N)
        .filter(|i| !got.contains_key(&format!("msg-{i}")))
        .collect();
    assert!(missing.is_empty(), "lost after the kill: {missing:?}");
    // With prefetch 1, at most the one message in hand at the kill can be
    // both at the destination and back in the source queue.
    let dups: u32 = got.values().map(|(_, c)| c - 1).sum();
    assert!(dups <= 1, "{dups} duplicates (killed after {after_kill})");
    assert_eq!(queue_counts(&sch, &q).await.0, 0);
}
