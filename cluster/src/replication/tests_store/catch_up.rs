//! Keeping up: compaction riding on a Persist, requests below the log base
//! answered with the state, and a store behind the floor catching up from a
//! peer and installing its state.

use super::*;

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
        [StoreCommand::Send { to, msg: Message::SnapshotChunk(SnapshotChunk { done: true, .. }) }] if *to == slave
    ));
}

#[test]
fn a_store_behind_the_floor_catches_up_from_a_peer_and_installs_its_state() {
    let mut s = compacting_store(&[(1, 1)], 1, 1);
    // The master holds nothing before 50 in memory (floor 50): reject, and
    // ask a peer store.
    let heartbeat = StoreInput::Receive {
        from: M,
        msg: Message::Append(Append {
            epoch: 2,
            prev: LogPosition::new(2, 50),
            entries: vec![],
            stable: 50,
            floor: 50,
        }),
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
        msg: Message::SnapshotChunk(SnapshotChunk {
            base,
            after: after.map(|a| Bytes::from(a.to_owned())),
            pairs: vec![(Bytes::from(key.to_owned()), Bytes::from("v"))],
            done,
        }),
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
