//! Helpers shared by the end-to-end tests (lapin clients, raw AMQP frames,
//! confirmed publishes): compiled once here, not once per test binary.
//!
//! Every wait is bounded by [`WAIT`], so a broker that never answers fails the test
//! instead of hanging it. Errors are checked by their AMQP reply code, the number a
//! RabbitMQ client sees, never by their text.
//!
//! The tests were checked against RabbitMQ 3.10 with `STABLEMQ_TEST_EXTERNAL_URI`,
//! and their expectations against the RabbitMQ 4.x source where the two differ
//! (see the comments at those tests). RabbitMQ 4.3 denies two deprecated features
//! by default that these tests use: transient non-exclusive queues (declare fails
//! with 541) and `basic.qos global=true` (silently per-consumer). To run the suite
//! against 4.3+, set `deprecated_features.permit.transient_nonexcl_queues = true`
//! and `deprecated_features.permit.global_qos = true` in rabbitmq.conf.

#![allow(dead_code)]

pub mod confirmed;
pub mod js;
pub mod python;
mod raw;
#[allow(unused_imports)] // only the tests that speak raw AMQP use it
pub use raw::*;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[allow(unused_imports)] // not every test file configures the broker
pub use crate::{Broker, BrokerOptions};
use futures_lite::{Stream, StreamExt};
use lapin::message::{BasicGetMessage, BasicReturnMessage, Delivery};
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::protocol::{AMQPClass, AMQPError};
use lapin::types::FieldTable;
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, Consumer, ErrorKind,
    Event, Queue,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Upper bound for any single wait on the broker.
pub const WAIT: Duration = Duration::from_secs(10);

/// How long a test watches for something that must NOT happen (a delivery beyond a
/// prefetch limit, a message that must not be routed). Only used where the broker
/// offers no reply that would prove the absence directly.
pub const QUIET: Duration = Duration::from_millis(500);

// AMQP 0-9-1 reply codes (spec section 1.2 "Constants").
pub const REPLY_SUCCESS: u16 = 200;
pub const CONTENT_TOO_LARGE: u16 = 311;
pub const NO_ROUTE: u16 = 312;
pub const CONNECTION_FORCED: u16 = 320;
pub const ACCESS_REFUSED: u16 = 403;
pub const NOT_FOUND: u16 = 404;
pub const RESOURCE_LOCKED: u16 = 405;
pub const PRECONDITION_FAILED: u16 = 406;
pub const FRAME_ERROR: u16 = 501;
pub const COMMAND_INVALID: u16 = 503;
pub const CHANNEL_ERROR: u16 = 504;
pub const NOT_ALLOWED: u16 = 530;
pub const NOT_IMPLEMENTED: u16 = 540;

/// Await `f`, failing the test if it takes longer than [`WAIT`].
pub async fn within<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(WAIT, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

/// A name no other test (and no earlier run against a shared external broker) uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        nanos % 1_000_000_000
    )
}

/// The AMQP error inside a lapin error, if the broker sent one.
pub fn amqp_error(err: &lapin::Error) -> Option<&AMQPError> {
    match err.kind() {
        ErrorKind::ProtocolError(e) => Some(e),
        _ => None,
    }
}

/// The AMQP reply code inside a lapin error, if the broker sent one.
pub fn reply_code(err: &lapin::Error) -> Option<u16> {
    amqp_error(err).map(|e| e.get_id())
}

/// Assert that `res` failed with the AMQP reply code `code`.
#[track_caller]
pub fn assert_code<T: std::fmt::Debug>(res: lapin::Result<T>, code: u16, what: &str) {
    match res {
        Ok(v) => panic!("{what}: expected reply code {code}, got success {v:?}"),
        Err(e) => assert_eq!(
            reply_code(&e),
            Some(code),
            "{what}: expected reply code {code}, got error {e:?}"
        ),
    }
}

/// Connect with default lapin properties, bounded by [`WAIT`].
pub async fn connect_uri(uri: &str) -> Connection {
    within(
        "connection",
        Connection::connect(uri, ConnectionProperties::default()),
    )
    .await
    .unwrap_or_else(|e| panic!("connect {uri}: {e:?}"))
}

/// Connect to `broker` as guest on `/`.
pub async fn connect(broker: &Broker) -> Connection {
    connect_uri(&broker.uri()).await
}

/// Open a channel on `conn`.
pub async fn channel(conn: &Connection) -> Channel {
    within("channel.open", conn.create_channel())
        .await
        .expect("channel.open")
}

/// Open a connection and one channel on it, in confirm mode.
///
/// Tests publish and then look at the queue (basic.get, declare-ok counts, purge
/// counts). Only a publisher confirm guarantees the message is in the queue by
/// then: RabbitMQ answers some of those (declare-ok's counts, anything on a quorum
/// queue) ahead of deliveries still in flight. [`publish`] awaits the confirm.
pub async fn open(broker: &Broker) -> (Connection, Channel) {
    let conn = connect(broker).await;
    let ch = confirm_channel(&conn).await;
    (conn, ch)
}

/// Open a channel and put it in confirm mode.
pub async fn confirm_channel(conn: &Connection) -> Channel {
    let ch = channel(conn).await;
    within(
        "confirm.select",
        ch.confirm_select(ConfirmSelectOptions::default()),
    )
    .await
    .expect("confirm.select");
    ch
}

/// Declare a plain (non-durable, non-exclusive, non-auto-delete) queue.
pub async fn declare_queue(ch: &Channel, name: &str) -> Queue {
    declare_queue_with(
        ch,
        name,
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
}

/// Declare a queue with explicit options and arguments, expecting success.
pub async fn declare_queue_with(
    ch: &Channel,
    name: &str,
    opts: QueueDeclareOptions,
    args: FieldTable,
) -> Queue {
    within("queue.declare", ch.queue_declare(name.into(), opts, args))
        .await
        .unwrap_or_else(|e| panic!("queue.declare {name}: {e:?}"))
}

/// Passive declare: the queue's current (message_count, consumer_count).
pub async fn queue_counts(ch: &Channel, name: &str) -> (u32, u32) {
    let q = within(
        "passive queue.declare",
        ch.queue_declare(
            name.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("passive queue.declare {name}: {e:?}"));
    (q.message_count(), q.consumer_count())
}

/// Publish with full control; awaits the publisher confirm when the channel is in
/// confirm mode (otherwise returns `Confirmation::NotRequested` at once).
pub async fn publish_full(
    ch: &Channel,
    exchange: &str,
    routing_key: &str,
    opts: BasicPublishOptions,
    body: &[u8],
    props: BasicProperties,
) -> Confirmation {
    let confirm = within(
        "basic.publish",
        ch.basic_publish(exchange.into(), routing_key.into(), opts, body, props),
    )
    .await
    .unwrap_or_else(|e| panic!("basic.publish to {exchange:?}/{routing_key:?}: {e:?}"));
    within("publisher confirm", confirm)
        .await
        .unwrap_or_else(|e| panic!("publisher confirm: {e:?}"))
}

/// Publish `body` with default properties.
pub async fn publish(ch: &Channel, exchange: &str, routing_key: &str, body: &[u8]) {
    publish_full(
        ch,
        exchange,
        routing_key,
        BasicPublishOptions::default(),
        body,
        BasicProperties::default(),
    )
    .await;
}

/// Publish `body` with the given properties.
pub async fn publish_props(
    ch: &Channel,
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    props: BasicProperties,
) {
    publish_full(
        ch,
        exchange,
        routing_key,
        BasicPublishOptions::default(),
        body,
        props,
    )
    .await;
}

/// basic.get with explicit no_ack.
pub async fn get_with(ch: &Channel, queue: &str, no_ack: bool) -> Option<BasicGetMessage> {
    within(
        "basic.get",
        ch.basic_get(queue.into(), BasicGetOptions { no_ack }),
    )
    .await
    .unwrap_or_else(|e| panic!("basic.get {queue}: {e:?}"))
}

/// basic.get with no_ack=true: the message leaves the queue at once.
pub async fn get(ch: &Channel, queue: &str) -> Option<BasicGetMessage> {
    get_with(ch, queue, true).await
}

/// Body of the next message on `queue` (no_ack), or None when it is empty.
pub async fn get_body(ch: &Channel, queue: &str) -> Option<Vec<u8>> {
    get(ch, queue).await.map(|m| m.delivery.data)
}

/// Take every message from `queue` (no_ack) and return the bodies in order.
pub async fn drain(ch: &Channel, queue: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(b) = get_body(ch, queue).await {
        out.push(b);
        assert!(out.len() <= 100_000, "queue {queue} never drains");
    }
    out
}

/// Start a consumer (manual ack unless `no_ack`).
pub async fn consume(ch: &Channel, queue: &str, tag: &str, no_ack: bool) -> Consumer {
    consume_with(
        ch,
        queue,
        tag,
        BasicConsumeOptions {
            no_ack,
            ..Default::default()
        },
    )
    .await
}

/// Start a consumer with explicit options.
pub async fn consume_with(
    ch: &Channel,
    queue: &str,
    tag: &str,
    opts: BasicConsumeOptions,
) -> Consumer {
    within(
        "basic.consume",
        ch.basic_consume(queue.into(), tag.into(), opts, FieldTable::default()),
    )
    .await
    .unwrap_or_else(|e| panic!("basic.consume {queue}: {e:?}"))
}

/// The next delivery on `consumer`; fails the test if the consumer ends or errors.
pub async fn next_delivery(consumer: &mut Consumer) -> Delivery {
    match within("a delivery", consumer.next()).await {
        Some(Ok(d)) => d,
        Some(Err(e)) => panic!("consumer failed: {e:?}"),
        None => panic!("consumer ended while a delivery was expected"),
    }
}

/// Assert that `consumer` receives nothing for [`QUIET`].
pub async fn assert_no_delivery(consumer: &mut Consumer, what: &str) {
    if let Ok(item) = tokio::time::timeout(QUIET, consumer.next()).await {
        match item {
            Some(Ok(d)) => panic!(
                "{what}: unexpected delivery {:?} (tag {})",
                String::from_utf8_lossy(&d.data),
                d.delivery_tag
            ),
            other => panic!("{what}: consumer ended unexpectedly: {other:?}"),
        }
    }
}

/// Poll lapin's store of basic.return messages (which `wait_for_confirms` drains)
/// until at least one has arrived.
pub async fn wait_returned(ch: &Channel) -> Vec<BasicReturnMessage> {
    within("basic.return", async {
        loop {
            let r = ch.wait_for_confirms().await.expect("wait_for_confirms");
            if !r.is_empty() {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// Watches a connection's event stream for the error a broker-sent channel.close or
/// connection.close carries. Create it BEFORE the operation that fails
/// asynchronously (basic.publish, basic.ack): lapin only records events while a
/// listener exists.
pub struct ErrorWatch {
    events: Pin<Box<dyn Stream<Item = Event> + Send>>,
}

impl ErrorWatch {
    pub fn new(conn: &Connection) -> ErrorWatch {
        ErrorWatch {
            events: Box::pin(conn.events_listener()),
        }
    }

    /// Wait for the next AMQP error and return its reply code.
    pub async fn next_code(&mut self) -> u16 {
        within("a channel or connection close from the broker", async {
            loop {
                match self.events.next().await {
                    Some(Event::Error(e)) => {
                        if let Some(code) = reply_code(&e) {
                            return code;
                        }
                    }
                    Some(_) => {}
                    None => panic!("connection event stream ended"),
                }
            }
        })
        .await
    }

    /// Like [`ErrorWatch::next_code`] with an explicit bound, for errors the broker
    /// raises from a periodic check (consumer timeout) rather than at once.
    pub async fn next_code_within(&mut self, bound: Duration) -> u16 {
        let wait = async {
            loop {
                match self.events.next().await {
                    Some(Event::Error(e)) => {
                        if let Some(code) = reply_code(&e) {
                            return code;
                        }
                    }
                    Some(_) => {}
                    None => panic!("connection event stream ended"),
                }
            }
        };
        match tokio::time::timeout(bound, wait).await {
            Ok(code) => code,
            Err(_) => panic!("no channel or connection close from the broker within {bound:?}"),
        }
    }

    /// Wait for the next AMQP error and assert its reply code.
    pub async fn expect(&mut self, code: u16, what: &str) {
        let got = self.next_code().await;
        assert_eq!(got, code, "{what}: reply code");
    }
}

/// Wait until `ch` has left the open state (after a broker-sent channel.close).
pub async fn wait_channel_closed(ch: &Channel) {
    within("the channel to close", async {
        while ch.status().connected() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// Wait until `conn` has left the connected state.
pub async fn wait_connection_closed(conn: &Connection) {
    within("the connection to close", async {
        while conn.status().connected() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// A headers table from (key, long-string value) pairs.
pub fn headers(pairs: &[(&str, &str)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert(
            (*k).into(),
            lapin::types::AMQPValue::LongString((*v).into()),
        );
    }
    t
}

// ---------------------------------------------------------------------------
// Helpers for the RabbitMQ-extension tests (dead-lettering, TTL, length limits,
// priorities, consumer extensions, alternate exchanges, direct reply-to, quorum).
// ---------------------------------------------------------------------------

/// How often the polling helpers below look again.
pub const POLL: Duration = Duration::from_millis(20);

/// A field table from (key, value) pairs.
pub fn ftable(pairs: &[(&str, lapin::types::AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert((*k).into(), v.clone());
    }
    t
}

/// An AMQP long-string value.
pub fn lstr(s: &str) -> lapin::types::AMQPValue {
    lapin::types::AMQPValue::LongString(s.into())
}

/// Declare an exchange of `kind` with explicit arguments, expecting success.
pub async fn declare_exchange_args(
    ch: &Channel,
    name: &str,
    kind: lapin::ExchangeKind,
    args: FieldTable,
) {
    within(
        "exchange.declare",
        ch.exchange_declare(
            name.into(),
            kind,
            lapin::options::ExchangeDeclareOptions::default(),
            args,
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("exchange.declare {name}: {e:?}"));
}

/// Bind `queue` to `exchange` with `key`, expecting success.
pub async fn bind_queue(ch: &Channel, queue: &str, exchange: &str, key: &str) {
    within(
        "queue.bind",
        ch.queue_bind(
            queue.into(),
            exchange.into(),
            key.into(),
            lapin::options::QueueBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("queue.bind {queue} -> {exchange}/{key}: {e:?}"));
}

/// Start a consumer with explicit options and consumer arguments (`x-priority`, ...).
pub async fn consume_args(
    ch: &Channel,
    queue: &str,
    tag: &str,
    opts: BasicConsumeOptions,
    args: FieldTable,
) -> Consumer {
    within(
        "basic.consume",
        ch.basic_consume(queue.into(), tag.into(), opts, args),
    )
    .await
    .unwrap_or_else(|e| panic!("basic.consume {queue}: {e:?}"))
}

/// Poll basic.get until `queue` yields a message, for messages the broker moves
/// there asynchronously (dead-lettering). Fails the test after [`WAIT`].
pub async fn get_eventually(ch: &Channel, queue: &str, no_ack: bool) -> BasicGetMessage {
    within(&format!("a message on {queue}"), async {
        loop {
            let m = ch
                .basic_get(queue.into(), BasicGetOptions { no_ack })
                .await
                .unwrap_or_else(|e| panic!("basic.get {queue}: {e:?}"));
            if let Some(m) = m {
                return m;
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await
}

/// Poll the passive-declare message count of `queue` until it equals `n`.
pub async fn wait_message_count(ch: &Channel, queue: &str, n: u32) {
    within(&format!("{queue} to hold {n} messages"), async {
        loop {
            if queue_counts(ch, queue).await.0 == n {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await
}

/// A message header, if present.
pub fn header_value<'a>(
    props: &'a BasicProperties,
    key: &str,
) -> Option<&'a lapin::types::AMQPValue> {
    props.headers().as_ref().and_then(|h| h.inner().get(key))
}

/// A long-string header (or table field) as a Rust string.
pub fn as_text(v: Option<&lapin::types::AMQPValue>) -> Option<String> {
    match v {
        Some(lapin::types::AMQPValue::LongString(s)) => {
            Some(String::from_utf8_lossy(s.as_bytes()).into_owned())
        }
        Some(lapin::types::AMQPValue::ShortString(s)) => Some(s.as_str().to_string()),
        _ => None,
    }
}

/// The entries of the `x-death` header (an array of tables), most recent first.
/// Fails the test if the header is missing or not an array of tables.
#[track_caller]
pub fn x_death(props: &BasicProperties) -> Vec<FieldTable> {
    match header_value(props, "x-death") {
        Some(lapin::types::AMQPValue::FieldArray(a)) => a
            .as_slice()
            .iter()
            .map(|v| match v {
                lapin::types::AMQPValue::FieldTable(t) => t.clone(),
                other => panic!("x-death entry is not a table: {other:?}"),
            })
            .collect(),
        other => panic!("x-death header: expected an array of tables, got {other:?}"),
    }
}
