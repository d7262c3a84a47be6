//! The front door's settings: what connection.start tells clients about the
//! server (`[server_properties]`), how many client connections the node
//! serves at once (`connection_max`) and how long a client has to finish
//! the handshake (`handshake_timeout_ms`), each named as in RabbitMQ's
//! rabbitmq.conf.

use serde::Deserialize;

/// `[server_properties]`: the `product` and `version` connection.start
/// reports (and the stream protocol's peer properties). Some clients and
/// tools branch on them (a tool that only talks to "RabbitMQ", a client that
/// enables features by version), so they can be set; the default is
/// StableMQ, with this build's version over AMQP 0-9-1 and, over the stream
/// protocol, [`STREAM_PROTOCOL_VERSION`].
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerProperties {
    /// The `product` server property.
    #[serde(default = "default_product")]
    pub product: String,
    /// The `version` server property, when set: both protocols say it.
    #[serde(default)]
    pub version: Option<String>,
}

/// The RabbitMQ version whose stream protocol StableMQ speaks (publish v2
/// and filtering, create and delete super stream, single active consumer,
/// deliver v2), said as the stream protocol's `version` peer property unless
/// `[server_properties] version` is set. The stream clients decide from it
/// what to use: rabbitmq-stream-js-client turns filtering, publish and
/// deliver v2 and create/delete super stream off for a server below 3.13.0;
/// the Go client turns single active consumer off below 3.11.0 and super
/// stream creation below 3.13.0. StableMQ's own version (0.x) is below. The
/// management API's `rabbitmq_version` is 3.10's
/// (`management::RABBITMQ_COMPAT_VERSION`): the API it imitates is 3.10's.
pub const STREAM_PROTOCOL_VERSION: &str = "3.13.0";

impl Default for ServerProperties {
    fn default() -> Self {
        ServerProperties {
            product: default_product(),
            version: None,
        }
    }
}

impl ServerProperties {
    /// The `version` connection.start says: the one set, else this build's.
    pub fn amqp_version(&self) -> &str {
        self.version.as_deref().unwrap_or(env!("CARGO_PKG_VERSION"))
    }

    /// The `version` the stream protocol's peer properties say: the one
    /// set, else [`STREAM_PROTOCOL_VERSION`].
    pub fn stream_version(&self) -> &str {
        self.version.as_deref().unwrap_or(STREAM_PROTOCOL_VERSION)
    }
}

fn default_product() -> String {
    "StableMQ".into()
}

/// RabbitMQ's `handshake_timeout` default: 10 seconds.
pub(super) fn default_handshake_timeout_ms() -> u64 {
    10_000
}
