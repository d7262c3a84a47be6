//! The simulated network: per-message drop, delay (which also reorders),
//! duplication, and partitions as a set of blocked directed links, so a
//! partition can be symmetric (both directions blocked) or asymmetric (one).

use std::collections::BTreeMap;

use crate::replication::{NodeId, SplitMix64};

/// How unreliable the network is; drawn per seed.
#[derive(Debug, Clone, PartialEq)]
pub struct NetParams {
    /// Chance that a message is lost, per thousand.
    pub drop_per_mille: u64,
    /// Chance that a message is delivered twice, per thousand.
    pub dup_per_mille: u64,
    /// Shortest delivery delay.
    pub delay_min_ms: u64,
    /// Longest delivery delay; the spread is what reorders messages.
    pub delay_max_ms: u64,
}

/// The network between nodes.
#[derive(Debug, Clone)]
pub struct Network {
    /// Current unreliability.
    pub params: NetParams,
    /// Blocked directed links, counted so overlapping partitions heal
    /// independently.
    blocked: BTreeMap<(NodeId, NodeId), u32>,
}

impl Network {
    /// A network with nothing blocked.
    pub fn new(params: NetParams) -> Self {
        Network {
            params,
            blocked: BTreeMap::new(),
        }
    }

    /// The delays after which copies of a message from `from` to `to` arrive:
    /// none if it is lost or the link is blocked, two if duplicated. A node
    /// talking to itself (co-located broker and store) is never cut off.
    pub fn deliveries(&self, rng: &mut SplitMix64, from: NodeId, to: NodeId) -> Vec<u64> {
        let p = &self.params;
        if from == to {
            return vec![rng.between(0, 1)];
        }
        if self.blocked.contains_key(&(from, to)) || rng.chance(p.drop_per_mille) {
            return Vec::new();
        }
        let mut delays = vec![rng.between(p.delay_min_ms, p.delay_max_ms)];
        if rng.chance(p.dup_per_mille) {
            delays.push(rng.between(p.delay_min_ms, p.delay_max_ms * 2));
        }
        delays
    }

    /// Block each directed link in `links`.
    pub fn block(&mut self, links: &[(NodeId, NodeId)]) {
        for &link in links {
            *self.blocked.entry(link).or_insert(0) += 1;
        }
    }

    /// Undo one `block` of each link in `links`.
    pub fn unblock(&mut self, links: &[(NodeId, NodeId)]) {
        for link in links {
            if let Some(count) = self.blocked.get_mut(link) {
                *count -= 1;
                if *count == 0 {
                    self.blocked.remove(link);
                }
            }
        }
    }

    /// Remove every partition.
    pub fn heal_all(&mut self) {
        self.blocked.clear();
    }
}

/// The directed links from every node of `a` to every node of `b`, and back if
/// `symmetric`.
pub fn cut(a: &[NodeId], b: &[NodeId], symmetric: bool) -> Vec<(NodeId, NodeId)> {
    let mut links = Vec::new();
    for &x in a {
        for &y in b {
            links.push((x, y));
            if symmetric {
                links.push((y, x));
            }
        }
    }
    links
}
