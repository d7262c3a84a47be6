//! Queues longer than RAM: the real binary with an 8 MiB RAM budget for ready
//! messages holds a 1 GiB durable backlog with resident memory far below
//! the backlog while it fills and drains, pages it out to `<data-dir>/pages`,
//! and gives every message back intact and in order, before and after a
//! SIGKILL restart.
//!
//! The RSS check is differential, so that what the event store's write path
//! holds (journal, memtables, the reducer's window: bounded, but a few
//! hundred MiB under load and not the subject here) cannot make it flaky:
//! after a first quarter of the backlog has warmed everything up, the other
//! 768 MiB may raise the peak RSS by at most half of that. Without paging
//! every body stays in RAM and the peak rises by all of it. The peak is the
//! kernel's high-water mark (VmHWM), which no sampling can miss.

use compat_tests::backlog::{bounded, connect, fill};
use compat_tests::procfs::{dir_bytes, number_of, numbered_body, peak_rss_bytes, rss_bytes};
use compat_tests::{Broker, BrokerOptions};
use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection};

const MIB: u64 = 1024 * 1024;
const BODY: usize = 64 * 1024;
/// 1 GiB of bodies.
const MESSAGES: u64 = 16384;
/// The first quarter, after which RSS is taken as the reference.
const WARM_UP: u64 = MESSAGES / 4;
const QUEUED_BYTES: u64 = MESSAGES * BODY as u64;
/// How much the rest of the backlog (768 MiB) may raise the peak RSS.
const RSS_GROWTH_LIMIT: u64 = (MESSAGES - WARM_UP) * BODY as u64 / 2;
const QUEUE: &str = "paging.backlog";

async fn channel(uri: &str) -> (Connection, Channel) {
    let conn = connect(uri).await;
    let ch = conn.create_channel().await.expect("channel.open");
    (conn, ch)
}

fn body(seq: u64) -> Vec<u8> {
    numbered_body(seq, BODY)
}

/// Consume `count` messages (or until `MESSAGES - 1`), checking each body is
/// the one published with its number and that numbers come in order from
/// `first_at_most` or below; returns the last number seen.
async fn consume(ch: &Channel, tag: &str, count: u64, first_at_most: u64) -> u64 {
    ch.basic_qos(200, BasicQosOptions::default())
        .await
        .expect("basic.qos");
    let mut consumer = ch
        .basic_consume(
            QUEUE.into(),
            tag.into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("basic.consume");
    let mut last: Option<u64> = None;
    for _ in 0..count {
        let d = bounded("delivery", consumer.next())
            .await
            .expect("consumer ended")
            .expect("delivery");
        let seq = number_of(&d.data);
        match last {
            None => assert!(
                seq <= first_at_most,
                "first message {seq}, expected at most {first_at_most}"
            ),
            Some(l) => assert_eq!(seq, l + 1, "out of order after {l}"),
        }
        assert!(d.data == body(seq), "body of message {seq} differs");
        d.ack(BasicAckOptions::default()).await.expect("basic.ack");
        last = Some(seq);
        if seq == MESSAGES - 1 {
            break;
        }
    }
    ch.basic_cancel(tag.into(), Default::default())
        .await
        .expect("basic.cancel");
    last.expect("consumed something")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_longer_than_the_ram_budget_stays_on_disk_and_comes_back_in_order() {
    let mut broker = Broker::start_with(BrokerOptions {
        config_toml: Some(format!("message_ram_budget_bytes = {}\n", 8 * MIB)),
        ..Default::default()
    });
    let pages = broker.data_dir().join("data").join("pages");
    let (conn, ch) = channel(&broker.uri()).await;
    ch.queue_declare(
        QUEUE.into(),
        QueueDeclareOptions::durable(),
        FieldTable::default(),
    )
    .await
    .expect("queue.declare");

    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    fill(&ch, QUEUE, 0..WARM_UP, BODY).await;
    let warm = rss_bytes(broker.pid());
    fill(&ch, QUEUE, WARM_UP..MESSAGES, BODY).await;
    let paged = dir_bytes(&pages);
    let half = MESSAGES / 2;
    let last = consume(&ch, "first-half", half, 0).await;
    let peak = peak_rss_bytes(broker.pid());
    eprintln!(
        "queued {} MiB; paged out {} MiB; broker RSS {} MiB after the first quarter, peak {} MiB",
        QUEUED_BYTES / MIB,
        paged / MIB,
        warm / MIB,
        peak / MIB
    );
    assert_eq!(last, half - 1);
    assert!(
        paged > QUEUED_BYTES / 2,
        "only {paged} bytes paged out of {QUEUED_BYTES} queued"
    );
    assert!(
        peak.saturating_sub(warm) < RSS_GROWTH_LIMIT,
        "peak RSS rose from {} MiB to {} MiB while {} MiB more were queued",
        warm / MIB,
        peak / MIB,
        (QUEUED_BYTES - WARM_UP * BODY as u64) / MIB
    );
    let _ = conn.close(200, "bye".into()).await;

    // A crash: the backlog comes back from the event store, paged again.
    broker.kill9();
    broker.start_again();
    let (conn, ch) = channel(&broker.uri()).await;
    // Acks are not confirmed, so some of the first half may come back; the
    // rest must follow in order without a gap.
    let last = consume(&ch, "second-half", MESSAGES, half).await;
    // Boot restores the state a page at a time and the queue pages out as it
    // fills, so even the high-water mark of the new process, boot included,
    // stays below half of the half backlog still queued (512 MiB).
    let peak = peak_rss_bytes(broker.pid());
    eprintln!("after restart: broker peak RSS {} MiB", peak / MIB);
    assert!(
        peak < QUEUED_BYTES / 4,
        "peak RSS {} MiB after a restart with {} MiB queued",
        peak / MIB,
        QUEUED_BYTES / 2 / MIB
    );
    assert_eq!(last, MESSAGES - 1);
    let _ = conn.close(200, "bye".into()).await;
    assert_eq!(dir_bytes(&pages), 0, "a drained queue leaves no pages");
}
