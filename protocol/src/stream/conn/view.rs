//! What a connection's publishers and subscriptions look like from outside:
//! read-only, for the broker's management API (RabbitMQ's
//! rabbitmq_stream_management lists them per connection).

use super::StreamConnection;
use crate::stream::types::Properties;

/// A publisher the broker accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherView<'a> {
    /// Its id on the connection.
    pub publisher_id: u8,
    /// The stream it publishes to.
    pub stream: &'a str,
    /// Its deduplication reference, if it has one.
    pub reference: Option<&'a str>,
}

/// A subscription the broker accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionView<'a> {
    /// Its id on the connection.
    pub subscription_id: u8,
    /// The stream it reads.
    pub stream: &'a str,
    /// Chunks the client may still be sent.
    pub credit: u32,
    /// The subscribe's properties.
    pub properties: &'a Properties,
}

impl StreamConnection {
    /// The publishers the broker accepted, by id.
    pub fn publishers(&self) -> Vec<PublisherView<'_>> {
        let mut list: Vec<_> = self
            .publishers
            .iter()
            .filter(|(_, p)| p.live)
            .map(|(id, p)| PublisherView {
                publisher_id: *id,
                stream: &p.stream,
                reference: p.reference.as_deref(),
            })
            .collect();
        list.sort_by_key(|p| p.publisher_id);
        list
    }

    /// The subscriptions the broker accepted, by id.
    pub fn subscriptions(&self) -> Vec<SubscriptionView<'_>> {
        let mut list: Vec<_> = self
            .subscriptions
            .iter()
            .filter(|(_, s)| s.live)
            .map(|(id, s)| SubscriptionView {
                subscription_id: *id,
                stream: &s.stream,
                credit: s.credit,
                properties: &s.properties,
            })
            .collect();
        list.sort_by_key(|s| s.subscription_id);
        list
    }
}
