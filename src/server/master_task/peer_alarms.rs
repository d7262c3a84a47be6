//! The other nodes' disk alarms, as RabbitMQ's disk alarm is cluster-wide:
//! any node low on disk blocks the publishers of every node.
//!
//! Every broker node checks its own disk (`alarms.rs`) and reports the
//! result in its `/api/stablemq/node-status` (`disk_free_alarm`; a
//! store-only node from its own reading). A cluster node reads its peers'
//! reports once a second, proving the cluster cookie instead of a user
//! (`management/node_proof.rs`), and the master blocks its publishers while
//! any peer that answers is in alarm. A peer that does not answer (down, cut
//! off) does not count: as in RabbitMQ, a node that is gone takes its alarm
//! with it. Without a cluster cookie there is no proof and only the node's
//! own disk counts.

use crate::management::node_proof;
use stablemq_cluster::transport::auth::Cookie;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How often the peers are asked.
const EVERY: Duration = Duration::from_secs(1);
/// How long one answer may take: a peer slower than this counts as gone.
const ANSWER_WITHIN: Duration = Duration::from_millis(800);

/// The peers' disk alarms as last read: a bit per peer (by its position in
/// the list), so a change is seen without a lock.
pub(super) struct PeerAlarms {
    low: Arc<AtomicU64>,
    /// The peers' node ids, in the bits' order, for the log.
    ids: Vec<u64>,
    poller: Option<tokio::task::JoinHandle<()>>,
}

impl PeerAlarms {
    /// Nobody to watch (a single node, or no cookie to prove).
    pub(super) fn none() -> PeerAlarms {
        PeerAlarms {
            low: Arc::new(AtomicU64::new(0)),
            ids: Vec::new(),
            poller: None,
        }
    }

    /// Watch `peers` (node id, management address), proving `cookie`. At
    /// most 64 peers are watched; a cluster has a handful.
    pub(super) fn watch(peers: Vec<(u64, SocketAddr)>, cookie: Cookie) -> PeerAlarms {
        let mut me = PeerAlarms::none();
        let peers: Vec<_> = peers.into_iter().take(64).collect();
        me.ids = peers.iter().map(|(id, _)| *id).collect();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return me;
        };
        let low = me.low.clone();
        me.poller = Some(rt.spawn(async move {
            let mut tick = tokio::time::interval(EVERY);
            loop {
                tick.tick().await;
                let (peers, cookie) = (peers.clone(), cookie.clone());
                let bits = tokio::task::spawn_blocking(move || read_all(&peers, &cookie))
                    .await
                    .unwrap_or(0);
                low.store(bits, Ordering::Relaxed);
            }
        }));
        me
    }

    /// The ids of the peers in disk alarm as last read.
    pub(super) fn low_on_disk(&self) -> Vec<u64> {
        let bits = self.low.load(Ordering::Relaxed);
        self.ids
            .iter()
            .enumerate()
            .filter(|(i, _)| bits & (1 << i) != 0)
            .map(|(_, id)| *id)
            .collect()
    }
}

impl Drop for PeerAlarms {
    fn drop(&mut self) {
        if let Some(p) = self.poller.take() {
            p.abort();
        }
    }
}

/// Ask every peer; bit i set when peer i answered and is low on disk.
fn read_all(peers: &[(u64, SocketAddr)], cookie: &Cookie) -> u64 {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(ANSWER_WITHIN))
        .build()
        .into();
    let mut bits = 0u64;
    for (i, (_, addr)) in peers.iter().enumerate() {
        let proof = node_proof::make(cookie, super::now_ms());
        let answer = agent
            .get(format!("http://{addr}/api/stablemq/node-status"))
            .header(node_proof::HEADER, &proof)
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_json::<serde_json::Value>().ok());
        let low = answer
            .as_ref()
            .and_then(|v| v["disk_free_alarm"].as_bool())
            .unwrap_or(false);
        if low {
            bits |= 1 << i;
        }
    }
    bits
}
