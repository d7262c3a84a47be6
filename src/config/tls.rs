//! The `[tls]` section: AMQPS (and HTTPS for the management API, and the
//! stream protocol over TLS) for clients.
//!
//! Named as RabbitMQ names its `ssl_options` (`certfile`, `keyfile`,
//! `cacertfile`, `verify`, `fail_if_no_peer_cert`), with the file keys spelled
//! `cert_file`, `key_file` and `ca_file`. Node-to-node TLS is a separate
//! setting of the `[cluster]` section: a node may serve clients over TLS and
//! peers over plain TCP, or the other way round.

use serde::Deserialize;
use std::path::PathBuf;

/// Whether the broker asks clients for a certificate and checks it.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Verify {
    /// No client certificate is asked for (RabbitMQ's default).
    #[default]
    VerifyNone,
    /// A client certificate is asked for and must chain to `ca_file`.
    VerifyPeer,
}

/// Which name of a verified client certificate is the user name for SASL
/// EXTERNAL (RabbitMQ's `ssl_cert_login_from`).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CertLoginFrom {
    /// The subject's common name (CN).
    #[default]
    CommonName,
    /// The first DNS name among the subject alternative names.
    SubjectAlternativeName,
}

/// TLS for client connections.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The server's certificate chain (PEM), leaf first.
    pub cert_file: PathBuf,
    /// The server's private key (PEM: PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key_file: PathBuf,
    /// CA certificates that client certificates must chain to (PEM); needed
    /// for `verify_peer`.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Ask for and check client certificates.
    #[serde(default)]
    pub verify: Verify,
    /// With `verify_peer`: refuse a client that sends no certificate.
    #[serde(default)]
    pub fail_if_no_peer_cert: bool,
    /// The AMQPS port (RabbitMQ's `listeners.ssl.default`, 5671).
    #[serde(default = "default_amqps_port")]
    pub amqps_port: u16,
    /// The stream protocol over TLS, with the same certificate (RabbitMQ's
    /// `stream.listeners.ssl.default`, usually 5551); unset = no listener.
    /// A single node's: in a cluster each node's `stream_tls_addr` is.
    #[serde(default)]
    pub stream_port: Option<u16>,
    /// The management API over HTTPS, with the same certificate (RabbitMQ's
    /// `management.ssl.port`, usually 15671); unset = no HTTPS listener.
    #[serde(default)]
    pub management_https_port: Option<u16>,
    /// How long a client has to finish the TLS handshake (RabbitMQ's
    /// `ssl_handshake_timeout`, 5 s).
    #[serde(default = "default_handshake_timeout")]
    pub handshake_timeout_ms: u64,
    /// Which certificate name SASL EXTERNAL logs in as.
    #[serde(default)]
    pub cert_login_from: CertLoginFrom,
}

fn default_amqps_port() -> u16 {
    5671
}

fn default_handshake_timeout() -> u64 {
    5_000
}

impl TlsConfig {
    /// A section with these files and every other key at its default.
    pub fn with_files(cert_file: PathBuf, key_file: PathBuf) -> TlsConfig {
        TlsConfig {
            cert_file,
            key_file,
            ca_file: None,
            verify: Verify::default(),
            fail_if_no_peer_cert: false,
            amqps_port: default_amqps_port(),
            stream_port: None,
            management_https_port: None,
            handshake_timeout_ms: default_handshake_timeout(),
            cert_login_from: CertLoginFrom::default(),
        }
    }

    /// Settings that contradict each other.
    pub fn validate(&self) -> Result<(), String> {
        if self.verify == Verify::VerifyPeer && self.ca_file.is_none() {
            return Err("[tls] verify = \"verify_peer\" needs ca_file".into());
        }
        if self.fail_if_no_peer_cert && self.verify != Verify::VerifyPeer {
            return Err("[tls] fail_if_no_peer_cert needs verify = \"verify_peer\"".into());
        }
        if self.handshake_timeout_ms == 0 {
            return Err("[tls] handshake_timeout_ms must be above 0".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_parses_with_rabbitmq_defaults_and_checks_itself() {
        let t: TlsConfig = toml::from_str("cert_file = \"c.pem\"\nkey_file = \"k.pem\"\n")
            .expect("minimal section");
        assert_eq!(t.amqps_port, 5671);
        assert_eq!(t.verify, Verify::VerifyNone);
        assert_eq!(t.handshake_timeout_ms, 5000);
        assert!(t.validate().is_ok());
        let t: TlsConfig = toml::from_str(
            "cert_file = \"c\"\nkey_file = \"k\"\nverify = \"verify_peer\"\nfail_if_no_peer_cert = true\n",
        )
        .expect("peer section");
        assert!(t.validate().is_err(), "verify_peer without a CA");
        assert!(
            toml::from_str::<TlsConfig>("cert_file = \"c\"\nkey_file = \"k\"\nverify = \"yes\"\n")
                .is_err()
        );
    }
}
