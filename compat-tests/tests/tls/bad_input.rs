//! Bad input on the AMQPS port: plain AMQP, garbage, a truncated handshake,
//! a handshake that never starts, an expired and an untrusted client
//! certificate. Each is closed within the handshake timeout and logged once,
//! while a bystander on plain AMQP keeps publishing with confirms and
//! reading its messages back; at the end a fresh TLS client is still served.

use super::client::{Pki, TlsBroker};
use super::common::*;
use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The handshake timeout the broker is given here.
const HANDSHAKE_MS: u64 = 1000;

/// A plain AMQP client that publishes with confirms and reads each message
/// back, one round at a time, until stopped; counts the rounds it finished.
struct Bystander {
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

impl Bystander {
    async fn start(uri: String) -> Bystander {
        let conn = connect_uri(&uri).await;
        let ch = confirm_channel(&conn).await;
        let q = ch
            .queue_declare(
                "".into(),
                QueueDeclareOptions::exclusive(),
                Default::default(),
            )
            .await
            .expect("bystander queue");
        let q = q.name().to_string();
        let (stop, rounds) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (stop2, rounds2) = (stop.clone(), rounds.clone());
        let task = tokio::spawn(async move {
            let _conn = conn;
            let mut n = 0u64;
            while !stop2.load(Ordering::SeqCst) {
                let body = n.to_string();
                publish(&ch, "", &q, body.as_bytes()).await;
                let got = ch
                    .basic_get(q.as_str().into(), BasicGetOptions { no_ack: true })
                    .await
                    .map_err(|e| format!("basic.get: {e}"))?;
                match got {
                    Some(m) if m.delivery.data == body.as_bytes() => {}
                    other => {
                        return Err(format!(
                            "round {n}: got {:?}",
                            other.map(|m| m.delivery.data)
                        ));
                    }
                }
                n += 1;
                rounds2.store(n, Ordering::SeqCst);
            }
            Ok(())
        });
        Bystander { stop, rounds, task }
    }

    /// Stop and check it kept going; returns the rounds it finished.
    async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        let r = within("the bystander to stop", self.task)
            .await
            .expect("bystander task");
        if let Err(e) = r {
            panic!("the bystander failed: {e}");
        }
        self.rounds.load(Ordering::SeqCst)
    }
}

/// Read until the broker closes the socket (EOF, reset, or an alert then
/// EOF); returns how long that took. Fails past `bound`.
async fn closed_within(mut s: TcpStream, bound: Duration) -> Duration {
    let t0 = Instant::now();
    let mut buf = [0u8; 4096];
    let r = tokio::time::timeout(bound, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(r.is_ok(), "the broker kept the socket open past {bound:?}");
    t0.elapsed()
}

async fn tcp(b: &TlsBroker) -> TcpStream {
    TcpStream::connect(("127.0.0.1", b.amqps_port))
        .await
        .expect("connect")
}

/// The first bytes of a TLS ClientHello that a real client sends.
async fn client_hello_prefix(b: &TlsBroker) -> Vec<u8> {
    // Capture one: a local listener that the rustls client dials.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = l.local_addr().expect("addr").port();
    let grab = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.expect("accept");
        let mut buf = vec![0u8; 4096];
        let n = s.read(&mut buf).await.expect("read hello");
        buf.truncate(n);
        buf
    });
    let fake = TlsBroker::pointing_at(b, port);
    let _ = tokio::time::timeout(Duration::from_millis(500), fake.handshake(None)).await;
    let hello = within("the ClientHello", grab).await.expect("grab");
    assert!(
        hello.len() > 40 && hello[0] == 0x16,
        "not a ClientHello: {hello:?}"
    );
    hello
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_input_is_closed_and_logged_while_a_bystander_keeps_working() {
    let pki = Pki::new();
    let lines = format!(
        "{}\nhandshake_timeout_ms = {HANDSHAKE_MS}",
        pki.verify_peer_lines(false)
    );
    let b = TlsBroker::start(&pki, &lines);
    let bystander = Bystander::start(b.broker.uri()).await;
    let bound = Duration::from_millis(HANDSHAKE_MS * 5);

    // Plain AMQP on the TLS port.
    let mut s = tcp(&b).await;
    s.write_all(b"AMQP\x00\x00\x09\x01").await.expect("write");
    closed_within(s, bound).await;
    // Garbage.
    let mut s = tcp(&b).await;
    s.write_all(&[0x42; 300]).await.expect("write");
    closed_within(s, bound).await;
    // A ClientHello cut in half, then silence: the handshake timeout.
    let hello = client_hello_prefix(&b).await;
    let mut s = tcp(&b).await;
    s.write_all(&hello[..hello.len() / 2]).await.expect("write");
    let took = closed_within(s, bound).await;
    assert!(
        took >= Duration::from_millis(HANDSHAKE_MS / 2),
        "closed after {took:?}"
    );
    // A client that connects and sends nothing.
    let took = closed_within(tcp(&b).await, bound).await;
    assert!(
        took >= Duration::from_millis(HANDSHAKE_MS / 2),
        "closed after {took:?}"
    );
    // An expired and an untrusted client certificate.
    for (what, cert) in [("expired", &pki.expired), ("untrusted", &pki.untrusted)] {
        let r = b.handshake(Some(cert)).await;
        let r = match r {
            Ok(s) => super::client::first_read(s).await,
            Err(e) => Err(e),
        };
        assert!(r.is_err(), "an {what} client certificate was accepted");
    }

    // Everyone else was served throughout.
    let rounds = bystander.finish().await;
    assert!(rounds > 0, "the bystander made no progress");
    let mut ok = b.raw(Some(&pki.alice)).await;
    ok.read_start().await;
    let log = b.broker.log();
    for needle in [
        "plain AMQP header to the TLS port",
        "TLS handshake timed out",
        "TLS handshake failed",
    ] {
        assert!(log.contains(needle), "no '{needle}' in the log:\n{log}");
    }
    assert!(!log.contains("panicked"), "{log}");
    // Logged once per connection: six bad connections, no more lines than that.
    let lines = log.lines().filter(|l| l.contains("TLS handshake")).count();
    assert!((6..=8).contains(&lines), "{lines} handshake lines:\n{log}");
}
