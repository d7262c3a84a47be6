//! AMQP class `confirm` (RabbitMQ's publisher confirms extension), as RabbitMQ
//! does it.

use compat_tests::common;

use common::*;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::protocol::{AMQPClass, basic as bm, channel as chm, confirm as cm};
use lapin::{BasicProperties, Confirmation};

/// A raw connection on `/` as guest with `channels` channels open (ids 1..).
async fn raw_with_channels(broker: &Broker, channels: u16) -> RawConn {
    let mut raw = RawConn::connect(broker.addr()).await;
    raw.read_start().await;
    let tune = raw.start_ok("guest", "guest").await;
    raw.tune_ok_and_open(tune.channel_max, tune.frame_max, 0, "/")
        .await;
    for id in 1..=channels {
        raw.send_method(id, 20, 10, &[0]).await;
        match raw.read_method().await {
            (c, AMQPClass::Channel(chm::AMQPMethod::OpenOk(_))) if c == id => {}
            other => panic!("expected channel.open-ok on {id}, got {other:?}"),
        }
    }
    raw
}

async fn raw_confirm_select(raw: &mut RawConn, channel: u16) {
    raw.send_method(channel, 85, 10, &[0]).await;
    match raw.read_method().await {
        (c, AMQPClass::Confirm(cm::AMQPMethod::SelectOk(_))) if c == channel => {}
        other => panic!("expected confirm.select-ok on {channel}, got {other:?}"),
    }
}

/// basic.publish + content header (no properties) + one body frame.
async fn raw_publish(
    raw: &mut RawConn,
    channel: u16,
    exchange: &str,
    key: &str,
    mandatory: bool,
    body: &[u8],
) {
    let mut args = Vec::new();
    args.extend_from_slice(&0u16.to_be_bytes()); // reserved-1
    put_shortstr(&mut args, exchange);
    put_shortstr(&mut args, key);
    args.push(u8::from(mandatory));
    raw.send_method(channel, 60, 40, &args).await;
    let mut header = Vec::new();
    header.extend_from_slice(&60u16.to_be_bytes()); // class
    header.extend_from_slice(&0u16.to_be_bytes()); // weight
    header.extend_from_slice(&(body.len() as u64).to_be_bytes());
    header.extend_from_slice(&0u16.to_be_bytes()); // property flags
    raw.send_frame(2, channel, &header).await;
    if !body.is_empty() {
        raw.send_frame(3, channel, body).await;
    }
}

/// What a confirm channel sends back, in arrival order.
#[derive(Debug, PartialEq)]
enum Reply {
    Ack { tag: u64, multiple: bool },
    Nack { tag: u64, multiple: bool },
    Return { code: u16 },
}

/// Read frames until every tag 1..=n on each of `channels` is confirmed; return
/// each channel's replies in order. Content frames after a basic.return are skipped.
///
/// Checks that each tag is confirmed exactly once and that no confirm names a tag
/// never published. It does not demand tag order: RabbitMQ confirms an unroutable
/// message at once, ahead of earlier routed ones still waiting for their queue.
async fn read_confirms(raw: &mut RawConn, channels: &[u16], n: u64) -> Vec<Vec<Reply>> {
    let mut replies: Vec<Vec<Reply>> = channels.iter().map(|_| Vec::new()).collect();
    // confirmed[i][t] is true once tag t on channels[i] has been confirmed.
    let mut confirmed = vec![vec![false; n as usize + 1]; channels.len()];
    let all_done = |c: &Vec<Vec<bool>>| c.iter().all(|tags| tags[1..].iter().all(|&done| done));
    within("publisher confirms", async {
        while !all_done(&confirmed) {
            let f = raw
                .read_frame()
                .await
                .expect("broker closed the socket before confirming");
            if f.kind != FRAME_METHOD {
                continue; // heartbeat, or the content of a basic.return
            }
            let (_, class) = lapin::protocol::parse_class(&f.payload[..]).expect("parse method");
            let i = channels
                .iter()
                .position(|&c| c == f.channel)
                .unwrap_or_else(|| panic!("frame on unexpected channel: {class:?}"));
            let reply = match class {
                AMQPClass::Basic(bm::AMQPMethod::Ack(a)) => Reply::Ack {
                    tag: a.delivery_tag,
                    multiple: a.multiple,
                },
                AMQPClass::Basic(bm::AMQPMethod::Nack(a)) => Reply::Nack {
                    tag: a.delivery_tag,
                    multiple: a.multiple,
                },
                AMQPClass::Basic(bm::AMQPMethod::Return(r)) => Reply::Return { code: r.reply_code },
                other => panic!("unexpected method on channel {}: {other:?}", f.channel),
            };
            if let Reply::Ack { tag, multiple } | Reply::Nack { tag, multiple } = reply {
                assert!(
                    (1..=n).contains(&tag),
                    "channel {}: confirm of tag {tag}, published 1..={n}",
                    f.channel
                );
                let tags = &mut confirmed[i];
                if multiple {
                    tags[1..=tag as usize].iter_mut().for_each(|t| *t = true);
                } else {
                    assert!(
                        !tags[tag as usize],
                        "channel {}: tag {tag} confirmed twice",
                        f.channel
                    );
                    tags[tag as usize] = true;
                }
            }
            replies[i].push(reply);
        }
    })
    .await;
    replies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_publish_is_acked() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = confirm_channel(&conn).await;
    assert!(ch.status().confirm());
    // confirm.select again is harmless.
    within(
        "confirm.select",
        ch.confirm_select(ConfirmSelectOptions::default()),
    )
    .await
    .expect("second confirm.select");
    let q = unique("cf-all");
    declare_queue(&ch, &q).await;
    const N: usize = 200;
    let mut pending = Vec::with_capacity(N);
    for i in 0..N {
        pending.push(
            within(
                "basic.publish",
                ch.basic_publish(
                    "".into(),
                    q.as_str().into(),
                    BasicPublishOptions::default(),
                    format!("m{i}").as_bytes(),
                    BasicProperties::default(),
                ),
            )
            .await
            .expect("basic.publish"),
        );
    }
    let returned = within("wait_for_confirms", ch.wait_for_confirms())
        .await
        .expect("wait_for_confirms");
    assert!(returned.is_empty());
    for (i, p) in pending.into_iter().enumerate() {
        let c = within("confirm", p).await.expect("confirm");
        assert_eq!(c, Confirmation::Ack(None), "message {i}");
    }
    assert_eq!(queue_counts(&ch, &q).await.0, N as u32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_non_mandatory_is_still_acked() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let c = publish_full(
        &ch,
        "amq.direct",
        &unique("cf-nobody"),
        BasicPublishOptions::default(),
        b"nowhere",
        BasicProperties::default(),
    )
    .await;
    assert_eq!(c, Confirmation::Ack(None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_mandatory_is_returned_then_acked() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let key = unique("cf-nobody");
    let c = publish_full(
        &ch,
        "amq.direct",
        &key,
        BasicPublishOptions {
            mandatory: true,
            ..Default::default()
        },
        b"bounce",
        BasicProperties::default(),
    )
    .await;
    // lapin attaches a basic.return that arrives before the ack to that ack.
    assert!(
        c.is_ack(),
        "an unroutable message is acked, not nacked: {c:?}"
    );
    let r = c
        .take_message()
        .expect("the basic.return came before the ack");
    assert_eq!(r.reply_code, NO_ROUTE);
    assert_eq!(r.delivery.routing_key.as_str(), key);
    assert_eq!(r.delivery.data, b"bounce");
    // The channel carries on.
    let q = unique("cf-after-return");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"fine").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_select_on_a_tx_channel_is_precondition_failed() {
    let broker = Broker::start();
    let conn = connect(&broker).await;
    let ch = channel(&conn).await;
    within("tx.select", ch.tx_select())
        .await
        .expect("tx.select");
    let res = within(
        "confirm.select",
        ch.confirm_select(ConfirmSelectOptions::default()),
    )
    .await;
    // "cannot switch from tx to confirm mode"
    assert_code(res, PRECONDITION_FAILED, "confirm.select in tx mode");
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
}

/// Delivery tags of confirms count publishes per channel from 1, and every one
/// is confirmed exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_tags_count_from_one_per_channel() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("cf-tags");
    declare_queue(&ch, &q).await;
    let mut raw = raw_with_channels(&broker, 2).await;
    raw_confirm_select(&mut raw, 1).await;
    raw_confirm_select(&mut raw, 2).await;
    const N: u64 = 20;
    for i in 0..N {
        raw_publish(&mut raw, 1, "", &q, false, format!("a{i}").as_bytes()).await;
        raw_publish(&mut raw, 2, "", &q, false, format!("b{i}").as_bytes()).await;
    }
    let replies = read_confirms(&mut raw, &[1, 2], N).await;
    for r in replies.iter().flatten() {
        assert!(matches!(r, Reply::Ack { .. }), "expected only acks: {r:?}");
    }
    assert_eq!(queue_counts(&ch, &q).await.0, 2 * N as u32);
}

/// The basic.return of an unroutable mandatory message precedes its ack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn return_precedes_ack_on_the_wire() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("cf-wire");
    declare_queue(&ch, &q).await;
    let mut raw = raw_with_channels(&broker, 1).await;
    raw_confirm_select(&mut raw, 1).await;
    raw_publish(&mut raw, 1, "", &q, true, b"routable").await;
    raw_publish(&mut raw, 1, "amq.direct", &unique("cf-nobody"), true, b"x").await;
    raw_publish(&mut raw, 1, "", &q, false, b"").await;
    let replies = read_confirms(&mut raw, &[1], 3).await;
    let replies = &replies[0];
    let ret = replies
        .iter()
        .position(|r| matches!(r, Reply::Return { .. }))
        .expect("a basic.return");
    assert_eq!(replies[ret], Reply::Return { code: NO_ROUTE });
    assert_eq!(
        replies
            .iter()
            .filter(|r| matches!(r, Reply::Return { .. }))
            .count(),
        1
    );
    // The ack covering tag 2 comes after the return.
    let ack2 = replies
        .iter()
        .position(|r| match r {
            Reply::Ack { tag, multiple } => *tag == 2 || (*multiple && *tag > 2),
            _ => false,
        })
        .expect("an ack covering tag 2");
    assert!(ret < ack2, "return after its ack: {replies:?}");
    assert!(
        !replies.iter().any(|r| matches!(r, Reply::Nack { .. })),
        "{replies:?}"
    );
}
