//! What a scrape reports, read at scrape time: the broker state copied out
//! of the master task, and the node's own facts (memory, disk, fds, alarms).

use super::{EndpointState, QUERY_TIMEOUT};
use crate::master::inout::ClientProtocol;
use crate::metrics as m;
use crate::server::MasterMsg;
use std::sync::atomic::Ordering;
use tokio::sync::{mpsc, oneshot};

/// The broker state a scrape reports, copied out of the master task.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Snapshot {
    /// The stored cluster name (`rabbitmq_cluster`), if one was set.
    pub cluster_name: Option<String>,
    /// Queues, while this node is the master.
    pub queues: Vec<QueueSample>,
    /// Open client connections (never the management API's internal
    /// sessions).
    pub connections: Vec<ConnectionSample>,
    /// Open channels with their consumer counts.
    pub channels: Vec<ChannelSample>,
    /// Publishers and consumers of each protocol, both always listed.
    pub protocols: Vec<ProtocolSample>,
}

/// The clients of one protocol (`rabbitmq_global_publishers` and
/// `rabbitmq_global_consumers`, labelled `protocol`).
#[derive(Debug, Clone, PartialEq)]
pub struct ProtocolSample {
    /// The protocol.
    pub protocol: ClientProtocol,
    /// Open channels that have published. A stream connection publishes on
    /// one channel whatever its number of declared publishers, so for the
    /// stream protocol this counts connections with publishers.
    pub publishers: usize,
    /// Consumers (a stream connection's subscriptions).
    pub consumers: usize,
}

/// One queue.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSample {
    /// Its vhost.
    pub vhost: String,
    /// Its name.
    pub name: String,
    /// Ready messages.
    pub ready: usize,
    /// Delivered, not yet acked.
    pub unacked: usize,
    /// Consumers.
    pub consumers: usize,
    /// A stream's highest consumer offset lag (entries from a consumer's
    /// next offset to the stream's end; 0 without consumers); None for a
    /// queue that is not a stream.
    pub stream_max_lag: Option<u64>,
}

/// One client connection.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionSample {
    /// `<connection id.0>`: unique on this node, and in the same form as the
    /// channels' ids (RabbitMQ 3.10 labels connection series `channel` too,
    /// with the connection process's pid).
    pub id: String,
    /// Channels open on it.
    pub channels: usize,
    /// Its socket traffic.
    pub traffic: m::conn_stats::Traffic,
}

/// One channel.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelSample {
    /// `<connection id.channel number>`, unique on this node.
    pub id: String,
    /// Consumers on it.
    pub consumers: usize,
}

impl Snapshot {
    /// Copy what a scrape needs from the master task's state.
    pub fn of(view: &crate::management::CoreView<'_>) -> Snapshot {
        let cluster_name =
            crate::broker::parameters::stored_cluster_name(&view.broker.global_parameters);
        let Some(master) = view.master else {
            return Snapshot {
                cluster_name,
                ..Snapshot::default()
            };
        };
        let mut queues = Vec::new();
        for (vname, v) in &view.broker.vhosts {
            for (qname, q) in &v.queues {
                // A stream's entries are all ready: acks remove none (as the
                // management API counts them).
                let (ready, stream_max_lag) = match &q.stream {
                    Some(s) => {
                        let end = s.next_offset();
                        let lag = master
                            .stream_consumer_offsets(vname, qname)
                            .map(|at| end.saturating_sub(at))
                            .max()
                            .unwrap_or(0);
                        // Stable entries only, as the management API counts.
                        let (ready, _) = s.stable_counts(Some(master.stable_index()));
                        (ready, Some(lag))
                    }
                    None => (q.ready.len(), None),
                };
                queues.push(QueueSample {
                    vhost: vname.clone(),
                    name: qname.clone(),
                    ready,
                    unacked: q.unacked.len(),
                    consumers: master.consumer_count(vname, qname),
                    stream_max_lag,
                });
            }
        }
        let mut channels = Vec::new();
        let mut connections = Vec::new();
        let mut protocols: Vec<ProtocolSample> = ClientProtocol::ALL
            .iter()
            .map(|&protocol| ProtocolSample {
                protocol,
                publishers: 0,
                consumers: 0,
            })
            .collect();
        // The management API's own sessions are no client's connections.
        let clients = master
            .sessions()
            .filter(|(conn, _)| !crate::management::internal::is_internal(*conn));
        for (conn, session) in clients {
            connections.push(ConnectionSample {
                id: format!("<{conn}.0>"),
                channels: session.channels.len(),
                traffic: m::conn_stats::traffic(conn),
            });
            let mut counts = protocols
                .iter_mut()
                .find(|p| p.protocol == session.info.protocol);
            for (ch, chan) in &session.channels {
                if let Some(c) = counts.as_deref_mut() {
                    c.publishers += usize::from(chan.publishing);
                    c.consumers += chan.consumers.len();
                }
                channels.push(ChannelSample {
                    id: format!("<{conn}.{ch}>"),
                    consumers: chan.consumers.len(),
                });
            }
        }
        Snapshot {
            cluster_name,
            queues,
            connections,
            channels,
            protocols,
        }
    }
}

/// Ask the master task for a snapshot. A closed queue (a store-only node,
/// or one stopping) has no broker state: an empty snapshot. A master too
/// busy to answer in time is an error.
pub(super) async fn take_snapshot(master: &mpsc::Sender<MasterMsg>) -> Result<Snapshot, ()> {
    let (tx, rx) = oneshot::channel();
    let q: crate::management::Query = Box::new(move |view| {
        let _ = tx.send(Snapshot::of(&view));
    });
    match tokio::time::timeout(QUERY_TIMEOUT, master.send(MasterMsg::Query(q))).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => return Ok(Snapshot::default()),
        Err(_) => return Err(()),
    }
    match tokio::time::timeout(QUERY_TIMEOUT, rx).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(_)) => Ok(Snapshot::default()),
        Err(_) => Err(()),
    }
}

/// Node facts, read at scrape time.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    /// `rabbitmq_node`.
    pub node: String,
    /// `rabbitmq_cluster`.
    pub cluster: String,
    /// Resident memory.
    pub rss: u64,
    /// Memory alarm threshold.
    pub memory_limit: u64,
    /// Free disk space, if known.
    pub disk_free: Option<u64>,
    /// Disk alarm threshold.
    pub disk_free_limit: u64,
    /// Open fds and sockets, if known.
    pub fds: Option<(u64, u64)>,
    /// Fd limit, if any.
    pub max_fds: Option<u64>,
    /// Seconds since start.
    pub uptime: f64,
    /// The alarms in effect: memory, disk.
    pub alarms: (bool, bool),
    /// Message size bucket counts (the last +Inf) and the sum.
    pub sizes: Vec<u64>,
}

impl NodeFacts {
    pub(super) fn read(state: &EndpointState, stored_cluster_name: Option<String>) -> NodeFacts {
        let flags = m::ALARM_FLAGS.load(Ordering::Relaxed);
        NodeFacts {
            node: state.node.clone(),
            cluster: stored_cluster_name.unwrap_or_else(|| state.cluster_name.clone()),
            rss: m::resident_memory_bytes(),
            memory_limit: m::MEMORY_LIMIT_BYTES.load(Ordering::Relaxed),
            disk_free: m::disk_free_bytes(&state.data_dir),
            disk_free_limit: state.disk_free_limit,
            fds: m::open_fds(),
            max_fds: m::max_fds(),
            uptime: m::uptime_seconds(),
            alarms: (flags & 1 != 0, flags & 2 != 0),
            sizes: m::SIZES.iter().map(|a| a.load(Ordering::Relaxed)).collect(),
        }
    }
}
