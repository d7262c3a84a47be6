//! What a broker node is driven by and what it asks for: the vocabulary
//! between the sans-IO state machine and its driver (the tokio runtime, the
//! simulator, the broker's tests).

use crate::position::{Entry, LogPosition};
use crate::replication::NodeId;
use crate::replication::messages::{Endpoint, Message};

/// What drives a broker node.
#[derive(Debug, Clone, PartialEq)]
pub enum BrokerInput {
    /// A message from a peer.
    Receive {
        /// The sender.
        from: Endpoint,
        /// The message.
        msg: Message,
    },
    /// Time passed: check the election timeout, resend what is overdue, send
    /// heartbeats. Call it every few milliseconds (well under `heartbeat_ms`).
    Tick,
    /// Entries were appended: send them. Call it after a run of
    /// [`BrokerNode::append`](super::BrokerNode::append) calls, so one Append carries all of them (the batch
    /// is whatever the client produced meanwhile, never a fixed sleep).
    Flush,
}

/// What a broker node asks its driver (and the broker) to do.
#[derive(Debug, Clone, PartialEq)]
pub enum BrokerCommand {
    /// Send a message.
    Send {
        /// The receiver.
        to: Endpoint,
        /// The message.
        msg: Message,
    },
    /// Slave (or a candidate becoming master): these entries are stable; apply
    /// them, in order. Consecutive with the previous `Apply`. Epoch markers
    /// ([`crate::replication::is_epoch_marker`]) are included and must be skipped.
    Apply(Vec<Entry>),
    /// Slave or candidate: one chunk of a store's materialized state of the
    /// stable log up to `base` (the entries the node needs were compacted),
    /// as it arrives, so no one holds the whole state at once. `first`
    /// starts it (drop whatever an earlier, abandoned transfer delivered);
    /// `done`: it is complete and replaces the broker's state. `Apply`
    /// continues from `base.index + 1`.
    Restore {
        /// The last entry the state covers.
        base: LogPosition,
        /// These pairs start the state.
        first: bool,
        /// The chunk's pairs, in key order, after every earlier chunk's.
        pairs: Vec<(bytes::Bytes, bytes::Bytes)>,
        /// The last chunk.
        done: bool,
    },
    /// Master: every entry up to this index is stable; release the confirms and
    /// replies waiting for it. Strictly increasing within one mastership.
    Stable(u64),
    /// This node started an election for `epoch` (for metrics and logs).
    Campaign {
        /// The epoch it fenced the stores with.
        epoch: u64,
    },
    /// The epoch-start marker is stable: this node is master of `epoch` and may
    /// serve clients. Everything up to `stable` was applied before this command.
    BecameMaster {
        /// The new epoch.
        epoch: u64,
        /// The marker's index: the stable index the mastership starts from.
        stable: u64,
    },
    /// This node was master and learned of a higher `epoch`, or (check-quorum,
    /// `epoch` is then its own) heard no quorum of stores for
    /// `check_quorum_ms`: stop at once (close client connections with 320),
    /// discard every effect past the last `Stable` index, and carry on as a
    /// slave (I2).
    SteppedDown {
        /// The higher epoch that deposed us.
        epoch: u64,
    },
}

/// Why [`BrokerNode::append`](super::BrokerNode::append) refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AppendError {
    /// Only the master appends. `master` is the node this one last heard from.
    #[error("not master (epoch {epoch}, master {master:?})")]
    NotMaster {
        /// The highest epoch this node knows.
        epoch: u64,
        /// The master it follows, if it knows one.
        master: Option<NodeId>,
    },
    /// An empty payload is reserved for epoch markers.
    #[error("empty payloads are reserved for epoch markers")]
    EmptyPayload,
}

/// Which role a broker node is in, for status pages and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleKind {
    /// Applies stable entries; may campaign when the master goes quiet.
    Slave,
    /// Fencing, fetching, or making its marker stable.
    Candidate,
    /// Serves clients.
    Master,
}
