//! What a stream connection shows the management API: its publishers and
//! subscriptions with their counts (`metrics::stream_clients`), counted
//! from the actions and inputs its task carries, and copied to the
//! registry after each pass in which something happened.

use crate::metrics::stream_clients::{self, ConsumerStats, PublisherStats, StreamClient};
use stablemq_protocol::stream::conn::{self as sc, ChunkSource};
use stablemq_protocol::stream::{ChunkHeader, StreamConnection};
use std::collections::HashMap;

/// Counts per publisher: published, confirmed, errored.
type PublisherCounts = (u64, u64, u64);
/// Counts per subscription: records delivered, the last one's offset.
type ConsumerCounts = (u64, Option<u64>);

/// The counts and the registration of one stream connection.
#[derive(Debug)]
pub(super) struct Shown {
    registration: stream_clients::Registration,
    publishers: HashMap<u8, PublisherCounts>,
    consumers: HashMap<u8, ConsumerCounts>,
    /// Something happened since the last copy.
    dirty: bool,
}

impl Shown {
    pub(super) fn new(id: u64) -> Shown {
        Shown {
            registration: stream_clients::register(id),
            publishers: HashMap::new(),
            consumers: HashMap::new(),
            dirty: false,
        }
    }

    /// An action of the connection (a publish frame's messages).
    pub(super) fn action(&mut self, a: &sc::Action) {
        self.dirty = true;
        if let sc::Action::Publish {
            publisher_id,
            messages,
            ..
        } = a
        {
            self.publishers.entry(*publisher_id).or_default().0 += messages.len() as u64;
        }
    }

    /// An input for the connection (confirms, errors, deliveries).
    pub(super) fn input(&mut self, i: &sc::Input) {
        self.dirty = true;
        match i {
            sc::Input::PublishConfirm {
                publisher_id,
                publishing_ids,
            } => {
                self.publishers.entry(*publisher_id).or_default().1 += publishing_ids.len() as u64;
            }
            sc::Input::PublishError {
                publisher_id,
                errors,
            } => {
                self.publishers.entry(*publisher_id).or_default().2 += errors.len() as u64;
            }
            sc::Input::Deliver {
                subscription_id,
                chunk: ChunkSource::Bytes(b),
                ..
            } => {
                if let Ok(h) = ChunkHeader::read(b) {
                    let c = self.consumers.entry(*subscription_id).or_default();
                    c.0 += u64::from(h.num_records);
                    c.1 = h
                        .chunk_id
                        .checked_add(u64::from(h.num_records))
                        .and_then(|n| n.checked_sub(1));
                }
            }
            _ => {}
        }
    }

    /// Copy the connection's publishers and subscriptions, with their
    /// counts, to the registry, if anything happened since the last copy.
    pub(super) fn sync(&mut self, conn: &StreamConnection) {
        if !std::mem::take(&mut self.dirty) {
            return;
        }
        let publishers = conn.publishers();
        let subscriptions = conn.subscriptions();
        // Ids no longer in use start again from zero.
        self.publishers
            .retain(|id, _| publishers.iter().any(|p| p.publisher_id == *id));
        self.consumers
            .retain(|id, _| subscriptions.iter().any(|s| s.subscription_id == *id));
        let client = StreamClient {
            publishers: publishers
                .iter()
                .map(|p| {
                    let (published, confirmed, errored) = self
                        .publishers
                        .get(&p.publisher_id)
                        .copied()
                        .unwrap_or_default();
                    PublisherStats {
                        publisher_id: p.publisher_id,
                        stream: p.stream.to_owned(),
                        reference: p.reference.unwrap_or_default().to_owned(),
                        published,
                        confirmed,
                        errored,
                    }
                })
                .collect(),
            consumers: subscriptions
                .iter()
                .map(|s| {
                    let (consumed, offset) = self
                        .consumers
                        .get(&s.subscription_id)
                        .copied()
                        .unwrap_or_default();
                    ConsumerStats {
                        subscription_id: s.subscription_id,
                        stream: s.stream.to_owned(),
                        credits: s.credit,
                        consumed,
                        offset,
                        properties: s.properties.clone(),
                    }
                })
                .collect(),
        };
        self.registration.publish(client);
    }
}
