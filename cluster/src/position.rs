//! Log positions and entries: the only vocabulary shared by the log, the stores
//! and (later) the replication protocol.

use std::fmt;

/// Position of an entry in the replicated log.
///
/// The index alone orders the log; the epoch says which master wrote the entry.
/// Two entries at the same index but different epochs are different entries
/// (one of them is a lost, never-stable write), which is why comparisons and log
/// matching (I3) use the pair. The derived `Ord` compares `epoch` first, which is
/// the order an election uses to pick the most up-to-date log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogPosition {
    /// Term of the master that assigned this position; bumped on every takeover
    /// (and, on a single node, on every restart) so positions are never reused.
    pub epoch: u64,
    /// 1-based position in the log; 0 means "before the first entry".
    pub index: u64,
}

impl LogPosition {
    /// The position of an empty log; it sorts before every real entry.
    pub const ZERO: LogPosition = LogPosition { epoch: 0, index: 0 };

    /// Shorthand used all over the tests and the replication code.
    pub const fn new(epoch: u64, index: u64) -> Self {
        LogPosition { epoch, index }
    }
}

impl fmt::Display for LogPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.epoch, self.index)
    }
}

/// One event in the log. The payload is opaque here: the broker encodes and
/// decodes it, so this crate never depends on AMQP types.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Where the entry sits; assigned by the master, never by a store.
    pub pos: LogPosition,
    /// `Bytes` so a payload handed to several stores or slaves is shared, not copied.
    pub payload: bytes::Bytes,
}

impl Entry {
    /// Convenience constructor, mostly for tests and the simulator.
    pub fn new(epoch: u64, index: u64, payload: impl Into<bytes::Bytes>) -> Self {
        Entry {
            pos: LogPosition::new(epoch, index),
            payload: payload.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_dominates_ordering() {
        // An election prefers a later epoch even when its log is shorter.
        assert!(LogPosition::new(2, 1) > LogPosition::new(1, 100));
        assert!(LogPosition::new(1, 2) > LogPosition::new(1, 1));
        assert_eq!(LogPosition::default(), LogPosition::ZERO);
    }

    #[test]
    fn display_is_epoch_colon_index() {
        assert_eq!(LogPosition::new(3, 42).to_string(), "3:42");
    }
}
