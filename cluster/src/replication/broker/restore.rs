//! Installing a store's materialized state: a slave catching up, or a
//! candidate fetching the log it adopts, needs entries that store has
//! compacted, so it takes the state instead, chunk by chunk (the bookkeeping
//! is [`SnapshotRx`]), handing each chunk to the broker as `Restore`, and
//! continues with entries after the state's base.

use crate::replication::messages::{Endpoint, SnapshotChunk};
use crate::replication::snapshot::{ChunkOutcome, SnapshotRx};

use super::{BrokerCommand, BrokerNode, Role};

impl BrokerNode {
    /// A chunk of a store's state: a slave catching up, or a candidate
    /// fetching the adopted log, below that store's log base.
    pub(super) fn on_snapshot_chunk(
        &mut self,
        now: u64,
        from: Endpoint,
        chunk: SnapshotChunk,
        out: &mut Vec<BrokerCommand>,
    ) {
        let have = match &self.role {
            Role::Slave { .. } => self.applied,
            Role::Candidate(c) => match c.fetch_next() {
                // Only from the store whose log we adopt: its state is a
                // prefix of that log.
                Some((source, next)) if source == from.node => next - 1,
                _ => return,
            },
            Role::Master(_) => return,
        };
        match SnapshotRx::on_chunk(&mut self.snapshot_rx, from, have, chunk) {
            ChunkOutcome::Ignored => {}
            ChunkOutcome::Taken {
                base,
                first,
                pairs,
                next: Some((to, msg)),
            } => {
                // Each chunk goes to the broker as it comes.
                out.push(BrokerCommand::Restore {
                    base,
                    first,
                    pairs,
                    done: false,
                });
                self.catch_up_sent_ms = Some(now);
                out.push(BrokerCommand::Send { to, msg });
            }
            ChunkOutcome::Taken {
                base,
                first,
                pairs,
                next: None,
            } => {
                // A stable entry of epoch e proves a master of e existed (see
                // `on_stable_entries`).
                self.observe_epoch(now, base.epoch, out);
                self.log.reset_to(base);
                self.applied = base.index;
                out.push(BrokerCommand::Restore {
                    base,
                    first,
                    pairs,
                    done: true,
                });
                match self.role {
                    Role::Slave { .. } => self.catch_up(now, true, out),
                    Role::Candidate(_) => self.fetch_after_snapshot(now, out),
                    Role::Master(_) => {}
                }
            }
        }
    }
}
