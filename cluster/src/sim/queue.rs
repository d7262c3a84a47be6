//! The event queue: every kind of event a run is made of, and the order they
//! run in (by simulated time, then by scheduling order, so a seed replays
//! exactly).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::position::Entry;
use crate::replication::{Endpoint, Message, NodeId, ReadRequest, StoreInput};

/// One scheduled event.
#[derive(Debug)]
pub(super) enum Ev {
    Deliver {
        from: Endpoint,
        to: Endpoint,
        msg: Message,
        /// The receiver's incarnation when sent: a restart loses what was in flight
        /// to it, as a broken TCP connection would.
        inc: u64,
    },
    Persisted {
        node: NodeId,
        inc: u64,
    },
    ReadDone {
        node: NodeId,
        inc: u64,
        req: ReadRequest,
        entries: Vec<Entry>,
    },
    /// A store input its driver produced without the disk's fsync: a snapshot
    /// chunk read, a commit window.
    StoreJob {
        node: NodeId,
        inc: u64,
        input: StoreInput,
    },
    Tick {
        node: NodeId,
        inc: u64,
    },
    Client,
    Fault,
    Restart {
        node: NodeId,
    },
    Unblock {
        links: Vec<(NodeId, NodeId)>,
    },
    Check,
    Heal,
    CutSlave,
}

struct Scheduled {
    at: u64,
    /// Tie-breaker: events at the same time run in scheduling order.
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    /// Reversed, so the max-heap pops the earliest event.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The pending events, earliest first.
#[derive(Default)]
pub(super) struct EventQueue {
    /// Events scheduled so far: the next one's tie-breaker.
    seq: u64,
    heap: BinaryHeap<Scheduled>,
}

impl EventQueue {
    /// Schedule `ev` to run at time `at`.
    pub(super) fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Scheduled {
            at,
            seq: self.seq,
            ev,
        });
    }

    /// The earliest event and its time.
    pub(super) fn pop(&mut self) -> Option<(u64, Ev)> {
        self.heap.pop().map(|s| (s.at, s.ev))
    }
}
