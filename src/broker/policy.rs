//! Policies: operator-set arguments for every queue or exchange whose name
//! matches a regex, as RabbitMQ's policies work.
//!
//! A policy is replicated state like a declaration: `PolicySet` and
//! `PolicyCleared` events change a vhost's policy table, and apply then
//! recomputes which policy each object of the vhost follows and the object's
//! effective arguments. Both steps are pure functions of the broker state
//! (policies are kept in name order, ties in priority go to the greater name),
//! so every replica picks the same policy (I4).
//!
//! RabbitMQ's rules, which this follows:
//! - at most one policy applies to an object: the matching one with the
//!   highest priority;
//! - `apply-to` is `queues`, `exchanges` or `all`;
//! - where a queue's own `x-` argument and its policy both set a key, the
//!   numeric limits (`message-ttl`, `expires`, `max-length`,
//!   `max-length-bytes`, `delivery-limit`) take the smaller of the two, and
//!   every other key (`dead-letter-*`, `overflow`, `alternate-exchange`) takes
//!   the argument.

use serde_json::{Map, Value};

/// Which objects a policy applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyTo {
    /// Queues only.
    Queues,
    /// Exchanges only.
    Exchanges,
    /// Both.
    All,
}

impl ApplyTo {
    /// Parse RabbitMQ's `apply-to` value.
    pub fn parse(s: &str) -> Option<ApplyTo> {
        match s {
            "queues" => Some(ApplyTo::Queues),
            "exchanges" => Some(ApplyTo::Exchanges),
            "all" => Some(ApplyTo::All),
            _ => None,
        }
    }

    /// The value as RabbitMQ spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyTo::Queues => "queues",
            ApplyTo::Exchanges => "exchanges",
            ApplyTo::All => "all",
        }
    }
}

/// One policy of a vhost.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Name.
    pub name: String,
    /// The regex as given (shown back by the API).
    pub pattern: String,
    /// The compiled regex; None if it does not compile (a log written by a
    /// build with another regex dialect): such a policy matches nothing.
    pub regex: Option<regex::Regex>,
    /// What it applies to.
    pub apply_to: ApplyTo,
    /// Higher wins.
    pub priority: i64,
    /// The keys it sets.
    pub definition: Map<String, Value>,
}

/// The policy an object follows, as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedPolicy {
    /// The policy's name.
    pub name: String,
    /// Its definition.
    pub definition: Map<String, Value>,
}

/// Why a policy was refused: RabbitMQ's "Validation failed" text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Validation failed\n\n{0}\n")]
pub struct PolicyError(pub String);

/// Keys a policy may set. The ones StableMQ acts on come first; the rest are
/// RabbitMQ keys that are accepted (so definitions exported from RabbitMQ
/// import) and have no effect here.
const KEYS: &[&str] = &[
    "message-ttl",
    "expires",
    "max-length",
    "max-length-bytes",
    "overflow",
    "dead-letter-exchange",
    "dead-letter-routing-key",
    "alternate-exchange",
    "delivery-limit",
    "queue-mode",
    "queue-version",
    "queue-master-locator",
    "queue-leader-locator",
    "ha-mode",
    "ha-params",
    "ha-sync-mode",
    "ha-sync-batch-size",
    "ha-promote-on-shutdown",
    "ha-promote-on-failure",
    "federation-upstream",
    "federation-upstream-set",
    "max-age",
    "stream-max-segment-size-bytes",
    "initial-cluster-size",
    "consumer-timeout",
];

impl Policy {
    /// Build and validate a policy, as a PUT or an import gives it.
    pub fn new(
        name: &str,
        pattern: &str,
        apply_to: &str,
        priority: i64,
        definition: Map<String, Value>,
    ) -> Result<Policy, PolicyError> {
        let apply_to = ApplyTo::parse(apply_to).ok_or_else(|| {
            PolicyError(format!(
                "\"{apply_to}\" is not a valid apply-to value (queues, exchanges, all)"
            ))
        })?;
        let regex = regex::Regex::new(pattern)
            .map_err(|e| PolicyError(format!("pattern \"{pattern}\" is not a valid regex: {e}")))?;
        validate(&definition)?;
        Ok(Policy {
            name: name.to_string(),
            pattern: pattern.to_string(),
            regex: Some(regex),
            apply_to,
            priority,
            definition,
        })
    }

    /// Rebuild from an event. Apply must not fail, so a pattern that does not
    /// compile gives a policy that matches nothing.
    pub fn from_event(
        name: &str,
        pattern: &str,
        apply_to: &str,
        priority: i64,
        definition: &str,
    ) -> Policy {
        Policy {
            name: name.to_string(),
            pattern: pattern.to_string(),
            regex: regex::Regex::new(pattern).ok(),
            apply_to: ApplyTo::parse(apply_to).unwrap_or(ApplyTo::All),
            priority,
            definition: serde_json::from_str(definition).unwrap_or_default(),
        }
    }

    fn matches(&self, name: &str, queue: bool) -> bool {
        let kind_ok = match self.apply_to {
            ApplyTo::All => true,
            ApplyTo::Queues => queue,
            ApplyTo::Exchanges => !queue,
        };
        kind_ok && self.regex.as_ref().is_some_and(|r| r.is_match(name))
    }
}

/// Check a definition's keys and value types, as RabbitMQ's validators do.
pub fn validate(definition: &Map<String, Value>) -> Result<(), PolicyError> {
    if definition.is_empty() {
        return Err(PolicyError("no policy provided".into()));
    }
    let unknown: Vec<&str> = definition
        .keys()
        .map(String::as_str)
        .filter(|k| !KEYS.contains(k))
        .collect();
    if !unknown.is_empty() {
        let list: Vec<String> = unknown.iter().map(|k| format!("<<\"{k}\">>")).collect();
        return Err(PolicyError(format!(
            "[{}] are not recognised policy settings",
            list.join(",")
        )));
    }
    for (k, v) in definition {
        let ok = match k.as_str() {
            "message-ttl" | "max-length" | "max-length-bytes" | "delivery-limit" => {
                v.as_u64().is_some()
            }
            "expires" | "consumer-timeout" => v.as_u64().is_some_and(|n| n > 0),
            "overflow" => matches!(
                v.as_str(),
                Some("drop-head" | "reject-publish" | "reject-publish-dlx")
            ),
            "dead-letter-exchange" | "dead-letter-routing-key" | "alternate-exchange" => {
                v.is_string()
            }
            "queue-mode" => matches!(v.as_str(), Some("default" | "lazy")),
            _ => true,
        };
        if !ok {
            return Err(PolicyError(format!("{k} value {v} is invalid")));
        }
    }
    if definition.contains_key("dead-letter-routing-key")
        && !definition.contains_key("dead-letter-exchange")
    {
        return Err(PolicyError(
            "dead-letter-routing-key requires dead-letter-exchange".into(),
        ));
    }
    Ok(())
}

/// The policy a queue (`queue`) or exchange named `name` follows: the
/// matching one with the highest priority; among equals, the greatest name.
pub fn pick<'a>(
    policies: impl IntoIterator<Item = &'a Policy>,
    name: &str,
    queue: bool,
) -> Option<AppliedPolicy> {
    policies
        .into_iter()
        .filter(|p| p.matches(name, queue))
        .max_by(|a, b| (a.priority, &a.name).cmp(&(b.priority, &b.name)))
        .map(|p| AppliedPolicy {
            name: p.name.clone(),
            definition: p.definition.clone(),
        })
}

/// A number the definition sets for `key`.
pub fn number(def: &Map<String, Value>, key: &str) -> Option<u64> {
    def.get(key).and_then(Value::as_u64)
}

/// A string the definition sets for `key`.
pub fn string(def: &Map<String, Value>, key: &str) -> Option<String> {
    def.get(key).and_then(Value::as_str).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn highest_priority_wins_and_apply_to_filters() {
        let low = Policy::new("a", "^q", "queues", 1, def(json!({"max-length": 5}))).unwrap();
        let high = Policy::new("b", "^q\\.x", "all", 7, def(json!({"max-length": 9}))).unwrap();
        let ex = Policy::new(
            "c",
            ".*",
            "exchanges",
            99,
            def(json!({"alternate-exchange": "ae"})),
        )
        .unwrap();
        let all = [low, high, ex];
        assert_eq!(pick(&all, "q.x", true).unwrap().name, "b");
        assert_eq!(pick(&all, "q.y", true).unwrap().name, "a");
        assert_eq!(pick(&all, "q.x", false).unwrap().name, "c");
        assert!(pick(&all[..2], "other", true).is_none());
    }

    #[test]
    fn validation_follows_rabbitmq() {
        assert!(Policy::new("p", "(", "queues", 0, def(json!({"max-length": 1}))).is_err());
        assert!(Policy::new("p", ".*", "nope", 0, def(json!({"max-length": 1}))).is_err());
        let e = Policy::new("p", ".*", "all", 0, def(json!({"bogus": 1}))).unwrap_err();
        assert!(e.0.contains("not recognised"), "{e}");
        assert!(Policy::new("p", ".*", "all", 0, def(json!({"max-length": -1}))).is_err());
        assert!(Policy::new("p", ".*", "all", 0, def(json!({"overflow": "x"}))).is_err());
        assert!(Policy::new("p", ".*", "all", 0, def(json!({}))).is_err());
        assert!(Policy::new("p", ".*", "all", 0, def(json!({"ha-mode": "all"}))).is_ok());
    }
}
