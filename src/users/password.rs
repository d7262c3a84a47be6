//! Password hashes in RabbitMQ's internal format, so users move between
//! RabbitMQ and StableMQ with their definitions and keep their passwords.
//!
//! RabbitMQ stores `base64(salt ‖ H(salt ‖ password))` with a 4-byte random
//! salt, where H is named by the user's `hashing_algorithm`:
//! `rabbit_password_hashing_sha256` (the default since 3.6),
//! `rabbit_password_hashing_sha512`, or `rabbit_password_hashing_md5` (older
//! exports). New passwords are always hashed with SHA-256; the other two are
//! accepted on import and checked at login.

use base64::Engine;
use md5::Md5;
use rand::Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha512};

/// The hash functions RabbitMQ's internal backend knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum HashAlgorithm {
    /// `rabbit_password_hashing_sha256`, the default.
    #[default]
    Sha256,
    /// `rabbit_password_hashing_sha512`.
    Sha512,
    /// `rabbit_password_hashing_md5` (RabbitMQ before 3.6).
    Md5,
}

impl HashAlgorithm {
    /// RabbitMQ's module name, as definitions carry it.
    pub fn name(self) -> &'static str {
        match self {
            HashAlgorithm::Sha256 => "rabbit_password_hashing_sha256",
            HashAlgorithm::Sha512 => "rabbit_password_hashing_sha512",
            HashAlgorithm::Md5 => "rabbit_password_hashing_md5",
        }
    }

    /// Parse RabbitMQ's module name.
    pub fn parse(s: &str) -> Option<HashAlgorithm> {
        match s {
            "rabbit_password_hashing_sha256" => Some(HashAlgorithm::Sha256),
            "rabbit_password_hashing_sha512" => Some(HashAlgorithm::Sha512),
            "rabbit_password_hashing_md5" => Some(HashAlgorithm::Md5),
            _ => None,
        }
    }

    fn digest(self, salt: &[u8], password: &[u8]) -> Vec<u8> {
        match self {
            HashAlgorithm::Sha256 => Sha256::new()
                .chain_update(salt)
                .chain_update(password)
                .finalize()
                .to_vec(),
            HashAlgorithm::Sha512 => Sha512::new()
                .chain_update(salt)
                .chain_update(password)
                .finalize()
                .to_vec(),
            HashAlgorithm::Md5 => Md5::new()
                .chain_update(salt)
                .chain_update(password)
                .finalize()
                .to_vec(),
        }
    }
}

/// Hash a new password with a fresh random salt (SHA-256). The random salt is
/// drawn by the caller of an event, never in apply (I4): the hash travels in
/// the event.
pub fn hash(password: &str) -> String {
    let salt: [u8; 4] = rand::rng().random();
    let mut out = salt.to_vec();
    out.extend_from_slice(&HashAlgorithm::Sha256.digest(&salt, password.as_bytes()));
    base64::engine::general_purpose::STANDARD.encode(out)
}

/// Whether `password` matches a stored hash. An empty or malformed hash
/// matches nothing: such a user cannot log in with a password, as in RabbitMQ.
pub fn verify(algo: HashAlgorithm, stored: &str, password: &str) -> bool {
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(stored.trim()) else {
        return false;
    };
    if bytes.len() <= 4 {
        return false;
    }
    let (salt, digest) = bytes.split_at(4);
    crate::auth::constant_time_eq(&algo.digest(salt, password.as_bytes()), digest)
}

/// Whether a hash taken from an import decodes as base64 (empty is allowed:
/// a user without a password).
pub fn well_formed(stored: &str) -> bool {
    stored.is_empty()
        || base64::engine::general_purpose::STANDARD
            .decode(stored.trim())
            .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_hash_verifies_and_is_salted() {
        let h = hash("secret");
        assert!(verify(HashAlgorithm::Sha256, &h, "secret"));
        assert!(!verify(HashAlgorithm::Sha256, &h, "Secret"));
        assert_ne!(h, hash("secret"));
        assert!(!verify(HashAlgorithm::Sha256, "", "secret"));
        assert!(!verify(HashAlgorithm::Sha256, "not base64!", "secret"));
    }

    #[test]
    fn hashes_made_by_rabbitmq_verify() {
        // guest/guest as RabbitMQ 3.10 exports it (sha256).
        assert!(verify(
            HashAlgorithm::Sha256,
            "VA8YUP5eIyCJ+fy2FIB8Xh7iw0jHB8SKyFLVC6eHQ0swaZqk",
            "guest"
        ));
        // Same layout, other algorithms: salt 01020304.
        for algo in [HashAlgorithm::Sha512, HashAlgorithm::Md5] {
            let salt = [1u8, 2, 3, 4];
            let mut b = salt.to_vec();
            b.extend_from_slice(&algo.digest(&salt, b"pw"));
            let h = base64::engine::general_purpose::STANDARD.encode(b);
            assert!(verify(algo, &h, "pw"));
            assert!(!verify(algo, &h, "px"));
            assert_eq!(HashAlgorithm::parse(algo.name()), Some(algo));
        }
    }
}
