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

mod declarations;
mod messages;
mod sigterm;

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
