//! Certificates for the TLS tests, made by the test itself with rcgen: a CA,
//! a server certificate for 127.0.0.1 and localhost, and client certificates
//! signed by that CA (or by a stranger, or expired), written as PEM files.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
use std::path::{Path, PathBuf};

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Pem {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

/// A test CA that signs server and client certificates.
pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
    /// The CA certificate (PEM file).
    pub cert_file: PathBuf,
    dir: PathBuf,
}

fn write(dir: &Path, name: &str, pem: String) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pem).expect("write PEM");
    path
}

impl Ca {
    /// A new CA named `name`, writing its files under `dir`.
    pub fn new(dir: &Path, name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA certificate");
        let cert_file = write(dir, &format!("{name}-ca.pem"), cert.pem());
        Ca {
            cert,
            key,
            cert_file,
            dir: dir.to_path_buf(),
        }
    }

    fn sign(&self, file: &str, params: CertificateParams) -> Pem {
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.cert, &self.key).expect("sign");
        Pem {
            cert: write(&self.dir, &format!("{file}.pem"), cert.pem()),
            key: write(&self.dir, &format!("{file}.key"), key.serialize_pem()),
        }
    }

    /// A server certificate for localhost and 127.0.0.1, with CN `cn`.
    pub fn server(&self, file: &str, cn: &str) -> Pem {
        let mut p = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        p.subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        p.distinguished_name.push(DnType::CommonName, cn);
        self.sign(file, p)
    }

    /// A client certificate with CN `cn` (and `dns` as its DNS SAN, if given).
    pub fn client(&self, file: &str, cn: &str, dns: Option<&str>) -> Pem {
        let sans = dns.map(|d| vec![d.to_string()]).unwrap_or_default();
        let mut p = CertificateParams::new(sans).expect("params");
        p.distinguished_name.push(DnType::CommonName, cn);
        self.sign(file, p)
    }

    /// A client certificate with CN `cn` that expired in 2001.
    pub fn expired_client(&self, file: &str, cn: &str) -> Pem {
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
        p.distinguished_name.push(DnType::CommonName, cn);
        p.not_before = rcgen::date_time_ymd(2000, 1, 1);
        p.not_after = rcgen::date_time_ymd(2001, 1, 1);
        self.sign(file, p)
    }
}

/// The `[tls]` section for a broker serving AMQPS on `port` with `server`.
pub fn tls_section(server: &Pem, port: u16, extra: &str) -> String {
    format!(
        "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\namqps_port = {port}\n{extra}\n",
        server.cert.display(),
        server.key.display()
    )
}
