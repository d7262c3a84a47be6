//! Joining: a new disk neither promises nor grants pre-votes until enough
//! peers answered its probes, and only peers' probes are answered.

use super::*;

/// A new (or wiped) disk of store 1 in a 3-store cluster: not joined.
fn unjoined_store() -> StoreNode {
    let mut cfg = Config::new(vec![1, 2, 3], vec![9]);
    cfg.retry_ms = 25;
    StoreNode::new(1, 0, 0, EpochRuns::default())
        .with_config(&cfg)
        .with_identity(false, 77)
}

fn from_peer(peer: NodeId, msg: Message) -> StoreInput {
    StoreInput::Receive {
        from: Endpoint::store(peer),
        msg,
    }
}

fn join_info(promised: u64, last: (u64, u64)) -> Message {
    Message::JoinInfo {
        promised,
        last: LogPosition::new(last.0, last.1),
        stable: 0,
    }
}

fn probes(peers: &[NodeId]) -> Vec<StoreCommand> {
    peers
        .iter()
        .map(|&p| StoreCommand::Send {
            to: Endpoint::store(p),
            msg: Message::JoinProbe { incarnation: 77 },
        })
        .collect()
}

#[test]
fn an_unjoined_store_never_promises_and_refuses_pre_votes() {
    let c = Endpoint::broker(9);
    let mut s = unjoined_store();
    // Any input drives joining: the first one probes both peers. The Fence
    // itself gets no answer at all: no Promise, no Persist of one.
    let cmds = s.step(
        0,
        StoreInput::Receive {
            from: c,
            msg: Message::Fence { epoch: 1, nonce: 5 },
        },
    );
    assert_eq!(cmds, probes(&[2, 3]));
    assert_eq!(s.promised(), 0);
    // A pre-vote for any epoch: no.
    let cmds = s.step(
        1,
        StoreInput::Receive {
            from: c,
            msg: Message::PreVote { epoch: 1 },
        },
    );
    assert_eq!(
        cmds,
        vec![StoreCommand::Send {
            to: c,
            msg: Message::PreVoteReply {
                epoch: 1,
                granted: false,
                promised: 0
            },
        }]
    );
    // One answer of the two needed: still nothing; probes are resent only
    // to the peer that has not answered, once per retry_ms.
    assert!(s.step(2, from_peer(2, join_info(3, (3, 5)))).is_empty());
    assert_eq!(s.step(30, StoreInput::Persisted), probes(&[3]));
    assert!(!s.joined());
    // Appends are taken and acked (with the incarnation), as on any store:
    // an ack claims only what this disk holds.
    let cmds = s.step(31, append(3, (0, 0), &[(1, 1)], 0));
    assert_eq!(
        cmds,
        vec![StoreCommand::Persist(vec![
            DiskOp::Promise(3),
            appended(3, &[(1, 1)])
        ])]
    );
    assert_eq!(
        s.step(32, StoreInput::Persisted),
        vec![StoreCommand::Send {
            to: M,
            msg: Message::AppendAck {
                epoch: 3,
                last: LogPosition::new(1, 1),
                incarnation: 77,
            },
        }]
    );
    // Still no promise, even for an epoch above everything.
    let cmds = s.step(
        33,
        StoreInput::Receive {
            from: c,
            msg: Message::Fence { epoch: 9, nonce: 5 },
        },
    );
    assert!(cmds.is_empty(), "{cmds:?}");
}

#[test]
fn a_store_joins_once_stable_past_the_highest_last_with_the_highest_promise() {
    let c = Endpoint::broker(9);
    let mut s = unjoined_store();
    assert_eq!(s.step(0, StoreInput::Persisted), probes(&[2, 3]));
    assert!(s.step(1, from_peer(2, join_info(4, (3, 2)))).is_empty());
    // Both answered: the target is index 3 (peer 3's last) and promise 4
    // (peer 2's). It catches up from a peer.
    let cmds = s.step(2, from_peer(3, join_info(3, (3, 3))));
    assert!(matches!(
        cmds.as_slice(),
        [StoreCommand::Send {
            msg: Message::CatchUp { from: 1, .. },
            ..
        }]
    ));
    // Stable entries up to 2 only: not there yet.
    let stable = |entries: &[(u64, u64)]| Message::StableEntries {
        epoch: 0,
        entries: entries.iter().map(|&(e, i)| entry(e, i)).collect(),
    };
    let cmds = s.step(3, from_peer(2, stable(&[(1, 1), (3, 2)])));
    assert_eq!(
        cmds,
        vec![StoreCommand::Persist(vec![
            DiskOp::Promise(3),
            appended(3, &[(1, 1), (3, 2)]),
            DiskOp::Stable(2),
        ])]
    );
    assert!(!s.joined());
    assert!(s.step(4, StoreInput::Persisted).is_empty());
    // Index 3 stable too: it joins, promise raised to 4 first.
    let cmds = s.step(5, from_peer(3, stable(&[(3, 3)])));
    assert_eq!(
        cmds,
        vec![StoreCommand::Persist(vec![
            appended(3, &[(3, 3)]),
            DiskOp::Stable(3),
            DiskOp::Promise(4),
            DiskOp::Joined,
        ])]
    );
    assert!(s.joined());
    assert!(s.step(6, StoreInput::Persisted).is_empty());
    // Now it votes, but never for an epoch a peer told it was promised.
    let fence = |epoch| StoreInput::Receive {
        from: c,
        msg: Message::Fence { epoch, nonce: 5 },
    };
    assert_eq!(
        s.step(7, fence(4)),
        vec![StoreCommand::Send {
            to: c,
            msg: Message::FenceRefused { promised: 4 }
        }]
    );
    assert_eq!(
        s.step(8, fence(5)),
        vec![StoreCommand::Persist(vec![DiskOp::Promise(5)])]
    );
}

#[test]
fn a_new_cluster_of_pristine_stores_joins_at_once() {
    let mut s = unjoined_store();
    assert_eq!(s.step(0, StoreInput::Persisted), probes(&[2, 3]));
    assert!(s.step(1, from_peer(3, join_info(0, (0, 0)))).is_empty());
    let cmds = s.step(2, from_peer(2, join_info(0, (0, 0))));
    assert_eq!(cmds, vec![StoreCommand::Persist(vec![DiskOp::Joined])]);
    assert!(s.joined());
    // A lone store has no one to ask.
    let mut lone = StoreNode::new(1, 0, 0, EpochRuns::default())
        .with_config(&Config::new(vec![1], vec![9]))
        .with_identity(false, 1);
    assert_eq!(
        lone.step(0, StoreInput::Persisted),
        vec![StoreCommand::Persist(vec![DiskOp::Joined])]
    );
}

#[test]
fn join_probes_are_answered_by_peers_only() {
    let mut s =
        store_with(&[(1, 1), (2, 2)], 3, 1).with_config(&Config::new(vec![1, 2, 3], vec![9]));
    let cmds = s.step(0, from_peer(2, Message::JoinProbe { incarnation: 8 }));
    assert_eq!(
        cmds,
        vec![StoreCommand::Send {
            to: Endpoint::store(2),
            msg: Message::JoinInfo {
                promised: 3,
                last: LogPosition::new(2, 2),
                stable: 1
            },
        }]
    );
    let not_a_peer = StoreInput::Receive {
        from: Endpoint::broker(2),
        msg: Message::JoinProbe { incarnation: 8 },
    };
    assert!(s.step(1, not_a_peer).is_empty());
}
