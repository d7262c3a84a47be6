//! Dead-letter exchanges (`x-dead-letter-exchange`, `x-dead-letter-routing-key`):
//! the reasons `rejected` and `expired` (`maxlen` is in length_limit.rs,
//! `delivery_limit` in quorum.rs), the `x-death` and `x-first-death-*` /
//! `x-last-death-*` headers, cycle detection and a missing DLX, as RabbitMQ does them
//! (https://www.rabbitmq.com/docs/dlx and RabbitMQ's own dead_lettering_SUITE).
//!
//! Checked against RabbitMQ 3.10; `x_last_death_headers_name_the_most_recent_death`
//! encodes 3.13+ behaviour and fails on 3.10 (see there).

use compat_tests::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use lapin::options::{BasicNackOptions, BasicQosOptions, BasicRejectOptions};
use lapin::types::{AMQPValue, FieldArray, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

/// Check one `x-death` entry field by field, including its exact set of keys.
#[track_caller]
#[allow(clippy::too_many_arguments)]
fn assert_death(
    entry: &FieldTable,
    queue: &str,
    reason: &str,
    exchange: &str,
    routing_keys: &[&str],
    count: i64,
    original_expiration: Option<&str>,
) {
    let mut keys: Vec<&str> = entry.inner().keys().map(|k| k.as_str()).collect();
    keys.sort_unstable();
    let mut want = vec![
        "count",
        "exchange",
        "queue",
        "reason",
        "routing-keys",
        "time",
    ];
    if original_expiration.is_some() {
        want.push("original-expiration");
    }
    want.sort_unstable();
    assert_eq!(keys, want, "x-death entry keys: {entry:?}");
    let get = |k: &str| entry.inner().get(k);
    assert_eq!(
        get("count"),
        Some(&AMQPValue::LongLongInt(count)),
        "x-death count (a signed 64-bit 'l' field): {entry:?}"
    );
    assert_eq!(
        as_text(get("queue")).as_deref(),
        Some(queue),
        "x-death queue"
    );
    assert_eq!(
        as_text(get("reason")).as_deref(),
        Some(reason),
        "x-death reason"
    );
    assert_eq!(
        as_text(get("exchange")).as_deref(),
        Some(exchange),
        "x-death exchange"
    );
    let got_rks: Option<Vec<Option<String>>> = match get("routing-keys") {
        Some(AMQPValue::FieldArray(a)) => {
            Some(a.as_slice().iter().map(|v| as_text(Some(v))).collect())
        }
        _ => None,
    };
    let want_rks: Vec<Option<String>> = routing_keys.iter().map(|k| Some(k.to_string())).collect();
    assert_eq!(
        got_rks,
        Some(want_rks),
        "x-death routing-keys (an array of long strings)"
    );
    let rks: Vec<AMQPValue> = routing_keys.iter().map(|k| lstr(k)).collect();
    assert_eq!(
        get("routing-keys"),
        Some(&AMQPValue::FieldArray(FieldArray::from(rks))),
        "x-death routing-keys field types"
    );
    match get("time") {
        Some(AMQPValue::Timestamp(t)) => {
            // A timestamp in seconds since the epoch; only the unit is checked.
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("clock")
                .as_secs();
            assert!(
                t.abs_diff(now) < 3600,
                "x-death time {t} is not seconds since the epoch (now {now})"
            );
        }
        other => panic!("x-death time: expected a timestamp, got {other:?}"),
    }
    if let Some(exp) = original_expiration {
        assert_eq!(
            as_text(get("original-expiration")).as_deref(),
            Some(exp),
            "x-death original-expiration"
        );
    }
}

#[track_caller]
fn assert_first_death(props: &BasicProperties, reason: &str, queue: &str, exchange: &str) {
    for (k, want) in [
        ("x-first-death-reason", reason),
        ("x-first-death-queue", queue),
        ("x-first-death-exchange", exchange),
    ] {
        assert_eq!(
            as_text(header_value(props, k)).as_deref(),
            Some(want),
            "header {k}"
        );
    }
}

/// A source queue dead-lettering to a fresh direct exchange, and a queue bound to that
/// exchange with `bind_key`. Returns (source, dlx, dead-letter queue).
async fn dlx_setup(
    ch: &Channel,
    prefix: &str,
    dl_routing_key: Option<&str>,
    bind_key: Option<&str>,
    extra: &[(&str, AMQPValue)],
) -> (String, String, String) {
    let src = unique(prefix);
    let dlx = unique(&format!("{prefix}-dlx"));
    let dlq = unique(&format!("{prefix}-dlq"));
    declare_exchange_args(ch, &dlx, ExchangeKind::Direct, FieldTable::default()).await;
    let mut args = vec![("x-dead-letter-exchange", lstr(&dlx))];
    if let Some(k) = dl_routing_key {
        args.push(("x-dead-letter-routing-key", lstr(k)));
    }
    args.extend(extra.iter().cloned());
    declare_queue_with(ch, &src, Default::default(), ftable(&args)).await;
    declare_queue(ch, &dlq).await;
    bind_queue(ch, &dlq, &dlx, bind_key.unwrap_or(&src)).await;
    (src, dlx, dlq)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_message_is_dead_lettered_with_x_death_and_first_death_headers() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let (src, dlx, dlq) = dlx_setup(&ch, "dl-reject", None, None, &[]).await;
    publish_props(
        &ch,
        "",
        &src,
        b"doomed",
        BasicProperties::default().with_message_id("m-1".into()),
    )
    .await;
    let m = get_with(&ch, &src, false).await.expect("message in source");
    assert!(
        header_value(&m.delivery.properties, "x-death").is_none(),
        "no x-death before dead-lettering"
    );
    within(
        "basic.reject",
        m.delivery
            .acker
            .reject(BasicRejectOptions { requeue: false }),
    )
    .await
    .expect("basic.reject");

    let d = get_eventually(&ch, &dlq, true).await.delivery;
    assert_eq!(d.data, b"doomed");
    // Published to the DLX with the message's original routing key.
    assert_eq!(
        d.exchange.as_str(),
        dlx,
        "exchange of the dead-lettered delivery"
    );
    assert_eq!(
        d.routing_key.as_str(),
        src,
        "routing key of the dead-lettered delivery"
    );
    assert_eq!(
        d.properties.message_id().as_ref().map(|s| s.as_str()),
        Some("m-1"),
        "other properties are kept"
    );
    let deaths = x_death(&d.properties);
    assert_eq!(deaths.len(), 1, "one x-death entry: {deaths:?}");
    assert_death(&deaths[0], &src, "rejected", "", &[&src], 1, None);
    assert_first_death(&d.properties, "rejected", &src, "");
    assert!(get(&ch, &src).await.is_none(), "the source queue is empty");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_without_requeue_dead_letters_with_the_dead_letter_routing_key() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let (src, dlx, dlq) = dlx_setup(&ch, "dl-nack", Some("dl-key"), Some("dl-key"), &[]).await;
    let input = unique("dl-nack-in");
    declare_exchange_args(&ch, &input, ExchangeKind::Direct, FieldTable::default()).await;
    bind_queue(&ch, &src, &input, "orig-key").await;
    publish(&ch, &input, "orig-key", b"nacked").await;

    within("basic.qos", ch.basic_qos(1, BasicQosOptions::default()))
        .await
        .expect("basic.qos");
    let mut consumer = consume(&ch, &src, "dl-nack-consumer", false).await;
    let d = next_delivery(&mut consumer).await;
    // nack with requeue=true is not a death: the message comes back to the source.
    within(
        "basic.nack requeue",
        d.acker.nack(BasicNackOptions {
            requeue: true,
            ..Default::default()
        }),
    )
    .await
    .expect("basic.nack");
    let d = next_delivery(&mut consumer).await;
    assert!(d.redelivered, "requeued message is redelivered");
    assert!(
        header_value(&d.properties, "x-death").is_none(),
        "a requeue adds no x-death"
    );
    assert!(get(&ch, &dlq).await.is_none(), "nothing dead-lettered yet");
    within(
        "basic.nack",
        d.acker.nack(BasicNackOptions {
            requeue: false,
            ..Default::default()
        }),
    )
    .await
    .expect("basic.nack");

    let d = get_eventually(&ch, &dlq, true).await.delivery;
    assert_eq!(d.data, b"nacked");
    assert_eq!(d.exchange.as_str(), dlx);
    assert_eq!(
        d.routing_key.as_str(),
        "dl-key",
        "x-dead-letter-routing-key replaces the routing key"
    );
    let deaths = x_death(&d.properties);
    assert_eq!(deaths.len(), 1, "{deaths:?}");
    // exchange and routing-keys record where the message was published, not the DLX.
    assert_death(&deaths[0], &src, "rejected", &input, &["orig-key"], 1, None);
    assert_first_death(&d.properties, "rejected", &src, &input);
    assert_no_delivery(&mut consumer, "source consumer after the nack").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_message_expiry_records_original_expiration_and_drops_the_expiration() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let (src, _dlx, dlq) = dlx_setup(&ch, "dl-msgttl", None, None, &[]).await;
    publish_props(
        &ch,
        "",
        &src,
        b"short-lived",
        BasicProperties::default().with_expiration("30".into()),
    )
    .await;
    let d = get_eventually(&ch, &dlq, true).await.delivery;
    assert_eq!(d.data, b"short-lived");
    // The expiration property is removed so the message does not expire again.
    assert_eq!(
        d.properties.expiration(),
        &None,
        "expiration of the dead-lettered message"
    );
    let deaths = x_death(&d.properties);
    assert_eq!(deaths.len(), 1, "{deaths:?}");
    assert_death(&deaths[0], &src, "expired", "", &[&src], 1, Some("30"));
    assert_first_death(&d.properties, "expired", &src, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_ttl_expiry_is_dead_lettered_without_original_expiration() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let (src, _dlx, dlq) = dlx_setup(
        &ch,
        "dl-qttl",
        None,
        None,
        &[("x-message-ttl", AMQPValue::LongInt(30))],
    )
    .await;
    publish(&ch, "", &src, b"queue-ttl").await;
    let d = get_eventually(&ch, &dlq, true).await.delivery;
    assert_eq!(d.data, b"queue-ttl");
    let deaths = x_death(&d.properties);
    assert_eq!(deaths.len(), 1, "{deaths:?}");
    assert_death(&deaths[0], &src, "expired", "", &[&src], 1, None);
}

/// routing-keys lists the publish routing key and the CC keys, never the BCC keys;
/// the BCC header itself is removed, CC is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_death_routing_keys_include_cc_but_not_bcc() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let (src, _dlx, dlq) = dlx_setup(&ch, "dl-cc", None, None, &[]).await;
    let mut h = FieldTable::default();
    h.insert(
        "CC".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![lstr("cc-one"), lstr("cc-two")])),
    );
    h.insert(
        "BCC".into(),
        AMQPValue::FieldArray(FieldArray::from(vec![lstr("bcc-one")])),
    );
    publish_props(
        &ch,
        "",
        &src,
        b"cc",
        BasicProperties::default().with_headers(h),
    )
    .await;
    let m = get_with(&ch, &src, false).await.expect("message in source");
    within(
        "basic.reject",
        m.delivery
            .acker
            .reject(BasicRejectOptions { requeue: false }),
    )
    .await
    .expect("basic.reject");
    let d = get_eventually(&ch, &dlq, true).await.delivery;
    let deaths = x_death(&d.properties);
    assert_eq!(deaths.len(), 1, "{deaths:?}");
    assert_death(
        &deaths[0],
        &src,
        "rejected",
        "",
        &[&src, "cc-one", "cc-two"],
        1,
        None,
    );
    assert!(
        header_value(&d.properties, "BCC").is_none(),
        "BCC header is removed"
    );
    assert!(
        header_value(&d.properties, "CC").is_some(),
        "CC header is kept"
    );
}

/// A queue dead-lettering to itself through the default exchange: rejections keep
/// the message cycling (a cycle with a rejection is not dropped), and the existing
/// (queue, reason) entry's count goes up instead of a new entry being added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_rejection_from_the_same_queue_increments_count() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("dl-self-reject");
    declare_queue_with(
        &ch,
        &q,
        Default::default(),
        ftable(&[("x-dead-letter-exchange", lstr(""))]),
    )
    .await;
    publish(&ch, "", &q, b"boomerang").await;
    for round in 1..=3i64 {
        let m = get_eventually(&ch, &q, false).await;
        assert_eq!(m.delivery.data, b"boomerang");
        if round == 1 {
            assert!(header_value(&m.delivery.properties, "x-death").is_none());
        } else {
            let deaths = x_death(&m.delivery.properties);
            assert_eq!(deaths.len(), 1, "round {round}: one entry: {deaths:?}");
            assert_death(&deaths[0], &q, "rejected", "", &[&q], round - 1, None);
            assert_first_death(&m.delivery.properties, "rejected", &q, "");
        }
        within(
            "basic.reject",
            m.delivery
                .acker
                .reject(BasicRejectOptions { requeue: false }),
        )
        .await
        .expect("basic.reject");
    }
    let m = get_eventually(&ch, &q, true).await;
    let deaths = x_death(&m.delivery.properties);
    assert_eq!(deaths.len(), 1, "{deaths:?}");
    assert_death(&deaths[0], &q, "rejected", "", &[&q], 3, None);
}

/// q1 --rejected--> q2 --expired--> q3: a new (queue, reason) pair is prepended, so
/// x-death is ordered most recent first, and x-first-death-* keep the first death.
async fn two_deaths(ch: &Channel) -> (String, String, lapin::message::Delivery) {
    let q1 = unique("dl-chain-1");
    let q2 = unique("dl-chain-2");
    let q3 = unique("dl-chain-3");
    declare_queue_with(
        ch,
        &q1,
        Default::default(),
        ftable(&[
            ("x-dead-letter-exchange", lstr("")),
            ("x-dead-letter-routing-key", lstr(&q2)),
        ]),
    )
    .await;
    declare_queue_with(
        ch,
        &q2,
        Default::default(),
        ftable(&[
            ("x-message-ttl", AMQPValue::LongInt(30)),
            ("x-dead-letter-exchange", lstr("")),
            ("x-dead-letter-routing-key", lstr(&q3)),
        ]),
    )
    .await;
    declare_queue(ch, &q3).await;
    publish(ch, "", &q1, b"twice").await;
    let m = get_with(ch, &q1, false).await.expect("message in q1");
    within(
        "basic.reject",
        m.delivery
            .acker
            .reject(BasicRejectOptions { requeue: false }),
    )
    .await
    .expect("basic.reject");
    let d = get_eventually(ch, &q3, true).await.delivery;
    assert_eq!(d.data, b"twice");
    (q1, q2, d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deaths_in_different_queues_are_prepended_most_recent_first() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let (q1, q2, d) = two_deaths(&ch).await;
    let deaths = x_death(&d.properties);
    assert_eq!(deaths.len(), 2, "{deaths:?}");
    assert_death(&deaths[0], &q2, "expired", "", &[&q2], 1, None);
    assert_death(&deaths[1], &q1, "rejected", "", &[&q1], 1, None);
    assert_first_death(&d.properties, "rejected", &q1, "");
}

/// x-last-death-{reason,queue,exchange} exist since RabbitMQ 3.13 (they are in the
/// newest documentation and dead_lettering_SUITE). FAILS on RabbitMQ 3.10, which
/// does not write them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_last_death_headers_name_the_most_recent_death() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let (_q1, q2, d) = two_deaths(&ch).await;
    for (k, want) in [
        ("x-last-death-reason", "expired"),
        ("x-last-death-queue", q2.as_str()),
        ("x-last-death-exchange", ""),
    ] {
        assert_eq!(
            as_text(header_value(&d.properties, k)).as_deref(),
            Some(want),
            "header {k}"
        );
    }
}

/// "Messages in such cycles (i.e. messages that reach the same queue twice) will be
/// dropped if there was no rejections in the entire cycle": a queue with a message
/// TTL dead-lettering to the default exchange without a routing key sends the
/// expired message back to itself, and RabbitMQ drops it there instead of looping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_cycle_through_the_default_exchange_drops_the_message() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("dl-self-ttl");
    declare_queue_with(
        &ch,
        &q,
        Default::default(),
        ftable(&[
            ("x-message-ttl", AMQPValue::LongInt(30)),
            ("x-dead-letter-exchange", lstr("")),
        ]),
    )
    .await;
    publish(&ch, "", &q, b"loop").await;
    wait_message_count(&ch, &q, 0).await;
    // A looping message would be back in the queue most of the time (30 ms TTL).
    tokio::time::sleep(QUIET).await;
    assert_eq!(queue_counts(&ch, &q).await.0, 0, "the message was dropped");
    assert!(get(&ch, &q).await.is_none());
}

/// The same cycle seen from outside: the DLX is a fanout to the queue itself and a
/// witness queue. The first expiry reaches the witness (count 1); the copy for the
/// queue itself is dropped, so the witness never sees a second death.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_cycle_is_dropped_only_for_the_queue_already_in_x_death() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("dl-cycle");
    let witness = unique("dl-cycle-witness");
    let fan = unique("dl-cycle-fanout");
    declare_exchange_args(&ch, &fan, ExchangeKind::Fanout, FieldTable::default()).await;
    declare_queue_with(
        &ch,
        &q,
        Default::default(),
        ftable(&[
            ("x-message-ttl", AMQPValue::LongInt(30)),
            ("x-dead-letter-exchange", lstr(&fan)),
        ]),
    )
    .await;
    declare_queue(&ch, &witness).await;
    bind_queue(&ch, &q, &fan, "").await;
    bind_queue(&ch, &witness, &fan, "").await;
    publish(&ch, "", &q, b"once").await;
    let d = get_eventually(&ch, &witness, true).await.delivery;
    let deaths = x_death(&d.properties);
    assert_eq!(deaths.len(), 1, "{deaths:?}");
    assert_death(&deaths[0], &q, "expired", "", &[&q], 1, None);
    tokio::time::sleep(QUIET).await;
    assert!(
        get(&ch, &witness).await.is_none(),
        "the witness got a second death: the message kept cycling"
    );
    assert_eq!(
        queue_counts(&ch, &q).await.0,
        0,
        "the cycling copy was dropped"
    );
}

/// A DLX that does not exist: the rejected message is dropped silently (no error,
/// the channel stays open, nothing is requeued).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_dead_letter_exchange_drops_silently() {
    let broker = Broker::start();
    let (_conn, ch) = open(&broker).await;
    let q = unique("dl-missing");
    declare_queue_with(
        &ch,
        &q,
        Default::default(),
        ftable(&[("x-dead-letter-exchange", lstr(&unique("dl-no-such-x")))]),
    )
    .await;
    publish(&ch, "", &q, b"nowhere").await;
    let m = get_with(&ch, &q, false).await.expect("message");
    within(
        "basic.reject",
        m.delivery
            .acker
            .reject(BasicRejectOptions { requeue: false }),
    )
    .await
    .expect("basic.reject");
    // Also via expiry.
    publish_props(
        &ch,
        "",
        &q,
        b"expiring",
        BasicProperties::default().with_expiration("10".into()),
    )
    .await;
    wait_message_count(&ch, &q, 0).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(ch.status().connected(), "the channel is still open");
    assert_eq!(queue_counts(&ch, &q).await, (0, 0));
    assert!(get(&ch, &q).await.is_none());
}
