//! Store-node handler tests: feed inputs, compare the exact command lists.

use bytes::Bytes;

use super::*;
use crate::position::{Entry, LogPosition};

const M: Endpoint = Endpoint::broker(9);

fn append(epoch: u64, prev: (u64, u64), entries: &[(u64, u64)], stable: u64) -> StoreInput {
    StoreInput::Receive {
        from: M,
        msg: Message::Append {
            epoch,
            prev: LogPosition::new(prev.0, prev.1),
            entries: entries.iter().map(|&(e, i)| entry(e, i)).collect(),
            stable,
            floor: 0,
        },
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

#[test]
fn acks_only_after_the_fsync() {
    let mut s = store_with(&[], 0, 0);
    let cmds = s.step(0, append(1, (0, 0), &[(1, 1), (1, 2)], 0));
    assert_eq!(
        cmds,
        vec![StoreCommand::Persist(vec![
            DiskOp::Promise(1),
            appended(1, &[(1, 1), (1, 2)])
        ])]
    );
    assert_eq!(s.step(1, StoreInput::Persisted), vec![ack(1, (1, 2))]);
}

#[test]
fn appends_arriving_during_an_fsync_share_the_next_one() {
    let mut s = store_with(&[], 1, 0);
    assert_eq!(s.step(0, append(1, (0, 0), &[(1, 1)], 0)).len(), 1);
    assert!(s.step(0, append(1, (1, 1), &[(1, 2)], 0)).is_empty());
    assert!(s.step(0, append(1, (1, 2), &[(1, 3)], 1)).is_empty());
    assert_eq!(
        s.step(1, StoreInput::Persisted),
        vec![
            ack(1, (1, 1)),
            StoreCommand::Persist(vec![
                appended(1, &[(1, 2)]),
                appended(1, &[(1, 3)]),
                DiskOp::Stable(1),
            ]),
        ]
    );
    assert_eq!(
        s.step(2, StoreInput::Persisted),
        vec![ack(1, (1, 2)), ack(1, (1, 3))]
    );
}

#[test]
fn a_gap_or_a_conflict_is_rejected_with_a_hint() {
    let mut s = store_with(&[(1, 1), (1, 2), (2, 3), (2, 4)], 3, 0);
    let mismatch = |prev: (u64, u64), hint| StoreCommand::Send {
        to: M,
        msg: Message::AppendReject {
            epoch: 3,
            reason: RejectReason::Mismatch {
                prev: LogPosition::new(prev.0, prev.1),
                hint,
                incarnation: 0,
            },
        },
    };
    // Shorter log: retry from our end.
    assert_eq!(
        s.step(0, append(3, (3, 9), &[], 0)),
        vec![mismatch((3, 9), 4)]
    );
    // Conflicting epoch-2 run starting at 3: retry from just before it.
    assert_eq!(
        s.step(0, append(3, (3, 4), &[], 0)),
        vec![mismatch((3, 4), 2)]
    );
}

#[test]
fn a_deposed_master_is_refused_at_once() {
    let mut s = store_with(&[(1, 1)], 5, 0);
    let cmds = s.step(0, append(4, (1, 1), &[(4, 2)], 0));
    assert_eq!(
        cmds,
        vec![StoreCommand::Send {
            to: M,
            msg: Message::AppendReject {
                epoch: 5,
                reason: RejectReason::Fenced,
            },
        }]
    );
    assert_eq!(s.last(), LogPosition::new(1, 1));
}

#[test]
fn a_conflicting_suffix_is_truncated_but_a_stale_duplicate_truncates_nothing() {
    let mut s = store_with(&[(1, 1), (1, 2), (1, 3)], 1, 1);
    // The epoch-2 master's log shares index 1 and has its marker at 2.
    let cmds = s.step(0, append(2, (1, 1), &[(2, 2)], 0));
    assert_eq!(
        cmds,
        vec![StoreCommand::Persist(vec![
            DiskOp::Promise(2),
            DiskOp::TruncateAfter(1),
            appended(2, &[(2, 2)]),
        ])]
    );
    s.step(1, StoreInput::Persisted);
    assert!(s.step(1, append(2, (2, 2), &[(2, 3)], 0)).len() == 1);
    s.step(2, StoreInput::Persisted);
    // A late copy of the first append: everything matches, nothing is cut.
    assert_eq!(
        s.step(3, append(2, (1, 1), &[(2, 2)], 0)),
        vec![ack(2, (2, 2))]
    );
    assert_eq!(s.last(), LogPosition::new(2, 3));
}

#[test]
fn stable_entries_are_never_truncated() {
    let mut s = store_with(&[(1, 1), (1, 2)], 2, 2);
    assert!(
        s.step(0, append(3, (1, 1), &[(3, 2)], 0))
            .iter()
            .all(|c| !matches!(c, StoreCommand::Send { .. }))
    );
    assert_eq!(s.last(), LogPosition::new(1, 2));
    assert_eq!(s.anomalies(), 1);
}

#[test]
fn stable_is_learned_only_up_to_what_the_append_proves() {
    let mut s = store_with(&[(1, 1), (1, 2), (1, 3)], 2, 0);
    // Master's stable is 3, but this heartbeat only proves index 1 is shared.
    let cmds = s.step(0, append(2, (1, 1), &[], 3));
    assert_eq!(cmds, vec![StoreCommand::Persist(vec![DiskOp::Stable(1)])]);
}

#[test]
fn a_promise_is_durable_before_it_is_sent_and_given_once_per_epoch() {
    let mut s = store_with(&[(1, 1)], 1, 0);
    let fence = |node, nonce| StoreInput::Receive {
        from: Endpoint::broker(node),
        msg: Message::Fence { epoch: 2, nonce },
    };
    let promise = |node| StoreCommand::Send {
        to: Endpoint::broker(node),
        msg: Message::Promise {
            epoch: 2,
            last: LogPosition::new(1, 1),
            stable: 0,
        },
    };
    assert_eq!(
        s.step(0, fence(7, 11)),
        vec![StoreCommand::Persist(vec![DiskOp::Promise(2)])]
    );
    assert_eq!(s.step(1, StoreInput::Persisted), vec![promise(7)]);
    // The same candidacy asking again gets the same answer...
    assert_eq!(s.step(2, fence(7, 11)), vec![promise(7)]);
    // ...another one (or the same node after a restart) does not.
    let refused = |node| StoreCommand::Send {
        to: Endpoint::broker(node),
        msg: Message::FenceRefused { promised: 2 },
    };
    assert_eq!(s.step(3, fence(8, 11)), vec![refused(8)]);
    assert_eq!(s.step(3, fence(7, 12)), vec![refused(7)]);
}

#[test]
fn fetch_is_served_only_to_the_promised_epoch() {
    let mut s = store_with(&[(1, 1), (1, 2)], 3, 0);
    let fetch = |epoch| StoreInput::Receive {
        from: M,
        msg: Message::Fetch {
            epoch,
            from: 1,
            to: 2,
        },
    };
    let req = ReadRequest {
        from: 1,
        to: 2,
        reply_to: M,
        epoch: 3,
        stable_only: false,
    };
    assert_eq!(s.step(0, fetch(3)), vec![StoreCommand::Read(req.clone())]);
    let entries = vec![entry(1, 1), entry(1, 2)];
    assert_eq!(
        s.step(
            1,
            StoreInput::ReadDone {
                req,
                entries: entries.clone()
            }
        ),
        vec![StoreCommand::Send {
            to: M,
            msg: Message::Entries { epoch: 3, entries },
        }]
    );
    assert_eq!(
        s.step(2, fetch(2)),
        vec![StoreCommand::Send {
            to: M,
            msg: Message::FenceRefused { promised: 3 },
        }]
    );
}

#[test]
fn a_failed_disk_silences_the_store() {
    let mut s = store_with(&[], 0, 0);
    assert!(s.step(0, StoreInput::DiskFailed).is_empty());
    assert!(s.step(0, append(1, (0, 0), &[(1, 1)], 0)).is_empty());
}

/// A store with compaction on (retention 2), peers 2 and 3.
fn compacting_store(positions: &[(u64, u64)], promised: u64, stable: u64) -> StoreNode {
    let mut cfg = Config::new(vec![1, 2, 3], vec![9]);
    cfg.store_retention = Some(2);
    cfg.retry_ms = 10;
    store_with(positions, promised, stable).with_config(&cfg)
}

#[test]
fn compaction_rides_on_a_persist_up_to_the_stable_index_on_disk() {
    let mut s = compacting_store(&[(1, 1), (1, 2), (1, 3), (1, 4), (1, 5)], 1, 5);
    // Stable 5 is on disk: the next Persist compacts through 5 - 2, first.
    let cmds = s.step(0, append(1, (1, 5), &[(1, 6)], 6));
    assert_eq!(
        cmds,
        vec![StoreCommand::Persist(vec![
            DiskOp::Compact(LogPosition::new(1, 3)),
            appended(1, &[(1, 6)]),
            DiskOp::Stable(6),
        ])]
    );
    assert_eq!(s.log_base(), LogPosition::new(1, 3));
    // An append reaching below the base is cut there and acked.
    s.step(1, StoreInput::Persisted);
    let cmds = s.step(2, append(1, (1, 1), &[(1, 2), (1, 3), (1, 4)], 6));
    assert_eq!(cmds, vec![ack(1, (1, 4))]);
    // One that disagrees with the entry at the base is refused.
    let cmds = s.step(3, append(1, (1, 2), &[(2, 3)], 6));
    assert!(cmds.is_empty());
    assert_eq!(s.anomalies(), 1);
}

#[test]
fn requests_below_the_base_get_the_state() {
    let mut s = compacting_store(&[(1, 1), (1, 2), (1, 3), (1, 4), (1, 5)], 1, 5);
    s.step(0, append(1, (1, 5), &[(1, 6)], 6));
    s.step(1, StoreInput::Persisted);
    let slave = Endpoint::broker(7);
    let catch_up = |from| StoreInput::Receive {
        from: slave,
        msg: Message::CatchUp {
            epoch: 1,
            from,
            to: 100,
        },
    };
    let snapshot = StoreCommand::ReadSnapshot(SnapshotRead {
        reply_to: slave,
        base: LogPosition::ZERO,
        after: None,
    });
    assert_eq!(s.step(2, catch_up(3)), vec![snapshot]);
    assert!(matches!(
        s.step(2, catch_up(4)).as_slice(),
        [StoreCommand::Read(ReadRequest { from: 4, to: 6, .. })]
    ));
    // The driver's chunk goes to the requester as is.
    let chunk = StoreInput::SnapshotDone {
        reply_to: slave,
        base: LogPosition::new(1, 3),
        after: None,
        pairs: vec![(Bytes::from("k"), Bytes::from("v"))],
        done: true,
    };
    assert!(matches!(
        s.step(3, chunk).as_slice(),
        [StoreCommand::Send { to, msg: Message::SnapshotChunk { done: true, .. } }] if *to == slave
    ));
}

#[test]
fn a_store_behind_the_floor_catches_up_from_a_peer_and_installs_its_state() {
    let mut s = compacting_store(&[(1, 1)], 1, 1);
    // The master holds nothing before 50 in memory (floor 50): reject, and
    // ask a peer store.
    let heartbeat = StoreInput::Receive {
        from: M,
        msg: Message::Append {
            epoch: 2,
            prev: LogPosition::new(2, 50),
            entries: vec![],
            stable: 50,
            floor: 50,
        },
    };
    let cmds = s.step(0, heartbeat);
    let peer = Endpoint::store(2);
    assert!(cmds.contains(&StoreCommand::Send {
        to: peer,
        msg: Message::CatchUp {
            epoch: 2,
            from: 2,
            to: 4097
        },
    }));
    s.step(1, StoreInput::Persisted);
    // The peer compacted through 40: its state, then entries after it.
    let base = LogPosition::new(2, 40);
    let chunk = |after: Option<&str>, key: &str, done| StoreInput::Receive {
        from: peer,
        msg: Message::SnapshotChunk {
            base,
            after: after.map(|a| Bytes::from(a.to_owned())),
            pairs: vec![(Bytes::from(key.to_owned()), Bytes::from("v"))],
            done,
        },
    };
    let kv = |k: &str| (Bytes::from(k.to_owned()), Bytes::from("v"));
    // Each chunk goes to disk as it comes; the next one is asked for only
    // once it is there, so a slow disk holds back the transfer.
    assert_eq!(
        s.step(2, chunk(None, "a", false)),
        vec![StoreCommand::Persist(vec![DiskOp::StageSnapshot {
            base,
            first: true,
            pairs: vec![kv("a")],
        }])]
    );
    assert_eq!(s.last(), LogPosition::new(1, 1), "nothing installed yet");
    assert_eq!(
        s.step(3, StoreInput::Persisted),
        vec![StoreCommand::Send {
            to: peer,
            msg: Message::SnapshotRequest {
                base,
                after: Some(Bytes::from("a"))
            }
        }]
    );
    let cmds = s.step(3, chunk(Some("a"), "b", true));
    assert_eq!(
        cmds,
        vec![
            StoreCommand::Send {
                to: Endpoint::store(3),
                msg: Message::CatchUp {
                    epoch: 2,
                    from: 41,
                    to: 4136
                },
            },
            StoreCommand::Persist(vec![
                DiskOp::StageSnapshot {
                    base,
                    first: false,
                    pairs: vec![kv("b")],
                },
                DiskOp::InstallSnapshot { base },
            ]),
        ]
    );
    assert_eq!(s.last(), base);
    assert_eq!(s.stable(), 40);
    // Stable entries from the peer follow, and become stable here.
    let cmds = s.step(
        4,
        StoreInput::Receive {
            from: Endpoint::store(3),
            msg: Message::StableEntries {
                epoch: 2,
                entries: vec![entry(2, 41), entry(2, 42)],
            },
        },
    );
    assert!(cmds.is_empty(), "queued behind the install");
    assert_eq!(
        s.step(5, StoreInput::Persisted),
        vec![StoreCommand::Persist(vec![
            appended(2, &[(2, 41), (2, 42)]),
            DiskOp::Stable(42),
        ])]
    );
}

#[test]
fn a_pre_vote_is_refused_while_a_master_is_heard() {
    let c = Endpoint::broker(5);
    let pre_vote = |epoch| StoreInput::Receive {
        from: c,
        msg: Message::PreVote { epoch },
    };
    let reply = |epoch, granted, promised| {
        vec![StoreCommand::Send {
            to: c,
            msg: Message::PreVoteReply {
                epoch,
                granted,
                promised,
            },
        }]
    };
    // A store that has heard no master grants an epoch above its promise,
    // and nothing at or below it.
    let mut s = store_with(&[(1, 1)], 1, 1);
    assert_eq!(s.step(0, pre_vote(2)), reply(2, true, 1));
    assert_eq!(s.step(0, pre_vote(1)), reply(1, false, 1));
    // Within an election timeout (400 ms by default) of the master's last
    // append: refused, and the promise is untouched. After: granted.
    s.step(1000, append(1, (1, 1), &[], 1));
    assert_eq!(s.step(1001, pre_vote(2)), reply(2, false, 1));
    assert_eq!(s.step(1399, pre_vote(2)), reply(2, false, 1));
    assert_eq!(s.step(1400, pre_vote(2)), reply(2, true, 1));
    assert_eq!(s.promised(), 1, "a pre-vote promises nothing");
    // A deposed master's append (below the promise) is not a master heard.
    let mut s = store_with(&[(1, 1)], 3, 1);
    s.step(2000, append(2, (1, 1), &[], 1));
    assert_eq!(s.step(2001, pre_vote(4)), reply(4, true, 3));
}

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
