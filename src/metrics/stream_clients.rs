//! The stream protocol's publishers and consumers, per connection, as
//! rabbitmq_stream_management lists them (`/api/stream/publishers`,
//! `/api/stream/consumers`): their streams, references, subscription
//! properties and credit, and what each published, had confirmed or failed,
//! and consumed.
//!
//! The connection task owns that state (the stream connection and its
//! bridge), and the master does not see it; so, as with [`super::conn_stats`],
//! the task writes a copy here and the management API reads it by connection
//! id. A connection registers when its task starts and is forgotten when the
//! task ends ([`Registration`]'s drop). The task counts into its own fields
//! and copies them here once per pass in which something happened: one short
//! uncontended lock, not one per message.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex};

use super::conn_stats::ConnId;

/// One publisher of a stream connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublisherStats {
    /// Its id on the connection.
    pub publisher_id: u8,
    /// The stream it publishes to.
    pub stream: String,
    /// Its deduplication reference ("" without one, as RabbitMQ lists it).
    pub reference: String,
    /// Messages it published (duplicates too).
    pub published: u64,
    /// Publishing ids confirmed.
    pub confirmed: u64,
    /// Publishing ids that failed.
    pub errored: u64,
}

/// One subscription of a stream connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Its id on the connection.
    pub subscription_id: u8,
    /// The stream it reads.
    pub stream: String,
    /// Chunks the client may still be sent.
    pub credits: u32,
    /// Records delivered.
    pub consumed: u64,
    /// The offset of the last record delivered (None before the first).
    pub offset: Option<u64>,
    /// The subscribe's properties.
    pub properties: Vec<(String, String)>,
}

/// What one stream connection has, as last copied by its task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamClient {
    /// Its publishers, by id.
    pub publishers: Vec<PublisherStats>,
    /// Its subscriptions, by id.
    pub consumers: Vec<ConsumerStats>,
}

/// The stream connections whose tasks are running.
static REGISTRY: LazyLock<Mutex<HashMap<ConnId, Arc<Mutex<StreamClient>>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// A stream connection's place in the registry; dropping it forgets it.
#[derive(Debug)]
pub struct Registration {
    id: ConnId,
    client: Arc<Mutex<StreamClient>>,
}

impl Registration {
    /// Replace what the connection shows with `client`.
    pub fn publish(&self, client: StreamClient) {
        if let Ok(mut c) = self.client.lock() {
            *c = client;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut map) = REGISTRY.lock() {
            map.remove(&self.id);
        }
    }
}

/// Start showing stream connection `id`.
pub fn register(id: ConnId) -> Registration {
    let client = Arc::new(Mutex::new(StreamClient::default()));
    if let Ok(mut map) = REGISTRY.lock() {
        map.insert(id, client.clone());
    }
    Registration { id, client }
}

/// What stream connection `id` has (nothing if it is not one, or its task
/// ended).
pub fn read(id: ConnId) -> StreamClient {
    let client = REGISTRY.lock().ok().and_then(|map| map.get(&id).cloned());
    client
        .and_then(|c| c.lock().ok().map(|c| c.clone()))
        .unwrap_or_default()
}

/// A slave's stream client whose subscriptions the slave serves from its
/// replica (`server/stream/replica`): the master never sees them, so the
/// management API gathers them from every node (`/api/stream/consumers`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaClient {
    /// The client's address.
    pub peer: Option<SocketAddr>,
    /// This node's address it connected to.
    pub local: Option<SocketAddr>,
    /// Who logged in (as the master answered the SASL exchange).
    pub user: String,
    /// The virtual host it opened.
    pub vhost: String,
    /// The subscriptions served here.
    pub consumers: Vec<ConsumerStats>,
}

/// The relayed stream connections with subscriptions served here, by the
/// relay's connection id.
static REPLICA_CLIENTS: LazyLock<Mutex<HashMap<ConnId, ReplicaClient>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// A relayed connection's place among [`replica_clients`]; dropping it
/// forgets it.
#[derive(Debug)]
pub struct ReplicaRegistration {
    id: ConnId,
}

impl ReplicaRegistration {
    /// Replace what the connection shows with `client`.
    pub fn publish(&self, client: ReplicaClient) {
        if let Ok(mut map) = REPLICA_CLIENTS.lock() {
            map.insert(self.id, client);
        }
    }
}

impl Drop for ReplicaRegistration {
    fn drop(&mut self) {
        if let Ok(mut map) = REPLICA_CLIENTS.lock() {
            map.remove(&self.id);
        }
    }
}

/// Start showing relayed stream connection `id` (nothing until it
/// publishes).
pub fn register_replica(id: ConnId) -> ReplicaRegistration {
    ReplicaRegistration { id }
}

/// The relayed connections with subscriptions served on this node.
pub fn replica_clients() -> Vec<ReplicaClient> {
    REPLICA_CLIENTS
        .lock()
        .map(|map| {
            map.values()
                .filter(|c| !c.consumers.is_empty())
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_while_registered_and_forgotten_after() {
        let id = 9_000_101;
        let reg = register(id);
        assert_eq!(read(id), StreamClient::default());
        let client = StreamClient {
            publishers: vec![PublisherStats {
                publisher_id: 1,
                stream: "s".into(),
                published: 3,
                ..PublisherStats::default()
            }],
            consumers: Vec::new(),
        };
        reg.publish(client.clone());
        assert_eq!(read(id), client);
        drop(reg);
        assert_eq!(read(id), StreamClient::default());
    }
}
