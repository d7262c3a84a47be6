//! Resource alarms (connection.blocked) and listening on IPv6 loopback.

use compat_tests::common;

use common::*;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_alarm_blocks_publishers_and_notifies_them() {
    // A watermark of one byte puts the broker in alarm at once.
    let broker = Broker::start_with(BrokerOptions {
        config_toml: Some("memory_high_watermark_bytes = 1\n".into()),
        ..Default::default()
    });
    assert!(!broker.is_external(), "needs a broker we configure");
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    let q = unique("alarm");
    declare_queue(&ch, &q).await;
    // Consumers are not blocked: declaring and getting still work before publishing.
    assert!(get(&ch, &q).await.is_none());
    ch.basic_publish(
        "".into(),
        q.as_str().into(),
        Default::default(),
        b"x",
        Default::default(),
    )
    .await
    .expect("publish is written");
    let deadline = Instant::now() + WAIT;
    while !conn.status().blocked() {
        assert!(
            Instant::now() < deadline,
            "connection.blocked never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_alarm_publishers_are_not_blocked() {
    let broker = Broker::start();
    let (conn, ch) = open(&broker).await;
    let q = unique("no-alarm");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"x").await;
    // Alarms are evaluated every second; give one evaluation a chance.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!conn.status().blocked());
    assert_eq!(get_body(&ch, &q).await.as_deref(), Some(&b"x"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listens_on_ipv6_loopback_too() {
    // Tests bind loopback only; `--bind` repeats (the default is 0.0.0.0 and ::).
    let broker = Broker::start_with(BrokerOptions {
        extra_args: vec!["--bind".into(), "::1".into()],
        ..Default::default()
    });
    assert!(!broker.is_external(), "needs a broker we start");
    let uri = format!("amqp://guest:guest@[::1]:{}/%2f", broker.amqp_port);
    let conn = connect_uri(&uri).await;
    let ch = channel(&conn).await;
    let q = unique("v6");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"over ipv6").await;
    assert_eq!(get_body(&ch, &q).await.as_deref(), Some(&b"over ipv6"[..]));
}
