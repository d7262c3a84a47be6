//! Streams longer than RAM (issue 22, scope 4): the real binary with an
//! 8 MiB RAM budget keeps a 384 MiB stream on disk, under
//! `<data-dir>/pages`, while two consumers read it from different offsets;
//! each gets every entry intact at its offset, and resident memory stays
//! far below the stream, before and after a SIGKILL restart.
//!
//! As in `paging.rs`, the RSS check is differential (the event store's
//! write path holds a bounded few hundred MiB under load, which is not the
//! subject here): after the first quarter, the other 288 MiB may raise the
//! peak by at most half of that. With the stream in RAM the peak rises by
//! all of it.

use compat_tests::backlog::{bounded, connect, fill};
use compat_tests::procfs::{dir_bytes, number_of, numbered_body, peak_rss_bytes, rss_bytes};
use compat_tests::{Broker, BrokerOptions};
use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{Channel, Connection};
use std::time::{Duration, Instant};

const MIB: u64 = 1024 * 1024;
const BODY: usize = 64 * 1024;
/// 384 MiB of bodies.
const ENTRIES: u64 = 6144;
const WARM_UP: u64 = ENTRIES / 4;
const STREAM_BYTES: u64 = ENTRIES * BODY as u64;
const RSS_GROWTH_LIMIT: u64 = (ENTRIES - WARM_UP) * BODY as u64 / 2;
const STREAM: &str = "paging.stream";

async fn channel(conn: &Connection) -> Channel {
    bounded("channel.open", conn.create_channel())
        .await
        .expect("channel.open")
}

/// Read entries `from..to` of the stream with a consumer starting at
/// `from`: each at its offset (the `x-stream-offset` header), with the body
/// published as that number. Returns the time to the first delivery.
async fn read(conn: &Connection, from: u64, to: u64) -> Duration {
    let ch = channel(conn).await;
    ch.basic_qos(100, BasicQosOptions::default())
        .await
        .expect("basic.qos");
    let mut args = FieldTable::default();
    let start = match from {
        0 => AMQPValue::LongString(LongString::from("first")),
        n => AMQPValue::LongLongInt(i64::try_from(n).expect("an offset")),
    };
    args.insert(ShortString::from("x-stream-offset"), start);
    let asked = Instant::now();
    let mut consumer = ch
        .basic_consume(
            STREAM.into(),
            format!("reader-{from}").as_str().into(),
            BasicConsumeOptions::default(),
            args,
        )
        .await
        .expect("basic.consume");
    let mut first = None;
    for expected in from..to {
        let d = bounded("delivery", consumer.next())
            .await
            .expect("consumer ended")
            .expect("delivery");
        first.get_or_insert_with(|| asked.elapsed());
        let offset = d
            .properties
            .headers()
            .as_ref()
            .and_then(|h| h.inner().get("x-stream-offset").cloned());
        assert_eq!(
            offset,
            Some(AMQPValue::LongLongInt(expected as i64)),
            "offset header"
        );
        assert_eq!(number_of(&d.data), expected, "entry at offset {expected}");
        assert!(
            d.data == numbered_body(expected, BODY),
            "body at {expected} differs"
        );
        d.ack(BasicAckOptions::default()).await.expect("basic.ack");
    }
    let _ = ch.close(200, "done".into()).await;
    first.expect("read something")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_longer_than_the_ram_budget_stays_on_disk_and_reads_from_any_offset() {
    let mut broker = Broker::start_with(BrokerOptions {
        config_toml: Some(format!("message_ram_budget_bytes = {}\n", 8 * MIB)),
        ..Default::default()
    });
    let pages = broker.data_dir().join("data").join("pages");
    let conn = connect(&broker.uri()).await;
    let ch = channel(&conn).await;
    let mut args = FieldTable::default();
    args.insert(
        ShortString::from("x-queue-type"),
        AMQPValue::LongString(LongString::from("stream")),
    );
    ch.queue_declare(STREAM.into(), QueueDeclareOptions::durable(), args)
        .await
        .expect("queue.declare");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    fill(&ch, STREAM, 0..WARM_UP, BODY).await;
    let warm = rss_bytes(broker.pid());
    fill(&ch, STREAM, WARM_UP..ENTRIES, BODY).await;
    let paged = dir_bytes(&pages);

    // Two consumers at once, one from the start and one from the middle.
    let (from_first, from_middle) =
        tokio::join!(read(&conn, 0, ENTRIES), read(&conn, ENTRIES / 2, ENTRIES));
    let peak = peak_rss_bytes(broker.pid());
    eprintln!(
        "stream {} MiB; paged out {} MiB; broker RSS {} MiB after the first quarter, peak {} MiB; \
         first delivery from `first` after {from_first:?}, from the middle after {from_middle:?}",
        STREAM_BYTES / MIB,
        paged / MIB,
        warm / MIB,
        peak / MIB
    );
    assert!(
        paged > STREAM_BYTES / 2,
        "only {paged} bytes paged out of {STREAM_BYTES}"
    );
    assert!(
        peak.saturating_sub(warm) < RSS_GROWTH_LIMIT,
        "peak RSS rose from {} MiB to {} MiB while {} MiB more were appended",
        warm / MIB,
        peak / MIB,
        (STREAM_BYTES - WARM_UP * BODY as u64) / MIB
    );
    let _ = conn.close(200, "bye".into()).await;

    // A crash: the stream comes back from the event store, paged again, with
    // every entry at the same offset.
    broker.kill9();
    broker.start_again();
    let conn = connect(&broker.uri()).await;
    let late = read(&conn, ENTRIES - 1000, ENTRIES).await;
    read(&conn, 0, 500).await;
    let peak = peak_rss_bytes(broker.pid());
    eprintln!(
        "after restart: broker peak RSS {} MiB; first delivery after {late:?}",
        peak / MIB
    );
    assert!(
        peak < STREAM_BYTES / 2,
        "peak RSS {} MiB after a restart with a {} MiB stream",
        peak / MIB,
        STREAM_BYTES / MIB
    );
    assert!(
        dir_bytes(&pages) > STREAM_BYTES / 2,
        "the restored stream is paged out again"
    );
    let _ = conn.close(200, "bye".into()).await;
}
