//! One run: declare and purge the queue, start the consumers and producers,
//! wait until all are ready, give the start, sample the counters every second,
//! stop on completion, deadline, timeout or error, and gather the report.

use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use stablemq_protocol::methods::queue;
use stablemq_protocol::{AMQPClass, FieldTable};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::client::{AmqpUri, Conn};
use super::report::{self, Report};
use super::stats::{Clock, Counters, Latency, Sample, Snapshot, cpu_seconds, latency_histogram};
use super::{Phase, Plan, TaskCtx, TaskReport, consumer, producer, task_queues};

/// Declare the queues (durable if persistent) and purge them, through every URI
/// (idempotent on a cluster; needed when the URIs are separate brokers).
async fn setup_queue(plan: &Plan) -> Result<(), String> {
    let mut done: Vec<&AmqpUri> = Vec::new();
    for uri in &plan.uris {
        if !done.contains(&uri) {
            setup_queue_at(plan, uri).await?;
            done.push(uri);
        }
    }
    Ok(())
}

async fn setup_queue_at(plan: &Plan, uri: &AmqpUri) -> Result<(), String> {
    let mut conn = Conn::open(uri, "stablemq perf setup").await?;
    let mut arguments = FieldTable::default();
    for (k, v) in &plan.args.queue_args {
        arguments.insert(k.as_str().into(), v.to_amqp());
    }
    for q in &plan.queues {
        let declare = AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: q.as_str().into(),
            passive: false,
            durable: plan.args.persistent,
            exclusive: false,
            auto_delete: false,
            nowait: false,
            arguments: arguments.clone(),
        }));
        conn.rpc(declare)
            .await
            .map_err(|e| format!("queue.declare {q}: {e}"))?;
        if plan.purge {
            let purge = AMQPClass::Queue(queue::AMQPMethod::Purge(queue::Purge {
                queue: q.as_str().into(),
                nowait: false,
            }));
            conn.rpc(purge)
                .await
                .map_err(|e| format!("queue.purge {q}: {e}"))?;
        }
    }
    conn.close(Duration::from_secs(2)).await;
    Ok(())
}

/// Run the plan and gather the report. Errors end the run early and are listed
/// in the report.
pub async fn run(plan: &Plan, live: bool) -> Report {
    let clock = Clock::new();
    let mut report = Report::new(plan);
    if let Err(e) = setup_queue(plan).await {
        report.errors.push(e);
        return report;
    }
    let counters = Arc::new(Counters::default());
    let (phase_tx, phase_rx) = watch::channel(Phase::Setup);
    let tasks = (plan.producers + plan.consumers) as usize;
    let (ready_tx, ready_rx) = mpsc::channel(tasks);
    let ctx = TaskCtx {
        clock,
        counters: counters.clone(),
        phase: phase_rx,
        ready: ready_tx,
        duration_ns: plan.duration_ns,
    };
    let set = spawn_tasks(plan, ctx);
    let mut run = Run {
        set,
        ready_rx,
        phase_tx,
        counters,
        report,
        clock,
        plan,
        live,
    };
    run.wait_ready(tasks).await;
    if !run.report.errors.is_empty() {
        let _ = run.phase_tx.send(Phase::Stop { done: false });
        finish_tasks(&mut run.set, &mut run.report).await;
        return run.into_report();
    }
    run.measure().await;
    run.into_report()
}

/// Spawn the producers, then the consumers, each with its URI (round robin)
/// and its share of the queues. `ctx` drops once each task has its copy.
fn spawn_tasks(plan: &Plan, ctx: TaskCtx) -> JoinSet<Result<TaskReport, String>> {
    let tasks = (plan.producers + plan.consumers) as usize;
    let mut set = JoinSet::new();
    for k in 0..tasks {
        let uri = plan.uris[k % plan.uris.len()].clone();
        let ctx = ctx.clone();
        let producers = plan.producers as usize;
        let queues_of = |i: usize, of: u32| -> Vec<String> {
            task_queues(i, of as usize, plan.queues.len())
                .into_iter()
                .map(|q| plan.queues[q].clone())
                .collect()
        };
        if k < producers {
            let name = format!("perf producer {k}");
            let queues = queues_of(k, plan.producers);
            set.spawn(producer::run(uri, name, plan.producer.clone(), queues, ctx));
        } else {
            let name = format!("perf consumer {}", k - producers);
            let queues = queues_of(k - producers, plan.consumers);
            set.spawn(consumer::run(uri, name, plan.consumer.clone(), queues, ctx));
        }
    }
    drop(ctx);
    set
}

/// A run once its tasks are spawned.
///
/// The fields are in the order they drop in (the tasks before the channels
/// to them), as the locals they were.
struct Run<'a> {
    /// The producer and consumer tasks.
    set: JoinSet<Result<TaskReport, String>>,
    /// Each task says here that it is connected and subscribed.
    ready_rx: mpsc::Receiver<()>,
    /// Tells the tasks to start and to stop.
    phase_tx: watch::Sender<Phase>,
    /// The tasks' shared totals.
    counters: Arc<Counters>,
    /// What the run found so far.
    report: Report,
    /// The run's clock.
    clock: Clock,
    /// What to run.
    plan: &'a Plan,
    /// Print each sample as it is taken.
    live: bool,
}

/// The state of the measuring loop, from the start on.
struct Measure {
    /// When the start was given.
    go_ns: u64,
    /// When the run times out.
    timeout_at: u64,
    /// The time and totals of the last sample.
    prev: (u64, Snapshot),
    /// Producers that ended having published all they had to.
    producers_done: u32,
    /// When the tasks were told to stop.
    stopped_at: Option<u64>,
    /// The task reports merged so far.
    ends: Ends,
    /// Whether the tasks were aborted for not stopping.
    aborted: bool,
    /// CPU time and clock when the measurement ended (before the connections close).
    cpu_end: Option<((f64, f64), u64)>,
}

impl Run<'_> {
    /// The report, once the run is over.
    fn into_report(self) -> Report {
        self.report
    }

    /// Wait until every task is connected and subscribed, or one failed, or
    /// a minute passed (both listed as errors).
    async fn wait_ready(&mut self, tasks: usize) {
        let mut ready = 0;
        let setup_deadline = tokio::time::sleep(Duration::from_secs(60));
        tokio::pin!(setup_deadline);
        while ready < tasks {
            tokio::select! {
                Some(()) = self.ready_rx.recv() => ready += 1,
                Some(r) = self.set.join_next() => {
                    self.report.errors.push(match r {
                        Ok(Err(e)) => e,
                        Ok(Ok(_)) => "a task ended before the start".into(),
                        Err(e) => format!("task failed: {e}"),
                    });
                    break;
                }
                () = &mut setup_deadline => {
                    self.report.errors.push("connecting the clients timed out".into());
                    break;
                }
            }
        }
    }

    /// Give the start, sample the counters until every task ended, and fill
    /// in the report.
    async fn measure(&mut self) {
        let go_ns = self.clock.now_ns();
        let cpu0 = cpu_seconds();
        let _ = self.phase_tx.send(Phase::Go(go_ns));
        let timeout_at = go_ns + self.plan.timeout.as_nanos() as u64;
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        let mut m = Measure {
            go_ns,
            timeout_at,
            prev: (go_ns, Snapshot::default()),
            producers_done: 0,
            stopped_at: None,
            ends: Ends::default(),
            aborted: false,
            cpu_end: None,
        };
        loop {
            tokio::select! {
                r = self.set.join_next() => match r {
                    None => break,
                    Some(r) => self.on_task_end(r, &mut m),
                },
                _ = tick.tick() => self.on_tick(&mut m),
            }
        }
        let clock = self.clock;
        let (cpu1, end_ns) = m.cpu_end.unwrap_or_else(|| (cpu_seconds(), clock.now_ns()));
        self.report.fill(
            &self.counters.snapshot(),
            &m.ends,
            go_ns,
            end_ns,
            cpu0,
            cpu1,
        );
    }

    /// A task ended: merge its report, or list its error (and stop the others).
    fn on_task_end(
        &mut self,
        r: Result<Result<TaskReport, String>, tokio::task::JoinError>,
        m: &mut Measure,
    ) {
        match r {
            Ok(Ok(t)) => {
                if t.publish_end_ns.is_some() {
                    m.producers_done += 1;
                }
                m.ends.add(t);
            }
            Ok(Err(e)) => {
                self.report.errors.push(e);
                let _ = self.phase_tx.send(Phase::Stop { done: false });
                m.stopped_at.get_or_insert(self.clock.now_ns());
            }
            Err(e) => self.report.errors.push(format!("task failed: {e}")),
        }
    }

    /// Every 10 ms: note the end of the measurement, take the second's
    /// sample, and stop the tasks on completion, timeout, or (abort) when
    /// they do not stop.
    fn on_tick(&mut self, m: &mut Measure) {
        let plan = self.plan;
        let go_ns = m.go_ns;
        let now = self.clock.now_ns();
        if m.cpu_end.is_none()
            && (m.stopped_at.is_some() || plan.duration_ns.is_some_and(|d| now - go_ns >= d))
        {
            m.cpu_end = Some((cpu_seconds(), now));
        }
        let measuring = m.stopped_at.is_none()
            && plan
                .duration_ns
                .is_none_or(|d| now - go_ns <= d + 500_000_000);
        if measuring && now - m.prev.0 >= 1_000_000_000 {
            let snap = self.counters.snapshot();
            let s = Sample::between((now - go_ns) as f64 / 1e9, &m.prev.1, &snap, now - m.prev.0);
            if self.live {
                println!("{}", report::sample_line(&s));
            }
            self.report.samples.push(s);
            m.prev = (now, snap);
        }
        let all_in = plan.consume_target.is_some_and(|target| {
            m.producers_done == plan.producers
                && (plan.consumers == 0 || self.counters.snapshot().consumed >= target)
        });
        if m.stopped_at.is_none() && all_in {
            let _ = self.phase_tx.send(Phase::Stop { done: true });
            m.stopped_at = Some(now);
        }
        if m.stopped_at.is_none() && now >= m.timeout_at {
            self.report.timed_out = true;
            let _ = self.phase_tx.send(Phase::Stop { done: false });
            m.stopped_at = Some(now);
        }
        if !m.aborted && m.stopped_at.is_some_and(|s| now - s > 10_000_000_000) {
            self.report
                .errors
                .push("tasks did not stop within 10 s; aborted".into());
            self.set.abort_all();
            m.aborted = true;
        }
    }
}

/// Collect what is left of the tasks after an early stop.
async fn finish_tasks(set: &mut JoinSet<Result<TaskReport, String>>, report: &mut Report) {
    let wait = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(r) = set.join_next().await {
            if let Ok(Err(e)) = r {
                report.errors.push(e);
            }
        }
    });
    if wait.await.is_err() {
        set.abort_all();
    }
}

/// The task reports merged: latest end per measure, and merged histograms.
#[derive(Debug)]
pub struct Ends {
    /// When the last publish went out.
    pub publish_ns: Option<u64>,
    /// When the last confirm arrived.
    pub confirm_ns: Option<u64>,
    /// When the last message arrived.
    pub consume_ns: Option<u64>,
    /// Every producer's confirm latencies.
    pub confirm: Histogram<u64>,
    /// Every consumer's end-to-end latencies.
    pub e2e: Histogram<u64>,
}

impl Default for Ends {
    fn default() -> Self {
        Ends {
            publish_ns: None,
            confirm_ns: None,
            consume_ns: None,
            confirm: latency_histogram(),
            e2e: latency_histogram(),
        }
    }
}

impl Ends {
    /// Merge in one task's report.
    pub fn add(&mut self, t: TaskReport) {
        let later = |a: Option<u64>, b: Option<u64>| a.max(b);
        self.publish_ns = later(self.publish_ns, t.publish_end_ns);
        self.confirm_ns = later(self.confirm_ns, t.confirm_end_ns);
        self.consume_ns = later(self.consume_ns, t.consume_end_ns);
        if let Some(h) = &t.confirm_hist {
            self.confirm.add(h).expect("same histogram bounds");
        }
        if let Some(h) = &t.e2e_hist {
            self.e2e.add(h).expect("same histogram bounds");
        }
    }

    /// Percentiles of the confirm latencies.
    pub fn confirm_latency(&self) -> Option<Latency> {
        Latency::of(&self.confirm)
    }

    /// Percentiles of the end-to-end latencies.
    pub fn e2e_latency(&self) -> Option<Latency> {
        Latency::of(&self.e2e)
    }
}
