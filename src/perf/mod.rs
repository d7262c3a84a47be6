//! `stablemq perf`: a load generator for AMQP 0-9-1 brokers (StableMQ and
//! RabbitMQ alike), in the spirit of RabbitMQ PerfTest and lavinmqperf.
//!
//! It declares the queue (durable with `--persistent`) and purges it through
//! every `--uri`, starts the consumers, then the producers, each on its own
//! connection and tokio task, and measures publish, confirm and consume rates, confirm and end-to-end latency
//! (HdrHistogram) and its own CPU time. The client is a raw one ([`client`]) so
//! that it is not the bottleneck: publish frames are encoded once and written
//! many per syscall ([`producer`]), deliveries are read without allocating
//! ([`consumer`]). `--frames-per-write 1` gives up the batching of writes: each
//! publish and each ack is one socket write, as a client library's are, so the
//! broker sees the small reads real applications send it.
//!
//! With `--queues N` (N > 1) the run uses N queues, `<queue>-1` to
//! `<queue>-N`, spread over the producers and consumers by [`task_queues`]:
//! a producer publishes round-robin to its queues, a consumer subscribes to each
//! of its own on one channel. `-x 1 -y 1 --queues 1000 -r 1000` is 1000 queues at
//! 1 msg/s each over two connections; `-x 4 -y 4 --queues 4` gives each producer
//! and consumer a queue of its own.
//!
//! Counts and rates: `-C` is per producer, like `-r` (PerfTest's meaning), so
//! `-x 2 -C 1000` publishes 2000 messages and the consumers stop after 2000.
//! With no producer (`-x 0`), `-C` is how many the consumers drain.
//! The run ends after `-z` seconds or when every count is reached, whichever is
//! first; `-z` defaults to 10 s when `-C` is not given. `--timeout` bounds the
//! whole run in any case (default `-z` + 30 s, or 300 s with `-C` alone).

pub mod client;
pub mod consumer;
pub mod producer;
pub mod report;
pub mod run;
pub mod stats;
pub mod stream;
pub mod uri;

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use stablemq_protocol::{AMQPValue, LongString};
use tokio::sync::{mpsc, watch};

use client::AmqpUri;
use consumer::ConsumerConfig;
use producer::ProducerConfig;
use run::run;
use stats::{Clock, Counters};

pub use run::Ends;

/// The URI used when no `--uri` is given.
pub const DEFAULT_URI: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Flags of `stablemq perf`.
#[derive(Debug, Clone, clap::Args)]
pub struct PerfArgs {
    /// Producers, each with its own connection.
    #[arg(short = 'x', long = "producers", default_value_t = 1)]
    pub producers: u32,
    /// Consumers, each with its own connection.
    #[arg(short = 'y', long = "consumers", default_value_t = 1)]
    pub consumers: u32,
    /// Message body size in octets (the first 8 carry the send time).
    #[arg(short = 's', long = "size", default_value_t = 16)]
    pub size: usize,
    /// Publisher-confirm window: most unconfirmed messages per producer
    /// (0 = no confirms).
    #[arg(short = 'c', long = "confirm", default_value_t = 0)]
    pub confirm: u32,
    /// Consumer prefetch (basic.qos); 0 sends none.
    #[arg(
        short = 'q',
        long = "qos",
        visible_alias = "prefetch",
        default_value_t = 0
    )]
    pub prefetch: u16,
    /// Consumers ack (multiple=true) every this many messages.
    #[arg(long, default_value_t = 1)]
    pub multi_ack_every: u64,
    /// Fixed publish rate in messages per second, per producer. Latency is then
    /// measured from each message's intended send time.
    #[arg(short = 'r', long = "rate")]
    pub rate: Option<f64>,
    /// Run for this many seconds (default 10 unless -C is given).
    #[arg(short = 'z', long = "duration", visible_alias = "time")]
    pub duration: Option<f64>,
    /// Messages per producer (with -x 0: messages to consume).
    #[arg(short = 'C', long = "count")]
    pub count: Option<u64>,
    /// Queue to declare, publish to (default exchange) and consume from; with
    /// `--queues N` (N > 1), the prefix of the queue names.
    #[arg(short = 'u', long = "queue", default_value = "stablemq-perf")]
    pub queue: String,
    /// Spread the run over this many queues, named QUEUE-1 to QUEUE-N (for
    /// N above 1): producer k publishes round-robin to queues k+1, k+1+x, ... and
    /// consumer k subscribes to queues k+1, k+1+y, ... (with fewer queues than
    /// producers or consumers, task k uses queue (k mod N)+1).
    #[arg(long = "queues", default_value_t = 1)]
    pub queues: u32,
    /// Queue argument k=v (repeatable): integers are sent as integers, true and
    /// false as booleans, anything else as a string.
    #[arg(long = "queue-args", value_name = "K=V", value_parser = parse_queue_arg)]
    pub queue_args: Vec<(String, ArgValue)>,
    /// Persistent messages (delivery mode 2) and a durable queue.
    #[arg(long)]
    pub persistent: bool,
    /// Consumers use automatic acknowledgement (no acks).
    #[arg(long, short = 'a')]
    pub auto_ack: bool,
    /// Broker URI (repeatable): producers, then consumers, are spread over them
    /// round-robin.
    #[arg(long = "uri")]
    pub uri: Vec<String>,
    /// CA certificate (PEM) that signed the broker's certificate, for
    /// `amqps://` URIs.
    #[arg(long)]
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// No per-second lines in text output.
    #[arg(long)]
    pub quiet: bool,
    /// Do not purge the queue at the start (to drain a backlog with -x 0).
    #[arg(long)]
    pub no_purge: bool,
    /// Give up after this many seconds in all (default: -z + 30, or 300).
    #[arg(long)]
    pub timeout: Option<f64>,
    /// Most publishes per socket write, and most acks per consumer write. Unset
    /// (the default), publishes are packed into writes of about 64 KiB and a
    /// consumer writes all the acks of one read at once; 1 writes every publish
    /// (method, header and body frames) and every ack on its own, as client
    /// libraries do.
    #[arg(long = "frames-per-write", value_name = "N")]
    pub frames_per_write: Option<u32>,
}

/// A queue argument's value.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ArgValue {
    /// An integer (`x-max-length=10`).
    Int(i64),
    /// A boolean (`true`, `false`).
    Bool(bool),
    /// Anything else, as a string.
    Str(String),
}

impl ArgValue {
    fn to_amqp(&self) -> AMQPValue {
        match self {
            ArgValue::Int(i) => AMQPValue::LongLongInt(*i),
            ArgValue::Bool(b) => AMQPValue::Boolean(*b),
            ArgValue::Str(s) => AMQPValue::LongString(LongString::from(s.as_bytes().to_vec())),
        }
    }
}

/// Parse `k=v` for `--queue-args`.
pub fn parse_queue_arg(s: &str) -> Result<(String, ArgValue), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not k=v"))?;
    if k.is_empty() {
        return Err(format!("{s:?} has an empty key"));
    }
    let v = if let Ok(i) = v.parse::<i64>() {
        ArgValue::Int(i)
    } else if v == "true" || v == "false" {
        ArgValue::Bool(v == "true")
    } else {
        ArgValue::Str(v.to_string())
    };
    Ok((k.to_string(), v))
}

/// Most queues one run may use (`--queues`).
pub const MAX_QUEUES: u32 = 100_000;

/// The queues (indexes into [`Plan::queues`]) that task `k` of `tasks`
/// producers (or consumers) uses, out of `n`: every `tasks`-th queue from `k`,
/// or queue `k mod n` alone when there are no more queues than tasks. Every
/// queue gets at least one task of each kind, and the load spreads evenly.
pub fn task_queues(k: usize, tasks: usize, n: usize) -> Vec<usize> {
    if n <= tasks {
        vec![k % n]
    } else {
        (k..n).step_by(tasks).collect()
    }
}

/// The validated shape of a run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The brokers: task `k` connects to `uris[k % uris.len()]`.
    pub uris: Vec<AmqpUri>,
    /// The queue names: `-u` alone, or `<-u>-1` to `<-u>-N` with `--queues N`.
    pub queues: Vec<String>,
    /// Producer connections.
    pub producers: u32,
    /// Consumer connections.
    pub consumers: u32,
    /// How long to run (`-z`); `None` runs until the counts are reached.
    pub duration_ns: Option<u64>,
    /// The consumers' stop count: every producer's count, or `-C` with `-x 0`.
    pub consume_target: Option<u64>,
    /// The run gives up after this long (`--timeout`).
    pub timeout: Duration,
    /// Purge the queues before the run.
    pub purge: bool,
    /// What each producer does.
    pub producer: Arc<ProducerConfig>,
    /// What each consumer does.
    pub consumer: Arc<ConsumerConfig>,
    /// The command line, for the report.
    pub args: PerfArgs,
}

fn secs_to_ns(what: &str, s: f64) -> Result<u64, String> {
    if !(s.is_finite() && s > 0.0 && s < 1e9) {
        return Err(format!("{what} must be a positive number of seconds"));
    }
    Ok((s * 1e9) as u64)
}

impl Plan {
    /// Check the arguments and work out the run.
    pub fn new(args: &PerfArgs) -> Result<Plan, String> {
        if args.producers == 0 && args.consumers == 0 {
            return Err("nothing to do: -x 0 and -y 0".into());
        }
        if args.queue.is_empty() || args.queue.len() > 255 {
            return Err("the queue name (-u) must be 1 to 255 octets".into());
        }
        if args.queues == 0 || args.queues > MAX_QUEUES {
            return Err(format!("--queues must be 1 to {MAX_QUEUES}"));
        }
        let queues: Vec<String> = if args.queues == 1 {
            vec![args.queue.clone()]
        } else {
            (1..=args.queues)
                .map(|i| format!("{}-{i}", args.queue))
                .collect()
        };
        if queues.iter().any(|q| q.len() > 255) {
            return Err("the queue names (-u with a -N suffix) must be at most 255 octets".into());
        }
        if args.size > 256 << 20 {
            return Err("the body size (-s) is limited to 256 MiB".into());
        }
        if args.multi_ack_every == 0 {
            return Err("--multi-ack-every must be at least 1".into());
        }
        if !args.auto_ack
            && args.consumers > 0
            && args.prefetch > 0
            && args.multi_ack_every > u64::from(args.prefetch)
        {
            return Err(format!(
                "--multi-ack-every {} exceeds the prefetch -q {}: consumers would wait forever",
                args.multi_ack_every, args.prefetch
            ));
        }
        if let Some(r) = args.rate
            && !(r.is_finite() && r > 0.0)
        {
            return Err("the rate (-r) must be positive".into());
        }
        if args.count == Some(0) {
            return Err("the count (-C) must be at least 1".into());
        }
        if args.frames_per_write == Some(0) {
            return Err("--frames-per-write must be at least 1".into());
        }
        let uris = if args.uri.is_empty() {
            vec![AmqpUri::parse(DEFAULT_URI)?]
        } else {
            args.uri
                .iter()
                .map(|u| AmqpUri::parse(u))
                .collect::<Result<_, _>>()?
        };
        let duration_ns = match (args.duration, args.count) {
            (Some(d), _) => Some(secs_to_ns("-z", d)?),
            (None, Some(_)) => None,
            (None, None) => Some(10_000_000_000),
        };
        let timeout_ns = match args.timeout {
            Some(t) => secs_to_ns("--timeout", t)?,
            None => duration_ns.map_or(300_000_000_000, |d| d + 30_000_000_000),
        };
        let consume_target = args.count.map(|c| c * u64::from(args.producers.max(1)));
        Ok(Plan {
            uris,
            queues,
            producers: args.producers,
            consumers: args.consumers,
            duration_ns,
            consume_target,
            timeout: Duration::from_nanos(timeout_ns),
            purge: !args.no_purge && args.producers > 0,
            producer: Arc::new(ProducerConfig {
                body_size: args.size,
                persistent: args.persistent,
                confirm_window: args.confirm,
                count: args.count,
                rate: args.rate,
                frames_per_write: args.frames_per_write,
            }),
            consumer: Arc::new(ConsumerConfig {
                prefetch: args.prefetch,
                auto_ack: args.auto_ack,
                multi_ack_every: args.multi_ack_every,
                frames_per_write: args.frames_per_write,
            }),
            args: args.clone(),
        })
    }
}

/// Where a run is; tasks watch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Connecting and declaring.
    Setup,
    /// Go, at this clock time (ns).
    Go(u64),
    /// Stop now; `done` when every expected message arrived (not an abort).
    Stop {
        /// Whether every expected message arrived (not an abort or a deadline).
        done: bool,
    },
}

/// What each producer and consumer task is handed.
#[derive(Debug, Clone)]
pub struct TaskCtx {
    /// The run's clock.
    pub clock: Clock,
    /// The run's shared totals.
    pub counters: Arc<Counters>,
    /// Where the run is.
    pub phase: watch::Receiver<Phase>,
    /// Sent once the task is set up.
    pub ready: mpsc::Sender<()>,
    /// How long to run (`-z`); `None` runs until the counts are reached.
    pub duration_ns: Option<u64>,
}

impl TaskCtx {
    fn deadline(&self, go_ns: u64) -> Option<Instant> {
        self.duration_ns.map(|d| self.clock.at(go_ns + d))
    }
}

/// What a task hands back: when its measurements ended and its histograms.
#[derive(Debug, Default)]
pub struct TaskReport {
    /// When this task's last publish went out.
    pub publish_end_ns: Option<u64>,
    /// When this task's last confirm arrived.
    pub confirm_end_ns: Option<u64>,
    /// When this task's last message arrived.
    pub consume_end_ns: Option<u64>,
    /// Confirm latencies (a producer with confirms).
    pub confirm_hist: Option<Histogram<u64>>,
    /// End-to-end latencies (a consumer).
    pub e2e_hist: Option<Histogram<u64>>,
}

/// Why a task's main loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Its count is done.
    Finished,
    /// The run's duration is over.
    Deadline,
    /// The run was stopped.
    Stopped {
        /// Whether every expected message arrived (not an abort).
        done: bool,
    },
}

/// Wait for the start; `None` if the run stops first.
async fn wait_go(rx: &mut watch::Receiver<Phase>) -> Option<u64> {
    loop {
        match *rx.borrow_and_update() {
            Phase::Go(ns) => return Some(ns),
            Phase::Stop { .. } => return None,
            Phase::Setup => {}
        }
        if rx.changed().await.is_err() {
            return None;
        }
    }
}

/// Poll a task's socket loop until it finishes, the deadline passes or the run
/// stops. The loop keeps its state outside, so dropping the poll is harmless.
async fn drive<F>(
    phase: &mut watch::Receiver<Phase>,
    deadline: Option<Instant>,
    mut poll: F,
) -> Result<Ended, String>
where
    F: FnMut(&mut Context<'_>) -> Poll<Result<(), String>>,
{
    let stop = async {
        loop {
            if let Phase::Stop { done } = *phase.borrow_and_update() {
                return done;
            }
            if phase.changed().await.is_err() {
                return false;
            }
        }
    };
    let deadline = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        done = stop => Ok(Ended::Stopped { done }),
        () = deadline => Ok(Ended::Deadline),
        r = std::future::poll_fn(|cx| poll(cx)) => r.map(|()| Ended::Finished),
    }
}

/// `stablemq perf`: run and print; returns the exit code (0 ok, 1 the run
/// failed or timed out, 2 bad arguments).
pub fn main(args: PerfArgs) -> i32 {
    let plan = match Plan::new(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("stablemq perf: {e}");
            return 2;
        }
    };
    if let Some(ca) = &args.tls_ca_file
        && let Err(e) = stream::trust_ca_file(ca)
    {
        eprintln!("stablemq perf: --tls-ca-file {e}");
        return 2;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("stablemq perf: tokio runtime: {e}");
            return 1;
        }
    };
    let live = !args.json && !args.quiet;
    let report = rt.block_on(run(&plan, live));
    rt.shutdown_timeout(Duration::from_secs(1));
    if args.json {
        match serde_json::to_string(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("stablemq perf: {e}");
                return 1;
            }
        }
    } else {
        print!("{}", report.text());
    }
    if report.errors.is_empty() && !report.timed_out {
        0
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        perf: PerfArgs,
    }

    fn parse(args: &[&str]) -> Result<PerfArgs, clap::Error> {
        Wrap::try_parse_from(std::iter::once("perf").chain(args.iter().copied())).map(|w| w.perf)
    }

    #[test]
    fn every_flag_parses() {
        let a = parse(&[
            "-x",
            "2",
            "-y",
            "3",
            "-s",
            "1024",
            "-c",
            "1000",
            "-q",
            "500",
            "--multi-ack-every",
            "100",
            "-r",
            "2500",
            "-z",
            "5",
            "-C",
            "9000",
            "-u",
            "q1",
            "--queue-args",
            "x-queue-type=quorum",
            "--queue-args",
            "x-max-length=10",
            "--queue-args",
            "x-single-active-consumer=true",
            "--persistent",
            "--auto-ack",
            "--uri",
            "amqp://a:b@h1:1/%2f",
            "--uri",
            "amqp://h2",
            "--json",
            "--frames-per-write",
            "1",
        ])
        .unwrap();
        assert_eq!((a.producers, a.consumers, a.size), (2, 3, 1024));
        assert_eq!((a.confirm, a.prefetch, a.multi_ack_every), (1000, 500, 100));
        assert_eq!(
            (a.rate, a.duration, a.count),
            (Some(2500.0), Some(5.0), Some(9000))
        );
        assert_eq!(a.queue, "q1");
        assert_eq!(
            a.queue_args,
            [
                ("x-queue-type".into(), ArgValue::Str("quorum".into())),
                ("x-max-length".into(), ArgValue::Int(10)),
                ("x-single-active-consumer".into(), ArgValue::Bool(true)),
            ]
        );
        assert!(a.persistent && a.auto_ack && a.json);
        assert_eq!(a.uri.len(), 2);
        assert_eq!(a.frames_per_write, Some(1));
        let p = Plan::new(&a).unwrap();
        assert_eq!(p.producer.frames_per_write, Some(1));
        assert_eq!(p.consumer.frames_per_write, Some(1));
        assert_eq!(p.uris[1].host, "h2");
        assert_eq!(p.duration_ns, Some(5_000_000_000));
        assert_eq!(p.consume_target, Some(18_000));
        assert_eq!(p.timeout, Duration::from_secs(35));
    }

    #[test]
    fn defaults_and_derived_limits() {
        let a = parse(&[]).unwrap();
        assert_eq!((a.producers, a.consumers, a.size, a.confirm), (1, 1, 16, 0));
        assert_eq!((a.prefetch, a.multi_ack_every), (0, 1));
        assert_eq!(a.frames_per_write, None, "batching is the default");
        let p = Plan::new(&a).unwrap();
        assert_eq!(p.uris, [AmqpUri::parse(DEFAULT_URI).unwrap()]);
        assert_eq!(p.duration_ns, Some(10_000_000_000)); // 10 s by default
        assert_eq!(p.consume_target, None);
        assert!(p.purge);
        // -C alone: no duration, a 300 s timeout
        let p = Plan::new(&parse(&["-C", "2000"]).unwrap()).unwrap();
        assert_eq!((p.duration_ns, p.consume_target), (None, Some(2000)));
        assert_eq!(p.timeout, Duration::from_secs(300));
        // draining with -x 0: consume -C messages and do not purge
        let p = Plan::new(&parse(&["-x", "0", "-C", "70"]).unwrap()).unwrap();
        assert_eq!(p.consume_target, Some(70));
        assert!(!p.purge);
        assert!(!Plan::new(&parse(&["--no-purge"]).unwrap()).unwrap().purge);
    }

    #[test]
    fn bad_combinations_are_refused() {
        let bad = |args: &[&str]| Plan::new(&parse(args).unwrap()).unwrap_err();
        assert!(bad(&["-x", "0", "-y", "0"]).contains("nothing to do"));
        assert!(bad(&["-q", "10", "--multi-ack-every", "20"]).contains("wait forever"));
        assert!(bad(&["--multi-ack-every", "0"]).contains("at least 1"));
        assert!(bad(&["-r", "0"]).contains("rate"));
        assert!(bad(&["-z=-1"]).contains("-z"));
        assert!(bad(&["-C", "0"]).contains("count"));
        assert!(bad(&["--frames-per-write", "0"]).contains("--frames-per-write"));
        assert!(bad(&["-u", ""]).contains("queue name"));
        assert!(bad(&["--uri", "http://x"]).contains("amqp://"));
        // auto-ack makes the ack batch irrelevant
        assert!(Plan::new(&parse(&["-q", "10", "--multi-ack-every", "20", "-a"]).unwrap()).is_ok());
        assert!(parse(&["--queue-args", "novalue"]).is_err());
        assert!(parse(&["--queue-args", "=1"]).is_err());
    }

    #[test]
    fn queues_are_named_and_spread_over_the_tasks() {
        let plan = |args: &[&str]| Plan::new(&parse(args).unwrap());
        assert_eq!(plan(&["-u", "q"]).unwrap().queues, ["q"]);
        assert_eq!(
            plan(&["-u", "q", "--queues", "3"]).unwrap().queues,
            ["q-1", "q-2", "q-3"]
        );
        assert!(plan(&["--queues", "0"]).unwrap_err().contains("--queues"));
        assert!(
            plan(&["--queues", "100001"])
                .unwrap_err()
                .contains("--queues")
        );
        let long = "q".repeat(254);
        assert!(plan(&["-u", &long]).is_ok());
        assert!(
            plan(&["-u", &long, "--queues", "2"])
                .unwrap_err()
                .contains("255")
        );
        // more queues than tasks: every tasks-th queue
        assert_eq!(task_queues(0, 1, 3), [0, 1, 2]);
        assert_eq!(task_queues(1, 4, 10), [1, 5, 9]);
        assert_eq!(task_queues(3, 4, 10), [3, 7]);
        // as many or fewer: one queue each, wrapping
        assert_eq!(task_queues(2, 4, 4), [2]);
        assert_eq!(task_queues(5, 6, 4), [1]);
        // every queue is covered exactly once when n > tasks
        let mut all: Vec<usize> = (0..7).flat_map(|k| task_queues(k, 7, 1000)).collect();
        all.sort_unstable();
        assert_eq!(all, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn queue_arg_values_are_typed() {
        assert_eq!(parse_queue_arg("k=-5").unwrap().1, ArgValue::Int(-5));
        assert_eq!(parse_queue_arg("k=false").unwrap().1, ArgValue::Bool(false));
        assert_eq!(
            parse_queue_arg("k=1.5").unwrap().1,
            ArgValue::Str("1.5".into())
        );
        assert_eq!(
            parse_queue_arg("k=a=b").unwrap().1,
            ArgValue::Str("a=b".into())
        );
        assert_eq!(ArgValue::Int(3).to_amqp(), AMQPValue::LongLongInt(3));
        assert_eq!(ArgValue::Bool(true).to_amqp(), AMQPValue::Boolean(true));
    }
}
