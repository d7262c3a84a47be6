//! The TLS tests' client side: the test PKI, a broker with `[tls]`, and a
//! rustls client that checks the broker's certificate against the test CA.

use super::common::*;
use compat_tests::free_port;
use compat_tests::pki::{Ca, Pem, tls_section};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::sync::Arc;
use tokio::io::AsyncReadExt;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// Certificates: a CA, the server's, clients signed by the CA (alice, bob),
/// an expired one, and one from a CA the broker does not trust.
pub struct Pki {
    pub _dir: tempfile::TempDir,
    pub ca: Ca,
    pub server: Pem,
    pub alice: Pem,
    pub bob: Pem,
    pub expired: Pem,
    pub untrusted: Pem,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().expect("pki dir");
        let ca = Ca::new(dir.path(), "test");
        let stranger = Ca::new(dir.path(), "stranger");
        Pki {
            server: ca.server("server", "first"),
            alice: ca.client("alice", "alice", Some("alice.example")),
            bob: ca.client("bob", "bob", None),
            expired: ca.expired_client("expired", "alice"),
            untrusted: stranger.client("untrusted", "alice", None),
            ca,
            _dir: dir,
        }
    }

    /// `[tls]` lines for verify_peer against the test CA.
    pub fn verify_peer_lines(&self, fail_if_no_peer_cert: bool) -> String {
        format!(
            "ca_file = \"{}\"\nverify = \"verify_peer\"\nfail_if_no_peer_cert = {fail_if_no_peer_cert}",
            self.ca.cert_file.display()
        )
    }

    /// Write a new server certificate (CN `cn`) over the server's files.
    pub fn replace_server_cert(&self, cn: &str) {
        let fresh = self.ca.server("server-next", cn);
        std::fs::copy(&fresh.key, &self.server.key).expect("replace key");
        std::fs::copy(&fresh.cert, &self.server.cert).expect("replace cert");
    }
}

/// A broker serving AMQPS.
pub struct TlsBroker {
    pub broker: Broker,
    pub amqps_port: u16,
    ca: std::path::PathBuf,
}

fn client_config(pki_ca: &std::path::Path, cert: Option<&Pem>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(pki_ca).expect("CA file") {
        roots.add(c.expect("CA cert")).expect("add CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    match cert {
        None => builder.with_no_client_auth(),
        Some(p) => {
            let chain = CertificateDer::pem_file_iter(&p.cert)
                .expect("client cert")
                .collect::<Result<Vec<_>, _>>()
                .expect("client cert");
            let key = PrivateKeyDer::from_pem_file(&p.key).expect("client key");
            builder
                .with_client_auth_cert(chain, key)
                .expect("client auth")
        }
    }
}

/// Read once: an alert the server sent after the handshake shows as an error.
pub async fn first_read(mut s: TlsStream<tokio::net::TcpStream>) -> std::io::Result<()> {
    let mut b = [0u8; 1];
    match tokio::time::timeout(WAIT, s.read(&mut b)).await {
        Ok(Ok(0)) => Err(std::io::Error::other("closed")),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e),
        Err(_) => Ok(()),
    }
}

impl TlsBroker {
    pub fn start(pki: &Pki, extra: &str) -> TlsBroker {
        TlsBroker::start_top(pki, "", extra)
    }

    /// With `top` (top-level config keys) before the `[tls]` section.
    pub fn start_top(pki: &Pki, top: &str, extra: &str) -> TlsBroker {
        let amqps_port = free_port();
        let broker = Broker::start_with(BrokerOptions {
            config_toml: Some(format!(
                "{top}\n{}",
                tls_section(&pki.server, amqps_port, extra)
            )),
            ..Default::default()
        });
        TlsBroker {
            broker,
            amqps_port,
            ca: pki.ca.cert_file.clone(),
        }
    }

    /// The same client settings, dialing `port` instead (to capture what
    /// a real client sends).
    pub fn pointing_at(other: &TlsBroker, port: u16) -> TlsTarget {
        TlsTarget {
            ca: other.ca.clone(),
            port,
        }
    }

    /// A TLS session to the AMQPS port (with `cert` as client certificate).
    pub async fn handshake(
        &self,
        cert: Option<&Pem>,
    ) -> std::io::Result<TlsStream<tokio::net::TcpStream>> {
        handshake(&self.ca, self.amqps_port, cert).await
    }

    /// A raw AMQP connection over TLS, the protocol header sent.
    pub async fn raw(&self, cert: Option<&Pem>) -> RawConn<TlsStream<tokio::net::TcpStream>> {
        let s = self.handshake(cert).await.expect("TLS handshake");
        RawConn::over(s).await
    }

    /// The SHA-256 of the certificate a new handshake is shown.
    pub async fn fingerprint_seen(&self) -> String {
        let s = self.handshake(None).await.expect("TLS handshake");
        let leaf = s
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .expect("server certificate")
            .clone();
        sha256_hex(leaf.as_ref())
    }

    fn api(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.broker.management_port)
    }

    /// GET an API path as guest.
    pub fn api_get(&self, path: &str) -> serde_json::Value {
        let mut r = ureq::get(&self.api(path))
            .header("Authorization", basic("guest", "guest"))
            .call()
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        r.body_mut().read_json().expect("JSON")
    }

    /// POST to an API path as guest; returns the status and body.
    pub fn api_post(&self, path: &str) -> (u16, String) {
        let r = ureq::post(&self.api(path))
            .header("Authorization", basic("guest", "guest"))
            .config()
            .http_status_as_error(false)
            .build()
            .send_empty()
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let code = r.status().as_u16();
        let body = r.into_body().read_to_string().unwrap_or_default();
        (code, body)
    }

    /// Create `name` (no password) with full permissions on `/`.
    pub fn add_user(&self, name: &str) {
        add_cert_user(self.broker.management_port, name);
    }
}

/// Create `name` with no password (it logs in by certificate only) and full
/// permissions on `/`, through the management API on `port`, as guest.
pub fn add_cert_user(port: u16, name: &str) {
    let put = |path: String, body: serde_json::Value| {
        ureq::put(&format!("http://127.0.0.1:{port}{path}"))
            .header("Authorization", basic("guest", "guest"))
            .send_json(body)
            .unwrap_or_else(|e| panic!("PUT {path}: {e}"));
    };
    put(
        format!("/api/users/{name}"),
        serde_json::json!({"password_hash": "", "tags": ""}),
    );
    put(
        format!("/api/permissions/%2F/{name}"),
        serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"}),
    );
}

fn basic(user: &str, pass: &str) -> String {
    use base64::Engine;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
    format!("Basic {token}")
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A TLS client's target: a CA to check against and a port.
pub struct TlsTarget {
    ca: std::path::PathBuf,
    port: u16,
}

impl TlsTarget {
    /// A target at 127.0.0.1:`port` whose certificate `ca` signed.
    pub fn new(ca: &std::path::Path, port: u16) -> TlsTarget {
        TlsTarget {
            ca: ca.to_path_buf(),
            port,
        }
    }

    /// Handshake (with `cert` as client certificate).
    pub async fn handshake(
        &self,
        cert: Option<&Pem>,
    ) -> std::io::Result<TlsStream<tokio::net::TcpStream>> {
        handshake(&self.ca, self.port, cert).await
    }
}

async fn handshake(
    ca: &std::path::Path,
    port: u16,
    cert: Option<&Pem>,
) -> std::io::Result<TlsStream<tokio::net::TcpStream>> {
    let connector = TlsConnector::from(Arc::new(client_config(ca, cert)));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let name = ServerName::try_from("localhost").expect("name");
    tokio::time::timeout(WAIT, connector.connect(name, tcp))
        .await
        .map_err(|_| std::io::Error::other("handshake timed out"))?
}
