//! `amqps://` for the shovel: what a URI's TLS session trusts and presents.
//!
//! RabbitMQ's shovel takes its TLS settings from the URI's query string
//! (`amqps://host?cacertfile=/ca.pem&certfile=/c.pem&keyfile=/c.key`), and so
//! does this one, so a shovel definition copied from RabbitMQ works as it is.
//! `--tls-ca-file` is the CA for either URI that names none. Without either,
//! the system's CA store is trusted (lapin's `rustls-native-certs`).
//! `auth_mechanism=external` (lapin reads it) logs in with the client
//! certificate.
//!
//! What it is not: a way to turn verification off. RabbitMQ's shovel accepts
//! `verify=verify_none`; this one refuses it with a clear error, since a
//! migration that moves every message should know whom it hands them to.

use super::ShovelError;
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use std::path::{Path, PathBuf};

/// The TLS settings a URI asks for: `None` for `amqp://`.
pub(super) fn for_uri(
    uri: &str,
    ca_flag: Option<&Path>,
) -> Result<Option<OwnedTLSConfig>, ShovelError> {
    let parsed = url::Url::parse(uri)
        .map_err(|e| ShovelError::Usage(format!("{}: {e}", super::redact(uri))))?;
    let mut query = Query::default();
    for (k, v) in parsed.query_pairs() {
        match k.as_ref() {
            "cacertfile" => query.ca = Some(PathBuf::from(v.as_ref())),
            "certfile" => query.cert = Some(PathBuf::from(v.as_ref())),
            "keyfile" => query.key = Some(PathBuf::from(v.as_ref())),
            "verify" if v == "verify_none" => {
                return Err(ShovelError::Usage(format!(
                    "{}: verify=verify_none is not supported: give the CA that signed the \
                     broker's certificate (cacertfile= or --tls-ca-file)",
                    super::redact(uri)
                )));
            }
            _ => {}
        }
    }
    if parsed.scheme() != "amqps" {
        if query.ca.is_some() || query.cert.is_some() {
            return Err(ShovelError::Usage(format!(
                "{}: TLS settings on an amqp:// URI; use amqps://",
                super::redact(uri)
            )));
        }
        return Ok(None);
    }
    query.config(ca_flag).map(Some)
}

/// A URI's TLS query parameters, as RabbitMQ names them.
#[derive(Default)]
struct Query {
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

impl Query {
    fn config(self, ca_flag: Option<&Path>) -> Result<OwnedTLSConfig, ShovelError> {
        let cert_chain = match self.ca.as_deref().or(ca_flag) {
            // Read through the shared loader first, so a bad bundle is
            // reported with its path rather than as a failed handshake.
            Some(ca) => {
                stablemq_cluster::transport::pem::read_roots(ca)
                    .map_err(|e| ShovelError::Usage(e.to_string()))?;
                Some(read_text(ca, "CA")?)
            }
            None => None,
        };
        let identity = match (self.cert, self.key) {
            (Some(cert), Some(key)) => Some(OwnedIdentity::PKCS8 {
                pem: read_text(&cert, "certificate")?.into_bytes(),
                key: read_text(&key, "key")?.into_bytes(),
            }),
            (None, None) => None,
            _ => {
                return Err(ShovelError::Usage(
                    "certfile and keyfile go together".into(),
                ));
            }
        };
        Ok(OwnedTLSConfig {
            identity,
            cert_chain,
        })
    }
}

fn read_text(path: &Path, what: &str) -> Result<String, ShovelError> {
    std::fs::read_to_string(path)
        .map_err(|e| ShovelError::Usage(format!("{what} {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_uris_need_no_tls_and_refuse_tls_settings() {
        assert!(
            for_uri("amqp://g:g@127.0.0.1:5672/%2f", None)
                .unwrap()
                .is_none()
        );
        let e = for_uri("amqp://h/%2f?cacertfile=/x.pem", None).unwrap_err();
        assert!(e.to_string().contains("use amqps://"), "{e}");
    }

    #[test]
    fn amqps_takes_rabbitmqs_query_parameters_and_refuses_verify_none() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        std::fs::write(&ca, cert.cert.pem()).unwrap();
        let uri = format!("amqps://h:5671/%2f?cacertfile={}", ca.display());
        let tls = for_uri(&uri, None).unwrap().expect("tls");
        assert_eq!(tls.cert_chain.as_deref(), Some(cert.cert.pem().as_str()));
        assert!(tls.identity.is_none());
        // The flag is the CA of a URI that names none.
        let tls = for_uri("amqps://h/%2f", Some(&ca)).unwrap().expect("tls");
        assert!(tls.cert_chain.is_some());
        // Neither: the system's store (lapin's default).
        let tls = for_uri("amqps://h/%2f", None).unwrap().expect("tls");
        assert!(tls.cert_chain.is_none());
        let e = for_uri("amqps://h/%2f?verify=verify_none", None).unwrap_err();
        assert!(
            e.to_string().contains("verify_none is not supported"),
            "{e}"
        );
        let e = for_uri("amqps://h/%2f?certfile=/c.pem", None).unwrap_err();
        assert!(e.to_string().contains("go together"), "{e}");
        let missing = format!("amqps://h/%2f?cacertfile={}/nope.pem", dir.path().display());
        let e = for_uri(&missing, None).unwrap_err();
        assert!(e.to_string().contains("nope.pem"), "{e}");
    }
}
