//! The task that owns the master core and the log.

use crate::config::Config;
use crate::master::Master;
use crate::master::io::{ConnId, Input, Output, ToConn};
use crate::metrics as m;
use stablemq_cluster::LocalLog;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// Messages into the master task.
#[allow(clippy::large_enum_variant)] // moved once; boxing would allocate per message
pub enum MasterMsg {
    /// An input for the core.
    Input(Input),
    /// A new connection's outbox.
    Register(ConnId, mpsc::UnboundedSender<ToConn>),
    /// Stop and hand back the log for flushing.
    Shutdown(oneshot::Sender<LocalLog>),
}

/// Run until shutdown.
pub async fn run(
    mut master: Master,
    mut log: LocalLog,
    mut rx: mpsc::Receiver<MasterMsg>,
    mut stable_rx: watch::Receiver<u64>,
    config: Arc<Config>,
    data_dir: std::path::PathBuf,
) {
    let mut outboxes: HashMap<ConnId, mpsc::UnboundedSender<ToConn>> = HashMap::new();
    let mut batch = Vec::with_capacity(512);
    let mut gauges = tokio::time::interval(Duration::from_secs(1));
    // Expiry and timeouts are checked this often; a TTL fires at most this late.
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let node = format!("stablemq@{}", hostname());
    let mut alarm: Option<String> = None;
    let memory_limit = config
        .memory_high_watermark_bytes
        .unwrap_or_else(|| crate::metrics::total_memory_bytes().map_or(u64::MAX, |t| t / 10 * 4));
    loop {
        tokio::select! {
            n = rx.recv_many(&mut batch, 512) => {
                if n == 0 {
                    return;
                }
                master.set_now(now_ms());
                for msg in batch.drain(..) {
                    match msg {
                        MasterMsg::Input(i) => {
                            let gone = match &i {
                                Input::Disconnected { conn } => Some(*conn),
                                _ => None,
                            };
                            master.handle(i);
                            dispatch(&mut master, &mut log, &mut outboxes);
                            if let Some(c) = gone {
                                outboxes.remove(&c);
                            }
                        }
                        MasterMsg::Register(id, tx) => {
                            if alarm.is_some() {
                                let _ = tx.send(ToConn::Alarm(alarm.clone()));
                            }
                            outboxes.insert(id, tx);
                        }
                        MasterMsg::Shutdown(done) => {
                            let _ = done.send(log);
                            return;
                        }
                    }
                }
            }
            Ok(()) = stable_rx.changed() => {
                master.set_now(now_ms());
                let index = *stable_rx.borrow_and_update();
                master.handle(Input::Stable { index });
                dispatch(&mut master, &mut log, &mut outboxes);
            }
            _ = tick.tick() => {
                master.set_now(now_ms());
                master.handle(Input::Tick);
                dispatch(&mut master, &mut log, &mut outboxes);
            }
            _ = gauges.tick() => {
                publish_gauges(&master, &config, &node);
                let now = check_alarms(&config, &data_dir, memory_limit);
                if now != alarm {
                    match &now {
                        Some(r) => tracing::warn!("resource alarm: {r}; blocking publishers"),
                        None => tracing::info!("resource alarm cleared"),
                    }
                    alarm = now;
                    for tx in outboxes.values() {
                        let _ = tx.send(ToConn::Alarm(alarm.clone()));
                    }
                }
            }
        }
    }
}

/// Carry out the core's outputs.
fn dispatch(
    master: &mut Master,
    log: &mut LocalLog,
    outboxes: &mut HashMap<ConnId, mpsc::UnboundedSender<ToConn>>,
) {
    for o in master.take_outputs() {
        match o {
            Output::Append(payload) => {
                let pos = log.append(payload);
                debug_assert!(pos.index <= master.last_appended());
            }
            Output::ToConn(conn, msg) => {
                let closing = matches!(msg, ToConn::CloseConnection(_));
                if let Some(tx) = outboxes.get(&conn) {
                    let _ = tx.send(msg);
                }
                if closing {
                    outboxes.remove(&conn);
                }
            }
        }
    }
    debug_assert_eq!(
        log.last_appended(),
        master.last_appended(),
        "master and log disagree on the last index"
    );
}

fn publish_gauges(master: &Master, config: &Config, node: &str) {
    metrics::gauge!(m::IDENTITY, "rabbitmq_node" => node.to_string(), "rabbitmq_cluster" => config.cluster_name.clone())
        .set(1.0);
    metrics::gauge!(m::RSS).set(crate::metrics::resident_memory_bytes() as f64);
    metrics::gauge!(m::CHANNELS).set(master.channel_count() as f64);
    let mut queues = 0usize;
    for (vname, v) in &master.broker.vhosts {
        for (qname, q) in &v.queues {
            queues += 1;
            let labels = [("vhost", vname.clone()), ("queue", qname.clone())];
            metrics::gauge!(m::QUEUE_READY, &labels).set(q.ready.len() as f64);
            metrics::gauge!(m::QUEUE_UNACKED, &labels).set(q.unacked.len() as f64);
            metrics::gauge!(m::QUEUE_MESSAGES, &labels).set(q.len() as f64);
            metrics::gauge!(m::QUEUE_CONSUMERS, &labels)
                .set(master.consumer_count(vname, qname) as f64);
        }
    }
    metrics::gauge!(m::QUEUES).set(queues as f64);
}

/// The active resource alarm, if any, with RabbitMQ's reason text.
fn check_alarms(config: &Config, data_dir: &std::path::Path, memory_limit: u64) -> Option<String> {
    let rss = crate::metrics::resident_memory_bytes();
    let free = crate::metrics::disk_free_bytes(data_dir);
    metrics::gauge!(m::MEMORY_LIMIT).set(memory_limit as f64);
    if let Some(f) = free {
        metrics::gauge!(m::DISK_FREE).set(f as f64);
    }
    let memory = rss > memory_limit;
    let disk = free.is_some_and(|f| f < config.disk_free_limit_bytes);
    metrics::gauge!(m::ALARMS_MEMORY).set(if memory { 1.0 } else { 0.0 });
    metrics::gauge!(m::ALARMS_DISK).set(if disk { 1.0 } else { 0.0 });
    if memory {
        Some("low on memory".into())
    } else if disk {
        Some("low on disk".into())
    } else {
        None
    }
}

/// Wall-clock time in ms since the Unix epoch: the master's only clock.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
