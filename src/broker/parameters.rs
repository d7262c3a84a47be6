//! Runtime parameters (per vhost, by component) and global parameters, as
//! RabbitMQ keeps them, and the vhost limits that live among them.
//!
//! They are replicated state like a declaration: `ParameterSet`,
//! `ParameterCleared`, `GlobalParameterSet` and `GlobalParameterCleared`
//! events change the tables, so a parameter survives a restart and a
//! failover (I1) and every replica holds the same ones (I4). Values are
//! free-form JSON, carried in the event as JSON text (postcard cannot carry
//! a `serde_json::Value`).
//!
//! Which components are accepted (see docs/compatibility.md):
//! - `vhost-limits` (name `limits`): `max-connections` and `max-queues`,
//!   enforced on AMQP by the master (`master/limits.rs`);
//! - `federation-upstream`, `federation-upstream-set` and `shovel`: the
//!   components of plugins that ship with RabbitMQ 3.10. StableMQ has no
//!   federation and no dynamic shovels, but definitions exported from a
//!   RabbitMQ that used them carry such parameters: they are stored and
//!   exported again unchanged, so nothing is lost on the way through, and
//!   have no effect here;
//! - any other component is refused, as RabbitMQ refuses a component whose
//!   plugin is not enabled ("component ... not found"); `policy` and
//!   `operator_policy` are refused as RabbitMQ refuses them on this path.

use serde_json::{Map, Value};

/// The component of the vhost limits.
pub const VHOST_LIMITS: &str = "vhost-limits";
/// The one parameter name the vhost limits use.
pub const LIMITS_NAME: &str = "limits";
/// The limit on connections to a vhost.
pub const MAX_CONNECTIONS: &str = "max-connections";
/// The limit on queues in a vhost.
pub const MAX_QUEUES: &str = "max-queues";

/// Components whose parameters are stored without effect (plugins StableMQ
/// does not have; their definitions still round-trip).
const STORED_ONLY: &[&str] = &["federation-upstream", "federation-upstream-set", "shovel"];

/// Why a parameter was refused: RabbitMQ's "Validation failed" text, which
/// the API answers with 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParameterError {
    /// A validation failure, as RabbitMQ words it.
    #[error("Validation failed\n\n{0}\n")]
    Invalid(String),
    /// A refusal RabbitMQ words without the "Validation failed" prefix.
    #[error("{0}")]
    Refused(String),
}

/// Check a parameter of `component` before it becomes an event.
pub fn validate(component: &str, name: &str, value: &Value) -> Result<(), ParameterError> {
    match component {
        "policy" | "operator_policy" => Err(ParameterError::Refused(
            "policies may not be set using this method".into(),
        )),
        VHOST_LIMITS => {
            if name != LIMITS_NAME {
                return Err(ParameterError::Invalid(format!(
                    "name {name} is not valid for component {VHOST_LIMITS} (only {LIMITS_NAME})"
                )));
            }
            match value {
                Value::Object(m) => validate_limits(m),
                // RabbitMQ's empty limits (an empty Erlang list), as it
                // exports a vhost whose last limit was deleted.
                Value::Array(a) if a.is_empty() => Ok(()),
                _ => Err(ParameterError::Invalid(format!(
                    "{name} must be an object, actually was {value}"
                ))),
            }
        }
        // An upstream set is a list of upstreams, each an object.
        "federation-upstream-set" => match value {
            Value::Array(a) if a.iter().all(Value::is_object) => Ok(()),
            _ => Err(ParameterError::Invalid(format!(
                "{name} must be a list of objects, actually was {value}"
            ))),
        },
        c if STORED_ONLY.contains(&c) => match value {
            Value::Object(_) => Ok(()),
            _ => Err(ParameterError::Invalid(format!(
                "{name} must be an object, actually was {value}"
            ))),
        },
        _ => Err(ParameterError::Invalid(format!(
            "component {component} not found"
        ))),
    }
}

/// The keys of a vhost-limits value: known names, integer values.
pub fn validate_limits(m: &Map<String, Value>) -> Result<(), ParameterError> {
    let unknown: Vec<String> = m
        .iter()
        .filter(|(k, _)| k.as_str() != MAX_CONNECTIONS && k.as_str() != MAX_QUEUES)
        .map(|(k, v)| format!("{{<<\"{k}\">>,{v}}}"))
        .collect();
    if !unknown.is_empty() {
        return Err(ParameterError::Invalid(format!(
            "Unrecognised terms [{}] in limits",
            unknown.join(",")
        )));
    }
    for (k, v) in m {
        if v.as_i64().is_none() {
            return Err(ParameterError::Invalid(format!(
                "{k} should be a number, actually was {v}"
            )));
        }
    }
    Ok(())
}

/// A vhost-limits value as RabbitMQ stores it: no limits at all is the
/// empty list `[]` (its empty proplist), which is what it shows and exports
/// after `{}` was set or the last limit deleted; anything else unchanged.
pub fn stored_limits(value: Value) -> Value {
    match value {
        Value::Object(m) if m.is_empty() => Value::Array(Vec::new()),
        other => other,
    }
}

/// Whether a vhost-limits value sets no limit (`[]` or `{}`).
pub fn limits_empty(value: &Value) -> bool {
    match value {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// A limit a vhost-limits value sets; a negative number means no limit, as
/// in RabbitMQ.
pub fn limit(value: &Value, key: &str) -> Option<u64> {
    value
        .get(key)
        .and_then(Value::as_i64)
        .and_then(|n| u64::try_from(n).ok())
}

/// Decode a value carried by an event. Apply must not fail: a value that
/// does not parse (never written by this build) is kept as a JSON string.
pub fn from_event(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// The global parameter that names the cluster.
pub const CLUSTER_NAME: &str = "cluster_name";

/// The stored cluster name, if one was set: the management API, the AMQP
/// handshake and the Prometheus `rabbitmq_cluster` label all report it, as
/// RabbitMQ reports its one cluster name everywhere.
pub fn stored_cluster_name(globals: &std::collections::BTreeMap<String, Value>) -> Option<String> {
    globals
        .get(CLUSTER_NAME)
        .and_then(|v| v.as_str())
        .map(String::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn components_and_limits_validate_as_rabbitmq() {
        assert!(validate("vhost-limits", "limits", &json!({"max-queues": 3})).is_ok());
        assert!(validate("vhost-limits", "limits", &json!({"max-queues": "x"})).is_err());
        assert!(validate("vhost-limits", "limits", &json!({"max-foo": 1})).is_err());
        assert!(validate("vhost-limits", "other", &json!({"max-queues": 1})).is_err());
        assert!(validate("shovel", "s", &json!({"src-uri": "amqp://"})).is_ok());
        assert!(validate("federation-upstream", "u", &json!(3)).is_err());
        assert!(validate("vhost-limits", "limits", &json!([])).is_ok());
        assert!(validate("vhost-limits", "limits", &json!([1])).is_err());
        assert!(validate("federation-upstream-set", "s", &json!([{"upstream": "u"}])).is_ok());
        assert!(validate("federation-upstream-set", "s", &json!({"upstream": "u"})).is_err());
        assert_eq!(stored_limits(json!({})), json!([]));
        assert_eq!(
            stored_limits(json!({"max-queues": 1})),
            json!({"max-queues": 1})
        );
        assert!(limits_empty(&json!([])) && limits_empty(&json!({})));
        let e = validate("nope", "n", &json!({})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Validation failed\n\ncomponent nope not found\n"
        );
        assert!(matches!(
            validate("policy", "p", &json!({})),
            Err(ParameterError::Refused(_))
        ));
    }

    #[test]
    fn negative_limits_mean_none() {
        let v = json!({"max-connections": -1, "max-queues": 0});
        assert_eq!(limit(&v, MAX_CONNECTIONS), None);
        assert_eq!(limit(&v, MAX_QUEUES), Some(0));
        assert_eq!(limit(&v, "missing"), None);
    }
}
