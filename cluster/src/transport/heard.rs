//! When each peer was last heard on an authenticated connection.
//!
//! A node's management port answering says nothing about replication: a node
//! kept out by a wrong cluster cookie (or a wrong TLS certificate) still
//! answers HTTP, while every node-to-node connection it opens or accepts is
//! refused. What the master hears on its authenticated connections is what
//! replication actually gets: acks from every store and slave, at least once
//! per heartbeat while the link works. Readers record the time of each read
//! (not of each frame: one clock read and one atomic store per syscall, off
//! the per-message path).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::replication::NodeId;

/// Shared record of when each peer was last heard; cheap to clone.
#[derive(Clone, Debug)]
pub struct Heard {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// What the stored times count from.
    start: Instant,
    /// Per peer: milliseconds since `start` at the last read, plus one; 0
    /// means never heard.
    last: HashMap<NodeId, AtomicU64>,
}

impl Heard {
    /// A record for `peers`, none heard yet.
    pub fn new(peers: impl IntoIterator<Item = NodeId>) -> Heard {
        Heard {
            inner: Arc::new(Inner {
                start: Instant::now(),
                last: peers.into_iter().map(|n| (n, AtomicU64::new(0))).collect(),
            }),
        }
    }

    /// `node` was heard now, on a connection that proved it is `node`.
    pub(crate) fn touch(&self, node: NodeId) {
        if let Some(last) = self.inner.last.get(&node) {
            let ms = u64::try_from(self.inner.start.elapsed().as_millis()).unwrap_or(u64::MAX);
            last.store(ms.saturating_add(1), Ordering::Relaxed);
        }
    }

    /// How long ago `node` was last heard; `None` if never (since this node
    /// started) or if it is not a peer.
    pub fn ago(&self, node: NodeId) -> Option<Duration> {
        let at = self.inner.last.get(&node)?.load(Ordering::Relaxed);
        let at = at.checked_sub(1)?;
        let now = u64::try_from(self.inner.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        Some(Duration::from_millis(now.saturating_sub(at)))
    }

    /// Every peer heard at least once, with how long ago, by id.
    pub fn all(&self) -> Vec<(NodeId, Duration)> {
        let mut out: Vec<_> = self
            .inner
            .last
            .keys()
            .filter_map(|&n| self.ago(n).map(|d| (n, d)))
            .collect();
        out.sort_by_key(|(n, _)| *n);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_peers_are_recorded_and_never_heard_is_none() {
        let heard = Heard::new([2, 3]);
        assert_eq!(heard.ago(2), None);
        heard.touch(2);
        heard.touch(9); // not a peer: ignored
        assert!(heard.ago(2).is_some_and(|d| d < Duration::from_secs(5)));
        assert_eq!(heard.ago(3), None);
        assert_eq!(heard.ago(9), None);
        assert_eq!(heard.all().len(), 1);
    }
}
