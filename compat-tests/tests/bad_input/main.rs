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

mod bystander;
mod encode;
mod raw;

use bystander::*;
use compat_tests::Broker;
use encode::*;
use futures_lite::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use raw::*;
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
