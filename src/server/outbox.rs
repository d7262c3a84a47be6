//! The master task's side of each connection's outbox: what one dispatch has
//! for a connection goes to it as one batch.
//!
//! A send per message took the channel's atomics, a block slot and a wake-up
//! check for every delivery and confirm, and the connection task popped them
//! one by one. Batching keeps each connection's order (a batch holds that
//! connection's messages in the order the master produced them) and changes
//! nothing between connections, which never had an order.

use crate::master::inout::{ConnId, ToConn};
use std::collections::HashMap;
use tokio::sync::mpsc;

/// Connection ids are small counters: a plain multiplicative hash suffices.
type ConnMap<V> = HashMap<ConnId, V, std::hash::BuildHasherDefault<rustc_hash::FxHasher>>;

/// A connection's outbox: batches of messages, each in the master's order.
pub type OutboxTx = mpsc::UnboundedSender<Vec<ToConn>>;
/// The receiving end, held by the connection task (or an internal session).
pub type OutboxRx = mpsc::UnboundedReceiver<Vec<ToConn>>;

/// A new outbox.
pub fn channel() -> (OutboxTx, OutboxRx) {
    mpsc::unbounded_channel()
}

/// Largest buffer a connection's next batch starts with. The buffer is
/// only made when a message comes, and leaves with its batch, so no idle
/// connection holds one; a lone message after a burst gets a large one for
/// a moment.
const MAX_START_CAPACITY: usize = 4096;

struct Outbox {
    tx: OutboxTx,
    /// This dispatch's messages, not sent yet.
    pending: Vec<ToConn>,
    /// How many the last batch held: the next buffer starts that large, so
    /// a steady stream grows no Vec (the sent buffer leaves with its batch).
    last: usize,
}

/// Every registered connection's outbox.
#[derive(Default)]
pub struct Outboxes {
    map: ConnMap<Outbox>,
    /// Connections with pending messages, in the order they got their first.
    touched: Vec<ConnId>,
}

impl Outboxes {
    /// Register a connection.
    pub fn insert(&mut self, conn: ConnId, tx: OutboxTx) {
        self.map.insert(
            conn,
            Outbox {
                tx,
                pending: Vec::new(),
                last: 0,
            },
        );
    }

    /// Forget a connection, sending what is pending for it first.
    pub fn remove(&mut self, conn: ConnId) {
        if let Some(mut ob) = self.map.remove(&conn)
            && !ob.pending.is_empty()
        {
            let _ = ob.tx.send(std::mem::take(&mut ob.pending));
        }
    }

    /// Queue `msg` for `conn` until [`Outboxes::send_all`]. A connection
    /// closed by the master is sent its batch at once and forgotten.
    pub fn push(&mut self, conn: ConnId, msg: ToConn) {
        let closing = matches!(msg, ToConn::CloseConnection(_));
        let Some(ob) = self.map.get_mut(&conn) else {
            return;
        };
        if ob.pending.capacity() == 0 {
            ob.pending.reserve(ob.last.clamp(1, MAX_START_CAPACITY));
        }
        if ob.pending.is_empty() {
            self.touched.push(conn);
        }
        ob.pending.push(msg);
        if closing {
            self.remove(conn);
        }
    }

    /// Send every connection its pending batch.
    pub fn send_all(&mut self) {
        for conn in self.touched.drain(..) {
            if let Some(ob) = self.map.get_mut(&conn)
                && !ob.pending.is_empty()
            {
                ob.last = ob.pending.len();
                let _ = ob.tx.send(std::mem::take(&mut ob.pending));
            }
        }
    }

    /// Send every connection `msg()` at once (nothing may be pending).
    pub fn broadcast(&mut self, msg: impl Fn() -> ToConn) {
        debug_assert!(self.touched.is_empty(), "broadcast inside a dispatch");
        for ob in self.map.values() {
            let _ = ob.tx.send(vec![msg()]);
        }
    }

    /// Send every connection `msg()` and forget them all.
    pub fn close_all(&mut self, msg: impl Fn() -> ToConn) {
        self.send_all();
        for (_, ob) in self.map.drain() {
            let _ = ob.tx.send(vec![msg()]);
        }
    }
}

/// Send one message to an outbox that is not in [`Outboxes`] (yet).
pub fn send_one(tx: &OutboxTx, msg: ToConn) {
    let _ = tx.send(vec![msg]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confirm(tag: u64) -> ToConn {
        ToConn::Confirm {
            ch: 1,
            tag,
            ack: true,
        }
    }

    fn tags(batch: &[ToConn]) -> Vec<u64> {
        batch
            .iter()
            .map(|m| match m {
                ToConn::Confirm { tag, .. } => *tag,
                _ => 0,
            })
            .collect()
    }

    /// One dispatch is one batch per connection, in the master's order,
    /// and nothing is sent before `send_all`.
    #[test]
    fn a_dispatch_is_one_batch_per_connection_in_order() {
        let mut o = Outboxes::default();
        let (tx1, mut rx1) = channel();
        let (tx2, mut rx2) = channel();
        o.insert(1, tx1);
        o.insert(2, tx2);
        o.push(1, confirm(1));
        o.push(2, confirm(10));
        o.push(1, confirm(2));
        o.push(3, confirm(99)); // not registered: dropped
        assert!(rx1.try_recv().is_err());
        o.send_all();
        assert_eq!(tags(&rx1.try_recv().unwrap()), [1, 2]);
        assert_eq!(tags(&rx2.try_recv().unwrap()), [10]);
        assert!(rx1.try_recv().is_err());
        o.push(1, confirm(3));
        o.send_all();
        assert_eq!(tags(&rx1.try_recv().unwrap()), [3]);
    }

    /// A connection the master closes gets what came before the close and
    /// the close itself, and nothing after.
    #[test]
    fn a_closed_connection_gets_its_batch_and_is_forgotten() {
        let mut o = Outboxes::default();
        let (tx, mut rx) = channel();
        o.insert(1, tx);
        o.push(1, confirm(1));
        o.push(
            1,
            ToConn::CloseConnection(crate::error::AmqpError::new(
                crate::error::ReplyCode::ConnectionForced,
                "bye",
            )),
        );
        o.push(1, confirm(2));
        o.send_all();
        let batch = rx.try_recv().unwrap();
        assert_eq!(batch.len(), 2);
        assert!(matches!(batch[1], ToConn::CloseConnection(_)));
        assert!(rx.try_recv().is_err());
    }
}
