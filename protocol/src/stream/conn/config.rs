//! What a broker configures of a stream connection: the properties and SASL
//! mechanisms it announces, the frame_max and heartbeat its tune offers, and
//! the timeouts.

use std::time::Duration;

use crate::stream::frame::{DEFAULT_FRAME_MAX, INITIAL_FRAME_MAX};
use crate::stream::types::Properties;

/// RabbitMQ's default heartbeat for the stream protocol, in seconds (what its
/// tune offers).
pub const DEFAULT_HEARTBEAT: u32 = 60;

/// RabbitMQ's `connection_negotiation_step_timeout` (10 s), used here for the
/// whole handshake and for the wait on a close's answer.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The broker-supplied settings of one stream connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamConnectionConfig {
    /// The server's peer properties, sent as given (in this order) in answer
    /// to the client's: see [`server_properties`] for RabbitMQ's set.
    pub server_properties: Properties,
    /// The SASL mechanisms offered, in order (e.g. `["PLAIN"]`, or with
    /// `"EXTERNAL"` on a TLS listener with client certificates). A
    /// SaslAuthenticate naming another is refused locally (0x07).
    pub mechanisms: Vec<String>,
    /// The frame_max the server's tune offers (0: no limit).
    pub frame_max: u32,
    /// The heartbeat the server's tune offers, in seconds (0: none).
    pub heartbeat: u32,
    /// The frame_max enforced on incoming frames until the client's tune
    /// settles one (RabbitMQ 4.x: 8192).
    pub initial_frame_max: u32,
    /// How long the client has, from the connection's start, to complete the
    /// handshake (peer properties through open).
    pub handshake_timeout: Duration,
    /// How long the server waits for the client's answer to its close.
    pub close_timeout: Duration,
    /// `advertised_host` of the open answer (left out if `None`).
    pub advertised_host: Option<String>,
    /// `advertised_port` of the open answer (left out if `None`).
    pub advertised_port: Option<u16>,
}

impl Default for StreamConnectionConfig {
    fn default() -> Self {
        StreamConnectionConfig {
            server_properties: server_properties("StableMQ", env!("CARGO_PKG_VERSION"), "stablemq"),
            mechanisms: vec!["PLAIN".to_owned()],
            frame_max: DEFAULT_FRAME_MAX,
            heartbeat: DEFAULT_HEARTBEAT,
            initial_frame_max: INITIAL_FRAME_MAX,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            close_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            advertised_host: None,
            advertised_port: None,
        }
    }
}

impl StreamConnectionConfig {
    /// The properties of a successful open answer: `advertised_port` then
    /// `advertised_host`, the order RabbitMQ 3.10 writes them in.
    pub(crate) fn open_properties(&self) -> Properties {
        let mut props = Vec::new();
        if let Some(port) = self.advertised_port {
            props.push(("advertised_port".to_owned(), port.to_string()));
        }
        if let Some(host) = &self.advertised_host {
            props.push(("advertised_host".to_owned(), host.clone()));
        }
        props
    }
}

/// The peer properties RabbitMQ announces, in the order it writes them
/// (`cluster_name`, `copyright`, `information`, `platform`, `product`,
/// `version`), with StableMQ's copyright and information lines.
pub fn server_properties(product: &str, version: &str, cluster_name: &str) -> Properties {
    [
        ("cluster_name", cluster_name),
        ("copyright", "Copyright (c) the StableMQ authors"),
        ("information", "Licensed under the Apache License 2.0"),
        ("platform", "Rust"),
        ("product", product),
        ("version", version),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_rabbitmqs() {
        let c = StreamConnectionConfig::default();
        assert_eq!((c.frame_max, c.heartbeat), (1_048_576, 60));
        assert_eq!(c.initial_frame_max, 8192);
        assert_eq!(c.handshake_timeout, Duration::from_secs(10));
        assert_eq!(c.mechanisms, vec!["PLAIN".to_owned()]);
        assert!(c.open_properties().is_empty());
        let keys: Vec<&str> = c
            .server_properties
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(keys, sorted);
    }

    #[test]
    fn open_properties_follow_rabbitmqs_order() {
        let c = StreamConnectionConfig {
            advertised_host: Some("127.0.0.1".into()),
            advertised_port: Some(5552),
            ..StreamConnectionConfig::default()
        };
        assert_eq!(
            c.open_properties(),
            vec![
                ("advertised_port".to_owned(), "5552".to_owned()),
                ("advertised_host".to_owned(), "127.0.0.1".to_owned()),
            ]
        );
    }
}
