//! Reading TLS material from PEM files: certificate chains, private keys and
//! CA bundles, with errors that name the file and say why.
//!
//! One copy for every TLS user of the workspace: node-to-node TLS
//! ([`super::tls`]), the broker's AMQPS and HTTPS listeners, and its TLS
//! clients (`stablemq perf`, `ctl`, `shovel`). It reads files; it builds no
//! rustls configuration, since each of those wants its own.

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;

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

impl TlsError {
    /// The file `path` (a `what`: certificate, key, CA) cannot be used, for `reason`.
    pub fn file(what: &'static str, path: &Path, reason: impl ToString) -> TlsError {
        TlsError::File {
            what,
            path: path.display().to_string(),
            reason: reason.to_string(),
        }
    }
}

/// Every certificate in the PEM file `path`; at least one. `what` names the
/// file in errors ("certificate", "CA").
pub fn read_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError::file(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::file(what, path, e))?;
    if certs.is_empty() {
        return Err(TlsError::file(what, path, "no certificate in the file"));
    }
    Ok(certs)
}

/// The first private key in the PEM file `path` (PKCS#8, PKCS#1 RSA or SEC1 EC).
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::file("key", path, e))
}

/// The CA bundle `path` as a root store of every certificate in it; one that
/// rustls does not accept as a trust anchor is an error.
pub fn read_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in read_certs("CA", path)? {
        roots.add(c).map_err(|e| TlsError::file("CA", path, e))?;
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_file_names_itself_and_why() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope.pem");
        let e = read_certs("certificate", &missing).expect_err("missing file");
        assert!(e.to_string().starts_with("certificate "), "{e}");
        assert!(e.to_string().contains("nope.pem"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a pem file\n").expect("write");
        let e = read_roots(&empty).expect_err("empty bundle");
        assert!(e.to_string().contains("no certificate in the file"), "{e}");
        let e = read_key(&empty).expect_err("no key");
        assert!(e.to_string().starts_with("key "), "{e}");
    }
}
