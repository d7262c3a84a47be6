//! Store-node handler tests: feed inputs, compare the exact command lists.
//! This module holds the fixtures; the tests are grouped by what they
//! cover, as `replication::store_node` is.

mod appends;
mod catch_up;
mod election;
mod join;
mod pacing;

use bytes::Bytes;

use super::*;
use crate::position::{Entry, LogPosition};

const M: Endpoint = Endpoint::broker(9);

fn append(epoch: u64, prev: (u64, u64), entries: &[(u64, u64)], stable: u64) -> StoreInput {
    StoreInput::Receive {
        from: M,
        msg: Message::Append(Append {
            epoch,
            prev: LogPosition::new(prev.0, prev.1),
            entries: entries.iter().map(|&(e, i)| entry(e, i)).collect(),
            stable,
            floor: 0,
        }),
    }
}

fn entry(epoch: u64, index: u64) -> Entry {
    Entry::new(epoch, index, Bytes::from(format!("{epoch}:{index}")))
}

fn ack(epoch: u64, last: (u64, u64)) -> StoreCommand {
    StoreCommand::Send {
        to: M,
        msg: Message::AppendAck {
            epoch,
            last: LogPosition::new(last.0, last.1),
            incarnation: 0,
        },
    }
}

fn appended(writer_epoch: u64, entries: &[(u64, u64)]) -> DiskOp {
    DiskOp::Append {
        writer_epoch,
        entries: entries.iter().map(|&(e, i)| entry(e, i)).collect(),
    }
}

/// A store holding `positions`, promised `promised`, everything durable.
fn store_with(positions: &[(u64, u64)], promised: u64, stable: u64) -> StoreNode {
    let runs = EpochRuns::from_positions(positions.iter().map(|&(e, i)| LogPosition::new(e, i)));
    StoreNode::new(1, promised, stable, runs)
}
