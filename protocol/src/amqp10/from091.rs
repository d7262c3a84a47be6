//! AMQP 0-9-1 → 1.0: the record RabbitMQ 3.10 stores in a stream for a message
//! published over AMQP 0-9-1 (`rabbit_stream_queue:msg_to_iodata/1`, i.e.
//! `rabbit_msg_record:from_amqp091/2`, `add_message_annotations/2`,
//! `to_iodata/1`), which is what a stream-protocol consumer reads.

use amq_protocol::types::{AMQPValue, ShortString};
use bytes::{BufMut, BytesMut};

use super::codec::Value;
use super::sections::{APPLICATION_PROPERTIES, DATA, MESSAGE_ANNOTATIONS, PROPERTIES, put_section};
use crate::BasicProperties;

/// See [`super::from_amqp091`].
pub(crate) fn from_amqp091(
    props: &BasicProperties,
    body: &[u8],
    exchange: &str,
    routing_key: &str,
    out: &mut BytesMut,
) {
    put_section(
        MESSAGE_ANNOTATIONS,
        &annotations(props, exchange, routing_key),
        out,
    );
    if let Some(properties) = properties(props) {
        put_section(PROPERTIES, &properties, out);
    }
    let application_properties = application_properties(props);
    if !application_properties.is_empty() {
        put_section(
            APPLICATION_PROPERTIES,
            &Value::Map(application_properties),
            out,
        );
    }
    // The data section, written straight from `body`.
    out.put_slice(&[0x00, 0x53, DATA]);
    match u8::try_from(body.len()) {
        Ok(len @ 0..=254) => out.put_slice(&[0xa0, len]),
        _ => {
            out.put_u8(0xb0);
            out.put_u32(u32::try_from(body.len()).unwrap_or(u32::MAX));
        }
    }
    out.put_slice(body);
}

fn text(s: &Option<ShortString>) -> Option<&[u8]> {
    s.as_ref().map(|s| s.as_str().as_bytes())
}

/// x-routing-key and x-exchange (added by the stream queue), then the
/// properties AMQP 1.0 keeps in its header: priority, delivery-mode, expiration.
fn annotations<'a>(
    props: &'a BasicProperties,
    exchange: &'a str,
    routing_key: &'a str,
) -> Value<'a> {
    let mut pairs = vec![
        (
            Value::Symbol(b"x-routing-key"),
            Value::String(routing_key.as_bytes()),
        ),
        (
            Value::Symbol(b"x-exchange"),
            Value::String(exchange.as_bytes()),
        ),
    ];
    if let Some(priority) = *props.priority() {
        pairs.push((Value::Symbol(b"x-basic-priority"), Value::Ubyte(priority)));
    }
    if let Some(mode) = *props.delivery_mode() {
        pairs.push((Value::Symbol(b"x-basic-delivery-mode"), Value::Ubyte(mode)));
    }
    if let Some(expiration) = text(props.expiration()) {
        pairs.push((
            Value::Symbol(b"x-basic-expiration"),
            Value::String(expiration),
        ));
    }
    Value::Map(pairs)
}

/// The properties section, all 13 fields, or None when every field RabbitMQ
/// fills is empty. cluster-id has no place and is dropped.
fn properties(props: &BasicProperties) -> Option<Value<'_>> {
    fn string(s: Option<&[u8]>) -> Value<'_> {
        s.map_or(Value::Null, Value::String)
    }
    fn symbol(s: Option<&[u8]>) -> Value<'_> {
        s.map_or(Value::Null, Value::Symbol)
    }
    let fields = vec![
        string(text(props.message_id())),
        text(props.user_id()).map_or(Value::Null, Value::Binary),
        Value::Null, // to
        Value::Null, // subject
        string(text(props.reply_to())),
        string(text(props.correlation_id())),
        symbol(text(props.content_type())),
        symbol(text(props.content_encoding())),
        Value::Null, // absolute-expiry-time
        props
            .timestamp()
            .map_or(Value::Null, |s| Value::Timestamp(milliseconds(s))),
        Value::Null, // group-id
        Value::Null, // group-sequence
        Value::Null, // reply-to-group-id
    ];
    fields
        .iter()
        .any(|f| *f != Value::Null)
        .then_some(Value::List(fields))
}

/// x-basic-type and x-basic-app-id, then each header RabbitMQ 3.10 can map.
fn application_properties(props: &BasicProperties) -> Vec<(Value<'_>, Value<'_>)> {
    let mut pairs = Vec::new();
    if let Some(kind) = text(props.kind()) {
        pairs.push((Value::String(b"x-basic-type"), Value::String(kind)));
    }
    if let Some(app_id) = text(props.app_id()) {
        pairs.push((Value::String(b"x-basic-app-id"), Value::String(app_id)));
    }
    if let Some(headers) = props.headers() {
        for (key, value) in headers.inner() {
            if let Some(value) = property_value(value) {
                pairs.push((Value::String(key.as_str().as_bytes()), value));
            }
        }
    }
    pairs
}

/// RabbitMQ 3.10's `from_091/2`. Arrays and tables are left out, as 3.10 does;
/// so are decimals, on which 3.10 fails the publishing connection (541).
fn property_value(value: &AMQPValue) -> Option<Value<'_>> {
    Some(match value {
        AMQPValue::LongString(s) => Value::String(s.as_bytes()),
        AMQPValue::ShortString(s) => Value::String(s.as_str().as_bytes()),
        AMQPValue::LongLongInt(v) => Value::Long(*v),
        AMQPValue::ShortShortUInt(v) => Value::Ubyte(*v),
        AMQPValue::ShortShortInt(v) => Value::Byte(*v),
        AMQPValue::ShortInt(v) => Value::Short(*v),
        AMQPValue::ShortUInt(v) => Value::Ushort(*v),
        AMQPValue::LongInt(v) => Value::Int(*v),
        AMQPValue::LongUInt(v) => Value::Uint(*v),
        AMQPValue::Float(v) => Value::Float(*v),
        AMQPValue::Double(v) => Value::Double(*v),
        AMQPValue::Boolean(v) => Value::Bool(*v),
        AMQPValue::ByteArray(b) => Value::Binary(b.as_slice()),
        AMQPValue::Timestamp(s) => Value::Timestamp(milliseconds(*s)),
        AMQPValue::Void => Value::Null,
        AMQPValue::DecimalValue(_) | AMQPValue::FieldArray(_) | AMQPValue::FieldTable(_) => {
            return None;
        }
    })
}

/// 0-9-1 seconds to AMQP 1.0 milliseconds, wrapping as RabbitMQ's 64-bit
/// encoding of the product does.
fn milliseconds(seconds: u64) -> i64 {
    i64::from_ne_bytes(seconds.wrapping_mul(1000).to_ne_bytes())
}
