//! A slave below a store's log base: it takes the store's state chunk by
//! chunk (`Restore`), then applies the entries after it.

use super::*;

#[test]
fn a_slave_below_a_stores_base_restores_its_state_then_applies_the_suffix() {
    let mut b = BrokerNode::new(ME, cfg(), 7, 0);
    // The master holds nothing before 30 (its floor): the heartbeat anchored
    // there is rejected, and the slave asks a store.
    let cmds = b.step(
        1,
        recv(
            Endpoint::broker(OTHER),
            Message::Append(Append {
                epoch: 2,
                prev: pos(2, 30),
                entries: vec![],
                stable: 30,
                floor: 30,
            }),
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
            Message::SnapshotChunk(SnapshotChunk {
                base,
                after: after.map(|a| Bytes::from(a.to_owned())),
                pairs: vec![kv(k)],
                done,
            }),
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
                Message::SnapshotChunk(SnapshotChunk {
                    base,
                    after: Some(Bytes::from("a")),
                    pairs: vec![kv("zz")],
                    done: true,
                })
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
