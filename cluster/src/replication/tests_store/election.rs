//! The store's side of an election: a promise (durable before it is sent,
//! once per epoch), fetches served only to the promised epoch, and
//! pre-votes refused while a master is heard.

use super::*;

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
