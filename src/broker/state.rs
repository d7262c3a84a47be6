//! The broker's materialized state: the [`Reducer`] the event stores run over
//! stable events, and the inverse, [`restore`], which rebuilds a [`Broker`]
//! from that state.
//!
//! Layout of the `state` keyspace (keys ordered bytewise):
//! - `d` + log index (u64 big-endian): a definition event, stored as the log
//!   payload itself. Definitions are every event that is not `Published` or
//!   `Removed` (declares, bindings, vhosts, users, policies, and whatever is
//!   added later). Restoring replays them through [`Broker::apply`], so the
//!   implicit effects (bindings going with their queue, no-ops for missing
//!   objects, policies picked per object) are the very same code (I4), and a new
//!   event variant needs no change here. The price: definition churn stays in
//!   the state (docs/architecture.md, "Limits").
//! - `m` + u16 length + vhost + u16 length + queue + message id (u64
//!   big-endian): one queued message, per queue it reached. Length prefixes,
//!   not separators, because AMQP names may contain any byte: the prefix of
//!   one queue can then never be the prefix of another.
//! - `f` + u16 length + vhost + u16 length + queue: a stream's newest
//!   retention cut (`StreamTruncated`, without its message ids), so a
//!   restore numbers the stream's entries from its first offset.
//! - `0xf3` + vhost + queue + message id (as `m`): one entry of a stream,
//!   which the cut deleted if it was before the first offset. A sequence
//!   tag ([`stablemq_cluster::store::SEQUENCE_TAG_MIN`]): the stores keep
//!   each stream's entries in a keyspace of its own (`stablemq_cluster`'s
//!   `fjall_spaces`), where entries whose ids only ascend are never
//!   rewritten once flushed, whatever else is written, and a deleted
//!   stream's keyspace is dropped at once. A state written before
//!   2026-12-06 holds a stream's older entries under `m`: a restore reads
//!   them first (their ids are lower), and the reducer deletes both keys
//!   of such a stream's entries (`legacy_streams`).
//! - `t` + vhost + queue (as above) + `o` or `s` + reference: a stream's
//!   tracked reference (`StreamTracked`: a consumer's stored offset, a
//!   publisher's sequence), its newest value only. Both are events a client
//!   makes as often as it likes: kept as definitions (by log index) they
//!   would grow the state for ever; keyed by what they name, the newest
//!   overwrites the last. (States written before 2026-12-04 hold them as
//!   definitions, which a restore replays first: still correct.)
//! - `x`: the highest message id ever published (u64 big-endian).
//!
//! Keys sort `d` < `f` < `m` < `t` < `x` < `0xf3`. A restore applies
//! declarations, cuts, messages and stream entries, then tracking; a state
//! streamed in key order (`RestoreBuilder`) applies tracking before the
//! entries, which is the same: tracking needs only its stream to exist.
//!
//! The reducer keeps the definitions in memory (a [`Broker`] that never holds
//! messages) so it knows which routed queues exist and what TTL they impose,
//! exactly as apply does when the message is published.
//!
//! Most messages are consumed within the batch that published them. Such a
//! message costs no write at all: a message whose id is above the highest id
//! the state held when the batch began cannot be in the state, so its copies
//! wait in memory (`pending`, not yet encoded) until the batch ends, and a
//! removal within the batch just drops them, without a delete for the store
//! to check or write. Only the survivors are encoded and written, at flush.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use stablemq_cluster::Entry;
use stablemq_cluster::replication::is_epoch_marker;
use stablemq_cluster::store::{ReduceError, Reducer, StateOp, StateRead};
use stablemq_protocol::{BasicProperties, ByteString};

use super::Broker;
use super::event::{Event, Published, Tracking};
use super::message::{Message, QueuedMessage};
use keys::{KeyArena, parse_message_key, queue_prefix};

const DEFINITION_TAG: u8 = b'd';
/// Between the definitions (which declare the streams) and the messages
/// (which a stream numbers from its first offset), in key order.
const STREAM_FIRST_TAG: u8 = b'f';
const MESSAGE_TAG: u8 = b'm';
/// A stream's entries: a sequence tag (`0x80 | b's'`), so last in key
/// order; a stream's older entries may be under `m` (see the module docs).
const STREAM_ENTRY_TAG: u8 = 0x80 | b's';
/// After the messages: tracking needs only its stream to exist.
const TRACKING_TAG: u8 = b't';
const MAX_MSG_ID_KEY: &[u8] = b"x";
/// Bumped when [`StoredMessage`]'s encoding changes, so an old state is refused.
const MESSAGE_FORMAT_VERSION: u8 = 1;

/// The state could not be read back into a broker.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The store failed while reading.
    #[error("reading the state: {0}")]
    Store(#[from] stablemq_cluster::StoreError),
    /// A key or value does not decode.
    #[error("corrupt state: {0}")]
    Corrupt(String),
}

/// One queue's copy of a message, as the state keeps it.
#[derive(Debug, Serialize, Deserialize)]
struct StoredMessage {
    exchange: ByteString,
    routing_key: ByteString,
    timestamp_ms: u64,
    properties: BasicProperties,
    body: Bytes,
    /// Computed at publish from the queue's arguments then in force, as apply
    /// does; stored so a later policy change does not move it on restore.
    expires_at_ms: Option<u64>,
}

/// The reducer the stores run; see the module docs.
pub struct BrokerReducer {
    /// Vhosts from the configuration: they exist before the log says anything,
    /// as in [`crate::broker::Broker::replay`].
    config_vhosts: Vec<String>,
    /// Definitions only; never holds a message.
    defs: Broker,
    max_msg_id: u64,
    /// `max_msg_id` changed in this batch: write `x` once, at flush.
    max_dirty: bool,
    /// `max_msg_id` as the state held it when this batch began: every message
    /// key in the state has an id at or below it (`x` is written with them).
    batch_floor: u64,
    /// Queue copies of messages published in this batch (ids above
    /// `batch_floor`), by state key; written at flush unless removed first.
    pending: HashMap<Bytes, PendingCopy>,
    /// Where message keys are made, for a publish and for a removal alike.
    keys: KeyArena,
    /// Where stored messages are encoded ([`encode_message_into`]).
    values: BytesMut,
    /// Streams (vhost, name) whose state holds entries under `m`, written
    /// before stream entries had a tag of their own: a cut deletes both
    /// keys of their entries (see the module docs).
    legacy_streams: HashSet<(String, String)>,
}

/// One queue's copy of a message published in the current batch.
struct PendingCopy {
    /// Held in the map's slot, not behind an `Arc` of its own: a clone per
    /// queue shares every part, and the usual one queue allocates nothing.
    msg: Message,
    expires_at_ms: Option<u64>,
}

impl BrokerReducer {
    /// A reducer for a node configured with `config_vhosts`.
    pub fn new(config_vhosts: Vec<String>) -> BrokerReducer {
        BrokerReducer {
            config_vhosts,
            defs: Broker::new(),
            max_msg_id: 0,
            max_dirty: false,
            batch_floor: 0,
            pending: HashMap::new(),
            keys: KeyArena::default(),
            values: BytesMut::new(),
            legacy_streams: HashSet::new(),
        }
    }
}

impl BrokerReducer {
    /// Delete `queue`'s copies of `msg_ids` (a copy published in this batch
    /// is in `pending` or nowhere).
    fn remove_copies(
        &mut self,
        vhost: &str,
        queue: &str,
        msg_ids: &[u64],
        out: &mut Vec<StateOp>,
    ) -> Result<(), ReduceError> {
        let stream = self.is_stream(vhost, queue);
        let legacy = stream && self.legacy_streams.contains(&(vhost.into(), queue.into()));
        for &id in msg_ids {
            let key = if stream {
                self.keys.stream_entry_key(vhost, queue, id)?
            } else {
                self.keys.message_key(vhost, queue, id)?
            };
            if id > self.batch_floor {
                self.pending.remove(&key);
            } else {
                out.push(StateOp::Delete { key });
                if legacy {
                    let key = self.keys.message_key(vhost, queue, id)?;
                    out.push(StateOp::Delete { key });
                }
            }
        }
        Ok(())
    }

    /// Whether `queue` is a stream now (the definitions so far).
    /// A `Published` event: each durable queue's copy, kept pending until
    /// the window's end; a deduplicating publisher's sequence under its
    /// stream's tracking key (`streams.rs`).
    fn reduce_published(
        &mut self,
        event: Event,
        out: &mut Vec<StateOp>,
    ) -> Result<(), ReduceError> {
        let Some(Published { vhost, msg, queues }) = event.into_published() else {
            return Ok(());
        };
        let (msg_id, timestamp_ms) = (msg.id, msg.timestamp_ms);
        if msg_id > self.max_msg_id {
            self.max_msg_id = msg_id;
            self.max_dirty = true;
        }
        let msg_ttl = msg.expiration_ms();
        // A deduplicating publisher's sequence rides in its record's
        // event (`stream_record::PUBLISHER_HEADER`): kept as apply
        // keeps it, under the stream's tracking key.
        if let Some((reference, id)) = crate::broker::stream_record::publisher_sequence(&msg) {
            let reference = reference.to_owned();
            for queue in &queues {
                self.put_tracking(
                    vhost.to_string(),
                    queue.to_string(),
                    Tracking::Sequence,
                    reference.clone(),
                    id,
                    out,
                )?;
            }
        }
        let transient_for_a_stream = !msg.is_persistent()
            && queues
                .iter()
                .any(|q| self.defs.queue(&vhost, q).is_some_and(|q| q.args.stream));
        for queue in &queues {
            // Only queues the log declared: a non-durable queue is
            // routed to but never logged, and apply skips it too.
            let Some(q) = self.defs.queue(&vhost, queue) else {
                continue;
            };
            // A transient message is logged when a stream got it:
            // another durable queue loses it at a restart, as
            // RabbitMQ's do, so only the stream keeps a copy.
            if transient_for_a_stream && !q.args.stream {
                continue;
            }
            let ttl = match (q.args.message_ttl, msg_ttl) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let expires_at_ms = ttl.map(|t| timestamp_ms.saturating_add(t));
            let key = if q.args.stream {
                self.keys.stream_entry_key(&vhost, queue, msg_id)?
            } else {
                self.keys.message_key(&vhost, queue, msg_id)?
            };
            if msg_id > self.batch_floor {
                let copy = PendingCopy {
                    msg: msg.clone(),
                    expires_at_ms,
                };
                self.pending.insert(key, copy);
            } else {
                // An id the state may hold already (never made by
                // the broker, which numbers publishes upwards): write
                // it at once, in order with the ops around it.
                out.push(StateOp::Put {
                    key,
                    value: encode_message_into(&mut self.values, &msg, expires_at_ms),
                });
            }
        }
        Ok(())
    }

    fn is_stream(&self, vhost: &str, queue: &str) -> bool {
        self.stream_of(vhost, queue).is_some()
    }

    /// `queue`'s stream as the definitions so far leave it: its cut and
    /// its tracking, never its entries.
    fn stream_of(&self, vhost: &str, queue: &str) -> Option<&crate::broker::stream::StreamLog> {
        self.defs
            .queue(vhost, queue)
            .and_then(|q| q.stream.as_ref())
    }

    /// Apply a definition event to `defs` and keep it, as the log payload,
    /// under its log index.
    fn put_definition(
        &mut self,
        definition: &Event,
        entry: &Entry,
        out: &mut Vec<StateOp>,
    ) -> Result<(), ReduceError> {
        let applied = self.defs.apply(definition, 0);
        for (vhost, q) in applied.deleted_queues {
            let prefix = queue_prefix(&vhost, &q.name)?.freeze();
            let entries = keys::tagged_prefix(STREAM_ENTRY_TAG, &vhost, &q.name)?;
            self.pending
                .retain(|key, _| !key.starts_with(&prefix) && !key.starts_with(&entries));
            out.push(StateOp::DeletePrefix { prefix });
            self.legacy_streams
                .remove(&(vhost.clone(), q.name.to_string()));
            // A stream declared again later starts with no entries, cut or
            // tracking of the old one's.
            for tag in [STREAM_ENTRY_TAG, STREAM_FIRST_TAG, TRACKING_TAG] {
                let prefix = keys::tagged_prefix(tag, &vhost, &q.name)?;
                out.push(StateOp::DeletePrefix { prefix });
            }
        }
        let mut key = BytesMut::with_capacity(9);
        key.put_u8(DEFINITION_TAG);
        key.put_u64(entry.pos.index);
        out.push(StateOp::Put {
            key: key.freeze(),
            value: entry.payload.clone(),
        });
        Ok(())
    }
}

impl Reducer for BrokerReducer {
    fn restore(&mut self, state: &dyn StateRead) -> Result<(), ReduceError> {
        let (mut defs, max) = restore_definitions(&self.config_vhosts, state)
            .map_err(|e| ReduceError(e.to_string()))?;
        // Cuts and tracking too: the next ones are stored as apply leaves
        // them after these (a sequence never goes back).
        for tag in [STREAM_FIRST_TAG, TRACKING_TAG] {
            let pairs = state
                .scan_prefix(&[tag])
                .map_err(|e| ReduceError(e.to_string()))?;
            apply_events(&mut defs, pairs).map_err(|e| ReduceError(e.to_string()))?;
        }
        self.legacy_streams =
            legacy_streams(&defs, state).map_err(|e| ReduceError(e.to_string()))?;
        self.defs = defs;
        self.max_msg_id = max;
        self.batch_floor = max;
        self.pending.clear();
        Ok(())
    }

    fn reduce(&mut self, entry: &Entry, out: &mut Vec<StateOp>) -> Result<(), ReduceError> {
        if is_epoch_marker(entry) {
            return Ok(());
        }
        // Bodies as slices of the entry: a surviving copy is encoded (copied)
        // at the window's end, the rest are dropped with the window.
        let event = Event::decode_shared(&entry.payload)
            .map_err(|e| ReduceError(format!("entry {}: {e}", entry.pos)))?;
        match event {
            Event::Published { .. } => self.reduce_published(event, out)?,
            Event::Removed {
                vhost,
                queue,
                msg_ids,
            } => self.remove_copies(&vhost, &queue, &msg_ids, out)?,
            Event::StreamTruncated {
                vhost,
                queue,
                first_offset,
                msg_ids,
            } => self.put_cut(vhost, queue, first_offset, &msg_ids, out)?,
            Event::StreamTracked {
                vhost,
                queue,
                kind,
                reference,
                value,
            } => self.put_tracking(vhost, queue, kind, reference, value, out)?,
            definition => self.put_definition(&definition, entry, out)?,
        }
        Ok(())
    }

    fn flush(&mut self, out: &mut Vec<StateOp>) -> Result<(), ReduceError> {
        // Distinct keys, each put once: their order does not matter.
        for (key, copy) in self.pending.drain() {
            out.push(StateOp::Put {
                key,
                value: encode_message_into(&mut self.values, &copy.msg, copy.expires_at_ms),
            });
        }
        self.batch_floor = self.max_msg_id;
        if std::mem::take(&mut self.max_dirty) {
            out.push(StateOp::Put {
                key: Bytes::from_static(MAX_MSG_ID_KEY),
                value: Bytes::copy_from_slice(&self.max_msg_id.to_be_bytes()),
            });
        }
        Ok(())
    }
}

/// Rebuild the broker a log would have produced from the state it reduced
/// to: the configured vhosts, the definitions replayed in log order, then
/// every message in key order (publish order, per queue).
pub fn restore(config_vhosts: &[String], state: &dyn StateRead) -> Result<Broker, RestoreError> {
    let (mut broker, max) = restore_definitions(config_vhosts, state)?;
    broker.max_msg_id = max;
    apply_events(&mut broker, state.scan_prefix(&[STREAM_FIRST_TAG])?)?;
    // A page at a time: queues page out what is over their RAM budget as
    // they fill, so a backlog longer than RAM is never held whole.
    for tag in [MESSAGE_TAG, STREAM_ENTRY_TAG] {
        let mut after: Option<Bytes> = None;
        loop {
            let page = state.scan_prefix_page(&[tag], after.as_deref(), RESTORE_PAGE)?;
            let Some((last, _)) = page.last() else {
                break;
            };
            after = Some(last.clone());
            restore_messages(&mut broker, page)?;
        }
    }
    apply_events(&mut broker, state.scan_prefix(&[TRACKING_TAG])?)?;
    Ok(broker)
}

/// Apply the events stored as the values of `pairs` (definitions, cuts,
/// tracking), in their order.
fn apply_events(broker: &mut Broker, pairs: Vec<(Bytes, Bytes)>) -> Result<(), RestoreError> {
    for (key, value) in pairs {
        let event = Event::decode(&value)
            .map_err(|e| RestoreError::Corrupt(format!("event at {key:?}: {e}")))?;
        broker.apply(&event, 0);
    }
    Ok(())
}

/// [`restore`] from a state that arrives in chunks, in key order (a store's
/// snapshot streamed to a slave): definitions (`d`) and cuts (`f`) sort
/// before messages (`m`), then come tracking (`t`, which needs only its
/// stream), the highest id (`x`) and stream entries (`0xf3`), so each
/// chunk is applied as it comes and the whole state is never held at once, only the broker it
/// makes (whose queues page out what is over their RAM budget as they fill).
pub struct RestoreBuilder {
    broker: Broker,
    /// The last key fed, to refuse a state out of order.
    last: Option<Bytes>,
}

impl RestoreBuilder {
    /// An empty broker with `config_vhosts`, as [`restore`] starts.
    pub fn new(config_vhosts: &[String]) -> RestoreBuilder {
        let mut broker = Broker::new();
        for vhost in config_vhosts {
            broker.apply(
                &Event::VhostCreated {
                    vhost: vhost.clone(),
                },
                0,
            );
        }
        RestoreBuilder { broker, last: None }
    }

    /// Apply the next pairs of the state; keys must ascend across calls.
    pub fn feed(&mut self, pairs: Vec<(Bytes, Bytes)>) -> Result<(), RestoreError> {
        for (key, value) in pairs {
            if self.last.as_ref().is_some_and(|l| *l >= key) {
                return Err(RestoreError::Corrupt(format!(
                    "state key {key:?} out of order"
                )));
            }
            match key.first() {
                Some(&DEFINITION_TAG | &STREAM_FIRST_TAG | &TRACKING_TAG) => {
                    apply_events(&mut self.broker, vec![(key.clone(), value)])?
                }
                Some(&MESSAGE_TAG | &STREAM_ENTRY_TAG) => {
                    restore_messages(&mut self.broker, vec![(key.clone(), value)])?
                }
                _ if key.as_ref() == MAX_MSG_ID_KEY => {
                    let max = value
                        .as_ref()
                        .try_into()
                        .map(u64::from_be_bytes)
                        .map_err(|_| {
                            RestoreError::Corrupt(format!(
                                "max message id of {} bytes",
                                value.len()
                            ))
                        })?;
                    self.broker.max_msg_id = max;
                }
                // [`restore`] reads only these: anything else is not
                // part of the broker.
                _ => {}
            }
            self.last = Some(key);
        }
        Ok(())
    }

    /// The broker the whole state makes.
    pub fn finish(self) -> Broker {
        self.broker
    }
}

/// Messages read per page at restore: 256 keeps a page of 64 KiB bodies at
/// 16 MiB.
const RESTORE_PAGE: usize = 256;

fn restore_messages(broker: &mut Broker, page: Vec<(Bytes, Bytes)>) -> Result<(), RestoreError> {
    for (key, value) in page {
        let (vhost, queue, id) = parse_message_key(&key)?;
        let stored = decode_message(&value)?;
        let Some(q) = broker.queue_mut(&vhost, &queue) else {
            return Err(RestoreError::Corrupt(format!(
                "message {id} of queue {queue:?} in vhost {vhost:?}, which does not exist"
            )));
        };
        q.push(QueuedMessage {
            msg: Message {
                id,
                exchange: stored.exchange,
                routing_key: stored.routing_key,
                properties: Arc::new(stored.properties),
                body: stored.body,
                timestamp_ms: stored.timestamp_ms,
            },
            redelivered: false,
            wait_index: 0,
            expires_at_ms: stored.expires_at_ms,
            delivery_count: 0,
        });
    }
    Ok(())
}

/// The streams of `defs` that hold entries under `m` in `state` (see
/// [`BrokerReducer::legacy_streams`]): one short read per stream.
fn legacy_streams(
    defs: &Broker,
    state: &dyn StateRead,
) -> Result<HashSet<(String, String)>, RestoreError> {
    let mut legacy = HashSet::new();
    for (vhost, v) in &defs.vhosts {
        for (queue, _) in v.queues.iter().filter(|(_, q)| q.args.stream) {
            let prefix = queue_prefix(vhost, queue).map_err(|e| RestoreError::Corrupt(e.0))?;
            if !state.scan_prefix_page(&prefix, None, 1)?.is_empty() {
                legacy.insert((vhost.clone(), queue.to_string()));
            }
        }
    }
    Ok(legacy)
}

fn restore_definitions(
    config_vhosts: &[String],
    state: &dyn StateRead,
) -> Result<(Broker, u64), RestoreError> {
    let mut broker = Broker::new();
    for vhost in config_vhosts {
        broker.apply(
            &Event::VhostCreated {
                vhost: vhost.clone(),
            },
            0,
        );
    }
    apply_events(&mut broker, state.scan_prefix(&[DEFINITION_TAG])?)?;
    let max =
        match state.get(MAX_MSG_ID_KEY)? {
            None => 0,
            Some(v) => v.as_ref().try_into().map(u64::from_be_bytes).map_err(|_| {
                RestoreError::Corrupt(format!("max message id of {} bytes", v.len()))
            })?,
        };
    Ok((broker, max))
}

/// [`StoredMessage`]'s encoding, written from borrowed fields (no copy of the
/// body before the one into the value).
#[derive(Serialize)]
struct StoredMessageRef<'a> {
    exchange: &'a str,
    routing_key: &'a str,
    timestamp_ms: u64,
    properties: &'a BasicProperties,
    body: &'a Bytes,
    expires_at_ms: Option<u64>,
}

/// The smallest chunk [`encode_message_into`] allocates.
const VALUE_ARENA_CHUNK: usize = 64 * 1024;

/// A stored message's value, cut from `arena` as [`Event::encode_into`] cuts
/// log entries: no allocation per message, one per [`VALUE_ARENA_CHUNK`] of
/// values (or per value bigger than that). A value lives until the store has
/// written it, so a chunk is soon free again.
fn encode_message_into(arena: &mut BytesMut, msg: &Message, expires_at_ms: Option<u64>) -> Bytes {
    let m = StoredMessageRef {
        exchange: &msg.exchange,
        routing_key: &msg.routing_key,
        timestamp_ms: msg.timestamp_ms,
        properties: &msg.properties,
        body: &msg.body,
        expires_at_ms,
    };
    // Room for the body plus the names and properties.
    let hint = 64 + msg.body.len() + msg.exchange.len() + msg.routing_key.len() + 256;
    if arena.capacity() < hint {
        arena.reserve(hint.max(VALUE_ARENA_CHUNK));
    }
    arena.put_u8(MESSAGE_FORMAT_VERSION);
    // Through `io::Write`, so the body is copied whole (`to_extend` pushes it
    // byte by byte). Writing to memory cannot fail for these types; a
    // failure is a bug.
    if let Err(e) = postcard::to_io(&m, arena.writer()) {
        panic!("message encoding failed: {e}");
    }
    arena.split().freeze()
}

#[cfg(test)]
fn encode_message(msg: &Message, expires_at_ms: Option<u64>) -> Bytes {
    encode_message_into(&mut BytesMut::new(), msg, expires_at_ms)
}

fn decode_message(b: &[u8]) -> Result<StoredMessage, RestoreError> {
    match b.split_first() {
        Some((&MESSAGE_FORMAT_VERSION, rest)) => postcard::from_bytes(rest)
            .map_err(|e| RestoreError::Corrupt(format!("stored message: {e}"))),
        Some((v, _)) => Err(RestoreError::Corrupt(format!("stored message format {v}"))),
        None => Err(RestoreError::Corrupt("empty stored message".into())),
    }
}

mod keys;
mod streams;
#[cfg(test)]
mod tests;
