//! A master: pipelining within a window, stability on a quorum, heartbeats
//! and resends, stepping down (a higher epoch, check-quorum), and a store
//! whose disk was lost (its incarnation).

use super::election::elect;
use super::*;

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
                msg: Message::Append(Append { prev, entries, .. }),
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
        Message::Append(Append {
            epoch: 2,
            prev: pos(2, 8),
            entries: vec![
                b.entry(9).cloned().expect("9"),
                b.entry(10).cloned().expect("10")
            ],
            stable: 6,
            floor: 4,
        }),
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
                msg: Message::Append(Append { prev, .. }),
            } if *to == Endpoint::store(1) => Some(prev.index),
            _ => None,
        })
        .collect();
    assert_eq!(to_store1.first(), Some(&0), "{cmds:?}");
}
