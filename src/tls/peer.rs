//! What a finished TLS handshake tells about the client: the protocol and
//! cipher suite (listed by `/api/connections` in RabbitMQ's words) and the
//! client certificate rustls verified, whose name SASL EXTERNAL logs in as.
//!
//! Plain data, so the connection state machine and the master carry it
//! without knowing rustls.

use crate::config::CertLoginFrom;
use rustls::ServerConnection;

/// A verified client certificate.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PeerCert {
    /// The subject, as `CN=name,O=org`.
    pub subject: String,
    /// The issuer, in the same form.
    pub issuer: String,
    /// `{not_before, not_after}`, as the management API shows it.
    pub validity: String,
    /// The user name SASL EXTERNAL logs in as (`cert_login_from`); None when
    /// the certificate has no such name.
    pub login: Option<String>,
}

/// A client connection's TLS session.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TlsInfo {
    /// `tlsv1.3` or `tlsv1.2`, as RabbitMQ writes it.
    pub protocol: String,
    /// The cipher suite's key exchange (`any` under TLS 1.3), as RabbitMQ.
    pub key_exchange: String,
    /// The suite's bulk cipher (`aes_256_gcm`, `chacha20_poly1305`).
    pub cipher: String,
    /// The suite's hash (`sha384`).
    pub hash: String,
    /// The client's certificate, when it sent one and it was verified.
    pub peer_cert: Option<PeerCert>,
}

impl TlsInfo {
    /// Read a finished server-side session. rustls hands out peer
    /// certificates only after its verifier accepted them.
    pub fn of(conn: &ServerConnection, login_from: CertLoginFrom) -> TlsInfo {
        let protocol = match conn.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "tlsv1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "tlsv1.2",
            _ => "unknown",
        };
        let suite = conn
            .negotiated_cipher_suite()
            .and_then(|s| s.suite().as_str())
            .unwrap_or("");
        let (key_exchange, cipher, hash) = split_suite(suite);
        let peer_cert = conn
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|leaf| read_cert(leaf.as_ref(), login_from));
        TlsInfo {
            protocol: protocol.to_string(),
            key_exchange,
            cipher,
            hash,
            peer_cert,
        }
    }

    /// The name SASL EXTERNAL would log in as, if any.
    pub fn cert_login(&self) -> Option<&str> {
        self.peer_cert.as_ref().and_then(|c| c.login.as_deref())
    }
}

/// `TLS13_AES_256_GCM_SHA384` → (`any`, `aes_256_gcm`, `sha384`);
/// `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256` → (`ecdhe_rsa`, `aes_128_gcm`, `sha256`).
fn split_suite(name: &str) -> (String, String, String) {
    let lower = name.to_ascii_lowercase();
    let (kx, rest) = if let Some(rest) = lower.strip_prefix("tls13_") {
        ("any".to_string(), rest.to_string())
    } else if let Some(rest) = lower.strip_prefix("tls_") {
        match rest.split_once("_with_") {
            Some((kx, rest)) => (kx.to_string(), rest.to_string()),
            None => (String::new(), rest.to_string()),
        }
    } else {
        (String::new(), lower.clone())
    };
    match rest.rsplit_once('_') {
        Some((cipher, hash)) => (kx, cipher.to_string(), hash.to_string()),
        None => (kx, rest, String::new()),
    }
}

fn read_cert(der: &[u8], login_from: CertLoginFrom) -> Option<PeerCert> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let name = |n: &x509_parser::x509::X509Name| {
        n.iter_rdn()
            .flat_map(|rdn| rdn.iter())
            .filter_map(|atv| {
                let key = x509_parser::objects::oid2abbrev(
                    atv.attr_type(),
                    x509_parser::objects::oid_registry(),
                )
                .ok()?;
                Some(format!("{key}={}", atv.as_str().ok()?))
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let login = match login_from {
        CertLoginFrom::CommonName => cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_string),
        CertLoginFrom::SubjectAlternativeName => cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .and_then(|ext| {
                ext.value.general_names.iter().find_map(|g| match g {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                    _ => None,
                })
            }),
    };
    let validity = cert.validity();
    Some(PeerCert {
        subject: name(cert.subject()),
        issuer: name(cert.issuer()),
        validity: format!("{{{}, {}}}", validity.not_before, validity.not_after),
        login,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suite_names_split_as_rabbitmq_reports_them() {
        assert_eq!(
            split_suite("TLS13_AES_256_GCM_SHA384"),
            ("any".into(), "aes_256_gcm".into(), "sha384".into())
        );
        assert_eq!(
            split_suite("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
            ("ecdhe_rsa".into(), "aes_128_gcm".into(), "sha256".into())
        );
    }

    #[test]
    fn a_certificate_gives_its_cn_or_its_first_dns_name() {
        let mut params =
            rcgen::CertificateParams::new(vec!["alt.example".to_string()]).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Acme");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("cert");
        let cn = read_cert(cert.der(), CertLoginFrom::CommonName).expect("parsed");
        assert_eq!(cn.login.as_deref(), Some("alice"));
        assert!(cn.subject.contains("CN=alice"), "{}", cn.subject);
        assert!(cn.subject.contains("O=Acme"), "{}", cn.subject);
        let san = read_cert(cert.der(), CertLoginFrom::SubjectAlternativeName).expect("parsed");
        assert_eq!(san.login.as_deref(), Some("alt.example"));
        assert!(read_cert(b"not a certificate", CertLoginFrom::CommonName).is_none());
    }
}
