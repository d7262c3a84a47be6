//! Optional TLS for node-to-node connections: mutual, against a cluster CA.
//!
//! The cookie ([`super::auth`]) keeps strangers out, but frames after it
//! travel in clear, and they carry every message body. With TLS configured,
//! each connection is TLS first (then the cookie exchange, if a cookie is
//! set, inside it). Both ends present a certificate and check the other's
//! against the configured CA, as RabbitMQ's inter-node TLS does with
//! `verify_peer`; the dialer also checks that the acceptor's certificate
//! names the IP address it dialed (`cluster_addr` is an IP, so node
//! certificates carry their cluster IPs as subject alternative names).
//!
//! A node with TLS and a node without it cannot talk: the TLS side waits for
//! a handshake the other never starts, and gives up after the connect
//! timeout.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ServerConfig};

pub use super::pem::{TlsError, read_certs, read_key, read_roots};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// Both sides' TLS configuration of one node.
#[derive(Clone)]
pub struct TlsConfig {
    acceptor: TlsAcceptor,
    connector: TlsConnector,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsConfig(..)")
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsConfig {
    /// Load this node's certificate chain and key and the cluster CA (PEM).
    pub fn from_pem_files(cert: &Path, key: &Path, ca: &Path) -> Result<TlsConfig, TlsError> {
        let chain = read_certs("certificate", cert)?;
        let key = read_key(key)?;
        let roots = Arc::new(read_roots(ca)?);
        let verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider()).build()?;
        let mut server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())?;
        // Connections live long and are redialed rarely: no resumption.
        server.send_tls13_tickets = 0;
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)?;
        Ok(TlsConfig {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
        })
    }

    /// The acceptor's TLS handshake on a fresh connection.
    pub(crate) async fn accept(
        &self,
        stream: TcpStream,
    ) -> std::io::Result<tokio_rustls::server::TlsStream<TcpStream>> {
        self.acceptor.accept(stream).await
    }

    /// The dialer's TLS handshake to `addr`, whose certificate must name its IP.
    pub(crate) async fn connect(
        &self,
        addr: SocketAddr,
        stream: TcpStream,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = ServerName::IpAddress(addr.ip().into());
        self.connector.connect(name, stream).await
    }
}
