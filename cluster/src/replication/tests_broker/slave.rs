//! A slave: it applies only what the master's Appends prove stable, and
//! refuses to append.

use super::*;

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
