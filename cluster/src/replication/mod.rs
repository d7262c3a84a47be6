//! The sans-IO replication engine: stores, master, slaves and candidates as pure
//! state machines.
//!
//! Every role is driven the same way: the driver (the tokio runtime later, the
//! deterministic simulator now) calls `step(now, input)` and carries out the
//! returned commands — send this message, persist these disk operations, apply
//! these entries. The engine reads no clock (time is the `now` argument, in
//! milliseconds), spawns nothing, and takes its randomness from a seeded
//! [`SplitMix64`], so the same inputs always give the same commands. That is what
//! lets [`crate::sim`] replay a failing seed exactly, and lets unit tests compare
//! command lists.
//!
//! - [`StoreNode`]: an event store. It never touches its disk itself: it emits
//!   [`StoreCommand::Persist`] and only acknowledges what the driver has reported
//!   durable ([`StoreInput::Persisted`]), so whoever drives it decides when an
//!   fsync finishes or whether it is lost in a crash.
//! - [`BrokerNode`]: a broker's view of the cluster. It is a slave (applies stable
//!   entries, watches the master's heartbeat), a candidate (fences the stores,
//!   adopts the most up-to-date log, makes an epoch-start marker stable) or the
//!   master (appends, pipelines to every store and slave, advances the stable
//!   index).
//!
//! The protocol, and why each invariant holds, is described in
//! `docs/replication.md`.

mod broker;
mod log;
mod messages;
mod replicator;
mod rng;
mod snapshot;
mod store_node;

pub use broker::{AppendError, BrokerCommand, BrokerInput, BrokerNode, RoleKind};
pub use log::{EpochRuns, MemLog};
pub use messages::{Append, Endpoint, Message, RejectReason, Service, SnapshotChunk, WIRE_VERSION};
pub use rng::SplitMix64;
pub use store_node::{DiskOp, ReadRequest, SnapshotRead, StoreCommand, StoreInput, StoreNode};

use crate::position::Entry;

/// Identifies a node of the cluster. A node may host a broker, a store, or both
/// (the co-located layout); [`Endpoint`] says which of the two a message is for.
pub type NodeId = u64;

/// Whether `entry` is an epoch-start marker rather than a broker event.
///
/// A new master appends one marker, in its own epoch, before it serves anyone:
/// making the marker stable is what makes every adopted entry below it stable
/// (an entry from an earlier epoch is never counted stable on its own, I1). The
/// marker is recognized by its empty payload: the broker's events always carry at
/// least a version byte, and [`BrokerNode::append`] refuses an empty payload, so
/// no event can be mistaken for a marker. Markers reach the broker through
/// `Apply` like any entry; the broker skips them.
pub fn is_epoch_marker(entry: &Entry) -> bool {
    entry.payload.is_empty()
}

/// Cluster membership and timing, identical on every node.
///
/// Times are milliseconds of the driver's clock. The defaults suit a LAN; the
/// simulator uses shorter ones so a seed covers many elections.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Every event-store node. A quorum is a strict majority of this list.
    pub stores: Vec<NodeId>,
    /// Every node that runs a broker (master, slave or candidate).
    pub brokers: Vec<NodeId>,
    /// The master sends at least one append (possibly empty) per peer this often,
    /// so slaves know it is alive and everyone learns the stable index.
    pub heartbeat_ms: u64,
    /// A slave that hears no master for this long, plus a random part of up to
    /// `election_jitter_ms`, starts an election. The random part is what keeps
    /// two slaves from fencing each other forever.
    pub election_timeout_ms: u64,
    /// See `election_timeout_ms`.
    pub election_jitter_ms: u64,
    /// Check-quorum: a master that hears from fewer than a quorum of stores
    /// for this long steps down (its clients are closed with 320 and
    /// reconnect to a node that can serve). Longer than the election
    /// timeout, because a store answers only between fsyncs: a slow fsync
    /// or compaction step must not depose a healthy master, while a master
    /// cut off from the stores makes nothing stable anyway (safety does not
    /// depend on it).
    pub check_quorum_ms: u64,
    /// Sent-but-unacknowledged entries are sent again after this long without
    /// progress (the message or its ack was lost). Also the resend period of
    /// Fence and Fetch during an election.
    pub retry_ms: u64,
    /// Most entries in one Append message.
    pub batch_entries_max: usize,
    /// Most entries sent to one peer and not yet acknowledged: the pipeline depth.
    /// Bounds memory and what a lagging peer is sent again after a loss.
    pub window_entries_max: u64,
    /// Most entries asked for in one Fetch during an election.
    pub fetch_entries_max: u64,
    /// Stores compact their logs, keeping this many stable entries behind the
    /// stable index they have on disk; `None`: they keep the whole log. A
    /// node whose next entry a store compacted gets that store's state
    /// instead (snapshot catch-up).
    pub store_retention: Option<u64>,
    /// A store starts a commit (Persist) no sooner than this many
    /// microseconds after it started the previous one; 0: as soon as the
    /// previous one is on disk. See `store_node`'s pacing.
    pub commit_interval_us: u64,
}

impl Config {
    /// A config with the default timings for these members.
    pub fn new(stores: Vec<NodeId>, brokers: Vec<NodeId>) -> Self {
        Config {
            stores,
            brokers,
            heartbeat_ms: 50,
            election_timeout_ms: 400,
            election_jitter_ms: 200,
            check_quorum_ms: 1000,
            retry_ms: 200,
            batch_entries_max: 512,
            window_entries_max: 8192,
            fetch_entries_max: 4096,
            // Half a pipeline window: a follower a little behind catches up
            // from the log, one further behind from a snapshot.
            store_retention: Some(65536),
            commit_interval_us: 0,
        }
    }

    /// How many stores make a quorum: a strict majority, so any two quorums share
    /// at least one store (the basis of I1 and I2).
    pub fn quorum(&self) -> usize {
        self.stores.len() / 2 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_is_a_strict_majority() {
        let q = |n: u64| Config::new((1..=n).collect(), vec![]).quorum();
        assert_eq!([q(1), q(2), q(3), q(4), q(5)], [1, 2, 2, 3, 3]);
    }

    #[test]
    fn only_empty_payloads_are_markers() {
        assert!(is_epoch_marker(&Entry::new(2, 7, bytes::Bytes::new())));
        assert!(!is_epoch_marker(&Entry::new(2, 7, "x")));
    }
}

#[cfg(test)]
mod tests_broker;
#[cfg(test)]
mod tests_store;
