//! Node-to-node messages.
//!
//! One enum for every role, addressed by [`Endpoint`] because a co-located node
//! hosts a broker and a store behind one address: the master sends the same
//! Append to node 2's store and to node 2's slave, and must tell their acks
//! apart (only store acks count towards stability).
//!
//! Encoding comes with the TCP transport: a frame will be a u32 length, the
//! [`WIRE_VERSION`] byte, then the message. The version byte is there so a
//! rolling upgrade can refuse (rather than misread) a peer that speaks another
//! version.

use bytes::Bytes;

use crate::position::{Entry, LogPosition};

use super::NodeId;

/// Version of the node-to-node encoding, the first byte of every frame.
/// 6: a frame may be addressed to both services of a node (one Append for a
/// co-located store and slave).
pub const WIRE_VERSION: u8 = 6;

/// Which service of a node a message is for, or from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Service {
    /// The event store (log on disk, promises).
    Store,
    /// The broker's replication role (master, slave or candidate).
    Broker,
}

/// A node and one of its services: the address of every message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    /// The node.
    pub node: NodeId,
    /// The service on that node.
    pub service: Service,
}

impl Endpoint {
    /// The store service of `node`.
    pub const fn store(node: NodeId) -> Self {
        Endpoint {
            node,
            service: Service::Store,
        }
    }

    /// The broker service of `node`.
    pub const fn broker(node: NodeId) -> Self {
        Endpoint {
            node,
            service: Service::Broker,
        }
    }
}

/// Why an Append was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum RejectReason {
    /// The receiver knows a higher epoch (carried in the reject's `epoch`): the
    /// sender is a deposed master and must step down (I2).
    Fenced,
    /// The receiver's log does not contain `prev` (log matching, I3). `hint` is an
    /// index the sender should retry from (`prev` = its entry at `hint`): the
    /// receiver's last index if it is shorter, else the index just before the
    /// receiver's run of entries with the conflicting epoch. Retrying from there
    /// skips a whole divergent epoch per round trip instead of one entry.
    Mismatch {
        /// The `prev` of the rejected append, so the master can ignore a reject
        /// that arrives after the same peer already acked past it.
        prev: LogPosition,
        /// Retry with `prev.index = hint`.
        hint: u64,
        /// The rejecting store's incarnation, as in `AppendAck`: a store
        /// whose disk was lost rejects from an empty log, and the master
        /// must learn that what it matched is gone.
        incarnation: u64,
    },
}

/// The body of [`Message::Append`]: passed whole to the handlers that take it.
#[derive(Debug, Clone, PartialEq)]
pub struct Append {
    /// The sender's epoch; a store below it raises its promise, a store above
    /// it refuses.
    pub epoch: u64,
    /// The entry just before `entries`: the receiver must hold exactly this
    /// position (log matching) or reject.
    pub prev: LogPosition,
    /// Consecutive entries from `prev.index + 1`. Their epochs may be older
    /// than `epoch` (adopted entries being re-replicated).
    pub entries: Vec<Entry>,
    /// The master's stable index.
    pub stable: u64,
    /// Every store holds the log up to here (the lowest index any store
    /// acked in this epoch, at most `stable`): brokers may drop entries up
    /// to it from memory, since no store will ever need them resent.
    pub floor: u64,
}

/// The body of [`Message::SnapshotChunk`]: passed whole to the handlers that take it.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotChunk {
    /// The last entry the state covers (the store's log base).
    pub base: LogPosition,
    /// The key this chunk continues after; `None` for the first chunk.
    pub after: Option<Bytes>,
    /// State pairs in key order, every key above `after`.
    pub pairs: Vec<(Bytes, Bytes)>,
    /// Whether this is the last chunk.
    pub done: bool,
}

/// A message between nodes. See `docs/replication.md` for the protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// Master (or candidate confirming its marker) → store or slave: append
    /// `entries` after `prev`. Empty `entries` is the heartbeat. `stable` is the
    /// master's stable index; a receiver takes it only up to the last index this
    /// message proves it shares with the master.
    Append(Append),
    /// Store or slave → master: everything up to `last` is held (on a store:
    /// durable) and matches the master's log. Sent only after the fsync.
    AppendAck {
        /// The epoch of the append being acked; an ack from an older epoch never
        /// counts (I1).
        epoch: u64,
        /// The last position of the acked append: `prev` plus its entries.
        last: LogPosition,
        /// The acking store's incarnation (0 from a slave, or from a store
        /// whose disk predates incarnations). A master resets what it knows
        /// a store matched when it sees a newer one, and ignores acks of an
        /// older one: those are ghosts of a disk that was lost.
        incarnation: u64,
    },
    /// Store or slave → master: the append was refused.
    AppendReject {
        /// The receiver's epoch (its promise, for a store).
        epoch: u64,
        /// Why.
        reason: RejectReason,
    },
    /// Candidate → store: promise to refuse every epoch below `epoch`.
    Fence {
        /// The candidate's new epoch: the highest it has seen, plus one.
        epoch: u64,
        /// Random per candidacy. A store answers a resent Fence of the epoch it
        /// promised only if the nonce matches too: the node id alone is not
        /// enough, since a broker that restarted has forgotten its candidacy and
        /// may pick the same epoch again with a different log.
        nonce: u64,
    },
    /// Store → candidate: the promise for `epoch` is on disk.
    Promise {
        /// The epoch promised.
        epoch: u64,
        /// The store's last log position when it promised; the candidate adopts
        /// the log of the responder with the highest one.
        last: LogPosition,
        /// The store's stable index, for the candidate's information.
        stable: u64,
    },
    /// Store → candidate: the store has promised `promised`, which is at least
    /// the candidate's epoch (and not to this candidate).
    FenceRefused {
        /// The store's promise.
        promised: u64,
    },
    /// Candidate → the store with the best log: send entries `from..=to`.
    Fetch {
        /// The candidate's epoch; served only if it is the store's promise.
        epoch: u64,
        /// First index wanted.
        from: u64,
        /// Last index wanted (inclusive).
        to: u64,
    },
    /// Slave → store: send stable entries `from..=to`. A slave too far behind
    /// the master's in-memory log (a restarted broker, say) catches up from a
    /// store. Served in any epoch: only entries the store knows stable are
    /// sent, and stable entries are final (I1).
    CatchUp {
        /// The slave's epoch (informational; stable entries need no promise).
        epoch: u64,
        /// First index wanted.
        from: u64,
        /// Last index wanted (inclusive).
        to: u64,
    },
    /// Store → slave: stable entries from the CatchUp's `from` (fewer, or none,
    /// if the store knows less to be stable).
    StableEntries {
        /// The epoch of the CatchUp being answered.
        epoch: u64,
        /// Consecutive entries starting at the CatchUp's `from`.
        entries: Vec<Entry>,
    },
    /// Store → slave, candidate or store: one chunk of the store's
    /// materialized state at `base`, the answer to a `CatchUp` or `Fetch`
    /// whose `from` lies in the compacted part of its log, or to a
    /// `SnapshotRequest`. The state covers exactly the stable log up to
    /// `base` (I1/I4); the requester installs it whole, then continues from
    /// `base.index + 1`. Speaks for no epoch: the state is final, like stable
    /// entries.
    SnapshotChunk(SnapshotChunk),
    /// Slave, candidate or store → store: the chunk of the snapshot at `base`
    /// after key `after`. A store that no longer has that snapshot starts a
    /// new one from the first chunk (`after: None`), which the requester takes
    /// as a restart.
    SnapshotRequest {
        /// The snapshot being continued.
        base: LogPosition,
        /// The last key received.
        after: Option<Bytes>,
    },
    /// Pre-vote (slave → store): would you promise `epoch` now? Asked before
    /// a slave raises its epoch, so a slave that cannot hear a master the
    /// stores still hear changes nothing (no epoch rises, no master is
    /// deposed). Speaks for no epoch: `epoch()` is 0.
    PreVote {
        /// The epoch the slave would fence with (its highest seen plus one).
        epoch: u64,
    },
    /// The answer to a [`Message::PreVote`]: `granted` if `epoch` is above
    /// the store's promise and the store has not heard from a master for an
    /// election timeout (leader stickiness). Promises nothing.
    PreVoteReply {
        /// The epoch asked about.
        epoch: u64,
        /// Whether the store would promise it.
        granted: bool,
        /// The store's promise, so a slave that restarted (epoch 0) learns
        /// the epoch it must go above, as from a `FenceRefused`.
        promised: u64,
    },
    /// Store that has not joined (a new or wiped disk) → peer store: what
    /// do you hold? Sent until enough peers answered; changes nothing.
    JoinProbe {
        /// The asking store's incarnation (for the peer's logs).
        incarnation: u64,
    },
    /// The answer to a [`Message::JoinProbe`]: the peer's promise and log.
    /// A peer with promise 0 and an empty log is pristine.
    JoinInfo {
        /// The peer's promise (possibly not yet durable: only a higher
        /// value than the truth could come of it, which is safe).
        promised: u64,
        /// The peer's last log position: the joiner catches up until its
        /// stable index reaches the highest `last` it was told.
        last: LogPosition,
        /// The peer's stable index (informational).
        stable: u64,
    },
    /// Store → candidate: the entries asked for (fewer if the log is shorter).
    Entries {
        /// The epoch of the Fetch being answered.
        epoch: u64,
        /// Consecutive entries starting at the Fetch's `from`.
        entries: Vec<Entry>,
    },
}

impl Message {
    /// The epoch the message speaks for, used by every receiver to notice that it
    /// is behind (a deposed master learns it must step down from any of these).
    pub fn epoch(&self) -> u64 {
        match self {
            Message::Append(Append { epoch, .. })
            | Message::AppendAck { epoch, .. }
            | Message::AppendReject { epoch, .. }
            | Message::Fence { epoch, .. }
            | Message::Promise { epoch, .. }
            | Message::Fetch { epoch, .. }
            | Message::Entries { epoch, .. } => *epoch,
            // Catch-up of stable entries speaks for no epoch: a slave behind on
            // epochs must not make a store (or itself) react to it.
            Message::CatchUp { .. }
            | Message::StableEntries { .. }
            | Message::SnapshotChunk(SnapshotChunk { .. })
            | Message::SnapshotRequest { .. }
            // Joining is between stores and speaks for no epoch either.
            | Message::JoinProbe { .. }
            | Message::JoinInfo { .. }
            // A pre-vote raises nobody's epoch: that is its point.
            | Message::PreVote { .. } => 0,
            Message::FenceRefused { promised } | Message::PreVoteReply { promised, .. } => {
                *promised
            }
        }
    }
}
