//! The result of a perf run, as text for people and as one JSON object
//! (`--json`) for scripts. Latencies are in microseconds, rates in messages per
//! second.

use std::fmt::Write as _;

use serde::Serialize;

use super::stats::{Cpu, Latency, Sample, Snapshot, rate};
use super::{ArgValue, Ends, Plan};

/// The run's settings, echoed so a JSON result stands on its own.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// Broker URIs, passwords masked.
    pub uris: Vec<String>,
    /// The queue name (or the prefix of the names).
    pub queue: String,
    /// The number of queues (`--queues`); with more than one, `queue` is the
    /// prefix of their names.
    pub queues: u32,
    /// Queue arguments declared with each queue.
    pub queue_args: Vec<(String, ArgValue)>,
    /// Producer connections.
    pub producers: u32,
    /// Consumer connections.
    pub consumers: u32,
    /// Bytes per message body.
    pub body_size: usize,
    /// Whether messages were persistent.
    pub persistent: bool,
    /// 0 = no publisher confirms.
    pub confirm_window: u32,
    /// basic.qos prefetch count; 0 = none.
    pub prefetch: u16,
    /// Whether consumers used no-ack.
    pub auto_ack: bool,
    /// Consumers acked (multiple) every this many messages.
    pub multi_ack_every: u64,
    /// Each producer's publish rate limit, if any.
    pub rate_per_producer: Option<f64>,
    /// The run's duration, if it had one.
    pub duration_s: Option<f64>,
    /// Messages per producer, if counted.
    pub count_per_producer: Option<u64>,
    /// Most publishes (and acks) per socket write; `None` = batched writes.
    pub frames_per_write: Option<u32>,
}

/// Everything a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What was asked for.
    pub settings: Settings,
    /// From the start until the last measurement ended.
    pub elapsed_s: f64,
    /// Whether the run hit `--timeout`.
    pub timed_out: bool,
    /// What went wrong, one line per task.
    pub errors: Vec<String>,
    /// Messages published.
    pub published: u64,
    /// Publishes acked by the broker.
    pub confirmed: u64,
    /// Publishes nacked by the broker.
    pub nacked: u64,
    /// Messages consumed.
    pub consumed: u64,
    /// Messages published per second.
    pub publish_rate: f64,
    /// Confirms per second.
    pub confirm_rate: f64,
    /// Messages consumed per second.
    pub consume_rate: f64,
    /// From publish to confirm, in microseconds.
    pub confirm_latency_us: Option<Latency>,
    /// From publish to consume, in microseconds.
    pub e2e_latency_us: Option<Latency>,
    /// The client's own CPU use.
    pub cpu: Option<Cpu>,
    /// Rates over each second of the run.
    pub samples: Vec<Sample>,
}

impl Report {
    /// An empty report for `plan` (what a run that failed to start prints).
    pub fn new(plan: &Plan) -> Report {
        let a = &plan.args;
        Report {
            settings: Settings {
                uris: plan.uris.iter().map(|u| u.display()).collect(),
                queue: a.queue.clone(),
                queues: a.queues,
                queue_args: a.queue_args.clone(),
                producers: a.producers,
                consumers: a.consumers,
                body_size: a.size,
                persistent: a.persistent,
                confirm_window: a.confirm,
                prefetch: a.prefetch,
                auto_ack: a.auto_ack,
                multi_ack_every: a.multi_ack_every,
                rate_per_producer: a.rate,
                duration_s: plan.duration_ns.map(|d| d as f64 / 1e9),
                count_per_producer: a.count,
                frames_per_write: a.frames_per_write,
            },
            elapsed_s: 0.0,
            timed_out: false,
            errors: Vec::new(),
            published: 0,
            confirmed: 0,
            nacked: 0,
            consumed: 0,
            publish_rate: 0.0,
            confirm_rate: 0.0,
            consume_rate: 0.0,
            confirm_latency_us: None,
            e2e_latency_us: None,
            cpu: None,
            samples: Vec::new(),
        }
    }

    /// Fill in the totals, rates (each over the time from the start to the end
    /// of that measurement), latencies and CPU use.
    pub fn fill(
        &mut self,
        totals: &Snapshot,
        ends: &Ends,
        go_ns: u64,
        now_ns: u64,
        cpu0: (f64, f64),
        cpu1: (f64, f64),
    ) {
        self.published = totals.published;
        self.confirmed = totals.confirmed;
        self.nacked = totals.nacked;
        self.consumed = totals.consumed;
        let span = |end: Option<u64>| end.unwrap_or(now_ns).saturating_sub(go_ns);
        self.publish_rate = rate(totals.published, span(ends.publish_ns));
        self.confirm_rate = rate(totals.confirmed, span(ends.confirm_ns));
        self.consume_rate = rate(totals.consumed, span(ends.consume_ns));
        let last = [ends.publish_ns, ends.confirm_ns, ends.consume_ns]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(now_ns);
        let wall = last.saturating_sub(go_ns);
        self.elapsed_s = wall as f64 / 1e9;
        self.confirm_latency_us = ends.confirm_latency();
        self.e2e_latency_us = ends.e2e_latency();
        let moved = totals.published.max(totals.consumed);
        self.cpu = Some(Cpu::between(
            cpu0,
            cpu1,
            now_ns.saturating_sub(go_ns),
            moved,
        ));
    }

    /// The human-readable report.
    pub fn text(&self) -> String {
        let s = &self.settings;
        let mut o = String::new();
        let plural = |n: u32, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
        let queues = match s.queues {
            1 => format!("queue {}", s.queue),
            n => format!("queues {q}-1 to {q}-{n}", q = s.queue),
        };
        let _ = writeln!(
            o,
            "stablemq perf: {}, {} on {}, {queues}",
            plural(s.producers, "producer"),
            plural(s.consumers, "consumer"),
            s.uris.join(" "),
        );
        let confirms = match s.confirm_window {
            0 => "no confirms".to_string(),
            w => format!("confirm window {w}"),
        };
        let acks = if s.auto_ack {
            "auto-ack".to_string()
        } else {
            format!("ack every {}", s.multi_ack_every)
        };
        let rate_mode = s
            .rate_per_producer
            .map(|r| format!(", {r} msg/s per producer"))
            .unwrap_or_default();
        let writes = match s.frames_per_write {
            None => String::new(),
            Some(1) => ", one publish per write".to_string(),
            Some(n) => format!(", at most {n} publishes per write"),
        };
        let _ = writeln!(
            o,
            "  {} B {}, {confirms}, prefetch {}, {acks}{rate_mode}{writes}",
            s.body_size,
            if s.persistent {
                "persistent"
            } else {
                "transient"
            },
            s.prefetch
        );
        let _ = writeln!(o, "elapsed     {:.2} s", self.elapsed_s);
        let mut count = |name: &str, n: u64, r: f64| {
            let _ = writeln!(o, "{name:<11} {n:>12} msg {r:>12.0} msg/s");
        };
        count("published", self.published, self.publish_rate);
        if s.confirm_window > 0 {
            count("confirmed", self.confirmed, self.confirm_rate);
        }
        count("consumed", self.consumed, self.consume_rate);
        if self.nacked > 0 {
            let _ = writeln!(o, "nacked      {:>12} msg", self.nacked);
        }
        for (name, l) in [
            ("confirm latency", &self.confirm_latency_us),
            ("end-to-end latency", &self.e2e_latency_us),
        ] {
            if let Some(l) = l {
                let _ = writeln!(o, "{name:<19} {}", latency_line(l));
            }
        }
        if let Some(c) = &self.cpu {
            let per = c
                .per_million_msgs_s
                .map(|p| format!(", {p:.2} s per million messages"))
                .unwrap_or_default();
            let _ = writeln!(
                o,
                "client CPU  {:.2} s (user {:.2}, sys {:.2}), {:.2} cores{per}",
                c.total_s, c.user_s, c.sys_s, c.cores
            );
        }
        if self.timed_out {
            let _ = writeln!(o, "TIMED OUT");
        }
        for e in &self.errors {
            let _ = writeln!(o, "error: {e}");
        }
        o
    }
}

fn ms(us: u64) -> String {
    format!("{:.3}", us as f64 / 1000.0)
}

/// `p50 0.412 ms  p99 ...` for one latency summary.
pub fn latency_line(l: &Latency) -> String {
    format!(
        "p50 {} ms  p99 {} ms  p99.9 {} ms  max {} ms  (n={})",
        ms(l.p50),
        ms(l.p99),
        ms(l.p999),
        ms(l.max),
        l.count
    )
}

/// The line printed each second in text mode.
pub fn sample_line(s: &Sample) -> String {
    format!(
        "{:>7.1} s  publish {:>10.0}/s  confirm {:>10.0}/s  consume {:>10.0}/s",
        s.t, s.publish_rate, s.confirm_rate, s.consume_rate
    )
}

#[cfg(test)]
mod tests {
    use super::super::stats::{latency_histogram, record_latency};
    use super::super::{Ends, PerfArgs, Plan};
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        perf: PerfArgs,
    }

    fn plan(args: &[&str]) -> Plan {
        let w = Wrap::try_parse_from(std::iter::once("perf").chain(args.iter().copied())).unwrap();
        Plan::new(&w.perf).unwrap()
    }

    #[test]
    fn rates_use_each_measures_own_end_and_json_has_every_field() {
        let p = plan(&[
            "-C",
            "1000",
            "-c",
            "100",
            "--uri",
            "amqp://u:secret@h:1/%2f",
        ]);
        let mut r = Report::new(&p);
        let mut ends = Ends {
            publish_ns: Some(1_500_000_000), // 0.5 s after the start
            confirm_ns: Some(2_000_000_000),
            consume_ns: Some(3_000_000_000),
            ..Ends::default()
        };
        let mut h = latency_histogram();
        record_latency(&mut h, 0, 250_000);
        ends.confirm = h.clone();
        ends.e2e = h;
        let totals = Snapshot {
            published: 1000,
            confirmed: 1000,
            nacked: 0,
            consumed: 1000,
        };
        r.fill(
            &totals,
            &ends,
            1_000_000_000,
            4_000_000_000,
            (0.0, 0.0),
            (0.3, 0.1),
        );
        assert_eq!(r.publish_rate, 2000.0);
        assert_eq!(r.confirm_rate, 1000.0);
        assert_eq!(r.consume_rate, 500.0);
        assert_eq!(r.elapsed_s, 2.0);
        let cpu = r.cpu.unwrap();
        assert!((cpu.per_million_msgs_s.unwrap() - 400.0).abs() < 1e-6);

        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        for k in [
            "published",
            "confirmed",
            "consumed",
            "publish_rate",
            "confirm_rate",
            "consume_rate",
            "elapsed_s",
            "timed_out",
            "errors",
            "samples",
        ] {
            assert!(v.get(k).is_some(), "{k} missing");
        }
        assert_eq!(v["confirm_latency_us"]["p50"], 250);
        assert_eq!(v["e2e_latency_us"]["count"], 1);
        assert_eq!(v["settings"]["uris"][0], "amqp://u:***@h:1/%2f");
        assert_eq!(v["settings"]["count_per_producer"], 1000);
        assert_eq!(v["settings"]["queues"], 1);

        let text = r.text();
        assert!(text.contains("confirm window 100"), "{text}");
        assert!(text.contains("p50 0.250 ms"), "{text}");
        assert!(!text.contains("secret"));
    }
}
