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

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A TLS setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{what} {path}: {reason}")]
    File {
        /// Which file (certificate, key, CA).
        what: &'static str,
        /// Its path.
        path: String,
        /// Why.
        reason: String,
    },
    /// rustls refused the combination (a key that does not match, say).
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// The CA file holds no certificate rustls accepts as a root.
    #[error("TLS CA: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

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

fn file_error(what: &'static str, path: &Path, reason: impl ToString) -> TlsError {
    TlsError::File {
        what,
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

fn certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(what, path, e))?;
    if certs.is_empty() {
        return Err(file_error(what, path, "no certificate in the file"));
    }
    Ok(certs)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsConfig {
    /// Load this node's certificate chain and key and the cluster CA (PEM).
    pub fn from_pem_files(cert: &Path, key: &Path, ca: &Path) -> Result<TlsConfig, TlsError> {
        let chain = certs("certificate", cert)?;
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error("key", key, e))?;
        let mut roots = RootCertStore::empty();
        for c in certs("CA", ca)? {
            roots.add(c).map_err(|e| file_error("CA", ca, e))?;
        }
        let roots = Arc::new(roots);
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
