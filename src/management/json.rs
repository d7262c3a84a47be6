//! AMQP values as RabbitMQ's management API writes them in JSON, and the
//! small encodings its URLs use.

use base64::Engine;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use stablemq_protocol::{AMQPValue, FieldTable};
use std::net::SocketAddr;

/// A field table (queue arguments, client properties), serialized as a JSON
/// object on the HTTP task; the master task only clones the table.
#[derive(Debug, Clone, Default)]
pub struct Table(pub FieldTable);

impl Serialize for Table {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        table(&self.0).serialize(s)
    }
}

/// A field table as a JSON object.
pub fn table(t: &FieldTable) -> Value {
    Value::Object(
        t.inner()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), value(v)))
            .collect::<Map<String, Value>>(),
    )
}

/// One AMQP value as JSON: numbers stay numbers, strings become text (lossy
/// for bytes that are not UTF-8, as RabbitMQ's JSON cannot carry them
/// either), tables and arrays nest, void is null.
pub fn value(v: &AMQPValue) -> Value {
    match v {
        AMQPValue::Boolean(b) => Value::Bool(*b),
        AMQPValue::ShortShortInt(n) => Value::from(*n),
        AMQPValue::ShortShortUInt(n) => Value::from(*n),
        AMQPValue::ShortInt(n) => Value::from(*n),
        AMQPValue::ShortUInt(n) => Value::from(*n),
        AMQPValue::LongInt(n) => Value::from(*n),
        AMQPValue::LongUInt(n) => Value::from(*n),
        AMQPValue::LongLongInt(n) => Value::from(*n),
        AMQPValue::Timestamp(n) => Value::from(*n),
        AMQPValue::Float(f) => float(f64::from(*f)),
        AMQPValue::Double(f) => float(*f),
        AMQPValue::DecimalValue(d) => float(f64::from(d.value) / 10f64.powi(i32::from(d.scale))),
        AMQPValue::ShortString(s) => Value::String(s.as_str().to_string()),
        AMQPValue::LongString(s) => {
            Value::String(String::from_utf8_lossy(s.as_bytes()).into_owned())
        }
        AMQPValue::ByteArray(b) => {
            Value::String(String::from_utf8_lossy(b.as_slice()).into_owned())
        }
        AMQPValue::FieldArray(a) => Value::Array(a.as_slice().iter().map(value).collect()),
        AMQPValue::FieldTable(t) => table(t),
        AMQPValue::Void => Value::Null,
    }
}

/// JSON has no NaN or infinity: those become null.
fn float(f: f64) -> Value {
    serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// RabbitMQ's `properties_key`, which names one binding in
/// `/api/bindings/{vhost}/e/{source}/{q|e}/{destination}/{props}`: the
/// routing key URL-encoded, then `~` and a hash of the arguments when there
/// are any (`~` alone for an empty key without arguments).
///
/// RabbitMQ hashes the arguments with Erlang's `phash2`; this uses FNV-1a
/// over their JSON, so keys of bindings with arguments differ from
/// RabbitMQ's but are stable and unique in the same way, which is what a
/// client that reads them from a listing needs.
pub fn properties_key(routing_key: &str, arguments: &FieldTable) -> String {
    if arguments.inner().is_empty() {
        if routing_key.is_empty() {
            return "~".into();
        }
        return quote_plus(routing_key);
    }
    let canonical = table(arguments).to_string();
    let mut hash: u32 = 0x811c_9dc5;
    for b in canonical.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash.to_be_bytes());
    format!("{}~{encoded}", quote_plus(routing_key))
}

/// Form encoding as RabbitMQ applies it to binding keys: letters, digits and
/// `-_.` stay, a space becomes `+`, every other byte `%XX`.
fn quote_plus(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => out.push(char::from(b)),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// An address's host as RabbitMQ prints it: IPv4-mapped IPv6 as IPv4, IPv6
/// without brackets.
pub fn host(addr: &SocketAddr) -> String {
    addr.ip().to_canonical().to_string()
}

/// RabbitMQ's connection name: `client:port -> broker:port`.
pub fn connection_name(peer: Option<SocketAddr>, local: Option<SocketAddr>) -> String {
    let side = |a: Option<SocketAddr>| match a {
        Some(a) => format!("{}:{}", host(&a), a.port()),
        None => "unknown".to_string(),
    };
    format!("{} -> {}", side(peer), side(local))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stablemq_protocol::{FieldArray, LongString};

    #[test]
    fn tables_become_json_objects() {
        let mut inner = FieldTable::default();
        inner.insert("publisher_confirms".into(), AMQPValue::Boolean(true));
        let mut t = FieldTable::default();
        t.insert("x-max-length".into(), AMQPValue::LongInt(10));
        t.insert(
            "name".into(),
            AMQPValue::LongString(LongString::from("orders")),
        );
        t.insert("capabilities".into(), AMQPValue::FieldTable(inner));
        t.insert(
            "list".into(),
            AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::Void])),
        );
        t.insert("nan".into(), AMQPValue::Double(f64::NAN));
        assert_eq!(
            table(&t),
            serde_json::json!({
                "x-max-length": 10,
                "name": "orders",
                "capabilities": {"publisher_confirms": true},
                "list": [null],
                "nan": null,
            })
        );
    }

    #[test]
    fn properties_keys_follow_rabbitmq() {
        let none = FieldTable::default();
        // Seen on RabbitMQ 3.10.
        assert_eq!(properties_key("", &none), "~");
        assert_eq!(properties_key("b.*", &none), "b.%2A");
        assert_eq!(
            properties_key("a b~c/d*e#f+g%h&i=j(k)!l'm;n:o@p$q,r", &none),
            "a+b%7Ec%2Fd%2Ae%23f%2Bg%25h%26i%3Dj%28k%29%21l%27m%3Bn%3Ao%40p%24q%2Cr"
        );
        let mut args = FieldTable::default();
        args.insert("k".into(), AMQPValue::LongInt(1));
        let key = properties_key("a.#", &args);
        assert!(key.starts_with("a.%23~") && key.len() == "a.%23~".len() + 6);
        assert_eq!(key, properties_key("a.#", &args), "stable");
    }

    #[test]
    fn connection_names_look_like_rabbitmq() {
        let peer: SocketAddr = "[::ffff:127.0.0.1]:41994".parse().expect("addr");
        let local: SocketAddr = "127.0.0.1:5672".parse().expect("addr");
        assert_eq!(
            connection_name(Some(peer), Some(local)),
            "127.0.0.1:41994 -> 127.0.0.1:5672"
        );
    }
}
