//! A message larger than the socket's buffers, to a client that reads late:
//! every byte of it reaches the client without another write to push it
//! (here, on one node; `cluster.rs` does the same through a slave's proxy).

use super::client::{Pki, TlsBroker};
use compat_tests::common::*;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// The body's size: many times a loopback socket's buffers.
pub(crate) const BODY: usize = 8 * 1024 * 1024;

/// Declare `queue` and publish a `BODY`-byte message to it with a confirm,
/// over plain AMQP to `amqp_port`.
pub(crate) async fn publish_large(amqp_port: u16, queue: &str) {
    let conn = connect_uri(&format!("amqp://guest:guest@127.0.0.1:{amqp_port}/%2f")).await;
    let ch = confirm_channel(&conn).await;
    declare_queue(&ch, queue).await;
    let body: Vec<u8> = (0..BODY).map(|i| (i % 251) as u8).collect();
    publish(&ch, "", queue, &body).await;
}

/// basic.get (no-ack) of `queue` on `raw`'s open channel 1, then a pause
/// before reading, so the broker's writes fill the socket and block; the
/// whole message must then arrive with no heartbeat or other traffic after
/// it (RabbitMQ writes it all; a TLS writer that left the last records in
/// its session until the next write stalled the client until its timeout,
/// as aio-pika's `test_big_message` over AMQPS saw under load).
pub(crate) async fn get_late_whole<S: AsyncRead + AsyncWrite + Unpin>(
    raw: &mut RawConn<S>,
    queue: &str,
) {
    let mut args = vec![0, 0]; // reserved-1
    put_shortstr(&mut args, queue);
    args.push(1); // no-ack
    raw.send_method(1, 60, 70, &args).await; // basic.get
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // get-ok and the content header count 1 each, so the loop ends at the
    // body's last byte.
    let mut got = 0usize;
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        while got < BODY + 2 {
            let Some(f) = raw.read_frame().await else {
                return false;
            };
            got += match f.kind {
                1 | 2 => 1,
                3 => f.payload.len(),
                _ => 0,
            };
        }
        true
    })
    .await;
    assert_eq!(
        read,
        Ok(true),
        "{got} of {} (get-ok, header, body bytes) arrived",
        BODY + 2
    );
}

#[tokio::test]
async fn a_large_message_reaches_a_slow_reader_over_amqps_whole() {
    let pki = Pki::new();
    let b = TlsBroker::start(&pki, "");
    let queue = unique("big-tls");
    publish_large(b.broker.amqp_port, &queue).await;
    let mut raw = b.raw(None).await;
    let _ = raw.read_start().await;
    let tune = raw.start_ok("guest", "guest").await;
    // No heartbeats: nothing else may push the last bytes out.
    raw.tune_ok_and_open(tune.channel_max, tune.frame_max, 0, "/")
        .await;
    raw.send_method(1, 20, 10, &[0]).await; // channel.open
    let (_, m) = raw.read_method().await;
    assert!(format!("{m:?}").contains("OpenOk"), "{m:?}");
    get_late_whole(&mut raw, &queue).await;
}
