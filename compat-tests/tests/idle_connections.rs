//! Many idle connections (issue 23, scope 3): 10,000 clients, each with a
//! channel, an exclusive queue bound to `amq.fanout` and a consumer, opened
//! side by side, then left idle. The broker must serve them all: one message
//! published to the fanout afterwards reaches every consumer.
//!
//! The test asserts that behaviour only. It prints what the targets
//! are about (the broker's RSS per connection, the time to open them all, its
//! CPU while they are idle), which docs/benchmarks.md records: a slow or busy
//! machine changes those figures and must not fail the test.
//!
//! The clients are raw AMQP frames on plain tokio sockets (`RawConn`), so
//! that the test process costs little per connection and opens them fast;
//! they negotiate a 60 s heartbeat as the usual client libraries do.

use compat_tests::Broker;
use compat_tests::common::*;
use compat_tests::procfs::rss_bytes;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// How many clients.
const CONNECTIONS: usize = 10_000;
/// How many of them are in their handshake at once.
const OPENING_AT_ONCE: usize = 200;
/// How long the idle CPU is measured over.
const IDLE: Duration = Duration::from_secs(20);
/// Bound of every wait: far above what the slowest machine needs.
const BOUND: Duration = Duration::from_secs(300);

/// The broker process's CPU time (user + system), in seconds.
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // The fields after the command name (which may hold spaces) start after ')'.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().expect("utime") + f[12].parse::<f64>().expect("stime");
    ticks / 100.0 // USER_HZ on Linux
}

/// Read the next method: it must be `class.method`.
async fn expect_method(c: &mut RawConn, class: u16, method: u16, what: &str) {
    let (_, m) = c.read_method().await;
    let got = (m.get_amqp_class_id(), m.get_amqp_method_id());
    assert_eq!(got, (class, method), "expected {what}, got {m:?}");
}

/// One idle client: logged in, a channel, an exclusive queue bound to
/// `amq.fanout`, a consumer with no-ack.
async fn open_client(addr: SocketAddr) -> RawConn {
    let mut c = RawConn::connect(addr).await;
    c.read_start().await;
    let tune = c.start_ok("guest", "guest").await;
    c.tune_ok_and_open(tune.channel_max, tune.frame_max, 60, "/")
        .await;
    let mut args = Vec::new();
    put_shortstr(&mut args, "");
    c.send_method(1, 20, 10, &args).await; // channel.open
    expect_method(&mut c, 20, 11, "channel.open-ok").await;
    let mut args = 0u16.to_be_bytes().to_vec();
    put_shortstr(&mut args, ""); // server-named
    args.push(0b0000_1100); // exclusive, auto-delete
    args.extend_from_slice(&0u32.to_be_bytes());
    c.send_method(1, 50, 10, &args).await; // queue.declare
    expect_method(&mut c, 50, 11, "queue.declare-ok").await;
    let mut args = 0u16.to_be_bytes().to_vec();
    put_shortstr(&mut args, ""); // the channel's last declared queue
    put_shortstr(&mut args, "amq.fanout");
    put_shortstr(&mut args, "");
    args.push(0);
    args.extend_from_slice(&0u32.to_be_bytes());
    c.send_method(1, 50, 20, &args).await; // queue.bind
    expect_method(&mut c, 50, 21, "queue.bind-ok").await;
    let mut args = 0u16.to_be_bytes().to_vec();
    put_shortstr(&mut args, "");
    put_shortstr(&mut args, "");
    args.push(0b0000_0010); // no-ack
    args.extend_from_slice(&0u32.to_be_bytes());
    c.send_method(1, 60, 20, &args).await; // basic.consume
    expect_method(&mut c, 60, 21, "basic.consume-ok").await;
    c
}

/// Wait for a basic.deliver on `c` (heartbeats skipped).
async fn delivered(mut c: RawConn) -> bool {
    loop {
        match c.read_frame().await {
            None => return false,
            Some(f) if f.kind == 1 && f.payload.get(..4) == Some(&[0, 60, 0, 60]) => return true,
            Some(_) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_idle_consumers_are_all_served() {
    let broker = Broker::start();
    let pid = broker.pid();
    let addr = broker.addr();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before = rss_bytes(pid);

    let started = Instant::now();
    let gate = Arc::new(Semaphore::new(OPENING_AT_ONCE));
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        let gate = gate.clone();
        opening.spawn(async move {
            let _turn = gate.acquire_owned().await.expect("semaphore");
            tokio::time::timeout(BOUND, open_client(addr))
                .await
                .expect("a client opened within the bound")
        });
    }
    let mut clients = Vec::with_capacity(CONNECTIONS);
    while let Some(c) = opening.join_next().await {
        clients.push(c.expect("client task"));
    }
    let opened_in = started.elapsed();
    assert_eq!(clients.len(), CONNECTIONS);

    // Idle: nothing but heartbeats' timers.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_open = rss_bytes(pid);
    let cpu0 = cpu_s(pid);
    tokio::time::sleep(IDLE).await;
    let idle_cpu = (cpu_s(pid) - cpu0) / IDLE.as_secs_f64();

    // Every consumer is still served: one message to the fanout reaches all.
    let conn = connect(&broker).await;
    let ch = conn.create_channel().await.expect("channel");
    ch.basic_publish(
        "amq.fanout".into(),
        "".into(),
        Default::default(),
        b"wake up",
        Default::default(),
    )
    .await
    .expect("publish");
    let started = Instant::now();
    let mut waiting = tokio::task::JoinSet::new();
    for c in clients {
        waiting.spawn(tokio::time::timeout(BOUND, delivered(c)));
    }
    let mut got = 0;
    while let Some(r) = waiting.join_next().await {
        if matches!(r, Ok(Ok(true))) {
            got += 1;
        }
    }
    let fanned_in = started.elapsed();
    let per_conn_kib = rss_open.saturating_sub(rss_before) as f64 / CONNECTIONS as f64 / 1024.0;
    eprintln!(
        "{CONNECTIONS} idle connections (a channel, an exclusive queue and a consumer each): \
         opened in {opened_in:.2?} ({OPENING_AT_ONCE} at once); broker RSS {} -> {} MiB, \
         {per_conn_kib:.1} KiB per connection; idle broker CPU {:.2}% of a core over {IDLE:?}; \
         one fanout message reached all {got} consumers in {fanned_in:.2?}",
        rss_before / (1 << 20),
        rss_open / (1 << 20),
        idle_cpu * 100.0
    );
    assert_eq!(got, CONNECTIONS, "consumers that got the fanout message");
}
