//! Becoming master: pre-vote, fencing the stores, adopting and fetching the
//! best log, confirming the epoch marker; and the ways a candidacy or a
//! pre-vote loses. `elect` is the fixture the master tests start from.

use super::*;

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
pub(super) fn elect() -> BrokerNode {
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
            // The slave broker hears of the new stable index at once (it
            // applies and serves reads only what it knows is stable).
            send(
                Endpoint::broker(5),
                append_msg(2, LogPosition::ZERO, vec![], 4)
            ),
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
