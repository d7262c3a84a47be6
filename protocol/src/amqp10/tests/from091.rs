//! 0-9-1 → AMQP 1.0, field by field, and round trips.

use amq_protocol::types::{AMQPValue, DecimalValue, FieldArray, FieldTable, LongString};
use bytes::BytesMut;

use super::{data, fields13, map, props_section, record};
use crate::BasicProperties;
use crate::amqp10::codec::Value;
use crate::amqp10::sections::{self, APPLICATION_PROPERTIES, Body, MESSAGE_ANNOTATIONS};
use crate::amqp10::{from_amqp091, to_amqp091};

/// Every property but headers and cluster-id (which AMQP 1.0 has no place for).
fn mapped_properties() -> BasicProperties {
    BasicProperties::default()
        .with_content_type("text/plain".into())
        .with_content_encoding("gzip".into())
        .with_delivery_mode(2)
        .with_priority(5)
        .with_correlation_id("corr".into())
        .with_reply_to("reply".into())
        .with_expiration("60000".into())
        .with_message_id("mid".into())
        .with_timestamp(1_600_000_000)
        .with_type("kind".into())
        .with_user_id("guest".into())
        .with_app_id("app".into())
}

fn all_headers() -> FieldTable {
    let mut headers = FieldTable::default();
    for (k, v) in [
        ("long", AMQPValue::LongString("v".into())),
        ("short", AMQPValue::ShortString("sv".into())),
        ("ll", AMQPValue::LongLongInt(-5_000_000_000)),
        ("ssu", AMQPValue::ShortShortUInt(200)),
        ("ssi", AMQPValue::ShortShortInt(-2)),
        ("si", AMQPValue::ShortInt(-300)),
        ("su", AMQPValue::ShortUInt(60000)),
        ("li", AMQPValue::LongInt(-70000)),
        ("lu", AMQPValue::LongUInt(4_000_000_000)),
        ("f", AMQPValue::Float(2.5)),
        ("d", AMQPValue::Double(-0.25)),
        ("bool", AMQPValue::Boolean(true)),
        ("bytes", AMQPValue::ByteArray(vec![0, 1].into())),
        ("ts", AMQPValue::Timestamp(1_600_000_000)),
        ("void", AMQPValue::Void),
        (
            "dec",
            AMQPValue::DecimalValue(DecimalValue { scale: 1, value: 5 }),
        ),
        ("array", AMQPValue::FieldArray(FieldArray::default())),
        ("table", AMQPValue::FieldTable(FieldTable::default())),
    ] {
        headers.insert(k.into(), v);
    }
    headers
}

fn all_properties() -> BasicProperties {
    mapped_properties()
        .with_headers(all_headers())
        .with_cluster_id("cluster".into())
}

#[test]
fn properties_from_091() {
    let mut out = BytesMut::new();
    from_amqp091(&all_properties(), b"hello", "ex", "rk", &mut out);
    let parsed = sections::parse(&out).unwrap();
    assert_eq!(
        Value::Map(parsed.message_annotations.clone()),
        map(
            &[
                ("x-routing-key", Value::String(b"rk")),
                ("x-exchange", Value::String(b"ex")),
                ("x-basic-priority", Value::Ubyte(5)),
                ("x-basic-delivery-mode", Value::Ubyte(2)),
                ("x-basic-expiration", Value::String(b"60000")),
            ],
            true
        )
    );
    assert_eq!(
        parsed.properties,
        fields13(&[
            (0, Value::String(b"mid")),
            (1, Value::Binary(b"guest")),
            (4, Value::String(b"reply")),
            (5, Value::String(b"corr")),
            (6, Value::Symbol(b"text/plain")),
            (7, Value::Symbol(b"gzip")),
            (9, Value::Timestamp(1_600_000_000_000)),
        ])
    );
    assert_eq!(
        Value::Map(parsed.application_properties.clone()),
        map(
            &[
                ("x-basic-type", Value::String(b"kind")),
                ("x-basic-app-id", Value::String(b"app")),
                ("bool", Value::Bool(true)),
                ("bytes", Value::Binary(b"\x00\x01")),
                ("d", Value::Double(-0.25)),
                ("f", Value::Float(2.5)),
                ("li", Value::Int(-70000)),
                ("ll", Value::Long(-5_000_000_000)),
                ("long", Value::String(b"v")),
                ("lu", Value::Uint(4_000_000_000)),
                ("short", Value::String(b"sv")),
                ("si", Value::Short(-300)),
                ("ssi", Value::Byte(-2)),
                ("ssu", Value::Ubyte(200)),
                ("su", Value::Ushort(60000)),
                ("ts", Value::Timestamp(1_600_000_000_000)),
                ("void", Value::Null),
            ],
            false
        ),
        "decimal, array and table headers are left out"
    );
    assert_eq!(parsed.body, Body::Data(out.len() - 5..out.len()));
}

#[test]
fn minimal_message_from_091() {
    for (len, head) in [
        (0, vec![0xa0, 0]),
        (254, vec![0xa0, 254]),
        (255, vec![0xb0, 0, 0, 0, 255]),
    ] {
        let mut out = BytesMut::new();
        let body = vec![b'x'; len];
        from_amqp091(&BasicProperties::default(), &body, "", "q", &mut out);
        let want = [&b"\x00\x53\x72\xc1\x21\x04\xa3\x0dx-routing-key\xa1\x01q\xa3\x0ax-exchange\xa1\x00\x00\x53\x75"[..], &head, &body].concat();
        assert_eq!(
            &out[..],
            &want[..],
            "no properties or application-properties section"
        );
    }
}

#[test]
fn round_trip_091_to_10_to_091() {
    let mut out = BytesMut::new();
    from_amqp091(&all_properties(), b"hello", "ex", "rk", &mut out);
    let back = to_amqp091(&out.freeze()).unwrap();
    let mut want = FieldTable::default();
    for (k, v) in all_headers().inner() {
        match v {
            AMQPValue::DecimalValue(_) | AMQPValue::FieldArray(_) | AMQPValue::FieldTable(_) => {}
            AMQPValue::ShortString(s) => {
                want.insert(
                    k.clone(),
                    AMQPValue::LongString(LongString::from(s.as_str())),
                );
            }
            _ => {
                want.insert(k.clone(), v.clone());
            }
        }
    }
    assert_eq!(back.properties, mapped_properties().with_headers(want));
    assert_eq!(&back.body[..], b"hello");
    assert_eq!(
        (back.exchange.as_deref(), back.routing_key.as_deref()),
        (Some("ex"), Some("rk"))
    );
}

#[test]
fn round_trip_10_to_091_to_10() {
    let original = record(&[
        (
            MESSAGE_ANNOTATIONS,
            map(
                &[
                    ("x-routing-key", Value::String(b"rk")),
                    ("x-exchange", Value::String(b"ex")),
                    ("x-basic-priority", Value::Ubyte(5)),
                    ("x-basic-delivery-mode", Value::Ubyte(2)),
                    ("x-basic-expiration", Value::String(b"60000")),
                ],
                true,
            ),
        ),
        props_section(&[
            (0, Value::String(b"mid")),
            (1, Value::Binary(b"guest")),
            (4, Value::String(b"reply")),
            (5, Value::String(b"corr")),
            (6, Value::Symbol(b"text/plain")),
            (7, Value::Symbol(b"gzip")),
            (9, Value::Timestamp(1_600_000_000_000)),
        ]),
        (
            APPLICATION_PROPERTIES,
            map(
                &[
                    ("x-basic-type", Value::String(b"kind")),
                    ("x-basic-app-id", Value::String(b"app")),
                    ("a", Value::Int(1)),
                    ("b", Value::String(b"two")),
                    ("c", Value::Null),
                ],
                false,
            ),
        ),
        data(b"hello"),
    ]);
    let m = to_amqp091(&original).unwrap();
    let mut out = BytesMut::new();
    from_amqp091(
        &m.properties,
        &m.body,
        m.exchange.as_deref().unwrap(),
        m.routing_key.as_deref().unwrap(),
        &mut out,
    );
    assert_eq!(out.freeze(), original, "byte for byte");
}
