//! Login: SASL PLAIN and AMQPLAIN, checked against the replicated users.
//!
//! Kept apart from the connection state machine so the rules RabbitMQ applies
//! (loopback-only users, `authentication_failure_close`) are tested on their own.
//! Users come from the access table every replica derives from the log
//! ([`crate::users`]); the config file only seeds it on a fresh node.

use crate::config::Config;
use crate::error::{AmqpError, ReplyCode};
use crate::users::{AccessTable, User};
use std::net::IpAddr;

/// SASL EXTERNAL: the user is the name in the client's verified TLS
/// certificate (RabbitMQ's rabbitmq_auth_mechanism_ssl).
pub const EXTERNAL: &str = "EXTERNAL";

/// The mechanisms this broker implements (`auth_mechanisms` may list these).
pub const KNOWN_MECHANISMS: [&str; 3] = ["PLAIN", "AMQPLAIN", EXTERNAL];

/// The mechanisms connection.start offers, space-separated: the configured
/// `auth_mechanisms` in their order, EXTERNAL only on a TLS connection whose
/// client certificate was verified and names someone.
pub fn mechanisms(configured: &[String], cert_login: Option<&str>) -> String {
    configured
        .iter()
        .filter(|m| m.as_str() != EXTERNAL || cert_login.is_some())
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `mechanism` is one connection.start offered.
pub fn offered(configured: &[String], cert_login: Option<&str>, mechanism: &str) -> bool {
    mechanisms(configured, cert_login)
        .split(' ')
        .any(|m| m == mechanism)
}

/// Log in with SASL EXTERNAL as `cert_login`, the verified certificate's
/// name. Without a verified certificate the mechanism was not offered, and
/// is refused as RabbitMQ refuses a mechanism it does not offer. A name
/// that is not a user is refused with 403, as any failed login.
pub fn authenticate_external<'t>(
    config: &Config,
    users: &'t AccessTable,
    cert_login: Option<&str>,
    peer: IpAddr,
) -> Result<&'t User, AmqpError> {
    let Some(user) = cert_login else {
        return Err(AmqpError::new(
            ReplyCode::AccessRefused,
            format!("unsupported authentication mechanism '{EXTERNAL}'"),
        )
        .at_connection());
    };
    let u = users.users.get(user).ok_or_else(|| {
        AmqpError::access_refused(format!(
            "Login was refused using authentication mechanism EXTERNAL. For details see the broker logfile. (user '{user}')"
        ))
        .at_connection()
    })?;
    if config.loopback_users.iter().any(|l| l == user) && !is_loopback(peer) {
        return Err(AmqpError::access_refused(format!(
            "user '{user}' can only connect via localhost"
        ))
        .at_connection());
    }
    Ok(u)
}

/// Pull user name and password out of a SASL response.
pub fn parse_response(mechanism: &str, response: &[u8]) -> Result<(String, String), AmqpError> {
    match mechanism {
        "PLAIN" => {
            // authzid \0 authcid \0 password
            let mut parts = response.split(|b| *b == 0);
            let _authz = parts.next();
            let user = parts.next();
            let pass = parts.next();
            match (user, pass, parts.next()) {
                (Some(u), Some(p), None) => Ok((
                    String::from_utf8_lossy(u).into_owned(),
                    String::from_utf8_lossy(p).into_owned(),
                )),
                _ => Err(AmqpError::access_refused(
                    "PLAIN login refused: malformed response",
                )),
            }
        }
        "AMQPLAIN" => parse_amqplain(response)
            .ok_or_else(|| AmqpError::access_refused("AMQPLAIN login refused: malformed response")),
        other => Err(AmqpError::new(
            ReplyCode::AccessRefused,
            format!("unsupported authentication mechanism '{other}'"),
        )),
    }
}

/// AMQPLAIN is a field table without its length prefix, holding LOGIN and PASSWORD.
fn parse_amqplain(mut b: &[u8]) -> Option<(String, String)> {
    let mut login = None;
    let mut password = None;
    while !b.is_empty() {
        let klen = *b.first()? as usize;
        let key = b.get(1..1 + klen)?;
        b = b.get(1 + klen..)?;
        let kind = *b.first()?;
        b = b.get(1..)?;
        let value = match kind {
            b'S' => {
                let len = u32::from_be_bytes(b.get(0..4)?.try_into().ok()?) as usize;
                let v = b.get(4..4 + len)?;
                b = b.get(4 + len..)?;
                v
            }
            b's' => {
                let len = *b.first()? as usize;
                let v = b.get(1..1 + len)?;
                b = b.get(1 + len..)?;
                v
            }
            _ => return None,
        };
        let value = String::from_utf8_lossy(value).into_owned();
        match key {
            b"LOGIN" => login = Some(value),
            b"PASSWORD" => password = Some(value),
            _ => {}
        }
    }
    Some((login?, password?))
}

/// Check credentials and the peer address; returns the user on success. A
/// user without a password hash cannot log in with a password.
pub fn authenticate<'t>(
    config: &Config,
    users: &'t AccessTable,
    user: &str,
    password: &str,
    peer: IpAddr,
) -> Result<&'t User, AmqpError> {
    let refused = || {
        AmqpError::access_refused(format!(
            "Login was refused using authentication mechanism PLAIN. For details see the broker logfile. (user '{user}')"
        ))
        .at_connection()
    };
    let u = users.users.get(user).ok_or_else(refused)?;
    if !u.password_matches(password) {
        return Err(refused());
    }
    if config.loopback_users.iter().any(|l| l == user) && !is_loopback(peer) {
        return Err(AmqpError::access_refused(format!(
            "user '{user}' can only connect via localhost"
        ))
        .at_connection());
    }
    Ok(u)
}

/// Whether `ip` is a loopback address (IPv4-mapped IPv6 included).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Compare secrets without an early exit, so timing does not leak the prefix length.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_amqplain_parse() {
        assert_eq!(
            parse_response("PLAIN", b"\0guest\0pw").unwrap(),
            ("guest".into(), "pw".into())
        );
        assert!(parse_response("PLAIN", b"guest").is_err());
        let mut t = vec![5];
        t.extend_from_slice(b"LOGIN");
        t.push(b'S');
        t.extend_from_slice(&5u32.to_be_bytes());
        t.extend_from_slice(b"guest");
        t.push(8);
        t.extend_from_slice(b"PASSWORD");
        t.push(b'S');
        t.extend_from_slice(&2u32.to_be_bytes());
        t.extend_from_slice(b"pw");
        assert_eq!(
            parse_response("AMQPLAIN", &t).unwrap(),
            ("guest".into(), "pw".into())
        );
        assert!(parse_response("AMQPLAIN", &t[..t.len() - 1]).is_err());
        assert!(parse_response("EXTERNAL", b"").is_err());
    }

    #[test]
    fn guest_only_from_loopback_and_wrong_password_refused() {
        let c = Config::default();
        let mut t = AccessTable::default();
        for (name, hash) in [
            ("guest", crate::users::password::hash("guest")),
            ("nopw", String::new()),
        ] {
            t.put_user(User {
                name: name.into(),
                password_hash: hash,
                hashing_algorithm: crate::users::HashAlgorithm::Sha256,
                tags: vec![],
            });
        }
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let remote: IpAddr = "192.0.2.7".parse().unwrap();
        assert!(authenticate(&c, &t, "guest", "guest", lo).is_ok());
        assert!(authenticate(&c, &t, "guest", "guest", "::1".parse().unwrap()).is_ok());
        let e = authenticate(&c, &t, "guest", "guest", remote).unwrap_err();
        assert_eq!(e.code, ReplyCode::AccessRefused);
        assert!(e.connection_level);
        assert!(authenticate(&c, &t, "guest", "nope", lo).is_err());
        assert!(authenticate(&c, &t, "nobody", "guest", lo).is_err());
        assert!(authenticate(&c, &t, "nopw", "", lo).is_err());
        // EXTERNAL: the certificate's name must be a user; no password is
        // checked, and without a certificate the mechanism is refused.
        assert_eq!(
            authenticate_external(&c, &t, Some("nopw"), lo)
                .map(|u| u.name.clone())
                .ok(),
            Some("nopw".to_string())
        );
        assert!(authenticate_external(&c, &t, Some("nobody"), lo).is_err());
        assert!(authenticate_external(&c, &t, None, lo).is_err());
        assert!(authenticate_external(&c, &t, Some("guest"), remote).is_err());
        // EXTERNAL is offered only when configured and a certificate names someone.
        let default = Config::default().auth_mechanisms;
        assert_eq!(mechanisms(&default, Some("nopw")), "PLAIN AMQPLAIN");
        let with: Vec<String> = ["EXTERNAL", "PLAIN"].map(String::from).to_vec();
        assert_eq!(mechanisms(&with, Some("nopw")), "EXTERNAL PLAIN");
        assert_eq!(mechanisms(&with, None), "PLAIN");
        assert!(offered(&with, Some("nopw"), "EXTERNAL"));
        assert!(!offered(&with, None, "EXTERNAL"));
        assert!(!offered(&with, None, "AMQPLAIN"));
    }
}
