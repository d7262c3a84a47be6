//! Malformed and hostile input on one connection must close that connection the
//! way RabbitMQ does, and must not disturb anyone else.
//!
//! Each test speaks raw AMQP 0-9-1 over TCP (the bytes are written by hand below,
//! so the test does not share a codec with the broker) and asserts the reply code
//! of the `connection.close` the server sends. Meanwhile a well-behaved lapin
//! client (the *bystander*) publishes with confirms and consumes on its own queue,
//! before, during and after; at the end it must have received exactly what it
//! published, in order.
//!
//! The expected replies were checked against RabbitMQ 3.10.8:
//!
//! | input | RabbitMQ's reply |
//! |---|---|
//! | not an AMQP protocol header | `AMQP\x00\x00\x09\x01`, then the socket closes |
//! | a frame larger than the negotiated frame_max | 501 `FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,8192,4088}` |
//! | a method on a channel never opened | 504 `CHANNEL_ERROR - expected 'channel.open'` (class/method of the offender) |
//! | an unknown frame type | 501 `FRAME_ERROR - type 65, all octets = <<"garbage">>: unknown_frame` |
//! | a bad frame-end octet | 501 `FRAME_ERROR - type 1, all octets = <<0,20,0,10,0>>: {invalid_frame_end_marker,0}` |
//! | a wrong password or unknown user | 403 `ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. ...` |
//! | an unknown class or method id | no connection.close: the connection process exits and the socket is reset |

use compat_tests::Broker;
use futures_lite::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::timeout;

/// Bound on every single network wait in these tests.
const WAIT: Duration = Duration::from_secs(30);

/// The protocol header of AMQP 0-9-1.
const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";

const FRAME_METHOD: u8 = 1;
const FRAME_HEADER: u8 = 2;
const FRAME_BODY: u8 = 3;
const FRAME_HEARTBEAT: u8 = 8;
const FRAME_END: u8 = 0xCE;

const FRAME_ERROR: u16 = 501;
const COMMAND_INVALID: u16 = 503;
const CHANNEL_ERROR: u16 = 504;
const ACCESS_REFUSED: u16 = 403;
const NOT_IMPLEMENTED: u16 = 540;

// ---------------------------------------------------------------------------
// Encoding, by hand.

fn shortstr(out: &mut Vec<u8>, s: &str) {
    out.push(u8::try_from(s.len()).expect("short string"));
    out.extend_from_slice(s.as_bytes());
}

fn longstr(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&u32::try_from(b.len()).expect("long").to_be_bytes());
    out.extend_from_slice(b);
}

/// A field table from already encoded `(name, type octet + value)` entries.
fn table(out: &mut Vec<u8>, entries: &[(&str, Vec<u8>)]) {
    let mut body = Vec::new();
    for (name, value) in entries {
        shortstr(&mut body, name);
        body.extend_from_slice(value);
    }
    longstr(out, &body);
}

fn frame(frame_type: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![frame_type];
    f.extend_from_slice(&channel.to_be_bytes());
    f.extend_from_slice(&u32::try_from(payload.len()).expect("size").to_be_bytes());
    f.extend_from_slice(payload);
    f.push(FRAME_END);
    f
}

fn method_frame(channel: u16, class: u16, method: u16, args: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(4 + args.len());
    p.extend_from_slice(&class.to_be_bytes());
    p.extend_from_slice(&method.to_be_bytes());
    p.extend_from_slice(args);
    frame(FRAME_METHOD, channel, &p)
}

/// connection.start-ok with PLAIN credentials. The client announces the
/// `authentication_failure_close` capability, as lapin and pika do, so a refused
/// login gets a connection.close instead of a bare socket close.
fn start_ok(user: &str, pass: &str) -> Vec<u8> {
    let mut caps = vec![b'F'];
    table(
        &mut caps,
        &[("authentication_failure_close", vec![b't', 1])],
    );
    let mut product = vec![b'S'];
    longstr(&mut product, b"stablemq bad_input test");
    let mut a = Vec::new();
    table(&mut a, &[("capabilities", caps), ("product", product)]);
    shortstr(&mut a, "PLAIN");
    longstr(&mut a, format!("\0{user}\0{pass}").as_bytes());
    shortstr(&mut a, "en_US");
    method_frame(0, 10, 11, &a)
}

fn tune_ok(channel_max: u16, frame_max: u32, heartbeat: u16) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&channel_max.to_be_bytes());
    a.extend_from_slice(&frame_max.to_be_bytes());
    a.extend_from_slice(&heartbeat.to_be_bytes());
    method_frame(0, 10, 31, &a)
}

fn connection_open(vhost: &str) -> Vec<u8> {
    let mut a = Vec::new();
    shortstr(&mut a, vhost);
    shortstr(&mut a, ""); // reserved-1
    a.push(0); // reserved-2
    method_frame(0, 10, 40, &a)
}

fn connection_close_ok() -> Vec<u8> {
    method_frame(0, 10, 51, &[])
}

fn channel_open(channel: u16) -> Vec<u8> {
    let mut a = Vec::new();
    shortstr(&mut a, ""); // reserved-1
    method_frame(channel, 20, 10, &a)
}

fn queue_declare(channel: u16, queue: &str) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&0u16.to_be_bytes()); // reserved-1
    shortstr(&mut a, queue);
    a.push(0b0000_1000); // auto-delete
    table(&mut a, &[]);
    method_frame(channel, 50, 10, &a)
}

fn basic_publish(channel: u16, exchange: &str, routing_key: &str) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&0u16.to_be_bytes()); // reserved-1
    shortstr(&mut a, exchange);
    shortstr(&mut a, routing_key);
    a.push(0);
    method_frame(channel, 60, 40, &a)
}

/// Content header for class basic with no properties.
fn content_header(channel: u16, body_size: u64) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&60u16.to_be_bytes());
    p.extend_from_slice(&0u16.to_be_bytes()); // weight
    p.extend_from_slice(&body_size.to_be_bytes());
    p.extend_from_slice(&0u16.to_be_bytes()); // property flags
    frame(FRAME_HEADER, channel, &p)
}

// ---------------------------------------------------------------------------
// A raw client.

#[derive(Debug)]
struct Frame {
    frame_type: u8,
    channel: u16,
    payload: Vec<u8>,
}

impl Frame {
    fn class_method(&self) -> Option<(u16, u16)> {
        if self.frame_type != FRAME_METHOD || self.payload.len() < 4 {
            return None;
        }
        let p = &self.payload;
        Some((
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        ))
    }
}

/// What the server said in its connection.close.
#[derive(Debug)]
struct Close {
    reply_code: u16,
    reply_text: String,
    class_id: u16,
    method_id: u16,
}

struct Raw {
    stream: TcpStream,
    buf: Vec<u8>,
    /// frame_max the server proposed in connection.tune.
    server_frame_max: u32,
}

impl Raw {
    async fn connect(addr: SocketAddr) -> Raw {
        let stream = timeout(WAIT, TcpStream::connect(addr))
            .await
            .expect("connect timed out")
            .expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Raw {
            stream,
            buf: Vec::new(),
            server_frame_max: 0,
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        timeout(WAIT, self.stream.write_all(bytes))
            .await
            .expect("write timed out")
            .expect("write");
    }

    /// Read more bytes into the buffer; false at EOF (or a reset: the peer is gone).
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        match timeout(WAIT, self.stream.read(&mut chunk))
            .await
            .expect("read timed out")
        {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// Everything the server sends until it closes the socket.
    async fn read_to_eof(&mut self) -> Vec<u8> {
        while self.fill().await {}
        std::mem::take(&mut self.buf)
    }

    /// The next frame, or None if the server closed the socket first.
    async fn read_frame(&mut self) -> Option<Frame> {
        loop {
            if self.buf.len() >= 7 {
                let size = u32::from_be_bytes([self.buf[3], self.buf[4], self.buf[5], self.buf[6]]);
                let total = 7 + size as usize + 1;
                if self.buf.len() >= total {
                    let rest = self.buf.split_off(total);
                    let f = std::mem::replace(&mut self.buf, rest);
                    assert_eq!(
                        f[total - 1],
                        FRAME_END,
                        "server sent a bad frame end: {f:?}"
                    );
                    return Some(Frame {
                        frame_type: f[0],
                        channel: u16::from_be_bytes([f[1], f[2]]),
                        payload: f[7..total - 1].to_vec(),
                    });
                }
            }
            if !self.fill().await {
                assert!(
                    self.buf.is_empty(),
                    "server closed mid-frame: {:?}",
                    self.buf
                );
                return None;
            }
        }
    }

    async fn expect_method(&mut self, class: u16, method: u16) -> Frame {
        loop {
            let f = self
                .read_frame()
                .await
                .unwrap_or_else(|| panic!("socket closed while waiting for {class}.{method}"));
            if f.frame_type == FRAME_HEARTBEAT {
                continue;
            }
            assert_eq!(
                f.class_method(),
                Some((class, method)),
                "expected method {class}.{method}, got {f:?}"
            );
            return f;
        }
    }

    /// Protocol header, start/start-ok, tune/tune-ok, open/open-ok: a working
    /// connection to vhost "/". `frame_max` 0 takes the server's proposal.
    async fn handshake(addr: SocketAddr, frame_max: u32) -> Raw {
        let mut raw = Raw::connect(addr).await;
        raw.send(PROTOCOL_HEADER).await;
        raw.expect_method(10, 10).await; // connection.start
        raw.send(&start_ok("guest", "guest")).await;
        let tune = raw.expect_method(10, 30).await;
        let p = &tune.payload[4..];
        let channel_max = u16::from_be_bytes([p[0], p[1]]);
        raw.server_frame_max = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
        let frame_max = if frame_max == 0 {
            raw.server_frame_max
        } else {
            frame_max
        };
        raw.send(&tune_ok(channel_max, frame_max, 0)).await;
        raw.send(&connection_open("/")).await;
        raw.expect_method(10, 41).await; // connection.open-ok
        raw
    }

    /// Read until the server's connection.close (skipping anything else it sends
    /// first), answer close-ok, and check the server then closes the socket.
    async fn expect_connection_close(&mut self) -> Close {
        self.connection_close_or_eof()
            .await
            .expect("the server closed the socket without sending connection.close")
    }

    /// Like `expect_connection_close`, but a socket closed without any
    /// connection.close gives None. Panics if the server keeps the connection.
    async fn connection_close_or_eof(&mut self) -> Option<Close> {
        let f = loop {
            let f = self.read_frame().await?;
            if f.class_method() == Some((10, 50)) {
                break f;
            }
        };
        assert_eq!(f.channel, 0, "connection.close on channel {}", f.channel);
        let p = &f.payload[4..];
        let reply_code = u16::from_be_bytes([p[0], p[1]]);
        let text_len = p[2] as usize;
        let reply_text = String::from_utf8_lossy(&p[3..3 + text_len]).into_owned();
        let q = &p[3 + text_len..];
        let close = Close {
            reply_code,
            reply_text,
            class_id: u16::from_be_bytes([q[0], q[1]]),
            method_id: u16::from_be_bytes([q[2], q[3]]),
        };
        // The server may already have shut the socket; a failed write is fine.
        let _ = self.stream.write_all(&connection_close_ok()).await;
        let rest = self.read_to_eof().await;
        assert!(
            rest.is_empty(),
            "the server sent more after connection.close: {rest:?}"
        );
        Some(close)
    }
}

/// The reply code, and RabbitMQ's reply-text convention "NAME - details" that
/// some clients match on.
fn assert_close(close: &Close, code: u16, name: &str) {
    assert_eq!(close.reply_code, code, "{close:?}");
    assert!(
        close.reply_text.starts_with(&format!("{name} - ")),
        "reply text should start with \"{name} - \": {close:?}"
    );
}

// ---------------------------------------------------------------------------
// The bystander: a well-behaved lapin client that must not notice anything.

struct Bystander {
    conn: Connection,
    /// Held, and closed explicitly at the end: lapin closes a channel when its
    /// last handle drops, and that close would race with the connection's close.
    publish_ch: Channel,
    consume_ch: Channel,
    stop: Arc<AtomicBool>,
    confirmed: Arc<AtomicU64>,
    /// Bodies received so far, and the consumer's error if its stream failed.
    received: Arc<Mutex<(Vec<u64>, Option<String>)>>,
    publisher: JoinHandle<u64>,
    consumer: JoinHandle<()>,
}

impl Bystander {
    async fn start(uri: &str) -> Bystander {
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
    async fn progress(&self, n: u64) {
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
    async fn finish(self) {
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

async fn with_bystander<F, Fut>(broker: &Broker, bad: F)
where
    F: FnOnce(SocketAddr) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let bystander = Bystander::start(&broker.uri()).await;
    bad(broker.addr()).await;
    bystander.progress(10).await;
    // A fresh, well-behaved connection still works too.
    let mut good = Raw::handshake(broker.addr(), 0).await;
    good.send(&channel_open(1)).await;
    good.expect_method(20, 11).await;
    bystander.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_instead_of_protocol_header_gets_the_header_back() {
    let broker = Broker::start();
    with_bystander(&broker, |addr| async move {
        for garbage in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            &b"\x16\x03\x01\x02\x00\x01\x00\x01"[..], // a TLS ClientHello's start
            &b"AMQX\x00\x00\x09\x01"[..],
        ] {
            let mut raw = Raw::connect(addr).await;
            raw.send(garbage).await;
            let reply = raw.read_to_eof().await;
            assert_eq!(
                reply,
                PROTOCOL_HEADER,
                "reply to {:?}",
                String::from_utf8_lossy(garbage)
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frame_larger_than_frame_max_is_a_frame_error() {
    let broker = Broker::start();
    with_bystander(&broker, |addr| async move {
        // The client may lower frame_max in tune-ok; the server must hold it to that.
        let frame_max = 4096u32;
        let mut raw = Raw::handshake(addr, frame_max).await;
        raw.send(&channel_open(1)).await;
        raw.expect_method(20, 11).await;
        let body = vec![b'x'; 2 * frame_max as usize];
        raw.send(&basic_publish(1, "", "nowhere")).await;
        raw.send(&content_header(1, body.len() as u64)).await;
        // One body frame of 8 KiB: the client should have split it at frame_max.
        raw.send(&frame(FRAME_BODY, 1, &body)).await;
        let close = raw.expect_connection_close().await;
        assert_close(&close, FRAME_ERROR, "FRAME_ERROR");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_on_a_channel_never_opened_is_a_channel_error() {
    let broker = Broker::start();
    with_bystander(&broker, |addr| async move {
        // A publish is one command in three frames; the server judges it once the
        // content is complete (RabbitMQ waits for the content header).
        let mut publish = basic_publish(5, "", "bad-input-nowhere");
        publish.extend(content_header(5, 3));
        publish.extend(frame(FRAME_BODY, 5, b"abc"));
        for (bad, class_method) in [
            (queue_declare(5, "bad-input-never-declared"), (50, 10)),
            (publish, (60, 40)),
        ] {
            let mut raw = Raw::handshake(addr, 0).await;
            raw.send(&channel_open(1)).await;
            raw.expect_method(20, 11).await;
            raw.send(&bad).await;
            let close = raw.expect_connection_close().await;
            assert_close(&close, CHANNEL_ERROR, "CHANNEL_ERROR");
            assert_eq!((close.class_id, close.method_id), class_method, "{close:?}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_frame_type_is_a_frame_error() {
    let broker = Broker::start();
    with_bystander(&broker, |addr| async move {
        let mut raw = Raw::handshake(addr, 0).await;
        raw.send(&frame(b'A', 0, b"garbage")).await;
        let close = raw.expect_connection_close().await;
        assert_close(&close, FRAME_ERROR, "FRAME_ERROR");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frame_end_octet_is_a_frame_error() {
    let broker = Broker::start();
    with_bystander(&broker, |addr| async move {
        let mut raw = Raw::handshake(addr, 0).await;
        let mut f = channel_open(1);
        *f.last_mut().unwrap() = 0x00;
        raw.send(&f).await;
        let close = raw.expect_connection_close().await;
        assert_close(&close, FRAME_ERROR, "FRAME_ERROR");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_access_refused() {
    let broker = Broker::start();
    with_bystander(&broker, |addr| async move {
        for (user, pass) in [("guest", "not-the-password"), ("nobody", "guest")] {
            let mut raw = Raw::connect(addr).await;
            raw.send(PROTOCOL_HEADER).await;
            raw.expect_method(10, 10).await;
            raw.send(&start_ok(user, pass)).await;
            let close = raw.expect_connection_close().await;
            assert_close(&close, ACCESS_REFUSED, "ACCESS_REFUSED");
        }
    })
    .await;
}

/// RabbitMQ (3.10.8, and its current source: `lookup_method_name` exits with
/// `unknown_method_id`) answers an unknown class or method id by dropping the
/// connection without a connection.close. A connection.close with 503
/// COMMAND_INVALID or 540 NOT_IMPLEMENTED first is also accepted: clients see the
/// connection end either way. Ignoring the frame, or anything else, fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_class_or_method_closes_the_connection() {
    let broker = Broker::start();
    with_bystander(&broker, |addr| async move {
        for (channel, class, method) in [(1, 60, 99), (1, 99, 10), (0, 10, 99)] {
            let mut raw = Raw::handshake(addr, 0).await;
            raw.send(&channel_open(1)).await;
            raw.expect_method(20, 11).await;
            raw.send(&method_frame(channel, class, method, &[0; 8]))
                .await;
            if let Some(close) = raw.connection_close_or_eof().await {
                assert!(
                    [COMMAND_INVALID, NOT_IMPLEMENTED].contains(&close.reply_code),
                    "class {class} method {method}: {close:?}"
                );
            }
        }
    })
    .await;
}

/// Control: the bystander and the raw handshake alone, with no bad input. If this
/// fails, the other failures here say nothing about bad input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_without_bad_input() {
    let broker = Broker::start();
    with_bystander(&broker, |_| async {}).await;
}
