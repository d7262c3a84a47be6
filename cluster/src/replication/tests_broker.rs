//! Broker-node handler tests: a slave, an election, a master, driven by hand
//! with the replies stores would give; the exact command lists are compared.

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
    Message::Append {
        epoch,
        prev,
        entries,
        stable,
        floor: 0,
    }
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

#[test]
fn a_slave_applies_only_what_the_append_proves_stable() {
    let mut b = slave();
    let from = Endpoint::broker(OTHER);
    // Entries 2..3 arrive with stable 5: only up to 3 is proven shared.
    let cmds = b.step(
        2,
        recv(
            from,
            append_msg(1, pos(1, 1), vec![entry(1, 2), entry(1, 3)], 5),
        ),
    );
    assert_eq!(
        cmds,
        vec![
            BrokerCommand::Apply(vec![entry(1, 2), entry(1, 3)]),
            send(
                from,
                Message::AppendAck {
                    epoch: 1,
                    last: pos(1, 3),
                    incarnation: 0,
                }
            ),
        ]
    );
    // A gap is rejected with our end as the hint; meanwhile the stable
    // entries we lack are asked of a store (the master may no longer hold
    // them in memory).
    let cmds = b.step(3, recv(from, append_msg(1, pos(1, 9), vec![], 5)));
    let reason = RejectReason::Mismatch {
        prev: pos(1, 9),
        hint: 3,
        incarnation: 0,
    };
    let catch_up = Message::CatchUp {
        epoch: 1,
        from: 4,
        to: 4 + cfg().fetch_entries_max - 1,
    };
    assert_eq!(
        cmds,
        vec![
            send(Endpoint::store(cfg().stores[0]), catch_up),
            send(from, Message::AppendReject { epoch: 1, reason })
        ]
    );
    // The store answers with stable entries: applied at once.
    let cmds = b.step(
        4,
        recv(
            Endpoint::store(cfg().stores[0]),
            Message::StableEntries {
                epoch: 1,
                entries: vec![entry(1, 4), entry(1, 5)],
            },
        ),
    );
    assert_eq!(
        cmds,
        vec![BrokerCommand::Apply(vec![entry(1, 4), entry(1, 5)])]
    );
    assert_eq!(b.applied(), 5);
    // A late duplicate answer changes nothing.
    let again = Message::StableEntries {
        epoch: 1,
        entries: vec![entry(1, 4)],
    };
    assert!(
        b.step(5, recv(Endpoint::store(cfg().stores[1]), again))
            .is_empty()
    );
    // A deposed master (epoch 0) is told the current epoch.
    let old = Endpoint::broker(6);
    let cmds = b.step(4, recv(old, append_msg(0, pos(0, 0), vec![], 0)));
    let reason = RejectReason::Fenced;
    assert_eq!(
        cmds,
        vec![send(old, Message::AppendReject { epoch: 1, reason })]
    );
    assert_eq!(
        b.append(Bytes::from_static(b"x")),
        Err(AppendError::NotMaster {
            epoch: 1,
            master: Some(OTHER)
        })
    );
}

/// Tick a slave at `now` (past its deadline): it pre-votes for `epoch`;
/// stores 1 and 2 grant, and it campaigns. Returns the commands of the
/// second grant.
fn prevote_then_campaign(b: &mut BrokerNode, now: u64, epoch: u64) -> Vec<BrokerCommand> {
    let cmds = b.step(now, BrokerInput::Tick);
    let asks: Vec<_> = [1, 2, 3]
        .map(|s| send(Endpoint::store(s), Message::PreVote { epoch }))
        .to_vec();
    assert_eq!(cmds, asks, "a pre-vote, not a campaign");
    assert_eq!(b.epoch(), epoch - 1, "a pre-vote raises no epoch");
    let grant = Message::PreVoteReply {
        epoch,
        granted: true,
        promised: epoch - 1,
    };
    assert!(
        b.step(now, recv(Endpoint::store(1), grant.clone()))
            .is_empty()
    );
    b.step(now, recv(Endpoint::store(2), grant))
}

/// Drive `slave()` through an election to master of epoch 2 with log
/// 1:1 1:2 1:3 2:4(marker), checking each step.
fn elect() -> BrokerNode {
    let mut b = slave();
    assert!(
        b.step(100, BrokerInput::Tick).is_empty(),
        "deadline is 1 + 100"
    );
    let cmds = prevote_then_campaign(&mut b, 101, 2);
    assert_eq!(cmds[0], BrokerCommand::Campaign { epoch: 2 });
    let Some(BrokerCommand::Send {
        msg: Message::Fence { epoch: 2, nonce },
        ..
    }) = cmds.get(1).cloned()
    else {
        panic!("expected fences: {cmds:?}")
    };
    let fences: Vec<_> = [1, 2, 3]
        .map(|s| send(Endpoint::store(s), Message::Fence { epoch: 2, nonce }))
        .to_vec();
    assert_eq!(cmds[1..], fences[..]);

    let promise = |last| Message::Promise {
        epoch: 2,
        last,
        stable: 1,
    };
    assert!(
        b.step(102, recv(Endpoint::store(1), promise(pos(1, 1))))
            .is_empty()
    );
    // Quorum: store 2 has the best log; we lack 2..3, so fetch them.
    let cmds = b.step(103, recv(Endpoint::store(2), promise(pos(1, 3))));
    assert_eq!(
        cmds,
        vec![send(
            Endpoint::store(2),
            Message::Fetch {
                epoch: 2,
                from: 2,
                to: 3
            }
        )]
    );
    let entries = Message::Entries {
        epoch: 2,
        entries: vec![entry(1, 2), entry(1, 3)],
    };
    let cmds = b.step(104, recv(Endpoint::store(2), entries));
    // The marker goes to every store and the other broker, optimistically
    // after our last adopted entry.
    let expected: Vec<_> = [
        Endpoint::store(1),
        Endpoint::store(2),
        Endpoint::store(3),
        Endpoint::broker(OTHER),
    ]
    .map(|to| send(to, append_msg(2, pos(1, 3), vec![marker(2, 4)], 1)))
    .to_vec();
    assert_eq!(cmds, expected);
    assert_eq!(b.role(), RoleKind::Candidate);

    // Store 1 lacks 2..3: it rejects, and gets them resent (batches of 2).
    let reason = RejectReason::Mismatch {
        prev: pos(1, 3),
        hint: 1,
        incarnation: 0,
    };
    let cmds = b.step(
        105,
        recv(
            Endpoint::store(1),
            Message::AppendReject { epoch: 2, reason },
        ),
    );
    assert_eq!(
        cmds,
        vec![
            send(
                Endpoint::store(1),
                append_msg(2, pos(1, 1), vec![entry(1, 2), entry(1, 3)], 1)
            ),
            send(
                Endpoint::store(1),
                append_msg(2, pos(1, 3), vec![marker(2, 4)], 1)
            ),
        ]
    );
    // Old-epoch entries on a quorum are not stable by themselves (I1).
    let ack = |last| Message::AppendAck {
        epoch: 2,
        last,
        incarnation: 0,
    };
    assert!(
        b.step(106, recv(Endpoint::store(1), ack(pos(1, 3))))
            .is_empty()
    );
    assert!(
        b.step(106, recv(Endpoint::store(2), ack(pos(2, 4))))
            .is_empty()
    );
    // The marker on a quorum: everything up to it is stable, apply, then serve.
    let cmds = b.step(107, recv(Endpoint::store(1), ack(pos(2, 4))));
    assert_eq!(
        cmds,
        vec![
            BrokerCommand::Apply(vec![entry(1, 2), entry(1, 3), marker(2, 4)]),
            BrokerCommand::BecameMaster {
                epoch: 2,
                stable: 4
            },
        ]
    );
    assert_eq!(b.role(), RoleKind::Master);
    b
}

#[test]
fn an_election_fences_adopts_fetches_and_confirms_a_marker() {
    let b = elect();
    assert_eq!(b.applied(), 4);
    assert!(is_epoch_marker(b.entry(4).expect("marker")));
}

#[test]
fn the_master_pipelines_within_a_window_and_advances_stable_on_a_quorum() {
    let mut b = elect();
    let positions: Vec<_> = (0..6)
        .map(|i| b.append(Bytes::from(format!("p{i}"))).expect("master"))
        .collect();
    assert_eq!(positions.first(), Some(&pos(2, 5)));
    assert_eq!(b.append(Bytes::new()), Err(AppendError::EmptyPayload));
    let cmds = b.step(110, BrokerInput::Flush);
    // Window 4 past what each store acked (4): 5..8, as two batches of 2.
    let to_store1: Vec<_> = cmds
        .iter()
        .filter_map(|c| match c {
            BrokerCommand::Send {
                to,
                msg: Message::Append { prev, entries, .. },
            } if *to == Endpoint::store(1) => Some((prev.index, entries.len())),
            _ => None,
        })
        .collect();
    assert_eq!(to_store1, vec![(4, 2), (6, 2)]);
    // One store acking is not a quorum; two are.
    let ack = Message::AppendAck {
        epoch: 2,
        last: pos(2, 6),
        incarnation: 0,
    };
    let cmds = b.step(111, recv(Endpoint::store(1), ack.clone()));
    assert!(cmds.iter().all(|c| !matches!(c, BrokerCommand::Stable(_))));
    let cmds = b.step(112, recv(Endpoint::store(3), ack));
    assert_eq!(cmds.first(), Some(&BrokerCommand::Stable(6)));
    // The window moved for store 3: 9..10 go out, carrying the new stable.
    // Its floor is what every store holds: store 2 still acked only 4.
    assert!(cmds.contains(&send(
        Endpoint::store(3),
        Message::Append {
            epoch: 2,
            prev: pos(2, 8),
            entries: vec![
                b.entry(9).cloned().expect("9"),
                b.entry(10).cloned().expect("10")
            ],
            stable: 6,
            floor: 4,
        },
    )));
    // Once store 2 acks too, the next step drops 1..=6 from memory.
    let ack = Message::AppendAck {
        epoch: 2,
        last: pos(2, 6),
        incarnation: 0,
    };
    b.step(113, recv(Endpoint::store(2), ack));
    b.step(114, BrokerInput::Tick);
    assert_eq!(b.log_base(), 6);
    assert!(b.entry(6).is_none() && b.entry(7).is_some());
}

#[test]
fn a_master_steps_down_at_once_on_a_higher_epoch() {
    let mut b = elect();
    let reject = Message::AppendReject {
        epoch: 3,
        reason: RejectReason::Fenced,
    };
    let cmds = b.step(120, recv(Endpoint::store(3), reject));
    assert_eq!(cmds, vec![BrokerCommand::SteppedDown { epoch: 3 }]);
    assert_eq!(b.role(), RoleKind::Slave);
    assert!(matches!(
        b.append(Bytes::from_static(b"late")),
        Err(AppendError::NotMaster { epoch: 3, .. })
    ));
}

#[test]
fn heartbeats_and_resends_need_no_new_entries() {
    let mut b = elect();
    // Nothing to send before heartbeat_ms has passed since the last append.
    assert!(b.step(110, BrokerInput::Tick).is_empty());
    let cmds = b.step(117, BrokerInput::Tick);
    // Store 3 never acked: its heartbeat claims only what it acked (nothing),
    // and the unacked marker is resent only after retry_ms.
    assert!(cmds.contains(&send(
        Endpoint::store(3),
        append_msg(2, pos(0, 0), vec![], 4)
    )));
    let cmds = b.step(160, BrokerInput::Tick);
    assert!(cmds.contains(&send(
        Endpoint::store(3),
        append_msg(2, pos(0, 0), vec![entry(1, 1), entry(1, 2)], 4)
    )));
}

#[test]
fn a_competing_candidate_loses_to_the_master_of_its_epoch() {
    let mut b = slave();
    let cmds = prevote_then_campaign(&mut b, 101, 2);
    assert_eq!(cmds[0], BrokerCommand::Campaign { epoch: 2 });
    // OTHER won epoch 2 first: its append makes us its slave.
    let from = Endpoint::broker(OTHER);
    let cmds = b.step(
        102,
        recv(from, append_msg(2, pos(1, 1), vec![marker(2, 2)], 1)),
    );
    assert_eq!(
        cmds,
        vec![send(
            from,
            Message::AppendAck {
                epoch: 2,
                last: pos(2, 2),
                incarnation: 0,
            }
        )]
    );
    assert_eq!(b.role(), RoleKind::Slave);
}

#[test]
fn a_slave_below_a_stores_base_restores_its_state_then_applies_the_suffix() {
    let mut b = BrokerNode::new(ME, cfg(), 7, 0);
    // The master holds nothing before 30 (its floor): the heartbeat anchored
    // there is rejected, and the slave asks a store.
    let cmds = b.step(
        1,
        recv(
            Endpoint::broker(OTHER),
            Message::Append {
                epoch: 2,
                prev: pos(2, 30),
                entries: vec![],
                stable: 30,
                floor: 30,
            },
        ),
    );
    let store = Endpoint::store(1);
    assert!(cmds.contains(&send(
        store,
        Message::CatchUp {
            epoch: 2,
            from: 1,
            to: 10
        }
    )));
    // The store compacted through 2:25: its state comes in two chunks.
    let base = pos(2, 25);
    let kv = |k: &str| (Bytes::from(k.to_owned()), Bytes::from("v"));
    let chunk = |after: Option<&str>, k: &str, done| {
        recv(
            store,
            Message::SnapshotChunk {
                base,
                after: after.map(|a| Bytes::from(a.to_owned())),
                pairs: vec![kv(k)],
                done,
            },
        )
    };
    // Each chunk goes to the broker as it comes.
    assert_eq!(
        b.step(2, chunk(None, "a", false)),
        vec![
            BrokerCommand::Restore {
                base,
                first: true,
                pairs: vec![kv("a")],
                done: false,
            },
            send(
                store,
                Message::SnapshotRequest {
                    base,
                    after: Some(Bytes::from("a"))
                }
            )
        ]
    );
    assert_eq!(b.applied(), 0, "nothing replaced until the last chunk");
    // A duplicate of a later chunk from elsewhere changes nothing.
    assert!(
        b.step(
            3,
            recv(
                Endpoint::store(2),
                Message::SnapshotChunk {
                    base,
                    after: Some(Bytes::from("a")),
                    pairs: vec![kv("zz")],
                    done: true,
                }
            )
        )
        .is_empty()
    );
    let cmds = b.step(4, chunk(Some("a"), "b", true));
    assert_eq!(
        cmds,
        vec![
            BrokerCommand::Restore {
                base,
                first: false,
                pairs: vec![kv("b")],
                done: true,
            },
            send(
                Endpoint::store(2),
                Message::CatchUp {
                    epoch: 2,
                    from: 26,
                    to: 35
                }
            ),
        ]
    );
    assert_eq!(b.applied(), 25);
    // The suffix follows the state.
    let cmds = b.step(
        5,
        recv(
            Endpoint::store(2),
            Message::StableEntries {
                epoch: 2,
                entries: vec![entry(2, 26), entry(2, 27)],
            },
        ),
    );
    assert_eq!(
        cmds,
        vec![BrokerCommand::Apply(vec![entry(2, 26), entry(2, 27)])]
    );
    assert_eq!(b.applied(), 27);
}

#[test]
fn a_refused_pre_vote_raises_no_epoch_and_the_master_is_still_followed() {
    let mut b = slave();
    let cmds = b.step(101, BrokerInput::Tick);
    assert_eq!(cmds.len(), 3, "a pre-vote to each store: {cmds:?}");
    let refuse = Message::PreVoteReply {
        epoch: 2,
        granted: false,
        promised: 1,
    };
    for s in [1, 2, 3] {
        assert!(
            b.step(102, recv(Endpoint::store(s), refuse.clone()))
                .is_empty()
        );
    }
    assert_eq!((b.epoch(), b.role()), (1, RoleKind::Slave));
    // The stores refused because they hear the master: when its append
    // gets through, it is followed, and the round is over.
    let from = Endpoint::broker(OTHER);
    let cmds = b.step(120, recv(from, append_msg(1, pos(1, 1), vec![], 1)));
    assert_eq!(
        cmds,
        vec![send(
            from,
            Message::AppendAck {
                epoch: 1,
                last: pos(1, 1),
                incarnation: 0,
            }
        )]
    );
    let late = Message::PreVoteReply {
        epoch: 2,
        granted: true,
        promised: 1,
    };
    for s in [1, 2] {
        assert!(
            b.step(121, recv(Endpoint::store(s), late.clone()))
                .is_empty()
        );
    }
    assert_eq!((b.epoch(), b.role()), (1, RoleKind::Slave));
    // Refused stores are asked again every retry_ms while the round lasts.
    let mut b = slave();
    b.step(101, BrokerInput::Tick);
    b.step(102, recv(Endpoint::store(1), late.clone()));
    let cmds = b.step(151, BrokerInput::Tick);
    assert_eq!(
        cmds,
        vec![
            send(Endpoint::store(2), Message::PreVote { epoch: 2 }),
            send(Endpoint::store(3), Message::PreVote { epoch: 2 }),
        ]
    );
}

#[test]
fn a_master_no_quorum_of_stores_answers_steps_down() {
    let mut b = elect();
    let e = b.epoch();
    let cq = cfg().check_quorum_ms;
    // Store 1 keeps answering, the others fall silent: one of three is not
    // a quorum.
    let mut now = 110;
    while now < 104 + cq {
        let cmds = b.step(now, BrokerInput::Tick);
        assert!(
            !cmds.contains(&BrokerCommand::SteppedDown { epoch: e }),
            "stepped down at {now}, before check_quorum_ms"
        );
        b.step(
            now,
            recv(
                Endpoint::store(1),
                Message::AppendAck {
                    epoch: e,
                    last: pos(2, 4),
                    incarnation: 0,
                },
            ),
        );
        now += 10;
    }
    let cmds = b.step(200 + cq, BrokerInput::Tick);
    assert_eq!(cmds, vec![BrokerCommand::SteppedDown { epoch: e }]);
    assert_eq!((b.role(), b.epoch()), (RoleKind::Slave, e));
    assert!(b.append(Bytes::from_static(b"x")).is_err());
}

#[test]
fn a_restarted_slave_pre_votes_above_the_promise_it_learns() {
    // Fresh from a restart: epoch 0, so its first round asks for epoch 1.
    let mut b = BrokerNode::new(ME, cfg(), 7, 0);
    let cmds = b.step(200, BrokerInput::Tick);
    assert!(cmds.contains(&send(Endpoint::store(1), Message::PreVote { epoch: 1 })));
    // Store 1 promised 5 long ago: ask again for 6 at once.
    let cmds = b.step(
        201,
        recv(
            Endpoint::store(1),
            Message::PreVoteReply {
                epoch: 1,
                granted: false,
                promised: 5,
            },
        ),
    );
    let asks: Vec<_> = [1, 2, 3]
        .map(|s| send(Endpoint::store(s), Message::PreVote { epoch: 6 }))
        .to_vec();
    assert_eq!(cmds, asks);
    assert_eq!(b.epoch(), 5);
}

#[test]
fn a_ghost_ack_of_a_lost_disk_counts_for_nothing() {
    let mut b = elect();
    for i in 0..2 {
        b.append(Bytes::from(format!("p{i}"))).expect("master");
    }
    b.step(110, BrokerInput::Flush);
    let ack = |index, incarnation| Message::AppendAck {
        epoch: 2,
        last: pos(2, index),
        incarnation,
    };
    let stable_of = |cmds: &[BrokerCommand]| {
        cmds.iter().find_map(|c| match c {
            BrokerCommand::Stable(i) => Some(*i),
            _ => None,
        })
    };
    // Store 1's disk (incarnation 10) acks 5. Then it is lost: the new disk
    // (incarnation 20) rejects from an empty log, so the master forgets 5.
    b.step(111, recv(Endpoint::store(1), ack(5, 10)));
    let reject = Message::AppendReject {
        epoch: 2,
        reason: RejectReason::Mismatch {
            prev: pos(2, 5),
            hint: 0,
            incarnation: 20,
        },
    };
    b.step(112, recv(Endpoint::store(1), reject));
    // A ghost ack of the old disk arrives late, with store 3's ack: no
    // quorum holds 6 (store 1's new disk holds nothing).
    b.step(113, recv(Endpoint::store(1), ack(6, 10)));
    let cmds = b.step(114, recv(Endpoint::store(3), ack(6, 0)));
    assert_eq!(stable_of(&cmds), None, "a ghost ack made 6 stable");
    // The new disk's own ack counts.
    let cmds = b.step(115, recv(Endpoint::store(1), ack(6, 20)));
    assert_eq!(stable_of(&cmds), Some(6));
}

#[test]
fn a_new_incarnation_restarts_what_the_master_sends_a_store() {
    let mut b = elect();
    b.append(Bytes::from_static(b"p")).expect("master");
    b.step(110, BrokerInput::Flush);
    let ack = |incarnation| Message::AppendAck {
        epoch: 2,
        last: pos(2, 5),
        incarnation,
    };
    b.step(111, recv(Endpoint::store(1), ack(10)));
    // Store 1's disk is lost; its first answer (a heartbeat ack at 0)
    // carries the new incarnation, and the master sends from the start.
    let ack0 = Message::AppendAck {
        epoch: 2,
        last: LogPosition::ZERO,
        incarnation: 20,
    };
    b.step(112, recv(Endpoint::store(1), ack0));
    let cmds = b.step(200, BrokerInput::Tick);
    let to_store1: Vec<_> = cmds
        .iter()
        .filter_map(|c| match c {
            BrokerCommand::Send {
                to,
                msg: Message::Append { prev, .. },
            } if *to == Endpoint::store(1) => Some(prev.index),
            _ => None,
        })
        .collect();
    assert_eq!(to_store1.first(), Some(&0), "{cmds:?}");
}
