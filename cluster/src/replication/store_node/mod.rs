//! The event-store role.
//!
//! A store keeps the log on disk, promises epochs, and acknowledges only what is
//! durable. It owns its disk only through commands: it emits
//! [`StoreCommand::Persist`] with a list of [`DiskOp`]s, the driver applies them
//! in order followed by one fsync, and reports [`StoreInput::Persisted`]. One
//! Persist is in flight at a time; everything that arrives meanwhile is queued and
//! goes out as the next one, so the batch size (group commit) follows the load.
//! Replies that promise durability (acks, promises) wait for the Persist that
//! covers them.
//!
//! The node checks every request against its *accepted* log: what is durable
//! plus what is in flight or queued. Ops are applied in order, so once the queue
//! drains the disk equals the accepted log.
//!
//! This module holds the node and the dispatch of its inputs; `io` the
//! inputs, commands and disk ops, `append` accepting a master's entries,
//! `catch_up` compaction and catching up from peers, `join` a new disk's
//! joining.

mod append;
mod catch_up;
mod io;
mod join;

use crate::position::LogPosition;

use super::log::EpochRuns;
use super::messages::{Append, Endpoint, Message, SnapshotChunk};
use super::snapshot::SnapshotRx;
use super::{Config, NodeId};

pub use io::{DiskOp, ReadRequest, SnapshotRead, StoreCommand, StoreInput};

/// The event-store role; see the module docs.
#[derive(Debug)]
pub struct StoreNode {
    /// This node, the `from` of everything it sends.
    id: NodeId,
    /// Highest epoch promised (accepted: possibly still queued for disk).
    promised: u64,
    /// The candidacy (node, nonce) the current promise was given to, so its
    /// resent Fence is answered again while any other candidacy with the same
    /// epoch is refused. Not durable: after a restart every Fence at the
    /// promised epoch is refused, which costs an election at worst and never
    /// grants one epoch twice.
    promised_to: Option<(NodeId, u64)>,
    /// Epochs of the accepted log.
    log: EpochRuns,
    /// Highest index known stable; the log is never truncated at or below it.
    stable: u64,
    /// `stable` as of the last finished Persist: its entries are on disk, so
    /// a read issued now returns them (a read runs before a Persist queued
    /// after it). Catch-up serves only up to here.
    stable_on_disk: u64,
    /// `stable` when the Persist in flight was issued.
    stable_in_flight: u64,
    /// Ops waiting for the next Persist.
    queued_ops: Vec<DiskOp>,
    /// Replies to send once the queued ops are durable.
    queued_replies: Vec<(Endpoint, Message)>,
    /// Replies waiting for the Persist in flight; `None` when none is.
    in_flight: Option<Vec<(Endpoint, Message)>>,
    /// Set by [`StoreInput::DiskFailed`]; the node is silent from then on.
    failed: bool,
    /// The other stores, to catch up from when the master no longer holds
    /// what this store lacks.
    peers: Vec<NodeId>,
    /// Stable entries kept in the log behind the stable index on disk;
    /// `None`: never compact.
    retention: Option<u64>,
    /// Resend period of catch-up requests.
    retry_ms: u64,
    /// Most entries asked for in one catch-up request.
    fetch_entries_max: u64,
    /// When this store last asked a peer to catch it up, and whom next.
    catch_up_sent_ms: Option<u64>,
    catch_up_turn: usize,
    /// A snapshot being received from a peer.
    snapshot_rx: Option<SnapshotRx>,
    /// Snapshots installed.
    installed_snapshots: u64,
    /// Failed internal consistency checks; nonzero means a protocol bug (the
    /// simulator asserts it stays zero).
    anomalies: u64,
    /// When an Append of an epoch at least our promise last arrived: a live
    /// master (or a candidate confirming its marker). Pre-votes are refused
    /// for `election_timeout_ms` after it (leader stickiness).
    master_heard_ms: Option<u64>,
    /// See `master_heard_ms`.
    election_timeout_ms: u64,
    /// Whether this store may vote: promise, ack, grant pre-votes. False
    /// for a new or wiped disk until it has joined (`join.rs`).
    joined: bool,
    /// The disk's incarnation, carried by every AppendAck so a master can
    /// tell a new disk's acks from ghosts of a lost one.
    incarnation: u64,
    /// Joining in progress (unused once joined).
    join: join::Join,
    /// Commit pacing on (`Config::commit_interval_us` > 0): after a Persist
    /// starts, the next one waits for [`StoreInput::CommitWindow`].
    paced: bool,
    /// Whether a Persist may start now (always, unpaced).
    window_open: bool,
    /// [`StoreCommand::AwaitCommitWindow`] was emitted and not yet answered.
    window_awaited: bool,
}

impl StoreNode {
    /// A store recovering what its disk holds (a fresh disk is all zeros and an
    /// empty log).
    pub fn new(id: NodeId, promised: u64, stable: u64, log: EpochRuns) -> Self {
        // Everything up to the base is stable: only stable entries are compacted.
        let stable = stable.min(log.last().index).max(log.base().index);
        StoreNode {
            id,
            promised,
            promised_to: None,
            stable,
            stable_on_disk: stable,
            stable_in_flight: stable,
            log,
            queued_ops: Vec::new(),
            queued_replies: Vec::new(),
            in_flight: None,
            failed: false,
            anomalies: 0,
            peers: Vec::new(),
            retention: None,
            retry_ms: 200,
            fetch_entries_max: 4096,
            catch_up_sent_ms: None,
            catch_up_turn: 0,
            snapshot_rx: None,
            installed_snapshots: 0,
            master_heard_ms: None,
            election_timeout_ms: 400,
            joined: true,
            incarnation: 0,
            join: join::Join::default(),
            paced: false,
            window_open: true,
            window_awaited: false,
        }
    }

    /// Take the cluster's settings: the peer stores to catch up from, the
    /// retention (compaction on when `cfg.store_retention` is set) and the
    /// timings. Without it a store never compacts and never catches up from
    /// its peers.
    pub fn with_config(mut self, cfg: &Config) -> Self {
        self.peers = cfg
            .stores
            .iter()
            .copied()
            .filter(|&n| n != self.id)
            .collect();
        self.retention = cfg.store_retention;
        self.retry_ms = cfg.retry_ms;
        self.fetch_entries_max = cfg.fetch_entries_max.max(1);
        self.election_timeout_ms = cfg.election_timeout_ms;
        self.paced = cfg.commit_interval_us > 0;
        let n = cfg.stores.len();
        self.join.need = (n + 1).saturating_sub(cfg.quorum()).min(self.peers.len());
        self
    }

    /// The last compacted position (`(0,0)`: none).
    pub fn log_base(&self) -> LogPosition {
        self.log.base()
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The promised epoch (including one not yet durable).
    pub fn promised(&self) -> u64 {
        self.promised
    }

    /// The last position of the accepted log.
    pub fn last(&self) -> LogPosition {
        self.log.last()
    }

    /// The stable index this store has learned.
    pub fn stable(&self) -> u64 {
        self.stable
    }

    /// Count of failed internal consistency checks (see the field).
    pub fn anomalies(&self) -> u64 {
        self.anomalies
    }

    /// Advance the store by one input.
    pub fn step(&mut self, now: u64, input: StoreInput) -> Vec<StoreCommand> {
        let mut out = Vec::new();
        if self.failed {
            return out;
        }
        self.join_step(now, &mut out);
        match input {
            StoreInput::Receive { from, msg } => self.receive(now, from, msg, &mut out),
            StoreInput::Persisted => {
                self.stable_on_disk = self.stable_in_flight;
                let replies = self.in_flight.take().unwrap_or_default();
                send_all(replies, &mut out);
            }
            StoreInput::ReadDone { req, entries } if req.stable_only => {
                // Stable entries are final: any epoch may have them.
                out.push(StoreCommand::Send {
                    to: req.reply_to,
                    msg: Message::StableEntries {
                        epoch: req.epoch,
                        entries,
                    },
                });
            }
            StoreInput::ReadDone { req, entries } => {
                // Answer only if still bound to that epoch: a higher promise since
                // means the candidate is deposed, and it will learn so on its next
                // request.
                if req.epoch == self.promised {
                    out.push(StoreCommand::Send {
                        to: req.reply_to,
                        msg: Message::Entries {
                            epoch: req.epoch,
                            entries,
                        },
                    });
                }
            }
            StoreInput::SnapshotDone {
                reply_to,
                base,
                after,
                pairs,
                done,
            } => out.push(StoreCommand::Send {
                to: reply_to,
                msg: Message::SnapshotChunk(SnapshotChunk {
                    base,
                    after,
                    pairs,
                    done,
                }),
            }),
            StoreInput::CommitWindow => {
                self.window_open = true;
                self.window_awaited = false;
            }
            StoreInput::DiskFailed => {
                self.failed = true;
                return Vec::new();
            }
        }
        self.try_finish_join();
        self.flush(&mut out);
        out
    }

    /// Dispatch a received message to its handler (or drop it).
    fn receive(&mut self, now: u64, from: Endpoint, msg: Message, out: &mut Vec<StoreCommand>) {
        match msg {
            Message::Append(append) => self.on_append(now, from, append, out),
            Message::CatchUp {
                epoch,
                from: lo,
                to,
            } => self.on_catch_up(from, epoch, lo, to, out),
            // A store that has not joined may have promised more than it
            // knows in its lost life: it promises nothing (the candidate
            // resends, and gets an answer once it joined).
            Message::Fence { .. } if !self.joined => {}
            Message::Fence { epoch, nonce } => self.on_fence(from, epoch, nonce, out),
            Message::PreVote { epoch } => self.on_pre_vote(now, from, epoch, out),
            Message::Fetch {
                epoch,
                from: lo,
                to,
            } => self.on_fetch(from, epoch, lo, to, out),
            Message::SnapshotRequest { base, after } => {
                out.push(StoreCommand::ReadSnapshot(SnapshotRead {
                    reply_to: from,
                    base,
                    after,
                }));
            }
            // A peer store catching this one up.
            Message::StableEntries { entries, .. } if self.is_peer(from) => {
                self.on_stable_entries(now, entries, out);
            }
            Message::SnapshotChunk(chunk) if self.is_peer(from) => {
                self.on_snapshot_chunk(now, from, chunk, out);
            }
            Message::JoinProbe { .. } if self.is_peer(from) => self.on_join_probe(from, out),
            Message::JoinInfo { promised, last, .. } if self.is_peer(from) => {
                self.on_join_info(now, from.node, promised, last, out);
            }
            Message::JoinProbe { .. } | Message::JoinInfo { .. } => {}
            // Replies meant for brokers.
            Message::AppendAck { .. }
            | Message::AppendReject { .. }
            | Message::Promise { .. }
            | Message::FenceRefused { .. }
            | Message::Entries { .. }
            | Message::StableEntries { .. }
            | Message::SnapshotChunk(SnapshotChunk { .. })
            | Message::PreVoteReply { .. } => {}
        }
    }

    /// A peer store asks for stable entries `lo..=to`: read them, or the
    /// state instead if `lo` is compacted.
    fn on_catch_up(
        &self,
        from: Endpoint,
        epoch: u64,
        lo: u64,
        to: u64,
        out: &mut Vec<StoreCommand>,
    ) {
        // Only what this store knows stable: its log up to there is
        // the stable log (it learnt `stable` only up to what an append
        // proved it shares with the master). And only what is on disk
        // already: the ops that made it stable may still be queued
        // behind this read, over an older tail.
        let to = to.min(self.stable_on_disk);
        if lo >= 1 && lo <= self.log.base().index {
            // Compacted: the state up to the base instead, then the
            // requester asks again from the base.
            out.push(StoreCommand::ReadSnapshot(SnapshotRead {
                reply_to: from,
                base: LogPosition::ZERO,
                after: None,
            }));
        } else if lo >= 1 && lo <= to {
            out.push(StoreCommand::Read(ReadRequest {
                from: lo,
                to,
                reply_to: from,
                epoch,
                stable_only: true,
            }));
        }
    }

    /// Answer a pre-vote for `epoch`, granted only if this store would
    /// promise it and hears no master.
    fn on_pre_vote(&self, now: u64, from: Endpoint, epoch: u64, out: &mut Vec<StoreCommand>) {
        // Leader stickiness: while a master is heard, a slave that
        // cannot hear it must not depose it. Changes no state. A
        // store that has not joined would not promise: no.
        let granted = self.joined
            && epoch > self.promised
            && self
                .master_heard_ms
                .is_none_or(|at| now.saturating_sub(at) >= self.election_timeout_ms);
        let reply = Message::PreVoteReply {
            epoch,
            granted,
            promised: self.promised,
        };
        reply_now(from, reply, out);
    }

    /// A candidate of `epoch` fetches entries `lo..=to` to adopt: read them
    /// (or the state, if `lo` is compacted) when bound to its epoch, refuse
    /// a lower epoch.
    fn on_fetch(&self, from: Endpoint, epoch: u64, lo: u64, to: u64, out: &mut Vec<StoreCommand>) {
        if epoch == self.promised && lo <= self.log.base().index {
            // The candidate needs what only the state holds now.
            out.push(StoreCommand::ReadSnapshot(SnapshotRead {
                reply_to: from,
                base: LogPosition::ZERO,
                after: None,
            }));
        } else if epoch == self.promised {
            out.push(StoreCommand::Read(ReadRequest {
                from: lo,
                to,
                reply_to: from,
                epoch,
                stable_only: false,
            }));
        } else if epoch < self.promised {
            reply_now(
                from,
                Message::FenceRefused {
                    promised: self.promised,
                },
                out,
            );
        }
    }

    /// Tell a joining peer store what this one holds.
    fn on_join_probe(&self, from: Endpoint, out: &mut Vec<StoreCommand>) {
        let info = Message::JoinInfo {
            promised: self.promised,
            last: self.log.last(),
            stable: self.stable,
        };
        reply_now(from, info, out);
    }

    fn on_fence(&mut self, from: Endpoint, epoch: u64, nonce: u64, out: &mut Vec<StoreCommand>) {
        let again = epoch == self.promised && self.promised_to == Some((from.node, nonce));
        if epoch > self.promised {
            self.promised = epoch;
            self.promised_to = Some((from.node, nonce));
            self.queued_ops.push(DiskOp::Promise(epoch));
        } else if !again {
            // I2: an epoch is promised once, to one candidate.
            reply_now(
                from,
                Message::FenceRefused {
                    promised: self.promised,
                },
                out,
            );
            return;
        }
        // `last` now includes every append accepted before the promise; they are
        // queued ahead of it, so they are durable when this reply goes out.
        let promise = Message::Promise {
            epoch,
            last: self.log.last(),
            stable: self.stable,
        };
        self.queued_replies.push((from, promise));
    }

    fn is_peer(&self, from: Endpoint) -> bool {
        from.service == super::Service::Store && self.peers.contains(&from.node)
    }

    /// Start the next Persist if none is in flight; replies with nothing left to
    /// wait for go out at once.
    ///
    /// Paced, a Persist also waits for the commit window its predecessor
    /// closed: what arrives meanwhile joins it. Replies that wait for no ops
    /// are never held back by the window.
    fn flush(&mut self, out: &mut Vec<StoreCommand>) {
        if self.in_flight.is_some() {
            return;
        }
        if self.queued_ops.is_empty() {
            send_all(std::mem::take(&mut self.queued_replies), out);
        } else if !self.window_open {
            if !self.window_awaited {
                self.window_awaited = true;
                let queued_entries = DiskOp::entries_in(&self.queued_ops);
                out.push(StoreCommand::AwaitCommitWindow { queued_entries });
            }
        } else {
            self.compact();
            out.push(StoreCommand::Persist(std::mem::take(&mut self.queued_ops)));
            self.in_flight = Some(std::mem::take(&mut self.queued_replies));
            self.stable_in_flight = self.stable;
            self.window_open = !self.paced;
        }
    }
}

fn reply_now(to: Endpoint, msg: Message, out: &mut Vec<StoreCommand>) {
    out.push(StoreCommand::Send { to, msg });
}

fn send_all(replies: Vec<(Endpoint, Message)>, out: &mut Vec<StoreCommand>) {
    out.extend(
        replies
            .into_iter()
            .map(|(to, msg)| StoreCommand::Send { to, msg }),
    );
}
