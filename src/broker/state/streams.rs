//! A stream's state beside its entries: its retention cut and its tracked
//! references (stored offsets, publisher sequences), each under a key of
//! its own (`keys.rs`), newest overwriting, stored as apply leaves them.

use super::{BrokerReducer, keys};
use crate::broker::event::{Event, Tracking};
use stablemq_cluster::store::{ReduceError, StateOp};

impl BrokerReducer {
    /// A retention cut (`StreamTruncated`).
    pub(super) fn put_cut(
        &mut self,
        vhost: String,
        queue: String,
        first_offset: u64,
        msg_ids: &[u64],
        out: &mut Vec<StateOp>,
    ) -> Result<(), ReduceError> {
        // The entries go, and the cut stays, under its stream's key
        // (`f`): a restore applies it before the messages, so they
        // are numbered from its first offset.
        self.remove_copies(&vhost, &queue, msg_ids, out)?;
        // As apply: a cut of no stream does nothing.
        if !self.is_stream(&vhost, &queue) {
            return Ok(());
        }
        // Stored as apply leaves the stream (a cut below the first
        // offset does nothing), so a restore comes to the same.
        self.defs.apply(
            &Event::StreamTruncated {
                vhost: vhost.clone(),
                queue: queue.clone(),
                first_offset,
                msg_ids: Vec::new(),
            },
            0,
        );
        let first_offset = self
            .stream_of(&vhost, &queue)
            .map_or(first_offset, |s| s.first_offset());
        let key = keys::stream_first_key(&vhost, &queue)?;
        let cut = Event::StreamTruncated {
            vhost,
            queue,
            first_offset,
            msg_ids: Vec::new(),
        };
        out.push(StateOp::Put {
            key,
            value: cut.encode(),
        });
        Ok(())
    }

    /// A stream's tracked reference, put under its key as apply leaves it
    /// (a sequence never goes back); tracking of no stream does nothing, as
    /// in apply.
    pub(super) fn put_tracking(
        &mut self,
        vhost: String,
        queue: String,
        kind: Tracking,
        reference: String,
        value: u64,
        out: &mut Vec<StateOp>,
    ) -> Result<(), ReduceError> {
        if !self.is_stream(&vhost, &queue) {
            return Ok(());
        }
        let key = keys::tracking_key(&vhost, &queue, kind, &reference)?;
        let mut tracked = Event::StreamTracked {
            vhost,
            queue,
            kind,
            reference,
            value,
        };
        self.defs.apply(&tracked, 0);
        if let Event::StreamTracked {
            vhost,
            queue,
            reference,
            value,
            ..
        } = &mut tracked
            && let Some(now) = self
                .stream_of(vhost, queue)
                .and_then(|s| s.tracked(kind, reference))
        {
            *value = now;
        }
        out.push(StateOp::Put {
            key,
            value: tracked.encode(),
        });
        Ok(())
    }
}
