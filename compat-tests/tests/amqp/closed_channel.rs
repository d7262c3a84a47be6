//! After a channel is closed (the client's channel.close and the broker's
//! close-ok, or the broker's channel.close), no further frame reaches the
//! client on that channel number until it is opened again (AMQP 0-9-1
//! §1.5.2.5 and §4.2.7). The report: a confirm channel closed with
//! unconfirmed publishes received basic.ack after channel.close-ok, which
//! makes some clients throw. Raw frames, read off the socket, so nothing a
//! client library drops can hide one.
//!
//! These also run against RabbitMQ 3.10 (`STABLEMQ_TEST_EXTERNAL_URI`): it
//! may confirm some publishes before its close-ok, never after.

use compat_tests::common;

use common::*;
use std::time::Duration;

/// How many publishes go with each close.
const PUBLISHES: usize = 200;
/// How long the test watches a closed channel for stray frames.
const WATCH: Duration = Duration::from_millis(700);
const FRAME_HEADER: u8 = 2;
const FRAME_BODY: u8 = 3;

/// basic.publish + header + body, persistent or not.
fn publish_bytes(ch: u16, exchange: &str, key: &str, persistent: bool, body: &[u8]) -> Vec<u8> {
    let mut args = vec![0, 0];
    put_shortstr(&mut args, exchange);
    put_shortstr(&mut args, key);
    args.push(0); // mandatory, immediate
    let mut out = method_bytes(ch, 60, 40, &args);
    let mut header = Vec::new();
    header.extend_from_slice(&60u16.to_be_bytes());
    header.extend_from_slice(&0u16.to_be_bytes());
    header.extend_from_slice(&(body.len() as u64).to_be_bytes());
    if persistent {
        header.extend_from_slice(&0x1000u16.to_be_bytes()); // delivery-mode
        header.push(2);
    } else {
        header.extend_from_slice(&0u16.to_be_bytes());
    }
    out.extend(frame_bytes(FRAME_HEADER, ch, &header));
    out.extend(frame_bytes(FRAME_BODY, ch, body));
    out
}

fn channel_close_bytes(ch: u16) -> Vec<u8> {
    let mut args = 200u16.to_be_bytes().to_vec();
    put_shortstr(&mut args, "bye");
    args.extend_from_slice(&[0, 0, 0, 0]);
    method_bytes(ch, 20, 40, &args)
}

fn method_of(f: &RawFrame) -> Option<(u16, u16)> {
    (f.kind == FRAME_METHOD && f.payload.len() >= 4).then(|| {
        (
            u16::from_be_bytes([f.payload[0], f.payload[1]]),
            u16::from_be_bytes([f.payload[2], f.payload[3]]),
        )
    })
}

/// Open `ch` in confirm mode and declare a queue (durable when `durable`).
async fn confirm_channel_with_queue(c: &mut RawConn, ch: u16, queue: &str, durable: bool) {
    let mut args = Vec::new();
    put_shortstr(&mut args, "");
    c.send_method(ch, 20, 10, &args).await;
    expect_method(c, ch, (20, 11)).await;
    c.send_method(ch, 85, 10, &[0]).await;
    expect_method(c, ch, (85, 11)).await;
    let mut args = vec![0, 0];
    put_shortstr(&mut args, queue);
    args.push(if durable { 0b10 } else { 0 });
    args.extend_from_slice(&0u32.to_be_bytes());
    c.send_method(ch, 50, 10, &args).await;
    expect_method(c, ch, (50, 11)).await;
}

async fn expect_method(c: &mut RawConn, ch: u16, want: (u16, u16)) {
    within("a method", async {
        loop {
            let f = c.read_frame().await.expect("broker closed the socket");
            if f.kind == FRAME_HEARTBEAT {
                continue;
            }
            assert_eq!((f.channel, method_of(&f)), (ch, Some(want)), "{f:?}");
            return;
        }
    })
    .await
}

/// Read until `ch`'s `last` method (close-ok, or the broker's close);
/// before it only confirms (and, for a broker close, nothing else either)
/// may come on `ch`. Returns how many confirms came.
async fn read_until(c: &mut RawConn, ch: u16, last: (u16, u16)) -> usize {
    let mut confirms = 0;
    within("the close", async {
        loop {
            let f = c.read_frame().await.expect("broker closed the socket");
            if f.channel != ch {
                continue;
            }
            match method_of(&f) {
                Some(m) if m == last => return,
                Some((60, 80)) | Some((60, 120)) => confirms += 1,
                other => {
                    panic!("unexpected frame on channel {ch} before the close: {other:?} {f:?}")
                }
            }
        }
    })
    .await;
    confirms
}

/// Nothing on `ch` for [`WATCH`] (the socket stays open).
async fn assert_quiet(c: &mut RawConn, ch: u16, after: &str) {
    let until = tokio::time::Instant::now() + WATCH;
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return;
        }
        match c.frame_within(left).await {
            None => return,
            Some(None) => panic!("broker closed the socket {after}"),
            Some(Some(f)) => assert_ne!(
                f.channel,
                ch,
                "frame on channel {ch} {after}: {:?} {f:?}",
                method_of(&f)
            ),
        }
    }
}

/// The client closes a confirm channel right behind a burst of publishes
/// (one write): after close-ok, not one ack, nack or any other frame on
/// that channel. Persistent publishes to a durable queue (their confirms
/// wait for the disk) and transient ones (confirmed at once) alike, and
/// the channel number reused each round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_confirm_channel_gets_nothing_after_close_ok() {
    let broker = Broker::start();
    let mut c = RawConn::open(broker.addr()).await;
    let durable_q = unique("closed-confirm-d");
    let transient_q = unique("closed-confirm-t");
    for round in 0..6 {
        let persistent = round % 2 == 0;
        let queue = if persistent { &durable_q } else { &transient_q };
        confirm_channel_with_queue(&mut c, 1, queue, persistent).await;
        let mut burst = Vec::new();
        for i in 0..PUBLISHES {
            burst.extend(publish_bytes(
                1,
                "",
                queue,
                persistent,
                format!("m{i}").as_bytes(),
            ));
        }
        burst.extend(channel_close_bytes(1));
        c.send_bytes(&burst).await;
        let confirms = read_until(&mut c, 1, (20, 41)).await;
        assert!(confirms <= PUBLISHES, "round {round}: {confirms} confirms");
        assert_quiet(&mut c, 1, &format!("after close-ok (round {round})")).await;
    }
    // The channel number works again, and the connection is fine.
    confirm_channel_with_queue(&mut c, 1, &transient_q, false).await;
    cleanup(&mut c, &[&durable_q, &transient_q]).await;
}

/// The broker closes a confirm channel (a publish to a missing exchange, 404)
/// right after publishes it confirms at once: nothing on that channel after
/// its channel.close, before or after the client's close-ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_the_broker_closes_gets_nothing_after_its_close() {
    let broker = Broker::start();
    let mut c = RawConn::open(broker.addr()).await;
    let queue = unique("closed-by-broker");
    for round in 0..4 {
        confirm_channel_with_queue(&mut c, 1, &queue, false).await;
        let mut burst = Vec::new();
        for i in 0..PUBLISHES {
            burst.extend(publish_bytes(
                1,
                "",
                &queue,
                false,
                format!("m{i}").as_bytes(),
            ));
        }
        burst.extend(publish_bytes(1, "no-such-exchange-here", "k", false, b"x"));
        c.send_bytes(&burst).await;
        read_until(&mut c, 1, (20, 40)).await;
        assert_quiet(
            &mut c,
            1,
            &format!("after the broker's close (round {round})"),
        )
        .await;
        c.send_method(1, 20, 41, &[]).await;
        assert_quiet(&mut c, 1, &format!("after our close-ok (round {round})")).await;
    }
    confirm_channel_with_queue(&mut c, 1, &queue, false).await;
    cleanup(&mut c, &[&queue]).await;
}

/// Delete the test's queues on channel 1 (open), so an external broker keeps
/// nothing.
async fn cleanup(c: &mut RawConn, queues: &[&str]) {
    for q in queues {
        let mut args = vec![0, 0];
        put_shortstr(&mut args, q);
        args.push(0);
        c.send_method(1, 50, 40, &args).await;
        expect_method(c, 1, (50, 41)).await;
    }
}
