//! Per-user limits, as RabbitMQ 3.10 keeps them on the user record:
//! `max-connections` (connections the user may have open on the node) and
//! `max-channels` (channels over all of them). A negative value means no
//! limit, 0 allows none.
//!
//! They are replicated state like the user: a `UserLimitsSet` event sets
//! (or, with null, removes) some of a user's limits in the [`AccessTable`],
//! as RabbitMQ sets them one by one, so the limits survive
//! a restart and a failover. The master enforces them (`master/limits.rs`);
//! the management API (`/api/user-limits`) and the definitions read and
//! write them.

use super::AccessTable;
use serde_json::{Map, Value};

/// The limit on a user's open connections.
pub const MAX_CONNECTIONS: &str = "max-connections";
/// The limit on a user's open channels, over all its connections.
pub const MAX_CHANNELS: &str = "max-channels";

/// Check a user's limits as RabbitMQ 3.10 does: known names, integer
/// values. The error is RabbitMQ's text, answered with 400.
pub fn validate(m: &Map<String, Value>) -> Result<(), String> {
    let unknown: Vec<String> = m
        .iter()
        .filter(|(k, _)| k.as_str() != MAX_CONNECTIONS && k.as_str() != MAX_CHANNELS)
        .map(|(k, v)| format!("{{<<\"{k}\">>,{v}}}"))
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "Unrecognised terms [{}] in user-limits",
            unknown.join(",")
        ));
    }
    for (k, v) in m {
        if v.as_i64().is_none() {
            let shown = match v {
                Value::String(s) => format!("<<\"{s}\">>"),
                other => other.to_string(),
            };
            return Err(format!("{k} should be a number, actually was {shown}"));
        }
    }
    Ok(())
}

impl AccessTable {
    /// Change a user's limits by the JSON object `value`: each key set to
    /// its number, or removed when null (a value that does not parse changes
    /// nothing). A user that does not exist is skipped: the event refers to
    /// nothing.
    pub fn set_user_limits(&mut self, user: &str, value: &str) {
        if !self.users.contains_key(user) {
            return;
        }
        let Ok(Value::Object(changes)) = serde_json::from_str::<Value>(value) else {
            return;
        };
        let limits = self.user_limits.entry(user.to_string()).or_default();
        for (k, v) in changes {
            if v.is_null() {
                limits.remove(&k);
            } else {
                limits.insert(k, v);
            }
        }
        if limits.is_empty() {
            self.user_limits.remove(user);
        }
    }

    /// A user's limits (empty when none are set).
    pub fn user_limits_of(&self, user: &str) -> Map<String, Value> {
        self.user_limits.get(user).cloned().unwrap_or_default()
    }

    /// The limit `key` of `user`, if one is in force (a negative value is
    /// none).
    pub fn user_limit(&self, user: &str, key: &str) -> Option<u64> {
        self.user_limits
            .get(user)?
            .get(key)
            .and_then(Value::as_i64)
            .and_then(|n| u64::try_from(n).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::users::{HashAlgorithm, User};
    use serde_json::json;

    fn table_with(user: &str) -> AccessTable {
        let mut t = AccessTable::default();
        t.put_user(User {
            name: user.into(),
            password_hash: String::new(),
            hashing_algorithm: HashAlgorithm::Sha256,
            tags: Vec::new(),
        });
        t
    }

    #[test]
    fn limits_are_set_replaced_cleared_and_go_with_their_user() {
        let mut t = table_with("alice");
        t.set_user_limits("alice", r#"{"max-connections":2,"max-channels":-1}"#);
        assert_eq!(t.user_limit("alice", MAX_CONNECTIONS), Some(2));
        // Negative: no limit.
        assert_eq!(t.user_limit("alice", MAX_CHANNELS), None);
        // A change merges: the other limit stays.
        t.set_user_limits("alice", r#"{"max-channels":0}"#);
        assert_eq!(t.user_limit("alice", MAX_CONNECTIONS), Some(2));
        assert_eq!(t.user_limit("alice", MAX_CHANNELS), Some(0));
        t.set_user_limits("alice", "{}");
        assert_eq!(t.user_limits_of("alice").len(), 2);
        // null removes.
        t.set_user_limits("alice", r#"{"max-channels":null,"max-connections":null}"#);
        assert!(t.user_limits_of("alice").is_empty());
        assert!(t.user_limits.is_empty());
        t.set_user_limits("nobody", r#"{"max-channels":1}"#);
        assert!(t.user_limits.is_empty());
        t.set_user_limits("alice", r#"{"max-channels":1}"#);
        t.delete_user("alice");
        assert!(t.user_limits.is_empty());
    }

    #[test]
    fn validation_words_errors_as_rabbitmq_3_10() {
        let m = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert!(validate(&m(json!({"max-connections": 1, "max-channels": -1}))).is_ok());
        assert_eq!(
            validate(&m(json!({"max-queues": 2}))).unwrap_err(),
            "Unrecognised terms [{<<\"max-queues\">>,2}] in user-limits"
        );
        assert_eq!(
            validate(&m(json!({"max-channels": "x"}))).unwrap_err(),
            "max-channels should be a number, actually was <<\"x\">>"
        );
    }
}
