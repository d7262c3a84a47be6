//! The front door's settings, against the real binary: the `product` and
//! `version` server properties (`[server_properties]`), the handshake
//! timeout (`handshake_timeout_ms`, RabbitMQ's `handshake_timeout`) and the
//! node's connection limit (`connection_max`). Each with a bystander
//! connection that keeps publishing and consuming.
//!
//! What RabbitMQ 3.10.8 does, checked on it: a client that does not finish
//! the handshake in time has its socket closed, with no connection.close,
//! counted from the TCP connect (whether it sent nothing, only the protocol
//! header, or stopped after start-ok); a client over `connection_max` gets
//! its TCP connect, but nothing answers its protocol header until another
//! connection closes (ranch stops accepting), and then it is served.

use compat_tests::common;

use common::*;
use lapin::types::AMQPValue;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

fn broker_with(toml: &str) -> Broker {
    Broker::start_with(BrokerOptions {
        config_toml: Some(toml.to_string()),
        ..Default::default()
    })
}

fn text_property(start: &lapin::protocol::connection::Start, key: &str) -> String {
    match start.server_properties.inner().get(key) {
        Some(AMQPValue::LongString(s)) => s.to_string(),
        other => panic!("server property {key}: {other:?}"),
    }
}

/// A connection that publishes and consumes one message, to show the
/// broker serves it.
struct Bystander {
    conn: lapin::Connection,
    ch: lapin::Channel,
    queue: String,
    consumer: lapin::Consumer,
}

impl Bystander {
    async fn new(broker: &Broker) -> Bystander {
        let (conn, ch) = open(broker).await;
        let queue = unique("bystander");
        declare_queue(&ch, &queue).await;
        let consumer = consume(&ch, &queue, "by", true).await;
        Bystander {
            conn,
            ch,
            queue,
            consumer,
        }
    }

    async fn round_trip(&mut self, body: &[u8]) {
        publish(&self.ch, "", &self.queue, body).await;
        assert_eq!(next_delivery(&mut self.consumer).await.data, body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn product_and_version_are_stablemq_unless_configured() {
    let broker = Broker::start();
    let mut raw = RawConn::connect(broker.addr()).await;
    let start = raw.read_start().await;
    assert_eq!(text_property(&start, "product"), "StableMQ");
    assert!(!text_property(&start, "version").is_empty());

    let broker = broker_with("[server_properties]\nproduct = \"RabbitMQ\"\nversion = \"3.10.8\"\n");
    let mut raw = RawConn::connect(broker.addr()).await;
    let start = raw.read_start().await;
    assert_eq!(text_property(&start, "product"), "RabbitMQ");
    assert_eq!(text_property(&start, "version"), "3.10.8");
    // Everything else is as before, and clients connect as usual.
    assert!(matches!(
        start.server_properties.inner().get("capabilities"),
        Some(AMQPValue::FieldTable(_))
    ));
    let mut by = Bystander::new(&broker).await;
    by.round_trip(b"hello").await;
}

/// Read until EOF (or a reset); None if the socket is still open after
/// `bound`. Returns the bytes read and when the socket closed.
async fn wait_closed(sock: &mut TcpStream, bound: Duration) -> Option<(Vec<u8>, Instant)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        match tokio::time::timeout_at(deadline, sock.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some((got, Instant::now())),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// With `handshake_timeout_ms = 1500`: a client that sends nothing, one that
/// sends only the protocol header and one that stops after start-ok are
/// each closed after about 1.5 s from their connect, with no
/// connection.close; a bystander that finished its handshake stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_finish_the_handshake_is_closed_after_the_timeout() {
    let broker = broker_with("handshake_timeout_ms = 1500\n");
    let mut by = Bystander::new(&broker).await;
    let t0 = Instant::now();
    let mut silent = TcpStream::connect(broker.addr()).await.expect("connect");
    let mut header_only = RawConn::connect(broker.addr()).await;
    header_only.read_start().await;
    let mut after_start_ok = RawConn::connect(broker.addr()).await;
    after_start_ok.read_start().await;
    after_start_ok.start_ok("guest", "guest").await; // reads tune, sends nothing more

    // Not before the timeout.
    tokio::time::sleep(Duration::from_millis(900)).await;
    by.round_trip(b"during").await;
    assert!(
        wait_closed(&mut silent, Duration::from_millis(50))
            .await
            .is_none(),
        "the silent client was closed before the timeout"
    );
    assert!(
        header_only
            .frame_within(Duration::from_millis(50))
            .await
            .is_none(),
        "the header-only client got a frame or EOF before the timeout"
    );
    // Then closed, and nothing but connection.start was ever written.
    let (bytes, at) = wait_closed(&mut silent, Duration::from_secs(5))
        .await
        .expect("the silent client is closed");
    assert!(bytes.is_empty(), "the silent client got {bytes:?}");
    let waited = at.duration_since(t0);
    assert!(
        waited >= Duration::from_millis(1400) && waited < Duration::from_secs(4),
        "closed after {waited:?}"
    );
    // After connection.start, nothing but EOF.
    let closed = within("header only", async { header_only.read_frame().await }).await;
    assert!(
        closed.is_none(),
        "header only: a frame instead of EOF: {closed:?}"
    );
    let closed = within("after start-ok", async {
        after_start_ok.read_frame().await
    })
    .await;
    assert!(
        closed.is_none(),
        "after start-ok: a frame instead of EOF: {closed:?}"
    );
    // The bystander, open for longer than the timeout, still works.
    by.round_trip(b"after").await;
    by.conn.close(200, "bye".into()).await.expect("close");
}

/// With `connection_max = 2`: a third client's TCP connect succeeds but its
/// header gets no connection.start while two are open; the two keep
/// working; once one closes, the third is served and logs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_connection_max_waits_until_a_connection_closes() {
    let broker = broker_with("connection_max = 2\nhandshake_timeout_ms = 2000\n");
    let mut by = Bystander::new(&broker).await;
    let second = connect(&broker).await;
    let mut third = RawConn::connect(broker.addr()).await; // TCP connect + header
    match third.frame_within(Duration::from_millis(2500)).await {
        None => {}
        Some(f) => panic!("the third client was answered over the limit: {f:?}"),
    }
    // Still waiting after longer than the handshake timeout: its time has not
    // started, as in RabbitMQ, where no reader runs for it yet.
    by.round_trip(b"at the limit").await;
    second.close(200, "bye".into()).await.expect("close second");
    let start = within("connection.start once a slot is free", third.read_start()).await;
    assert_eq!((start.version_major, start.version_minor), (0, 9));
    let tune = third.start_ok("guest", "guest").await;
    third
        .tune_ok_and_open(tune.channel_max, tune.frame_max, 0, "/")
        .await;
    by.round_trip(b"after").await;
    by.conn.close(200, "bye".into()).await.expect("close");
}
