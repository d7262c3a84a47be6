//! Appends and their durability: acks only after the fsync, group commit,
//! log matching and its rejects, a deposed master refused, truncation of a
//! conflicting suffix (never of stable entries), the stable index, and a
//! failed disk.

use super::*;

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
fn a_failed_disk_silences_the_store() {
    let mut s = store_with(&[], 0, 0);
    assert!(s.step(0, StoreInput::DiskFailed).is_empty());
    assert!(s.step(0, append(1, (0, 0), &[(1, 1)], 0)).is_empty());
}
