//! The front door's settings: what connection.start tells clients about the
//! server (`[server_properties]`), how many client connections the node
//! serves at once (`connection_max`) and how long a client has to finish
//! the handshake (`handshake_timeout_ms`), each named as in RabbitMQ's
//! rabbitmq.conf.

use serde::Deserialize;

/// `[server_properties]`: the `product` and `version` connection.start
/// reports. Some clients and tools branch on them (a tool that only talks to
/// "RabbitMQ", a client that enables features by version), so they can be
/// set; the default is StableMQ and this build's version.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerProperties {
    /// The `product` server property.
    #[serde(default = "default_product")]
    pub product: String,
    /// The `version` server property.
    #[serde(default = "default_version")]
    pub version: String,
}

impl Default for ServerProperties {
    fn default() -> Self {
        ServerProperties {
            product: default_product(),
            version: default_version(),
        }
    }
}

fn default_product() -> String {
    "StableMQ".into()
}

fn default_version() -> String {
    env!("CARGO_PKG_VERSION").into()
}

/// RabbitMQ's `handshake_timeout` default: 10 seconds.
pub(super) fn default_handshake_timeout_ms() -> u64 {
    10_000
}
