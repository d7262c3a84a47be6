//! The total-queue checker and the invariants of a partition run.
//!
//! After every fault is healed and the queue drained, each published id is
//! one of: confirmed and consumed (ok), confirmed and never consumed
//! (**lost**), unconfirmed and consumed (recovered: allowed, the confirm was
//! in flight when its node went away), or consumed more than once
//! (duplicated: reported, allowed, as with RabbitMQ's quorum queues). An id
//! consumed that no publisher sent is **unexpected**. Besides: no message
//! published through a node while it could not reach a quorum of stores may
//! be confirmed before the heal; no epoch may have two masters (from the
//! nodes' logs and from polling their status); a master cut off from every
//! peer must close its clients (320) within `check_quorum_ms` plus slack.

use super::client::Msg;
use super::nemesis::{Kind, Window};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Counts over a set of messages.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    /// Faults of this kind.
    pub runs: usize,
    /// Messages published.
    pub published: u64,
    /// Messages confirmed.
    pub confirmed: u64,
    /// Confirmed, never consumed.
    pub lost: u64,
    /// Extra deliveries of a message consumed more than once.
    pub duplicated: u64,
    /// Unconfirmed but consumed (allowed).
    pub recovered: u64,
    /// Confirmed through a node that could not reach a store quorum.
    pub minority_confirms: u64,
    /// The longest time without any confirm, in ms.
    pub max_gap_ms: u64,
    /// The slowest close of a cut-off master's clients, in ms.
    pub max_close_ms: Option<u64>,
    /// Elections the faults caused: the epoch after recovery minus the
    /// epoch before.
    pub elections: u64,
}

/// The result of a run.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Per kind of fault, by the time a message was published.
    pub rows: BTreeMap<Kind, Counts>,
    /// Everything, the steady periods included.
    pub total: Counts,
    /// Ids consumed that nobody published.
    pub unexpected: u64,
    /// Seconds of load in which at least one confirm arrived.
    pub seconds_with_confirms: u64,
    /// Seconds of load.
    pub seconds: u64,
    /// Every invariant broken, in words; empty when the run passed.
    pub violations: Vec<String>,
}

/// What the checker reads.
pub struct Input<'a> {
    /// Every message published.
    pub msgs: &'a HashMap<u64, Msg>,
    /// Every id the drain consumed, with repeats.
    pub consumed: &'a [u64],
    /// The faults, in order.
    pub windows: &'a [Window],
    /// Masters per epoch, as the status polls saw them.
    pub polled_masters: &'a BTreeMap<u64, BTreeSet<usize>>,
    /// Masters per epoch, as the nodes logged them.
    pub logged_masters: &'a BTreeMap<u64, BTreeSet<usize>>,
    /// When the load started and stopped.
    pub load: (Instant, Instant),
    /// check_quorum_ms plus slack.
    pub close_bound: Duration,
}

/// Masters per epoch from the nodes' logs: each "serving clients as master"
/// line names its epoch.
pub fn masters_from_logs(logs: &[String]) -> BTreeMap<u64, BTreeSet<usize>> {
    let mut out: BTreeMap<u64, BTreeSet<usize>> = BTreeMap::new();
    for (node, log) in logs.iter().enumerate() {
        for line in log
            .lines()
            .filter(|l| l.contains("serving clients as master"))
        {
            let epoch = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("epoch="))
                .and_then(|e| e.parse::<u64>().ok());
            if let Some(e) = epoch {
                out.entry(e).or_default().insert(node);
            }
        }
    }
    out
}

/// The window a message published at `t` belongs to: the last fault that
/// began at or before `t`, if one did.
fn window_of(windows: &[Window], t: Instant) -> Option<usize> {
    windows.iter().rposition(|w| w.start <= t)
}

/// The longest gap between confirms (`times` sorted) within `from..to`,
/// counting from the last confirm before `from`.
fn max_gap(times: &[Instant], from: Instant, to: Instant) -> Duration {
    let first = times.partition_point(|t| *t < from);
    let mut prev = if first > 0 { times[first - 1] } else { from };
    let mut gap = Duration::ZERO;
    for t in &times[first..] {
        if *t > to {
            break;
        }
        gap = gap.max(t.duration_since(prev));
        prev = *t;
    }
    gap.max(to.saturating_duration_since(prev))
}

/// Check a run.
pub fn check(input: &Input) -> Verdict {
    let mut v = Verdict::default();
    let mut seen: HashMap<u64, u64> = HashMap::new();
    for id in input.consumed {
        *seen.entry(*id).or_default() += 1;
    }
    v.unexpected = seen
        .keys()
        .filter(|id| !input.msgs.contains_key(id))
        .count() as u64;
    let mut rows: Vec<Counts> = vec![Counts::default(); input.windows.len()];
    let mut examples: Vec<Vec<String>> = vec![Vec::new(); input.windows.len()];
    let mut confirm_times = Vec::new();
    let mut lost_ids = Vec::new();
    for (id, m) in input.msgs {
        let w = window_of(input.windows, m.published);
        let mut c = Counts {
            published: 1,
            ..Default::default()
        };
        let n = seen.get(id).copied().unwrap_or(0);
        c.duplicated = n.saturating_sub(1);
        if let Some(t) = m.confirmed {
            confirm_times.push(t);
            c.confirmed = 1;
            if n == 0 {
                c.lost = 1;
                lost_ids.push(*id);
            }
            if let Some(w) = w {
                let win = &input.windows[w];
                if win.minority.contains(&m.node) && m.published > win.start && t < win.heal {
                    c.minority_confirms = 1;
                    examples[w].push(format!(
                        "id {id:#x} via node {}: published +{} ms, confirmed +{} ms, heal +{} ms",
                        m.node + 1,
                        m.published.duration_since(win.start).as_millis(),
                        t.duration_since(win.start).as_millis(),
                        win.heal.duration_since(win.start).as_millis()
                    ));
                }
            }
        } else if n > 0 {
            c.recovered = 1;
        }
        add(&mut v.total, &c);
        if let Some(w) = w {
            add(&mut rows[w], &c);
        }
    }
    confirm_times.sort();
    let (t0, t1) = input.load;
    v.seconds = t1.duration_since(t0).as_secs().max(1);
    v.seconds_with_confirms = confirm_times
        .iter()
        .map(|t| t.duration_since(t0).as_secs())
        .collect::<BTreeSet<u64>>()
        .len() as u64;
    v.total.max_gap_ms = max_gap(&confirm_times, t0, t1).as_millis() as u64;
    for (w, win) in input.windows.iter().enumerate() {
        let mut c = rows[w].clone();
        c.runs = 1;
        c.max_gap_ms = max_gap(&confirm_times, win.start, win.end).as_millis() as u64;
        c.max_close_ms = win.closed.map(|(ms, _)| ms);
        c.elections = win
            .epoch_after
            .unwrap_or(win.master.1)
            .saturating_sub(win.master.1);
        examples[w].sort();
        examples[w].truncate(5);
        check_window(win, &c, &examples[w], input.close_bound, &mut v.violations);
        let row = v.rows.entry(win.kind).or_default();
        add(row, &c);
        row.runs += 1;
        row.max_gap_ms = row.max_gap_ms.max(c.max_gap_ms);
        row.max_close_ms = row.max_close_ms.max(c.max_close_ms);
        row.elections += c.elections;
    }
    if v.total.lost > 0 {
        lost_ids.sort_unstable();
        v.violations.push(format!(
            "{} confirmed messages lost (first ids: {:?})",
            v.total.lost,
            &lost_ids[..lost_ids.len().min(10)]
        ));
    }
    if v.unexpected > 0 {
        v.violations
            .push(format!("{} unexpected messages consumed", v.unexpected));
    }
    for (what, masters) in [
        ("logs", input.logged_masters),
        ("status polls", input.polled_masters),
    ] {
        for (epoch, nodes) in masters {
            if nodes.len() > 1 {
                v.violations.push(format!(
                    "epoch {epoch} had {} masters ({what}): nodes {:?}",
                    nodes.len(),
                    nodes.iter().map(|n| n + 1).collect::<Vec<_>>()
                ));
            }
        }
    }
    v
}

/// The per-fault invariants.
fn check_window(
    win: &Window,
    c: &Counts,
    examples: &[String],
    bound: Duration,
    out: &mut Vec<String>,
) {
    let what = format!("{} ({})", win.kind.name(), win.note);
    if c.minority_confirms > 0 {
        out.push(format!(
            "{what}: {} messages confirmed through a node that could not reach a store quorum \
             (master before: node {} epoch {}; e.g. {})",
            c.minority_confirms,
            win.master.0 + 1,
            win.master.1,
            examples.join("; ")
        ));
    }
    if win.close_expected {
        match win.closed {
            None => out.push(format!(
                "{what}: the cut-off master did not close its clients within {} ms",
                win.heal.duration_since(win.start).as_millis()
            )),
            Some((ms, code)) => {
                if ms > bound.as_millis() as u64 {
                    out.push(format!(
                        "{what}: the cut-off master closed its clients after {ms} ms, over {} ms",
                        bound.as_millis()
                    ));
                }
                if code != Some(320) {
                    out.push(format!(
                        "{what}: clients closed with {code:?}, not 320 (CONNECTION_FORCED)"
                    ));
                }
            }
        }
    }
    if !win.recovered {
        out.push(format!(
            "{what}: no confirms after the heal within the bound"
        ));
    }
}

fn add(a: &mut Counts, b: &Counts) {
    a.published += b.published;
    a.confirmed += b.confirmed;
    a.lost += b.lost;
    a.duplicated += b.duplicated;
    a.recovered += b.recovered;
    a.minority_confirms += b.minority_confirms;
}

impl Verdict {
    /// The result table (Markdown) and the invariants, as printed and as
    /// docs/reliability.md keeps them.
    pub fn table(&self) -> String {
        let mut s = String::new();
        s.push_str(
            "| nemesis | runs | elections | published | confirmed | lost | duplicated | recovered | \
             minority confirms | longest gap without confirms (s) | slowest 320 close (ms) |\n",
        );
        s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        let row = |s: &mut String, name: &str, c: &Counts| {
            let close = c
                .max_close_ms
                .map_or_else(|| "-".to_string(), |ms| ms.to_string());
            let _ = writeln!(
                s,
                "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {close} |",
                c.runs,
                c.elections,
                c.published,
                c.confirmed,
                c.lost,
                c.duplicated,
                c.recovered,
                c.minority_confirms,
                c.max_gap_ms as f64 / 1000.0
            );
        };
        for (kind, c) in &self.rows {
            row(&mut s, kind.name(), c);
        }
        let mut total = self.total.clone();
        total.runs = self.rows.values().map(|c| c.runs).sum();
        total.max_close_ms = self.rows.values().filter_map(|c| c.max_close_ms).max();
        total.elections = self.rows.values().map(|c| c.elections).sum();
        row(&mut s, "**all** (steady periods too)", &total);
        let _ = writeln!(
            s,
            "\nunexpected: {}; confirms flowed in {} of {} s ({:.0}%)",
            self.unexpected,
            self.seconds_with_confirms,
            self.seconds,
            100.0 * self.seconds_with_confirms as f64 / self.seconds as f64
        );
        s
    }
}
