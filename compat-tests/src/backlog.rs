//! Backlogs for the tests of queues and streams longer than RAM
//! (`tests/paging.rs`, `tests/stream_paging.rs`): bounded waits, and a queue
//! filled with numbered persistent bodies under publisher confirms.

use crate::procfs::numbered_body;
use lapin::options::BasicPublishOptions;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;
use tokio::time::timeout;

/// The longest any single step of these tests may take.
pub const WAIT: Duration = Duration::from_secs(120);

/// Publishes waiting for their confirm at most, while filling.
const CONFIRM_WINDOW: usize = 200;

/// `f`, or a panic naming `what` after [`WAIT`].
pub async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {WAIT:?}"))
}

/// A connection to `uri`, within [`WAIT`].
pub async fn connect(uri: &str) -> Connection {
    bounded(
        "connect",
        Connection::connect(uri, ConnectionProperties::default()),
    )
    .await
    .expect("connect")
}

/// Publish [`numbered_body`]s `seqs` of `len` bytes, persistent, to `queue`
/// through the default exchange on confirming channel `ch`, and check each
/// is confirmed (at most 200 wait at once).
pub async fn fill(ch: &Channel, queue: &str, seqs: std::ops::Range<u64>, len: usize) {
    let mut in_flight = VecDeque::new();
    for seq in seqs {
        let confirm = bounded(
            "publish",
            ch.basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                &numbered_body(seq, len),
                BasicProperties::default().with_delivery_mode(2),
            ),
        )
        .await
        .expect("basic.publish");
        in_flight.push_back(confirm);
        if in_flight.len() >= CONFIRM_WINDOW {
            let c = in_flight.pop_front().expect("in flight");
            assert!(bounded("confirm", c).await.expect("confirm").is_ack());
        }
    }
    for c in in_flight {
        assert!(bounded("confirm", c).await.expect("confirm").is_ack());
    }
}
