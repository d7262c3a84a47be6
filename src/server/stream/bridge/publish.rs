//! Publishers: every publisher of the connection publishes on one channel
//! with confirms; a publisher with a reference is deduplicated.

use super::*;

/// A publisher with a reference: its last publishing id, at or below which
/// a publish is a duplicate (confirmed, not stored). None: the reference
/// has published nothing yet, so every id is new, 0 too (the js client
/// numbers from 0).
#[derive(Debug)]
pub(super) struct Deduplicated {
    pub(super) reference: String,
    pub(super) last: Option<u64>,
}

/// A publish waiting for its confirm.
#[derive(Debug, Clone)]
pub(super) struct Unconfirmed {
    pub(super) publisher_id: u8,
    /// Set on the last publish of a message (a sub-batch is several).
    pub(super) publishing_id: Option<u64>,
    pub(super) stream: Arc<str>,
    /// The master returned it: no queue of that name any more.
    pub(super) returned: bool,
}

/// One published message, as stored: its records (several for a
/// sub-batch) and its filter value (publish v2), which every record keeps.
pub(super) struct Message<'a> {
    pub(super) publishing_id: u64,
    pub(super) filter_value: Option<&'a str>,
    pub(super) records: Vec<Bytes>,
}

impl Bridge {
    pub(super) fn open_publish(&mut self, master: &mut Vec<Input>) {
        if self.publish_open {
            return;
        }
        self.publish_open = true;
        master.push(Input::ChannelOpen {
            conn: self.conn,
            ch: PUBLISH,
        });
        master.push(method(
            self.conn,
            PUBLISH,
            AMQPClass::Confirm(confirm::AMQPMethod::Select(confirm::Select {
                nowait: false,
            })),
        ));
    }

    pub(super) fn publish(
        &mut self,
        publisher_id: u8,
        stream: &Arc<str>,
        message: Message<'_>,
        master: &mut Vec<Input>,
    ) {
        let Message {
            publishing_id,
            filter_value,
            records,
        } = message;
        self.open_publish(master);
        let last = records.len().saturating_sub(1);
        for (i, body) in records.into_iter().enumerate() {
            // A chunk in Osiris is what its writer took in at once: a small
            // frame is one (the js client's "last" and credit tests), a big
            // one several (rstream's: "last" of a 4999-message frame is not
            // all of it; RabbitMQ 3.10.8 made last chunks of 4 to 1008
            // records of frames of 100 to 4999). A chunk here is a frame's
            // first record and every STORED_CHUNK_RECORDS-th after it; its
            // first record carries its count.
            let writer = self.dedup.get(&publisher_id).map(|d| d.reference.as_str());
            // The message's last record of a deduplicating publisher carries
            // its publishing id, logged with the entry (`PUBLISHER_HEADER`).
            let sequence = writer.filter(|_| i == last).map(|w| (w, publishing_id));
            let starts = self.frame_records.is_multiple_of(STORED_CHUNK_RECORDS);
            let properties = if starts || sequence.is_some() || filter_value.is_some() {
                let n = (self.frame_total - self.frame_records).min(STORED_CHUNK_RECORDS);
                let count = if starts { u32::try_from(n).ok() } else { None };
                Arc::new(record::properties(count, writer, sequence, filter_value))
            } else {
                self.record_properties.clone()
            };
            self.frame_records += 1;
            let tag = self.next_tag;
            self.next_tag += 1;
            self.unconfirmed.insert(
                tag,
                Unconfirmed {
                    publisher_id,
                    publishing_id: (i == last).then_some(publishing_id),
                    stream: stream.clone(),
                    returned: false,
                },
            );
            master.push(Input::Publish {
                conn: self.conn,
                ch: PUBLISH,
                publish: Publish {
                    exchange: Default::default(),
                    routing_key: (&**stream).into(),
                    mandatory: true,
                    immediate: false,
                },
                properties,
                body,
            });
        }
    }

    pub(super) fn on_confirm(&mut self, tag: u64, ack: bool) {
        let Some(u) = self.unconfirmed.remove(&tag) else {
            return;
        };
        if !ack || u.returned {
            let code = if u.returned {
                ResponseCode::StreamDoesNotExist
            } else {
                ResponseCode::InternalError
            };
            self.fail(&u, code);
        } else if let Some(id) = u.publishing_id {
            self.confirms.entry(u.publisher_id).or_default().push(id);
        }
    }

    pub(super) fn fail(&mut self, u: &Unconfirmed, code: ResponseCode) {
        if let Some(publishing_id) = u.publishing_id {
            self.errors
                .entry(u.publisher_id)
                .or_default()
                .push(PublishingError {
                    publishing_id,
                    code,
                });
        }
    }

    /// The master returned a publish: no queue of that name any more. Its
    /// confirm (which follows) becomes an error.
    pub(super) fn on_return(&mut self, routing_key: &str) {
        if let Some(u) = self
            .unconfirmed
            .values_mut()
            .find(|u| !u.returned && *u.stream == *routing_key)
        {
            u.returned = true;
        }
    }

    /// The master closed the publish channel: what it had not confirmed
    /// fails.
    pub(super) fn on_publish_closed(&mut self) {
        self.publish_open = false;
        for u in std::mem::take(&mut self.unconfirmed).into_values() {
            self.fail(&u, ResponseCode::InternalError);
        }
    }
}

/// Records per stored chunk at most. Small, so that a subscription at
/// `last` taken while a big frame is still being stored (a client that
/// publishes without waiting, then subscribes: rstream's
/// test_offset_type_last) rarely lands on the frame's first chunk; the
/// chunks a subscription delivers pack several of them.
const STORED_CHUNK_RECORDS: usize = 100;

/// The records of a published entry, each stored as one entry of the stream
/// (so a sub-batch of N records takes N offsets, as in Osiris). A compressed
/// sub-batch is uncompressed first (`server/stream/codecs.rs`: gzip, snappy,
/// lz4, zstd); a body that does not uncompress to its declared length, or a
/// malformed batch, gives none, which the publisher gets as an error.
pub(super) fn entry_records(entry: Entry) -> Vec<Bytes> {
    let body = match entry {
        Entry::Simple(r) => return vec![r],
        Entry::SubBatch {
            compression,
            uncompressed_length,
            body,
            ..
        } => match super::super::codecs::uncompress(compression, body, uncompressed_length) {
            Ok(b) => b,
            Err(why) => {
                tracing::debug!(%why, "a sub-entry batch refused");
                return Vec::new();
            }
        },
    };
    stablemq_protocol::stream::sub_batch_records(&body).unwrap_or_default()
}
