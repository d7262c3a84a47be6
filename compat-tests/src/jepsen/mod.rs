//! Jepsen-style partition runs of a real 3-node cluster in network namespaces.
//!
//! [`run`] builds the namespaces ([`crate::netns`]), starts the three
//! example nodes in them ([`nodes`]), starts confirming publishers in the
//! root namespace ([`client`]), applies faults ([`nemesis`]) one after
//! another (every kind once, or seeded random ones until a deadline), heals,
//! drains the queue and checks the history ([`checker`]). `scripts/jepsen.sh`
//! runs it (the binary `compat-tests/src/bin/jepsen.rs`); the test command runs
//! the short form (`scripts/partitions-check.sh`).

pub mod checker;
pub mod client;
pub mod nemesis;
pub mod nodes;

use crate::netns::Net;
use client::{Book, History, Publisher};
use nemesis::{Ctx, Kind, Window};
use nodes::Nodes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The queue every publisher writes to.
const QUEUE: &str = "jepsen.total";
/// Bound on waiting for a master, or for confirms after a heal.
const RECOVER_WAIT: Duration = Duration::from_secs(30);

/// How to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Random faults for this long; None: every kind once, briefly.
    pub duration: Option<Duration>,
    /// Seed of every random choice.
    pub seed: u64,
    /// Publishers (each starts on node `p % 3`).
    pub publishers: u64,
    /// Messages a second per publisher, at most.
    pub rate: u32,
    /// The nodes' `check_quorum_ms`.
    pub check_quorum_ms: u64,
    /// Slack over `check_quorum_ms` for a cut-off master to close clients.
    pub close_slack_ms: u64,
}

/// Masters per epoch, as polled.
type Masters = Arc<Mutex<BTreeMap<u64, BTreeSet<usize>>>>;

/// Polls every node's status every 100 ms, recording who claims to be
/// master of which epoch.
struct Monitor {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    masters: Masters,
}

impl Monitor {
    fn start(nodes: &Nodes) -> Monitor {
        let stop = Arc::new(AtomicBool::new(false));
        let masters: Masters = Arc::default();
        let threads = (0..nodes.len())
            .map(|i| {
                let read = nodes.status_reader(i);
                let (stop, masters) = (stop.clone(), masters.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if let Some(s) = read(Duration::from_millis(300))
                            && s.role == "master"
                        {
                            masters
                                .lock()
                                .expect("masters")
                                .entry(s.epoch)
                                .or_default()
                                .insert(i);
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                })
            })
            .collect();
        Monitor {
            stop,
            threads,
            masters,
        }
    }

    fn finish(self) -> BTreeMap<u64, BTreeSet<usize>> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        let m = self.masters.lock().expect("masters");
        m.clone()
    }
}

/// Wait for a master; None after [`RECOVER_WAIT`].
fn wait_master(nodes: &Nodes) -> Option<(usize, u64)> {
    let deadline = Instant::now() + RECOVER_WAIT;
    while Instant::now() < deadline {
        if let Some(m) = nodes.master() {
            return Some(m);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Wait until `n` more confirms arrived; false after [`RECOVER_WAIT`].
fn wait_acks(history: &History, n: u64) -> bool {
    let target = history.acks.load(Ordering::Relaxed) + n;
    let deadline = Instant::now() + RECOVER_WAIT;
    while history.acks.load(Ordering::Relaxed) < target {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// The faults to apply: every kind once (short), or seeded random kinds.
struct Schedule {
    rng: StdRng,
    deadline: Option<Instant>,
    next: usize,
}

impl Schedule {
    /// The next fault and how long to hold it, or None when done.
    fn next(&mut self) -> Option<(Kind, Duration)> {
        match self.deadline {
            None => {
                let kind = *Kind::ALL.get(self.next)?;
                self.next += 1;
                let hold = match kind {
                    Kind::KillMaster => Duration::from_millis(2000),
                    _ => Duration::from_millis(3000),
                };
                Some((kind, hold))
            }
            Some(d) if Instant::now() >= d => None,
            Some(_) => {
                let kind = Kind::ALL[self.rng.random_range(0..Kind::ALL.len())];
                Some((
                    kind,
                    Duration::from_millis(self.rng.random_range(500..8000)),
                ))
            }
        }
    }

    /// How long to let the cluster run unharmed after a recovery.
    fn quiet(&mut self) -> Duration {
        match self.deadline {
            None => Duration::from_millis(2000),
            Some(_) => Duration::from_millis(self.rng.random_range(1000..6000)),
        }
    }
}

fn elapsed(t0: Instant, t: Instant) -> f64 {
    t.duration_since(t0).as_secs_f64()
}

/// Run the faults on a fresh cluster and check the history; prints progress
/// and the result table, returns the verdict.
pub fn run(opts: &Options) -> checker::Verdict {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let net = Net::create(3);
    // JEPSEN_PLANT_CHECK_QUORUM_MS gives the nodes another check_quorum_ms
    // than the one the checker holds them to: a planted bug (a master that
    // does not step down in time) to show the close check fails.
    let node_check_quorum_ms = std::env::var("JEPSEN_PLANT_CHECK_QUORUM_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(opts.check_quorum_ms);
    let mut nodes = Nodes::start(&net, &format!("check_quorum_ms = {node_check_quorum_ms}"));
    let t0 = Instant::now();
    println!(
        "jepsen: namespaces {}n1..3 on 10.x/24 via bridge {}br ({}); seed {}",
        net.tag(),
        net.tag(),
        net.host_ip(),
        opts.seed
    );
    let first = wait_master(&nodes).expect("a master within 30 s");
    println!(
        "[{:5.1} s] node {} is master (epoch {})",
        elapsed(t0, Instant::now()),
        first.0 + 1,
        first.1
    );
    let monitor = Monitor::start(&nodes);
    let history: History = Arc::new(Book::default());
    let publishers: Vec<Publisher> = {
        let _rt = rt.enter();
        (0..opts.publishers)
            .map(|p| Publisher::start(p, nodes.uris(), QUEUE, opts.rate, history.clone()))
            .collect()
    };
    let load_start = Instant::now();
    assert!(
        wait_acks(&history, 100),
        "no confirms within 30 s of the start"
    );
    let close_bound = Duration::from_millis(opts.check_quorum_ms + opts.close_slack_ms);
    let mut schedule = Schedule {
        rng: StdRng::seed_from_u64(opts.seed),
        deadline: opts.duration.map(|d| Instant::now() + d),
        next: 0,
    };
    let mut nemesis_rng = StdRng::seed_from_u64(opts.seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut windows: Vec<Window> = Vec::new();
    // Rounds published through cut-off nodes take ids above the publishers'.
    let mut next_cut_id = 0xff << 40;
    while let Some((kind, hold)) = schedule.next() {
        let Some(master) = wait_master(&nodes) else {
            println!("no master within 30 s; stopping the faults");
            break;
        };
        let mut ctx = Ctx {
            net: &net,
            nodes: &mut nodes,
            rt: &rt,
            rng: &mut nemesis_rng,
            close_bound,
            queue: QUEUE,
            history: &history,
            next_cut_id,
        };
        let mut w = ctx.apply(kind, master, hold);
        next_cut_id = ctx.next_cut_id;
        w.recovered = wait_master(&nodes).is_some() && wait_acks(&history, 40);
        w.end = Instant::now();
        w.epoch_after = nodes.master().map(|m| m.1);
        let close = match w.closed {
            Some((ms, code)) => format!("; clients closed after {ms} ms ({code:?})"),
            None => String::new(),
        };
        println!(
            "[{:5.1} s] {}: {}{close}; healed after {:.1} s; confirms again {:.1} s later; \
             epoch {} -> {}{}",
            elapsed(t0, w.start),
            kind.name(),
            w.note,
            w.heal.duration_since(w.start).as_secs_f64(),
            w.end.duration_since(w.heal).as_secs_f64(),
            w.master.1,
            w.epoch_after
                .map_or_else(|| "?".to_string(), |e| e.to_string()),
            if w.recovered { "" } else { " (NOT RECOVERED)" }
        );
        windows.push(w);
        std::thread::sleep(schedule.quiet());
    }
    net.heal();
    rt.block_on(async {
        for p in publishers {
            p.stop().await;
        }
    });
    let load_end = Instant::now();
    let polled = monitor.finish();
    let consumed = drain_any(&rt, &nodes);
    let logs: Vec<String> = (0..nodes.len()).map(|i| nodes.log(i)).collect();
    let logged = checker::masters_from_logs(&logs);
    let msgs = history.msgs.lock().expect("history");
    let verdict = checker::check(&checker::Input {
        msgs: &msgs,
        consumed: &consumed,
        windows: &windows,
        polled_masters: &polled,
        logged_masters: &logged,
        load: (load_start, load_end),
        close_bound,
    });
    println!(
        "\n{} s, seed {}, {} publishers at <= {} msg/s each, check_quorum_ms {} (+{} ms slack), \
         {} epochs\n",
        t0.elapsed().as_secs(),
        opts.seed,
        opts.publishers,
        opts.rate,
        opts.check_quorum_ms,
        opts.close_slack_ms,
        logged.len()
    );
    println!("{}", verdict.table());
    if !verdict.violations.is_empty() {
        let dir = nodes.dir().display().to_string();
        println!("INVARIANTS BROKEN:");
        for v in &verdict.violations {
            println!("  - {v}");
        }
        let keep = std::env::temp_dir().join(format!("jepsen-failed-{}", net.tag()));
        if copy_logs(&nodes, &keep) {
            println!("node logs kept in {} (run dir was {dir})", keep.display());
        }
    }
    verdict
}

/// Copy the node logs to `to`, for a failed run.
fn copy_logs(nodes: &Nodes, to: &std::path::Path) -> bool {
    if std::fs::create_dir_all(to).is_err() {
        return false;
    }
    (0..nodes.len())
        .all(|i| std::fs::write(to.join(format!("node{}.log", i + 1)), nodes.log(i)).is_ok())
}

/// Drain the queue through the master (or any node), retrying on failure.
fn drain_any(rt: &tokio::runtime::Runtime, nodes: &Nodes) -> Vec<u64> {
    let mut ids = Vec::new();
    for attempt in 0..5 {
        let at = wait_master(nodes).map_or(attempt % nodes.len(), |m| m.0);
        match rt.block_on(client::drain(
            &nodes.uri(at),
            QUEUE,
            Duration::from_secs(120),
            &mut ids,
        )) {
            Ok(()) => return ids,
            Err(e) => println!("drain through node {}: {e}; retrying", at + 1),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    panic!("could not drain {QUEUE} in 5 attempts");
}
