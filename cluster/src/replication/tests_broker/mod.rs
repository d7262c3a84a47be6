//! Broker-node handler tests: a slave, an election, a master, driven by hand
//! with the replies stores would give; the exact command lists are compared.
//! This module holds the fixtures; the tests are grouped by the role they
//! cover, as `replication::broker` is.

mod election;
mod master;
mod restore;
mod slave;

use bytes::Bytes;

use super::*;
use crate::position::{Entry, LogPosition};

const ME: NodeId = 4;
const OTHER: NodeId = 5;

fn cfg() -> Config {
    let mut cfg = Config::new(vec![1, 2, 3], vec![ME, OTHER]);
    cfg.heartbeat_ms = 10;
    cfg.election_timeout_ms = 100;
    cfg.election_jitter_ms = 0; // deterministic deadlines for the tests
    cfg.retry_ms = 50;
    cfg.batch_entries_max = 2;
    cfg.window_entries_max = 4;
    cfg.fetch_entries_max = 10;
    cfg
}

fn entry(epoch: u64, index: u64) -> Entry {
    Entry::new(epoch, index, Bytes::from(format!("{epoch}:{index}")))
}

fn marker(epoch: u64, index: u64) -> Entry {
    Entry::new(epoch, index, Bytes::new())
}

fn pos(epoch: u64, index: u64) -> LogPosition {
    LogPosition::new(epoch, index)
}

fn recv(from: Endpoint, msg: Message) -> BrokerInput {
    BrokerInput::Receive { from, msg }
}

fn send(to: Endpoint, msg: Message) -> BrokerCommand {
    BrokerCommand::Send { to, msg }
}

fn append_msg(epoch: u64, prev: LogPosition, entries: Vec<Entry>, stable: u64) -> Message {
    Message::Append(Append {
        epoch,
        prev,
        entries,
        stable,
        floor: 0,
    })
}

/// A slave of `OTHER` in epoch 1 holding 1:1 (stable).
fn slave() -> BrokerNode {
    let mut b = BrokerNode::new(ME, cfg(), 7, 0);
    let cmds = b.step(
        1,
        recv(
            Endpoint::broker(OTHER),
            append_msg(1, pos(0, 0), vec![entry(1, 1)], 1),
        ),
    );
    assert_eq!(
        cmds,
        vec![
            BrokerCommand::Apply(vec![entry(1, 1)]),
            send(
                Endpoint::broker(OTHER),
                Message::AppendAck {
                    epoch: 1,
                    last: pos(1, 1),
                    incarnation: 0,
                }
            ),
        ]
    );
    b
}
