//! What survives a crash (SIGKILL) and a clean stop (SIGTERM), as RabbitMQ defines it.
//!
//! Durable exchanges, durable queues (with their arguments), bindings, and
//! persistent messages whose publish was confirmed survive; non-durable exchanges
//! and queues and transient messages do not. On SIGTERM the broker closes every
//! client connection with 320 CONNECTION_FORCED and exits with status 0.
//!
//! These tests kill and restart the broker, so they cannot run against an
//! external broker (`STABLEMQ_TEST_EXTERNAL_URI`); the harness panics saying so.
//! Each test is split into a `setup_*` and a `check_*` half that take only a URI,
//! so the same halves can be run by hand around a RabbitMQ restart.

use compat_tests::Broker;
use futures_lite::StreamExt;
use lapin::message::BasicGetMessage;
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, ExchangeBindOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{
    BasicProperties, Channel, Connection, ConnectionProperties, ErrorKind, Event, ExchangeKind,
};
use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;
use tokio::time::timeout;

/// Bound on any single wait. Publishing 10,000 confirmed messages fits easily.
const WAIT: Duration = Duration::from_secs(120);

const MESSAGES: u64 = 10_000;

/// Run a blocking harness call (kill, wait for exit, wait for listen) without
/// stalling the runtime's other tasks.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {WAIT:?}"))
}

async fn connect(uri: &str) -> Connection {
    bounded(
        "connect",
        Connection::connect(uri, ConnectionProperties::default()),
    )
    .await
    .expect("connect")
}

async fn confirm_channel(conn: &Connection) -> Channel {
    let ch = conn.create_channel().await.expect("channel.open");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    ch
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

fn transient() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(1)
}

fn durable_queue() -> QueueDeclareOptions {
    QueueDeclareOptions::durable()
}

fn durable_exchange() -> ExchangeDeclareOptions {
    ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

/// Publish one message and wait for its ack.
async fn publish_confirmed(
    ch: &Channel,
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    props: BasicProperties,
) {
    let confirm = bounded(
        "publish",
        ch.basic_publish(
            exchange.into(),
            routing_key.into(),
            BasicPublishOptions::default(),
            body,
            props,
        ),
    )
    .await
    .expect("basic.publish");
    let confirm = bounded("confirm", confirm).await.expect("confirm");
    assert!(
        confirm.is_ack(),
        "publish to {exchange:?}/{routing_key:?} was nacked"
    );
}

/// Every message in `queue` right now, by basic.get with auto-ack.
async fn drain(ch: &Channel, queue: &str) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let got: Option<BasicGetMessage> = bounded(
            "basic.get",
            ch.basic_get(queue.into(), BasicGetOptions { no_ack: true }),
        )
        .await
        .unwrap_or_else(|e| panic!("basic.get {queue}: {e}"));
        match got {
            Some(m) => out.push(String::from_utf8(m.delivery.data).expect("utf8")),
            None => return out,
        }
    }
}

/// The error a channel-closing request failed with must be this soft error.
fn assert_soft_error(result: lapin::Result<impl std::fmt::Debug>, want: AMQPSoftError, what: &str) {
    let err = result.expect_err(&format!("{what}: should have failed"));
    match err.kind() {
        ErrorKind::ProtocolError(e) => assert_eq!(
            e.kind(),
            &AMQPErrorKind::Soft(want.clone()),
            "{what}: {err}"
        ),
        _ => panic!("{what}: expected {want:?}, got {err}"),
    }
}

// ---------------------------------------------------------------------------
// Confirmed persistent messages.

const BULK_QUEUE: &str = "restart.bulk";

/// Publish `MESSAGES` persistent messages (body = sequence number) with confirms,
/// keeping up to 1,000 unconfirmed in flight, and wait for every confirm.
pub async fn setup_bulk(uri: &str) -> Connection {
    let conn = connect(uri).await;
    let ch = confirm_channel(&conn).await;
    ch.queue_declare(BULK_QUEUE.into(), durable_queue(), FieldTable::default())
        .await
        .expect("queue.declare");
    let mut in_flight = VecDeque::new();
    for n in 0..MESSAGES {
        let confirm = bounded(
            "publish",
            ch.basic_publish(
                "".into(),
                BULK_QUEUE.into(),
                BasicPublishOptions::default(),
                n.to_string().as_bytes(),
                persistent(),
            ),
        )
        .await
        .expect("basic.publish");
        in_flight.push_back((n, confirm));
        if in_flight.len() >= 1_000 {
            let (n, c) = in_flight.pop_front().expect("in flight");
            assert!(
                bounded("confirm", c).await.expect("confirm").is_ack(),
                "nack {n}"
            );
        }
    }
    for (n, c) in in_flight {
        assert!(
            bounded("confirm", c).await.expect("confirm").is_ack(),
            "nack {n}"
        );
    }
    // Still open: the broker is killed with its clients connected.
    conn
}

/// All `MESSAGES` are there, in publish order.
pub async fn check_bulk(uri: &str) {
    let conn = connect(uri).await;
    let ch = conn.create_channel().await.expect("channel");
    let q = ch
        .queue_declare(
            BULK_QUEUE.into(),
            durable_queue().passive(),
            FieldTable::default(),
        )
        .await
        .expect("the durable queue is gone");
    assert_eq!(q.message_count() as u64, MESSAGES, "messages after restart");

    ch.basic_qos(500, BasicQosOptions::default())
        .await
        .expect("basic.qos");
    let mut consumer = ch
        .basic_consume(
            BULK_QUEUE.into(),
            "restart-check".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("basic.consume");
    for n in 0..MESSAGES {
        let d = bounded("delivery", consumer.next())
            .await
            .unwrap_or_else(|| panic!("consumer ended after {n} messages"))
            .expect("delivery");
        let body = String::from_utf8(d.data.clone()).expect("utf8");
        assert_eq!(body, n.to_string(), "message {n} out of order");
        d.ack(Default::default()).await.expect("basic.ack");
    }
    conn.close(200, "bye".into()).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_persistent_messages_survive_sigkill() {
    let mut broker = Broker::start();
    let before = setup_bulk(&broker.uri()).await;
    blocking(|| {
        broker.kill9();
        broker.start_again();
    });
    drop(before);
    check_bulk(&broker.uri()).await;
}

// ---------------------------------------------------------------------------
// Declarations.

const EXCHANGES: [(&str, ExchangeKind); 4] = [
    ("restart.direct", ExchangeKind::Direct),
    ("restart.fanout", ExchangeKind::Fanout),
    ("restart.topic", ExchangeKind::Topic),
    ("restart.headers", ExchangeKind::Headers),
];

fn queue_args(max_length: i64) -> FieldTable {
    let mut t = FieldTable::default();
    t.insert("x-max-length".into(), AMQPValue::LongLongInt(max_length));
    t.insert(
        "x-stablemq-test".into(),
        AMQPValue::LongString("kept".into()),
    );
    t
}

fn headers_binding() -> FieldTable {
    let mut t = FieldTable::default();
    t.insert("x-match".into(), AMQPValue::LongString("all".into()));
    t.insert("colour".into(), AMQPValue::LongString("blue".into()));
    t
}

fn headers(colour: &str) -> BasicProperties {
    let mut t = FieldTable::default();
    t.insert("colour".into(), AMQPValue::LongString(colour.into()));
    BasicProperties::default().with_headers(t)
}

/// Durable exchanges of each type, a durable queue with arguments, queue and
/// exchange-to-exchange bindings (one removed again), a non-durable exchange and
/// queue, a durable queue deleted again, and a durable queue holding both
/// persistent and transient messages.
pub async fn setup_declarations(uri: &str) -> Connection {
    let conn = connect(uri).await;
    let ch = confirm_channel(&conn).await;
    for (name, kind) in EXCHANGES {
        ch.exchange_declare(name.into(), kind, durable_exchange(), FieldTable::default())
            .await
            .expect("exchange.declare");
    }
    ch.exchange_declare(
        "restart.transient-exchange".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange.declare");

    for q in [
        "restart.q.direct",
        "restart.q.fanout",
        "restart.q.topic",
        "restart.q.headers",
    ] {
        ch.queue_declare(q.into(), durable_queue(), FieldTable::default())
            .await
            .expect("queue.declare");
    }
    ch.queue_declare("restart.q.args".into(), durable_queue(), queue_args(1000))
        .await
        .expect("queue.declare with arguments");
    ch.queue_declare(
        "restart.q.transient".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("queue.declare");
    ch.queue_declare(
        "restart.q.deleted".into(),
        durable_queue(),
        FieldTable::default(),
    )
    .await
    .expect("queue.declare");
    ch.queue_delete("restart.q.deleted".into(), QueueDeleteOptions::default())
        .await
        .expect("queue.delete");

    let bind = |q: &'static str, ex: &'static str, key: &'static str, args: FieldTable| {
        let ch = ch.clone();
        async move {
            ch.queue_bind(
                q.into(),
                ex.into(),
                key.into(),
                QueueBindOptions::default(),
                args,
            )
            .await
            .expect("queue.bind");
        }
    };
    bind(
        "restart.q.direct",
        "restart.direct",
        "k1",
        FieldTable::default(),
    )
    .await;
    bind(
        "restart.q.direct",
        "restart.direct",
        "k2",
        FieldTable::default(),
    )
    .await;
    bind(
        "restart.q.fanout",
        "restart.fanout",
        "",
        FieldTable::default(),
    )
    .await;
    bind(
        "restart.q.topic",
        "restart.topic",
        "a.*",
        FieldTable::default(),
    )
    .await;
    bind(
        "restart.q.headers",
        "restart.headers",
        "",
        headers_binding(),
    )
    .await;
    bind(
        "restart.q.args",
        "restart.direct",
        "args",
        FieldTable::default(),
    )
    .await;
    ch.queue_unbind(
        "restart.q.direct".into(),
        "restart.direct".into(),
        "k2".into(),
        FieldTable::default(),
    )
    .await
    .expect("queue.unbind");
    // restart.topic --e2e.#--> restart.fanout
    ch.exchange_bind(
        "restart.fanout".into(),
        "restart.topic".into(),
        "e2e.#".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange.bind");

    ch.queue_declare(
        "restart.q.mixed".into(),
        durable_queue(),
        FieldTable::default(),
    )
    .await
    .expect("queue.declare");
    for i in 0..10 {
        publish_confirmed(
            &ch,
            "",
            "restart.q.mixed",
            format!("p{i}").as_bytes(),
            persistent(),
        )
        .await;
        publish_confirmed(
            &ch,
            "",
            "restart.q.mixed",
            format!("t{i}").as_bytes(),
            transient(),
        )
        .await;
    }
    conn
}

pub async fn check_declarations(uri: &str) {
    let conn = connect(uri).await;

    // Each durable exchange is back with its type: the same declaration is
    // accepted, another type is refused with 406 PRECONDITION_FAILED.
    for (name, kind) in EXCHANGES {
        let ch = conn.create_channel().await.expect("channel");
        ch.exchange_declare(
            name.into(),
            kind.clone(),
            ExchangeDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("durable exchange {name} is gone: {e}"));
        ch.exchange_declare(
            name.into(),
            kind.clone(),
            durable_exchange(),
            FieldTable::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("redeclare {name}: {e}"));
        let other = if kind == ExchangeKind::Fanout {
            ExchangeKind::Direct
        } else {
            ExchangeKind::Fanout
        };
        let r = ch
            .exchange_declare(
                name.into(),
                other,
                durable_exchange(),
                FieldTable::default(),
            )
            .await;
        assert_soft_error(r, AMQPSoftError::PRECONDITIONFAILED, name);
    }

    // The queue arguments were kept: the same arguments are accepted, a
    // different x-max-length is refused with 406.
    let ch = conn.create_channel().await.expect("channel");
    ch.queue_declare("restart.q.args".into(), durable_queue(), queue_args(1000))
        .await
        .expect("redeclare with the same arguments");
    let r = ch
        .queue_declare("restart.q.args".into(), durable_queue(), queue_args(5))
        .await;
    assert_soft_error(r, AMQPSoftError::PRECONDITIONFAILED, "x-max-length changed");

    // Non-durable and deleted things are gone: 404 NOT_FOUND.
    let ch = conn.create_channel().await.expect("channel");
    let r = ch
        .exchange_declare(
            "restart.transient-exchange".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await;
    assert_soft_error(r, AMQPSoftError::NOTFOUND, "non-durable exchange");
    for q in ["restart.q.transient", "restart.q.deleted"] {
        let ch = conn.create_channel().await.expect("channel");
        let r = ch
            .queue_declare(
                q.into(),
                QueueDeclareOptions::default().passive(),
                FieldTable::default(),
            )
            .await;
        assert_soft_error(r, AMQPSoftError::NOTFOUND, q);
    }

    // Only the persistent messages are left, in order.
    let ch = confirm_channel(&conn).await;
    let want: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
    assert_eq!(
        drain(&ch, "restart.q.mixed").await,
        want,
        "transient messages must be gone"
    );

    // The bindings route as before the crash.
    publish_confirmed(&ch, "restart.direct", "k1", b"direct k1", transient()).await;
    publish_confirmed(
        &ch,
        "restart.direct",
        "k2",
        b"direct k2 (unbound)",
        transient(),
    )
    .await;
    publish_confirmed(&ch, "restart.direct", "args", b"direct args", transient()).await;
    publish_confirmed(&ch, "restart.fanout", "any", b"fanout", transient()).await;
    publish_confirmed(&ch, "restart.topic", "a.b", b"topic a.b", transient()).await;
    publish_confirmed(&ch, "restart.topic", "a.b.c", b"topic a.b.c", transient()).await;
    publish_confirmed(&ch, "restart.topic", "e2e.x", b"via e2e", transient()).await;
    let colour = |c: &str| headers(c);
    let conf = ch
        .basic_publish(
            "restart.headers".into(),
            "".into(),
            BasicPublishOptions::default(),
            b"headers blue",
            colour("blue"),
        )
        .await
        .expect("publish");
    assert!(bounded("confirm", conf).await.expect("confirm").is_ack());
    let conf = ch
        .basic_publish(
            "restart.headers".into(),
            "".into(),
            BasicPublishOptions::default(),
            b"headers red",
            colour("red"),
        )
        .await
        .expect("publish");
    assert!(bounded("confirm", conf).await.expect("confirm").is_ack());

    assert_eq!(drain(&ch, "restart.q.direct").await, vec!["direct k1"]);
    assert_eq!(drain(&ch, "restart.q.args").await, vec!["direct args"]);
    assert_eq!(
        drain(&ch, "restart.q.fanout").await,
        vec!["fanout", "via e2e"]
    );
    assert_eq!(drain(&ch, "restart.q.topic").await, vec!["topic a.b"]);
    assert_eq!(drain(&ch, "restart.q.headers").await, vec!["headers blue"]);
    conn.close(200, "bye".into()).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_declarations_survive_sigkill_and_transient_ones_do_not() {
    let mut broker = Broker::start();
    let before = setup_declarations(&broker.uri()).await;
    blocking(|| {
        broker.kill9();
        broker.start_again();
    });
    drop(before);
    check_declarations(&broker.uri()).await;
}

// ---------------------------------------------------------------------------
// SIGTERM.

const TERM_QUEUE: &str = "restart.sigterm";

/// Wait until the lapin connection reports that it ended with an error.
///
/// With a broker that waits for close-ok (as the spec asks) lapin reports the
/// server's 320 CONNECTION_FORCED. RabbitMQ 3.10.8 resets the socket about 3 ms
/// after sending that close, so lapin reports only the reset
/// (`Connection reset by peer`). Either shows the client noticed; the exact reply
/// code is checked on the wire by [`RawClient`].
pub async fn expect_connection_ended(events: impl futures_lite::Stream<Item = Event> + Unpin) {
    let mut events = events;
    let err = bounded("the lapin client to notice the close", async {
        loop {
            match events.next().await {
                Some(Event::Error(e)) => return e,
                Some(_) => continue,
                None => panic!("the connection's events ended without an error"),
            }
        }
    })
    .await;
    match err.kind() {
        ErrorKind::ProtocolError(e) => assert_eq!(e.get_id(), 320, "{err}"),
        ErrorKind::IOError(_) => {}
        _ => panic!("expected connection.close 320 CONNECTION_FORCED, got {err}"),
    }
}

/// A hand-written AMQP client that logs in and then reads the raw frames, to see
/// exactly what the server sends when it closes the connection.
pub struct RawClient {
    stream: std::net::TcpStream,
    buf: Vec<u8>,
}

impl RawClient {
    fn frame(frame_type: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![frame_type, 0, 0];
        f.extend_from_slice(&u32::try_from(payload.len()).expect("size").to_be_bytes());
        f.extend_from_slice(payload);
        f.push(0xCE);
        f
    }

    fn method(class: u16, method: u16, args: &[u8]) -> Vec<u8> {
        let mut p = class.to_be_bytes().to_vec();
        p.extend_from_slice(&method.to_be_bytes());
        p.extend_from_slice(args);
        Self::frame(1, &p)
    }

    /// Connect as guest to vhost "/" and wait for open-ok.
    pub fn connect(addr: std::net::SocketAddr) -> RawClient {
        let stream = std::net::TcpStream::connect_timeout(&addr, WAIT).expect("connect");
        stream.set_read_timeout(Some(WAIT)).expect("timeout");
        let mut c = RawClient {
            stream,
            buf: Vec::new(),
        };
        c.write(b"AMQP\x00\x00\x09\x01");
        c.expect_method(10, 10);
        let mut a = 0u32.to_be_bytes().to_vec(); // client-properties: empty table
        a.push(5);
        a.extend_from_slice(b"PLAIN");
        a.extend_from_slice(&12u32.to_be_bytes());
        a.extend_from_slice(b"\0guest\0guest");
        a.push(5);
        a.extend_from_slice(b"en_US");
        c.write(&Self::method(10, 11, &a));
        let tune = c.expect_method(10, 30);
        // tune-ok with the server's channel-max and frame-max, no heartbeats.
        let mut a = tune[4..10].to_vec();
        a.extend_from_slice(&0u16.to_be_bytes());
        c.write(&Self::method(10, 31, &a));
        c.write(&Self::method(10, 40, b"\x01/\x00\x00"));
        c.expect_method(10, 41);
        c
    }

    fn write(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.stream.write_all(bytes).expect("write");
    }

    /// Next frame's type and payload; None once the socket is closed or reset.
    fn read_frame(&mut self) -> Option<(u8, Vec<u8>)> {
        use std::io::Read;
        loop {
            if self.buf.len() >= 7 {
                let size = u32::from_be_bytes(self.buf[3..7].try_into().expect("4 bytes"));
                let total = 8 + size as usize;
                if self.buf.len() >= total {
                    let rest = self.buf.split_off(total);
                    let f = std::mem::replace(&mut self.buf, rest);
                    assert_eq!(f[total - 1], 0xCE, "bad frame end from the server");
                    return Some((f[0], f[7..total - 1].to_vec()));
                }
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    panic!("no frame from the server within {WAIT:?}")
                }
                Err(_) => return None,
            }
        }
    }

    fn expect_method(&mut self, class: u16, method: u16) -> Vec<u8> {
        let (t, p) = self
            .read_frame()
            .unwrap_or_else(|| panic!("closed while waiting for {class}.{method}"));
        assert_eq!(t, 1, "expected a method frame");
        assert_eq!(
            (
                u16::from_be_bytes([p[0], p[1]]),
                u16::from_be_bytes([p[2], p[3]])
            ),
            (class, method)
        );
        p
    }

    /// Read until connection.close; return its reply code and text, answer
    /// close-ok and wait for the socket to close.
    pub fn expect_connection_close(&mut self) -> (u16, String) {
        loop {
            let (t, p) = self
                .read_frame()
                .expect("the server closed the socket without sending connection.close");
            if t == 1 && p[..4] == [0, 10, 0, 50] {
                let code = u16::from_be_bytes([p[4], p[5]]);
                let len = p[6] as usize;
                let text = String::from_utf8_lossy(&p[7..7 + len]).into_owned();
                use std::io::Write;
                let _ = self.stream.write_all(&Self::method(10, 51, &[]));
                while self.read_frame().is_some() {}
                return (code, text);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_clients_with_connection_forced_and_keeps_data() {
    let mut broker = Broker::start();
    let conn = connect(&broker.uri()).await;
    let events = Box::pin(conn.events_listener());
    let ch = confirm_channel(&conn).await;
    ch.queue_declare(TERM_QUEUE.into(), durable_queue(), FieldTable::default())
        .await
        .expect("queue.declare");
    for i in 0..100 {
        publish_confirmed(
            &ch,
            "",
            TERM_QUEUE,
            format!("m{i}").as_bytes(),
            persistent(),
        )
        .await;
    }
    // A second client, idle, speaks raw AMQP so the test sees the exact close.
    let addr = broker.addr();
    let raw = tokio::task::spawn_blocking(move || {
        let mut raw = RawClient::connect(addr);
        move || raw.expect_connection_close()
    })
    .await
    .expect("raw client");
    let raw_close = tokio::task::spawn_blocking(raw);

    let code = blocking(|| broker.terminate());
    assert_eq!(
        code,
        Some(0),
        "SIGTERM must exit cleanly; log:\n{}",
        broker.log()
    );
    expect_connection_ended(events).await;
    let (reply_code, reply_text) = raw_close.await.expect("raw client");
    assert_eq!(reply_code, 320, "{reply_text}");
    assert!(
        reply_text.starts_with("CONNECTION_FORCED - "),
        "{reply_text}"
    );

    blocking(|| broker.start_again());
    let conn = connect(&broker.uri()).await;
    let ch = conn.create_channel().await.expect("channel");
    let want: Vec<String> = (0..100).map(|i| format!("m{i}")).collect();
    assert_eq!(drain(&ch, TERM_QUEUE).await, want);
    conn.close(200, "bye".into()).await.expect("close");
}
