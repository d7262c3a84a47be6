//! AMQP 1.0 → 0-9-1: what a 0-9-1 consumer of a stream receives for a record a
//! stream-protocol client published (RabbitMQ 3.10's `rabbit_msg_record:init/1`
//! and `to_amqp091/1`, then `rabbit_stream_queue:binary_to_msg/2`).

use amq_protocol::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use base64::Engine;
use bytes::Bytes;
use bytestring::ByteString;

use super::codec::Value;
use super::sections::{self, Body, Sections};
use super::{AMQP10_TYPE, Amqp10Error, Amqp091Message};
use crate::BasicProperties;

/// See [`super::to_amqp091`].
pub(crate) fn to_amqp091(record: &Bytes) -> Result<Amqp091Message, Amqp10Error> {
    let sections = sections::parse(record)?;
    let (body, encoded_body) = match &sections.body {
        Body::None => (Bytes::new(), false),
        Body::Data(range) => (record.slice(range.clone()), false),
        Body::Sequence(range) | Body::Value(range) => (record.slice(range.clone()), true),
    };
    let mut headers = FieldTable::default();
    let mut props = BasicProperties::default();
    let (mut kind, mut app_id) = (None, None);
    for (key, value) in &sections.application_properties {
        let Some(key) = key.as_text() else { continue };
        match key {
            b"x-basic-type" => kind = value.as_text().and_then(short),
            b"x-basic-app-id" => app_id = value.as_text().and_then(short),
            _ => {
                if let (Some(key), Some(value)) = (short(key), header_value(value)) {
                    headers.insert(key, value);
                }
            }
        }
    }
    if kind.is_none() && encoded_body {
        kind = Some(ShortString::from(AMQP10_TYPE));
    }
    if let Some(kind) = kind {
        props = props.with_type(kind);
    }
    if let Some(app_id) = app_id {
        props = props.with_app_id(app_id);
    }
    let (exchange, routing_key);
    (props, exchange, routing_key) = annotations(props, &sections);
    props = header(props, &sections);
    props = properties(props, &sections.properties, &mut headers);
    if !headers.inner().is_empty() {
        props = props.with_headers(headers);
    }
    Ok(Amqp091Message {
        properties: props,
        body,
        exchange,
        routing_key,
    })
}

/// The message annotations RabbitMQ 3.10 reads: x-basic-priority,
/// x-basic-delivery-mode and x-basic-expiration for the properties, x-exchange
/// and x-routing-key for the deliver. It drops all others.
fn annotations(
    mut props: BasicProperties,
    sections: &Sections<'_>,
) -> (BasicProperties, Option<ByteString>, Option<ByteString>) {
    let (mut exchange, mut routing_key) = (None, None);
    for (key, value) in &sections.message_annotations {
        let Value::Symbol(key) = key else { continue };
        match *key {
            b"x-basic-priority" => {
                if let Some(priority) = octet(value) {
                    props = props.with_priority(priority);
                }
            }
            b"x-basic-delivery-mode" => {
                if let Some(mode) = octet(value) {
                    props = props.with_delivery_mode(mode);
                }
            }
            b"x-basic-expiration" => {
                if let Some(expiration) = value.as_text().and_then(short) {
                    props = props.with_expiration(expiration);
                }
            }
            b"x-exchange" => exchange = value.as_text().and_then(name),
            b"x-routing-key" => routing_key = value.as_text().and_then(name),
            _ => {}
        }
    }
    (props, exchange, routing_key)
}

/// The header section, which RabbitMQ 3.10 cannot consume (541): here its
/// fields win over the x-basic-* annotations, as in RabbitMQ 3.13 and later.
fn header(mut props: BasicProperties, sections: &Sections<'_>) -> BasicProperties {
    let Some(fields) = &sections.header else {
        return props;
    };
    if let Some(Value::Bool(durable)) = fields.first() {
        props = props.with_delivery_mode(if *durable { 2 } else { 1 });
    }
    if let Some(Value::Ubyte(priority)) = fields.get(1) {
        props = props.with_priority(*priority);
    }
    if let Some(Value::Uint(ttl)) = fields.get(2) {
        props = props.with_expiration(ShortString::from(ttl.to_string()));
    }
    props
}

/// The properties section. RabbitMQ 3.10 maps message-id, user-id, reply-to,
/// correlation-id, content-type, content-encoding and creation-time, and drops
/// to, subject, absolute-expiry-time, group-id, group-sequence and
/// reply-to-group-id.
fn properties(
    mut props: BasicProperties,
    fields: &[Value<'_>],
    headers: &mut FieldTable,
) -> BasicProperties {
    let text = |i: usize| fields.get(i).and_then(Value::as_text).and_then(short);
    if let Some(id) = fields
        .first()
        .and_then(|id| message_id(id, "x-message-id", headers))
    {
        props = props.with_message_id(id);
    }
    if let Some(Value::Binary(user)) = fields.get(1)
        && let Some(user) = short(user)
    {
        props = props.with_user_id(user);
    }
    if let Some(reply_to) = text(4) {
        props = props.with_reply_to(reply_to);
    }
    if let Some(id) = fields
        .get(5)
        .and_then(|id| message_id(id, "x-correlation-id", headers))
    {
        props = props.with_correlation_id(id);
    }
    if let Some(content_type) = text(6) {
        props = props.with_content_type(content_type);
    }
    if let Some(content_encoding) = text(7) {
        props = props.with_content_encoding(content_encoding);
    }
    if let Some(Value::Timestamp(ms)) = fields.get(9) {
        props = props.with_timestamp(seconds(*ms));
    }
    props
}

/// A message-id or correlation-id as a 0-9-1 short string, recording its AMQP
/// 1.0 type in `<header>-type`; one that does not fit a short string goes to
/// the `<header>` header instead, as RabbitMQ 3.10 does (it moves only strings
/// over 256 octets and base64 over 256 characters, and fails on exactly 256).
fn message_id(id: &Value<'_>, header: &str, headers: &mut FieldTable) -> Option<ShortString> {
    let typed = |headers: &mut FieldTable, kind: &str, text: String| {
        let key = ShortString::from(format!("{header}-type"));
        headers.insert(key, AMQPValue::LongString(LongString::from(kind)));
        Some(ShortString::from(text))
    };
    match *id {
        Value::String(s) | Value::Symbol(s) => short(s).or_else(|| {
            headers.insert(ShortString::from(header), AMQPValue::LongString(s.into()));
            None
        }),
        Value::Ulong(n) => typed(headers, "ulong", n.to_string()),
        Value::Uuid(uuid) => typed(headers, "uuid", uuid_string(&uuid)),
        Value::Binary(b) => {
            let text = base64::engine::general_purpose::STANDARD.encode(b);
            if text.len() > usize::from(u8::MAX) {
                headers.insert(ShortString::from(header), AMQPValue::LongString(b.into()));
                None
            } else {
                typed(headers, "binary", text)
            }
        }
        _ => None,
    }
}

/// An application property as a header value: RabbitMQ 3.10's `to_091/2` for
/// the types it knows; symbol, ulong, list and map as RabbitMQ 3.13+ maps them
/// (3.10 fails on them); None (dropped) for uuid, char, decimals, arrays and
/// described values, which no RabbitMQ version maps.
fn header_value(value: &Value<'_>) -> Option<AMQPValue> {
    Some(match *value {
        Value::String(s) | Value::Symbol(s) => AMQPValue::LongString(s.into()),
        Value::Long(v) => AMQPValue::LongLongInt(v),
        Value::Ulong(v) => AMQPValue::LongLongInt(i64::from_ne_bytes(v.to_ne_bytes())),
        Value::Byte(v) => AMQPValue::ShortShortInt(v),
        Value::Ubyte(v) => AMQPValue::ShortShortUInt(v),
        Value::Short(v) => AMQPValue::ShortInt(v),
        Value::Ushort(v) => AMQPValue::ShortUInt(v),
        Value::Int(v) => AMQPValue::LongInt(v),
        Value::Uint(v) => AMQPValue::LongUInt(v),
        Value::Float(v) => AMQPValue::Float(v),
        Value::Double(v) => AMQPValue::Double(v),
        Value::Timestamp(ms) => AMQPValue::Timestamp(seconds(ms)),
        Value::Binary(b) => AMQPValue::ByteArray(b.into()),
        Value::Bool(b) => AMQPValue::Boolean(b),
        Value::Null => AMQPValue::Void,
        Value::List(ref items) => AMQPValue::FieldArray(FieldArray::from(
            items.iter().filter_map(header_value).collect::<Vec<_>>(),
        )),
        Value::Map(ref pairs) => {
            let mut table = FieldTable::default();
            for (key, value) in pairs {
                if let (Some(key), Some(value)) =
                    (key.as_text().and_then(short), header_value(value))
                {
                    table.insert(key, value);
                }
            }
            AMQPValue::FieldTable(table)
        }
        Value::Uuid(_) | Value::Opaque(_) => return None,
    })
}

/// Milliseconds to 0-9-1 seconds as RabbitMQ does: divided with truncation
/// toward zero, a negative result sent as its 64-bit two's complement.
fn seconds(ms: i64) -> u64 {
    u64::from_ne_bytes((ms / 1000).to_ne_bytes())
}

/// An integer annotation that fits an octet (RabbitMQ takes any integer type).
fn octet(value: &Value<'_>) -> Option<u8> {
    let wide = match *value {
        Value::Ubyte(v) => i128::from(v),
        Value::Ushort(v) => i128::from(v),
        Value::Uint(v) => i128::from(v),
        Value::Ulong(v) => i128::from(v),
        Value::Byte(v) => i128::from(v),
        Value::Short(v) => i128::from(v),
        Value::Int(v) => i128::from(v),
        Value::Long(v) => i128::from(v),
        _ => return None,
    };
    u8::try_from(wide).ok()
}

/// Bytes as a 0-9-1 short string: UTF-8 of at most 255 octets (what
/// amq-protocol can represent), else None.
fn short(bytes: &[u8]) -> Option<ShortString> {
    let text = std::str::from_utf8(bytes).ok()?;
    ShortString::try_new(text).ok()
}

/// An exchange or routing key name: UTF-8 of at most 255 octets.
fn name(bytes: &[u8]) -> Option<ByteString> {
    short(bytes).map(|s| ByteString::from(s.as_str()))
}

/// A UUID as RabbitMQ writes it: lower-case hex in 8-4-4-4-12 groups.
fn uuid_string(uuid: &[u8; 16]) -> String {
    let mut out = String::with_capacity(36);
    for (i, byte) in uuid.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push_str(&format!("{byte:02x}"));
    }
    out
}
