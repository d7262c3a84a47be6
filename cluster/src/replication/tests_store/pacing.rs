//! Commit pacing (`Config::commit_interval_us`): a paced store starts its
//! next Persist only when the driver reports the commit window open, and
//! everything that arrives meanwhile joins that Persist. Acks wait for
//! their own fsync only, never for a window.

use super::*;

fn paced(positions: &[(u64, u64)], promised: u64) -> StoreNode {
    let mut cfg = Config::new(vec![1], vec![9]);
    cfg.commit_interval_us = 1_000;
    store_with(positions, promised, 0).with_config(&cfg)
}

#[test]
fn the_first_persist_goes_at_once_and_the_next_waits_for_the_window() {
    let mut s = paced(&[], 1);
    // Nothing committed yet: the window is open.
    assert_eq!(
        s.step(0, append(1, (0, 0), &[(1, 1)], 0)),
        vec![StoreCommand::Persist(vec![appended(1, &[(1, 1)])])]
    );
    assert!(s.step(0, append(1, (1, 1), &[(1, 2)], 0)).is_empty());
    // The fsync is done: its ack goes out, but the next Persist waits, and
    // the driver is asked once for the window, with the batch's size.
    assert_eq!(
        s.step(1, StoreInput::Persisted),
        vec![
            ack(1, (1, 1)),
            StoreCommand::AwaitCommitWindow { queued_entries: 1 }
        ]
    );
    assert!(
        s.step(1, append(1, (1, 2), &[(1, 3), (1, 4)], 1))
            .is_empty()
    );
    // The window opens: one Persist with everything that waited.
    assert_eq!(
        s.step(2, StoreInput::CommitWindow),
        vec![StoreCommand::Persist(vec![
            appended(1, &[(1, 2)]),
            appended(1, &[(1, 3), (1, 4)]),
            DiskOp::Stable(1),
        ])]
    );
    assert_eq!(
        s.step(3, StoreInput::Persisted),
        vec![ack(1, (1, 2)), ack(1, (1, 4))]
    );
}

#[test]
fn a_window_that_opens_while_idle_lets_the_next_append_go_at_once() {
    let mut s = paced(&[], 1);
    assert_eq!(s.step(0, append(1, (0, 0), &[(1, 1)], 0)).len(), 1);
    assert_eq!(s.step(1, StoreInput::Persisted), vec![ack(1, (1, 1))]);
    // Nothing queued: nothing asked. An append then asks for the window.
    assert_eq!(
        s.step(2, append(1, (1, 1), &[(1, 2)], 0)),
        vec![StoreCommand::AwaitCommitWindow { queued_entries: 1 }]
    );
    assert_eq!(
        s.step(2, StoreInput::CommitWindow),
        vec![StoreCommand::Persist(vec![appended(1, &[(1, 2)])])]
    );
    // An early or repeated window report only opens it.
    assert!(s.step(3, StoreInput::CommitWindow).is_empty());
    assert_eq!(s.step(3, StoreInput::Persisted), vec![ack(1, (1, 2))]);
    assert_eq!(
        s.step(4, append(1, (1, 2), &[(1, 3)], 0)),
        vec![StoreCommand::Persist(vec![appended(1, &[(1, 3)])])]
    );
}

#[test]
fn replies_that_wait_for_no_ops_are_not_held_by_the_window() {
    let mut s = paced(&[(1, 1)], 1);
    assert_eq!(s.step(0, append(1, (1, 1), &[(1, 2)], 0)).len(), 1);
    assert_eq!(s.step(1, StoreInput::Persisted), vec![ack(1, (1, 2))]);
    // The window is closed, but an append of entries already held needs
    // no fsync: its ack goes out at once.
    assert_eq!(
        s.step(1, append(1, (1, 1), &[(1, 2)], 0)),
        vec![ack(1, (1, 2))]
    );
}

#[test]
fn unpaced_stores_never_ask_for_a_window() {
    let mut s = store_with(&[], 1, 0);
    assert_eq!(s.step(0, append(1, (0, 0), &[(1, 1)], 0)).len(), 1);
    assert!(s.step(0, append(1, (1, 1), &[(1, 2)], 0)).is_empty());
    assert_eq!(
        s.step(1, StoreInput::Persisted),
        vec![
            ack(1, (1, 1)),
            StoreCommand::Persist(vec![appended(1, &[(1, 2)])])
        ]
    );
}
