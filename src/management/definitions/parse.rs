//! A definitions document (RabbitMQ's JSON) into events, in RabbitMQ's
//! import order, with the list of what StableMQ does not import. Shared by
//! `POST /api/definitions` and `stablemq serve --definitions FILE`.

use crate::broker::event::{Binding, Destination, Event, ExchangeKind, ExchangeSpec, QueueSpec};
use crate::broker::parameters::{LIMITS_NAME, VHOST_LIMITS};
use crate::management::users_api::{regex, tags, topic_regex, user_fields};
use serde_json::{Map, Value};
use stablemq_protocol::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};

/// Read a definitions file for `serve --definitions`.
pub fn load_file(path: &std::path::Path) -> Result<(Vec<Event>, Vec<String>), String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let doc: Value = serde_json::from_slice(&text)
        .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    parse(&doc, None)
}

/// Turn a definitions document into events, in import order, and the list
/// of entries StableMQ does not import. `only_vhost` is the per-vhost form:
/// entries carry no vhost and users, vhosts and permissions are ignored.
/// A malformed entry fails the whole import (400), as in RabbitMQ.
pub fn parse(doc: &Value, only_vhost: Option<&str>) -> Result<(Vec<Event>, Vec<String>), String> {
    let mut import = Import {
        doc,
        only_vhost,
        events: Vec::new(),
        not_imported: Vec::new(),
    };
    if only_vhost.is_none() {
        import.users()?;
        import.vhosts()?;
        import.permissions()?;
        import.topic_permissions()?;
        import.global_parameters()?;
    }
    import.parameters()?;
    // Before queues and exchanges, as RabbitMQ orders it, so they are
    // declared with their policy in place.
    import.policies()?;
    import.queues()?;
    import.exchanges()?;
    import.bindings()?;
    Ok((import.events, import.not_imported))
}

/// A definitions document being read, section by section, into events.
struct Import<'a> {
    /// The whole document.
    doc: &'a Value,
    /// The vhost of the per-vhost form, whose entries carry none.
    only_vhost: Option<&'a str>,
    /// The events so far, in import order.
    events: Vec<Event>,
    /// The entries StableMQ does not import, said.
    not_imported: Vec<String>,
}

/// The string field `k` of an entry, or the error naming the entry.
fn str_field(m: &Map<String, Value>, k: &str) -> Result<String, String> {
    m.get(k)
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or_else(|| format!("missing or invalid '{k}' in {}", Value::Object(m.clone())))
}

/// The boolean field `k` of an entry (`true`, or the string `"true"`), else `default`.
fn bool_field(m: &Map<String, Value>, k: &str, default: bool) -> bool {
    match m.get(k) {
        Some(Value::Bool(x)) => *x,
        Some(Value::String(x)) => x == "true",
        _ => default,
    }
}

impl<'a> Import<'a> {
    /// The entries of the section `key`: none if it is absent or null.
    fn list(&self, key: &str) -> Result<Vec<&'a Map<String, Value>>, String> {
        match self.doc.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_object()
                        .ok_or_else(|| format!("'{key}' entries must be objects"))
                })
                .collect(),
            Some(_) => Err(format!("'{key}' must be a list")),
        }
    }

    /// An entry's vhost: the per-vhost form's own, else its `vhost` field.
    fn vhost_of(&self, m: &Map<String, Value>) -> Result<String, String> {
        match self.only_vhost {
            Some(v) => Ok(v.to_string()),
            None => str_field(m, "vhost"),
        }
    }

    /// The `users` section, each user with the limits it names.
    fn users(&mut self) -> Result<(), String> {
        let s = str_field;
        for u in self.list("users")? {
            let (password_hash, hashing_algorithm, tags) = user_fields(u)
                .map_err(|e| format!("user {}: {e:?}", s(u, "name").unwrap_or_default()))?;
            let name = s(u, "name")?;
            self.events.push(Event::UserPut {
                name: name.clone(),
                password_hash,
                hashing_algorithm,
                tags,
            });
            // RabbitMQ 3.10 exports a user's limits with it, and an import
            // sets each one it names: the others (all, without the key or
            // with `{}`) stay as they are.
            if let Some(Value::Object(limits)) = u.get("limits")
                && !limits.is_empty()
            {
                crate::users::limits::validate(limits)
                    .map_err(|e| format!("limits of user '{name}': {e}"))?;
                self.events.push(Event::UserLimitsSet {
                    name,
                    value: Value::Object(limits.clone()).to_string(),
                });
            }
        }
        Ok(())
    }

    /// The `vhosts` section: each vhost, its metadata and its limits.
    fn vhosts(&mut self) -> Result<(), String> {
        let s = str_field;
        for v in self.list("vhosts")? {
            let name = s(v, "name")?;
            let meta = v.get("metadata").and_then(Value::as_object);
            let get = |k: &str| v.get(k).or_else(|| meta.and_then(|m| m.get(k)));
            self.events.push(Event::VhostCreated {
                vhost: name.clone(),
            });
            self.events.push(Event::VhostMetadata {
                vhost: name,
                description: get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                tags: tags(get("tags")).map_err(|e| format!("vhost tags: {e:?}"))?,
                default_queue_type: get("default_queue_type")
                    .and_then(Value::as_str)
                    .map(String::from),
            });
            // RabbitMQ exports the limits here and among the parameters;
            // `[]` is its empty list.
            if let Some(l @ Value::Object(o)) = v.get("limits")
                && !o.is_empty()
            {
                let vhost = s(v, "name")?;
                let ev = crate::management::parameters::parameter_event(
                    &vhost,
                    VHOST_LIMITS,
                    LIMITS_NAME,
                    l,
                )
                .map_err(|e| format!("limits of vhost '{vhost}': {e}"))?;
                self.events.push(ev);
            }
        }
        Ok(())
    }

    /// The `permissions` section.
    fn permissions(&mut self) -> Result<(), String> {
        let s = str_field;
        for p in self.list("permissions")? {
            let re = |k: &str| s(p, k).and_then(|x| regex(&x).map_err(|e| format!("{e:?}")));
            self.events.push(Event::PermissionSet {
                user: s(p, "user")?,
                vhost: s(p, "vhost")?,
                configure: re("configure")?,
                write: re("write")?,
                read: re("read")?,
            });
        }
        Ok(())
    }

    /// The `topic_permissions` section.
    fn topic_permissions(&mut self) -> Result<(), String> {
        let s = str_field;
        for p in self.list("topic_permissions")? {
            let re = |k: &str| s(p, k).and_then(|x| topic_regex(&x).map_err(|e| format!("{e:?}")));
            self.events.push(Event::TopicPermissionSet {
                user: s(p, "user")?,
                vhost: s(p, "vhost")?,
                exchange: s(p, "exchange")?,
                write: re("write")?,
                read: re("read")?,
            });
        }
        Ok(())
    }

    /// The `global_parameters` section.
    fn global_parameters(&mut self) -> Result<(), String> {
        for g in self.list("global_parameters")? {
            // Every one, internal_cluster_id and cluster_name included:
            // RabbitMQ 3.10's import replaces its own with the file's.
            let value = g.get("value").cloned().unwrap_or(Value::Null);
            self.events.push(Event::GlobalParameterSet {
                name: str_field(g, "name")?,
                value: value.to_string(),
            });
        }
        Ok(())
    }

    /// The `parameters` section: those of a component StableMQ lacks are
    /// listed as not imported.
    fn parameters(&mut self) -> Result<(), String> {
        let s = str_field;
        for p in self.list("parameters")? {
            let (vhost, component, name) = (self.vhost_of(p)?, s(p, "component")?, s(p, "name")?);
            let value = p.get("value").cloned().unwrap_or(Value::Null);
            match crate::management::parameters::parameter_event(&vhost, &component, &name, &value)
            {
                Ok(ev) => self.events.push(ev),
                // A component of a plugin StableMQ lacks: said, not dropped silently.
                Err(e) => self.not_imported.push(format!(
                    "parameter '{name}' of component '{component}' in vhost '{vhost}': {}",
                    e.to_string().trim()
                )),
            }
        }
        Ok(())
    }

    /// The `policies` section.
    fn policies(&mut self) -> Result<(), String> {
        for p in self.list("policies")? {
            let name = str_field(p, "name")?;
            let vhost = self.vhost_of(p)?;
            let ev = crate::management::policies::policy_event(&vhost, &name, p)
                .map_err(|e| format!("policy '{name}' in vhost '{vhost}': {}", e.0))?;
            self.events.push(ev);
        }
        Ok(())
    }

    /// The `queues` section.
    fn queues(&mut self) -> Result<(), String> {
        let b = bool_field;
        for q in self.list("queues")? {
            self.events.push(Event::QueueDeclared {
                vhost: self.vhost_of(q)?,
                name: str_field(q, "name")?,
                spec: QueueSpec {
                    durable: b(q, "durable", true),
                    auto_delete: b(q, "auto_delete", false),
                    exclusive_owner: None,
                    arguments: arguments(q.get("arguments"))?,
                },
            });
        }
        Ok(())
    }

    /// The `exchanges` section: those of a type StableMQ lacks are listed as
    /// not imported, the default and `amq.*` ones skipped.
    fn exchanges(&mut self) -> Result<(), String> {
        let (s, b) = (str_field, bool_field);
        for x in self.list("exchanges")? {
            let name = s(x, "name")?;
            let kind_text = s(x, "type")?;
            let Some(kind) = ExchangeKind::parse(&kind_text) else {
                self.not_imported.push(format!(
                    "exchange '{name}' in vhost '{}': type '{kind_text}' is not supported",
                    self.vhost_of(x)?
                ));
                continue;
            };
            if name.is_empty() || name.starts_with("amq.") {
                continue;
            }
            self.events.push(Event::ExchangeDeclared {
                vhost: self.vhost_of(x)?,
                name,
                spec: ExchangeSpec {
                    kind,
                    durable: b(x, "durable", true),
                    auto_delete: b(x, "auto_delete", false),
                    internal: b(x, "internal", false),
                    arguments: arguments(x.get("arguments"))?,
                },
            });
        }
        Ok(())
    }

    /// The `bindings` section.
    fn bindings(&mut self) -> Result<(), String> {
        let s = str_field;
        for bd in self.list("bindings")? {
            let dest = s(bd, "destination")?;
            let destination = match s(bd, "destination_type")?.as_str() {
                "queue" => Destination::Queue(dest),
                "exchange" => Destination::Exchange(dest),
                other => return Err(format!("invalid destination_type '{other}'")),
            };
            self.events.push(Event::Bound {
                vhost: self.vhost_of(bd)?,
                binding: Binding {
                    source: s(bd, "source")?,
                    destination,
                    routing_key: s(bd, "routing_key").unwrap_or_default(),
                    arguments: arguments(bd.get("arguments"))?,
                },
            });
        }
        Ok(())
    }
}

/// JSON arguments as an AMQP table, as RabbitMQ's management plugin reads
/// them: integers become signed 64-bit, other numbers doubles, strings long
/// strings, lists arrays, objects tables.
fn arguments(v: Option<&Value>) -> Result<FieldTable, String> {
    match v {
        None | Some(Value::Null) => Ok(FieldTable::default()),
        Some(Value::Object(m)) => {
            let mut t = FieldTable::default();
            for (k, v) in m {
                // AMQP cannot carry a longer key (and `ShortString::from`
                // panics on one: found by fuzzing).
                let key = ShortString::try_new(k.as_str()).map_err(|_| {
                    format!(
                        "argument name of {} bytes is longer than 255 bytes",
                        k.len()
                    )
                })?;
                t.insert(key, amqp_value(v));
            }
            Ok(t)
        }
        Some(other) => Err(format!("arguments must be an object, got {other}")),
    }
}

fn amqp_value(v: &Value) -> AMQPValue {
    match v {
        Value::Null => AMQPValue::Void,
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => AMQPValue::LongLongInt(i),
            None => AMQPValue::Double(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => AMQPValue::LongString(LongString::from(s.as_str())),
        Value::Array(a) => {
            let mut arr = FieldArray::default();
            for x in a {
                arr.push(amqp_value(x));
            }
            AMQPValue::FieldArray(arr)
        }
        Value::Object(_) => match arguments(Some(v)) {
            Ok(t) => AMQPValue::FieldTable(t),
            Err(_) => AMQPValue::Void,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_rabbitmq_export_parses_in_import_order() {
        let doc = json!({
            "rabbit_version": "3.10.8",
            "users": [{"name": "u", "password_hash": "VA8YUP5eIyCJ+fy2FIB8Xh7iw0jHB8SKyFLVC6eHQ0swaZqk",
                       "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["management"], "limits": {}}],
            "vhosts": [{"name": "v", "limits": [], "metadata": {"description": "d", "tags": ["t"]}}],
            "permissions": [{"user": "u", "vhost": "v", "configure": ".*", "write": "", "read": "^q"}],
            "topic_permissions": [{"user": "u", "vhost": "v", "exchange": "amq.topic", "write": "^a", "read": ".*"}],
            "parameters": [],
            "global_parameters": [{"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-x"}],
            "policies": [{"vhost": "v", "name": "p", "pattern": ".*", "apply-to": "queues", "definition": {"max-length": 10}, "priority": 0}],
            "queues": [{"name": "q", "vhost": "v", "durable": true, "auto_delete": false,
                        "arguments": {"x-max-length": 10, "x-queue-type": "classic"}}],
            "exchanges": [{"name": "x", "vhost": "v", "type": "topic", "durable": true, "auto_delete": false,
                           "internal": false, "arguments": {}},
                          {"name": "d", "vhost": "v", "type": "x-delayed-message", "durable": true,
                           "auto_delete": false, "internal": false, "arguments": {}}],
            "bindings": [{"source": "x", "vhost": "v", "destination": "q", "destination_type": "queue",
                          "routing_key": "a.#", "arguments": {}}]
        });
        let (events, skipped) = parse(&doc, None).expect("parses");
        assert!(matches!(events[0], Event::UserPut { .. }));
        assert!(matches!(events[1], Event::VhostCreated { .. }));
        assert!(matches!(events.last(), Some(Event::Bound { .. })));
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        let q = events
            .iter()
            .find_map(|e| match e {
                Event::QueueDeclared { spec, .. } => Some(spec.clone()),
                _ => None,
            })
            .expect("queue");
        assert_eq!(
            q.arguments.inner().get("x-max-length"),
            Some(&AMQPValue::LongLongInt(10))
        );
        assert!(parse(&json!({"queues": [{"vhost": "v"}]}), None).is_err());
        assert!(parse(&json!({"permissions": [{"user": "u", "vhost": "v", "configure": "(", "write": "", "read": ""}]}), None).is_err());
    }
}
