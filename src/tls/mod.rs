//! TLS for client connections: AMQPS and HTTPS for the management API.
//!
//! What it is: the rustls server configuration built from the `[tls]`
//! section (certificate chain, key, optional client CA), held so that it can
//! be replaced while the node runs ([`ServerTls::reload`], on SIGHUP or
//! through the management API): a handshake takes the configuration current
//! at its start, so established connections keep theirs and new ones get the
//! new certificate. A reload that fails leaves the old one in place.
//! [`peer`] reads what a finished handshake negotiated and whose certificate
//! it verified, for SASL EXTERNAL and the management API.
//!
//! What it is not: node-to-node TLS (`stablemq_cluster::transport::tls`,
//! mutual against the cluster CA) or a TLS client (`perf`, `shovel` and the
//! tests dial with their own).

pub mod peer;

use crate::config::{TlsConfig, Verify};
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use stablemq_cluster::transport::pem::{read_certs, read_key, read_roots};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio_rustls::TlsAcceptor;

pub use peer::{PeerCert, TlsInfo};
pub use stablemq_cluster::transport::pem::TlsError;

/// The two rustls configurations one certificate serves: AMQP (no ALPN) and
/// HTTP (ALPN `http/1.1`, which browsers and curl offer).
struct Built {
    amqp: Arc<ServerConfig>,
    http: Arc<ServerConfig>,
    /// SHA-256 of the leaf certificate, hex: what a reload changed.
    fingerprint: String,
}

fn build(settings: &TlsConfig) -> Result<Built, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = read_certs("certificate", &settings.cert_file)?;
    let key = read_key(&settings.key_file)?;
    let versions = [&rustls::version::TLS13, &rustls::version::TLS12];
    let builder =
        ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(&versions)?;
    let builder = match (settings.verify, &settings.ca_file) {
        (Verify::VerifyPeer, Some(ca)) => {
            let roots = read_roots(ca)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if settings.fail_if_no_peer_cert {
                verifier.build()?
            } else {
                verifier.allow_unauthenticated().build()?
            };
            builder.with_client_cert_verifier(verifier)
        }
        // Config::validate refuses verify_peer without a CA.
        _ => builder.with_no_client_auth(),
    };
    use sha2::Digest;
    let fingerprint = chain
        .first()
        .map(|leaf| {
            sha2::Sha256::digest(leaf.as_ref())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        })
        .unwrap_or_default();
    let amqp = builder.with_single_cert(chain, key)?;
    let mut http = amqp.clone();
    http.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Built {
        amqp: Arc::new(amqp),
        http: Arc::new(http),
        fingerprint,
    })
}

/// The node's client-facing TLS, replaceable at run time.
pub struct ServerTls {
    settings: TlsConfig,
    current: RwLock<Arc<Built>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert_file", &self.settings.cert_file)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Read the files of `settings`; an error names the file and why.
    pub fn load(settings: &TlsConfig) -> Result<Arc<ServerTls>, TlsError> {
        let built = build(settings)?;
        Ok(Arc::new(ServerTls {
            settings: settings.clone(),
            current: RwLock::new(Arc::new(built)),
        }))
    }

    /// Read the certificate, key and CA files again. New handshakes use the
    /// new ones; on an error the old ones stay and the error is returned.
    /// Returns the new leaf certificate's SHA-256 fingerprint.
    pub fn reload(&self) -> Result<String, TlsError> {
        let built = Arc::new(build(&self.settings)?);
        let fingerprint = built.fingerprint.clone();
        match self.current.write() {
            Ok(mut g) => *g = built,
            Err(poisoned) => *poisoned.into_inner() = built,
        }
        Ok(fingerprint)
    }

    fn now(&self) -> Arc<Built> {
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// An acceptor for AMQPS with the configuration current now.
    pub fn amqp_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.now().amqp.clone())
    }

    /// An acceptor for HTTPS with the configuration current now.
    pub fn http_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.now().http.clone())
    }

    /// The SHA-256 fingerprint of the certificate new handshakes present.
    pub fn fingerprint(&self) -> String {
        self.now().fingerprint.clone()
    }

    /// How long a client has to finish the handshake.
    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_millis(self.settings.handshake_timeout_ms)
    }

    /// The settings this was built from.
    pub fn settings(&self) -> &TlsConfig {
        &self.settings
    }
}

/// The node's client TLS, once `serve` has loaded it: the AMQPS acceptors,
/// the HTTPS listener, SIGHUP and the management API's reload share it.
static INSTALLED: std::sync::OnceLock<Arc<ServerTls>> = std::sync::OnceLock::new();

/// Make `tls` the node's client TLS (the first call wins: one per process).
pub fn install(tls: Arc<ServerTls>) {
    let _ = INSTALLED.set(tls);
}

/// The node's client TLS, if `[tls]` is configured.
pub fn installed() -> Option<Arc<ServerTls>> {
    INSTALLED.get().cloned()
}
