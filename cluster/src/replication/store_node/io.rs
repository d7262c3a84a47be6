//! What drives a store and what it asks its driver to do: the vocabulary
//! between the sans-IO store node and whoever owns its disk and network
//! (the store runner, the simulator, the tests).

use bytes::Bytes;

use crate::position::{Entry, LogPosition};
use crate::replication::messages::{Endpoint, Message};

/// One write to the store's disk. The driver applies a Persist's ops in order,
/// then fsyncs once.
#[derive(Debug, Clone, PartialEq)]
pub enum DiskOp {
    /// Record the promised epoch (I2). Durable before any reply that depends on it.
    Promise(u64),
    /// Drop every entry above the index (a conflicting suffix from a deposed
    /// master). Never below the store's stable index.
    TruncateAfter(u64),
    /// Append entries following the log's end. `writer_epoch` is the epoch of the
    /// master that sent them, which the disk may check against the promise;
    /// the entries' own epochs may be older (adopted entries re-replicated).
    Append {
        /// The sending master's epoch.
        writer_epoch: u64,
        /// Consecutive entries after the log's end.
        entries: Vec<Entry>,
    },
    /// Record the stable index (lazily durable: it rides on the fsync).
    Stable(u64),
    /// Materialize the state through this position (a stable entry of the
    /// log) and delete the log up to it: it becomes the log base. Emitted
    /// only up to the stable index already on disk.
    Compact(LogPosition),
    /// Write one chunk of a peer store's state of the stable log up to
    /// `base` into the staging area, beside the live state, which it does
    /// not touch (`EventStore::stage_state`). `first` starts a new staged
    /// state, dropping whatever was staged before. A crash loses what is
    /// staged: the store restarts on its old state and asks again.
    StageSnapshot {
        /// The last entry the state covers.
        base: LogPosition,
        /// These pairs start the state.
        first: bool,
        /// The chunk's pairs, in key order, after every earlier chunk's.
        pairs: Vec<(Bytes, Bytes)>,
    },
    /// Switch the state staged for `base` in, replacing the state, and make
    /// `base` the log base, in one durable write
    /// (`EventStore::install_staged`). Entries after `base` are kept if the
    /// log holds `base` itself, else the whole log goes (what disagrees with
    /// a stable entry is never stable). The stable index becomes at least
    /// `base.index`.
    InstallSnapshot {
        /// The last entry the state covers.
        base: LogPosition,
    },
    /// Record that this store has joined (see `join.rs`): from now on it
    /// promises and acks. Durable before any reply queued after it.
    Joined,
}

impl DiskOp {
    /// How many log entries `ops` append: the size of a commit, for pacing.
    pub fn entries_in(ops: &[DiskOp]) -> u64 {
        ops.iter()
            .map(|op| match op {
                DiskOp::Append { entries, .. } => entries.len() as u64,
                _ => 0,
            })
            .sum()
    }
}

/// A read the store asks the driver to do; handed back in
/// [`StoreInput::ReadDone`] so the node, not the driver, answers the peer.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadRequest {
    /// First index wanted.
    pub from: u64,
    /// Last index wanted (inclusive); the driver returns fewer if the log is shorter.
    pub to: u64,
    /// Who asked (a candidate).
    pub reply_to: Endpoint,
    /// The candidate's epoch, echoed in the reply.
    pub epoch: u64,
    /// A slave's catch-up: `to` is already clamped to the stable index, and
    /// the answer is [`Message::StableEntries`], sent whatever the promise.
    pub stable_only: bool,
}

/// A chunk of the store's state the store asks its driver to read: the
/// snapshot at `base` after key `after`, or, if the driver no longer has that
/// snapshot pinned (or `after` is `None`), the first chunk of a snapshot of
/// the state as it is now.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotRead {
    /// Who asked.
    pub reply_to: Endpoint,
    /// The snapshot being continued; ignored when `after` is `None`.
    pub base: LogPosition,
    /// The last key the requester has.
    pub after: Option<Bytes>,
}

/// What drives a store.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreInput {
    /// A message from a peer.
    Receive {
        /// The sender.
        from: Endpoint,
        /// The message.
        msg: Message,
    },
    /// The last [`StoreCommand::Persist`] is applied and fsynced.
    Persisted,
    /// A [`StoreCommand::Read`] finished.
    ReadDone {
        /// The request, as emitted.
        req: ReadRequest,
        /// Consecutive entries from `req.from`.
        entries: Vec<Entry>,
    },
    /// A [`StoreCommand::ReadSnapshot`] finished: one chunk to send.
    SnapshotDone {
        /// The requester.
        reply_to: Endpoint,
        /// The snapshot read (a new one if the requested one was gone).
        base: LogPosition,
        /// The key this chunk continues after (`None`: the first chunk).
        after: Option<Bytes>,
        /// The pairs, in key order.
        pairs: Vec<(Bytes, Bytes)>,
        /// Whether it is the last chunk.
        done: bool,
    },
    /// The commit window asked for with [`StoreCommand::AwaitCommitWindow`]
    /// is open: the next Persist may start.
    CommitWindow,
    /// The disk failed (fjall poisons itself after a failed fsync): the node stops
    /// answering for good, since nothing it says about durability can be trusted.
    DiskFailed,
}

/// What a store asks its driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreCommand {
    /// Send a message.
    Send {
        /// The receiver.
        to: Endpoint,
        /// The message.
        msg: Message,
    },
    /// Apply the ops in order, fsync once, then report [`StoreInput::Persisted`].
    Persist(Vec<DiskOp>),
    /// Read entries and report [`StoreInput::ReadDone`].
    Read(ReadRequest),
    /// Read a chunk of the state and report [`StoreInput::SnapshotDone`].
    ReadSnapshot(SnapshotRead),
    /// Ops are queued but the commit window is closed (pacing): report
    /// [`StoreInput::CommitWindow`] when the next Persist should start, at
    /// the latest `Config::commit_interval_us` after the last one started.
    /// Emitted once per window. When is the driver's choice, a matter of
    /// speed only: the node is correct whenever (or if ever) it opens.
    AwaitCommitWindow {
        /// Log entries in the queued ops: the batch the window would grow.
        queued_entries: u64,
    },
}
