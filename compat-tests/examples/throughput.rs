//! A small load tool: one confirmed publisher and one consumer on one durable
//! queue, each on its own connection, through lapin.
//!
//! ```sh
//! cargo run --release -p compat-tests --example throughput -- \
//!     --uri amqp://guest:guest@127.0.0.1:5672/%2f --count 100000 --size 1024 \
//!     --confirm-window 1000 --prefetch 1000 --multi-ack 100 --queue tp
//! ```
//!
//! It declares the durable queue and purges it, starts the consumer (manual acks,
//! basic.qos prefetch P, basic.ack multiple=true every M messages), then publishes N
//! messages of BYTES bytes to it through the default exchange. In confirm mode the
//! publisher keeps at most W unconfirmed publishes in flight: it awaits the oldest
//! confirm only once W are outstanding. Messages are persistent (delivery_mode 2)
//! unless `--transient`; `--no-confirm` publishes without confirm mode.
//!
//! Each body starts with its sequence number (when BYTES >= 8), so the consumer
//! checks that every message arrives exactly once; it reports out-of-order,
//! duplicate and redelivered messages. The run ends when the consumer has N
//! messages, or fails after 120 s. It prints one line of text and one JSON line.

use std::collections::VecDeque;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Confirmation, Connection, ConnectionProperties, PublisherConfirm};

/// The whole run gives up after this long.
const DEADLINE: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
struct Args {
    uri: String,
    count: u64,
    size: usize,
    confirm_window: usize,
    prefetch: u16,
    multi_ack: u64,
    queue: String,
    transient: bool,
    confirm: bool,
}

const USAGE: &str = "usage: throughput --uri URI --count N --size BYTES --confirm-window W \
--prefetch P --multi-ack M --queue NAME [--transient] [--no-confirm]";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        uri: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
        count: 100_000,
        size: 1024,
        confirm_window: 1000,
        prefetch: 1000,
        multi_ack: 100,
        queue: "throughput".into(),
        transient: false,
        confirm: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |s: String| -> Result<u64, String> {
            s.parse::<u64>().map_err(|e| format!("{flag}: {e}"))
        };
        match flag.as_str() {
            "--uri" => a.uri = value()?,
            "--count" => a.count = num(value()?)?,
            "--size" => a.size = num(value()?)? as usize,
            "--confirm-window" => a.confirm_window = num(value()?)?.max(1) as usize,
            "--prefetch" => {
                a.prefetch = u16::try_from(num(value()?)?)
                    .map_err(|_| "--prefetch must fit in 16 bits".to_string())?
            }
            "--multi-ack" => a.multi_ack = num(value()?)?.max(1),
            "--queue" => a.queue = value()?,
            "--transient" => a.transient = true,
            "--no-confirm" => a.confirm = false,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    if a.count == 0 {
        return Err("--count must be > 0".into());
    }
    Ok(a)
}

/// What the publisher saw.
#[derive(Debug, Default)]
struct PubStats {
    /// Since start, when the last basic.publish was handed to the socket.
    published_at: Duration,
    /// Since start, when the last confirm arrived (equals `published_at` without
    /// confirms).
    confirmed_at: Duration,
    nacks: u64,
}

/// What the consumer saw.
#[derive(Debug, Default)]
struct ConsStats {
    /// Since start, when the N-th message arrived.
    consumed_at: Duration,
    received: u64,
    redelivered: u64,
    out_of_order: u64,
    duplicates: u64,
}

async fn publisher(args: Args, start: Instant) -> lapin::Result<PubStats> {
    let conn = Connection::connect(
        &args.uri,
        ConnectionProperties::default().with_connection_name("throughput-publisher".into()),
    )
    .await?;
    let ch = conn.create_channel().await?;
    if args.confirm {
        ch.confirm_select(ConfirmSelectOptions::default()).await?;
    }
    let props = BasicProperties::default().with_delivery_mode(if args.transient { 1 } else { 2 });
    let mut body = vec![0xA5u8; args.size];
    let mut stats = PubStats::default();
    let mut window: VecDeque<PublisherConfirm> = VecDeque::with_capacity(args.confirm_window);

    let check = |c: Confirmation, stats: &mut PubStats| {
        if c.is_nack() {
            stats.nacks += 1;
        }
    };

    for seq in 0..args.count {
        if body.len() >= 8 {
            body[..8].copy_from_slice(&seq.to_be_bytes());
        }
        if args.confirm && window.len() >= args.confirm_window {
            let oldest = window.pop_front().expect("window is not empty");
            check(oldest.await?, &mut stats);
        }
        let confirm = ch
            .basic_publish(
                "".into(),
                args.queue.as_str().into(),
                BasicPublishOptions::default(),
                &body,
                props.clone(),
            )
            .await?;
        if args.confirm {
            window.push_back(confirm);
        }
    }
    stats.published_at = start.elapsed();
    while let Some(c) = window.pop_front() {
        check(c.await?, &mut stats);
    }
    stats.confirmed_at = start.elapsed();
    let _ = conn.close(200, "OK".into()).await;
    Ok(stats)
}

async fn consumer(
    args: Args,
    ready: tokio::sync::oneshot::Sender<Instant>,
) -> lapin::Result<(ConsStats, Instant)> {
    let conn = Connection::connect(
        &args.uri,
        ConnectionProperties::default().with_connection_name("throughput-consumer".into()),
    )
    .await?;
    let ch = conn.create_channel().await?;
    ch.queue_declare(
        args.queue.as_str().into(),
        QueueDeclareOptions::durable(),
        FieldTable::default(),
    )
    .await?;
    let purged = ch
        .queue_purge(args.queue.as_str().into(), QueuePurgeOptions::default())
        .await?;
    if purged > 0 {
        eprintln!("purged {purged} old messages from {}", args.queue);
    }
    ch.basic_qos(args.prefetch, BasicQosOptions::default())
        .await?;
    let mut consumer = ch
        .basic_consume(
            args.queue.as_str().into(),
            "throughput-consumer".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;

    let start = Instant::now();
    let _ = ready.send(start);

    let mut stats = ConsStats::default();
    // seen[i] is true once the message with sequence number i has arrived.
    let mut seen = vec![false; args.count as usize];
    let mut next_expected = 0u64;
    let mut unacked = 0u64;
    while stats.received < args.count {
        let delivery = match consumer.next().await {
            Some(d) => d?,
            None => {
                eprintln!("consumer stream ended after {} messages", stats.received);
                break;
            }
        };
        stats.received += 1;
        if delivery.redelivered {
            stats.redelivered += 1;
        }
        if delivery.data.len() >= 8 {
            let seq = u64::from_be_bytes(delivery.data[..8].try_into().expect("8 bytes"));
            if seq != next_expected {
                stats.out_of_order += 1;
            }
            next_expected = seq + 1;
            match seen.get_mut(seq as usize) {
                Some(s) if *s => stats.duplicates += 1,
                Some(s) => *s = true,
                None => stats.duplicates += 1, // not from this run
            }
        }
        unacked += 1;
        if unacked >= args.multi_ack || stats.received == args.count {
            ch.basic_ack(delivery.delivery_tag, BasicAckOptions { multiple: true })
                .await?;
            unacked = 0;
        }
    }
    stats.consumed_at = start.elapsed();
    let _ = conn.close(200, "OK".into()).await;
    Ok((stats, start))
}

fn rate(n: u64, d: Duration) -> f64 {
    if d.is_zero() {
        0.0
    } else {
        n as f64 / d.as_secs_f64()
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };

    // The consumer declares and purges the queue and subscribes; the clock starts
    // once it is subscribed, and the publisher starts then.
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let cons = tokio::spawn(consumer(args.clone(), ready_tx));
    let start = match tokio::time::timeout(Duration::from_secs(30), ready_rx).await {
        Ok(Ok(start)) => start,
        _ => {
            let why = if cons.is_finished() {
                match cons.await {
                    Ok(Err(e)) => format!("{e}"),
                    other => format!("{other:?}"),
                }
            } else {
                "timed out".into()
            };
            eprintln!("consumer setup failed: {why}");
            return ExitCode::FAILURE;
        }
    };
    let publ = tokio::spawn(publisher(args.clone(), start));

    let both = async {
        let p = publ.await;
        let c = cons.await;
        (p, c)
    };
    let (p, c) = match tokio::time::timeout(DEADLINE.saturating_sub(start.elapsed()), both).await {
        Ok(r) => r,
        Err(_) => {
            eprintln!(
                "gave up after {} s: run did not finish (hang or too slow)",
                DEADLINE.as_secs()
            );
            return ExitCode::FAILURE;
        }
    };
    let p = match p {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            eprintln!("publisher failed: {e}");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("publisher task panicked: {e}");
            return ExitCode::FAILURE;
        }
    };
    let c = match c {
        Ok(Ok((c, _))) => c,
        Ok(Err(e)) => {
            eprintln!("consumer failed: {e}");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("consumer task panicked: {e}");
            return ExitCode::FAILURE;
        }
    };

    // Until both the last confirm and the N-th delivery (not the closes).
    let elapsed = p.confirmed_at.max(c.consumed_at);
    let n = args.count;
    let publish_rate = rate(n, p.published_at);
    let confirm_rate = if args.confirm {
        rate(n, p.confirmed_at)
    } else {
        0.0
    };
    let consume_rate = rate(c.received, c.consumed_at);
    let ok = c.received == n && c.duplicates == 0 && p.nacks == 0;
    println!(
        "count={n} size={} window={} prefetch={} multi_ack={} persistent={} confirm={} | \
         publish {publish_rate:.0} msg/s, confirm {confirm_rate:.0} msg/s, consume \
         {consume_rate:.0} msg/s, elapsed {:.3} s | received={} nacks={} duplicates={} \
         out_of_order={} redelivered={}{}",
        args.size,
        args.confirm_window,
        args.prefetch,
        args.multi_ack,
        !args.transient,
        args.confirm,
        elapsed.as_secs_f64(),
        c.received,
        p.nacks,
        c.duplicates,
        c.out_of_order,
        c.redelivered,
        if ok { "" } else { " FAILED" },
    );
    println!(
        "{{\"count\":{n},\"size\":{},\"confirm_window\":{},\"prefetch\":{},\"multi_ack\":{},\
         \"persistent\":{},\"confirm\":{},\"publish_rate\":{publish_rate:.1},\
         \"confirm_rate\":{confirm_rate:.1},\"consume_rate\":{consume_rate:.1},\
         \"elapsed_s\":{:.4},\"received\":{},\"nacks\":{},\"duplicates\":{},\
         \"out_of_order\":{},\"redelivered\":{},\"ok\":{ok}}}",
        args.size,
        args.confirm_window,
        args.prefetch,
        args.multi_ack,
        !args.transient,
        args.confirm,
        elapsed.as_secs_f64(),
        c.received,
        p.nacks,
        c.duplicates,
        c.out_of_order,
        c.redelivered,
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
