//! AMQP 1.0 → 0-9-1, field by field.

use amq_protocol::types::{AMQPValue, FieldArray, FieldTable, ShortString};
use bytes::Bytes;

use super::{data, headers, map, props_section, record, s};
use crate::BasicProperties;
use crate::amqp10::codec::Value;
use crate::amqp10::sections::{self, APPLICATION_PROPERTIES, HEADER, MESSAGE_ANNOTATIONS};
use crate::amqp10::{AMQP10_TYPE, to_amqp091};

#[test]
fn properties_section_to_091() {
    let m = to_amqp091(&record(&[
        props_section(&[
            (0, Value::String(b"mid")),
            (1, Value::Binary(b"guest")),
            (2, Value::String(b"/queues/to")),
            (3, Value::String(b"subject")),
            (4, Value::String(b"reply")),
            (5, Value::String(b"corr")),
            (6, Value::Symbol(b"text/plain")),
            (7, Value::String(b"gzip")),
            (8, Value::Timestamp(1_700_000_000_000)),
            (9, Value::Timestamp(1_600_000_000_999)),
            (10, Value::String(b"group")),
            (11, Value::Uint(3)),
            (12, Value::String(b"reply-group")),
        ]),
        data(b"body"),
    ]))
    .unwrap();
    let want = BasicProperties::default()
        .with_message_id("mid".into())
        .with_user_id("guest".into())
        .with_reply_to("reply".into())
        .with_correlation_id("corr".into())
        .with_content_type("text/plain".into())
        .with_content_encoding("gzip".into())
        .with_timestamp(1_600_000_000);
    assert_eq!(
        m.properties, want,
        "to, subject, expiry, group fields are dropped"
    );
    assert_eq!(&m.body[..], b"body");
    let odd = to_amqp091(&record(&[props_section(&[
        (1, Value::Binary(b"\xff")),
        (4, Value::String(&[b'r'; 256])),
        (6, Value::Uint(1)),
        (9, Value::Timestamp(-1500)),
    ])]))
    .unwrap();
    assert_eq!(
        odd.properties,
        BasicProperties::default().with_timestamp(u64::MAX),
        "-1500 ms is -1 s"
    );
}

#[test]
fn message_and_correlation_ids_to_091() {
    let uuid = *b"\x12\x34\x56\x78\x9a\xbc\xde\xf0\x12\x34\x56\x78\x9a\xbc\xde\xf0";
    let long = vec![b'm'; 256];
    // (id, the 0-9-1 id, the headers it adds)
    type Case<'a> = (Value<'a>, Option<&'a str>, Vec<(&'a str, AMQPValue)>);
    let cases: Vec<Case<'_>> = vec![
        (
            Value::String(&long[..255]),
            Some(std::str::from_utf8(&long[..255]).unwrap()),
            vec![],
        ),
        (
            Value::String(&long),
            None,
            vec![("x-message-id", AMQPValue::LongString(long.clone().into()))],
        ),
        (
            Value::Ulong(12345),
            Some("12345"),
            vec![("x-message-id-type", AMQPValue::LongString("ulong".into()))],
        ),
        (
            Value::Uuid(uuid),
            Some("12345678-9abc-def0-1234-56789abcdef0"),
            vec![("x-message-id-type", AMQPValue::LongString("uuid".into()))],
        ),
        (
            Value::Binary(b"\x01\x02\x03"),
            Some("AQID"),
            vec![("x-message-id-type", AMQPValue::LongString("binary".into()))],
        ),
        (
            Value::Binary(&[0; 190]),
            None,
            vec![("x-message-id", AMQPValue::LongString(vec![0; 190].into()))],
        ),
        (Value::Bool(true), None, vec![]),
    ];
    for (id, want, want_headers) in cases {
        let m = to_amqp091(&record(&[props_section(&[(0, id.clone())])])).unwrap();
        assert_eq!(
            m.properties.message_id().as_ref().map(ShortString::as_str),
            want,
            "{id:?}"
        );
        let want_table = want_headers
            .iter()
            .fold(FieldTable::default(), |mut t, (k, v)| {
                t.insert((*k).into(), v.clone());
                t
            });
        assert_eq!(headers(&m.properties), want_table, "{id:?}");
        let c = to_amqp091(&record(&[props_section(&[(5, id.clone())])])).unwrap();
        assert_eq!(
            c.properties
                .correlation_id()
                .as_ref()
                .map(ShortString::as_str),
            want
        );
        let renamed: Vec<String> = want_headers
            .iter()
            .map(|(k, _)| k.replace("message", "correlation"))
            .collect();
        let got: Vec<String> = headers(&c.properties)
            .inner()
            .keys()
            .map(|k| k.to_string())
            .collect();
        assert_eq!(got, renamed);
    }
}

#[test]
fn header_section_to_091() {
    let annotations = (
        MESSAGE_ANNOTATIONS,
        map(
            &[
                ("x-basic-priority", Value::Ubyte(1)),
                ("x-basic-delivery-mode", Value::Ubyte(1)),
                ("x-basic-expiration", Value::String(b"5")),
            ],
            true,
        ),
    );
    let header = (
        HEADER,
        Value::List(vec![Value::Bool(true), Value::Ubyte(7), Value::Uint(1000)]),
    );
    let m = to_amqp091(&record(&[header, annotations.clone(), data(b"")])).unwrap();
    let want = BasicProperties::default()
        .with_delivery_mode(2)
        .with_priority(7)
        .with_expiration("1000".into());
    assert_eq!(m.properties, want, "the header wins over the annotations");
    let nulls = (
        HEADER,
        Value::List(vec![Value::Null, Value::Null, Value::Null]),
    );
    let m = to_amqp091(&record(&[nulls, annotations])).unwrap();
    let want = BasicProperties::default()
        .with_priority(1)
        .with_delivery_mode(1)
        .with_expiration("5".into());
    assert_eq!(
        m.properties, want,
        "absent header fields leave the annotations"
    );
    let m = to_amqp091(&record(&[(HEADER, Value::List(vec![Value::Bool(false)]))])).unwrap();
    assert_eq!(*m.properties.delivery_mode(), Some(1));
    assert!(to_amqp091(&record(&[(HEADER, Value::List(vec![]))])).is_ok());
}

#[test]
fn message_annotations_to_091() {
    let m = to_amqp091(&record(&[(
        MESSAGE_ANNOTATIONS,
        map(
            &[
                ("x-basic-priority", Value::Uint(9)),
                ("x-basic-delivery-mode", Value::Long(2)),
                ("x-basic-expiration", Value::Symbol(b"60000")),
                ("x-exchange", Value::String(b"ex")),
                ("x-routing-key", Value::Symbol(b"rk")),
                ("x-other", Value::String(b"dropped")),
            ],
            true,
        ),
    )]))
    .unwrap();
    let want = BasicProperties::default()
        .with_priority(9)
        .with_delivery_mode(2)
        .with_expiration("60000".into());
    assert_eq!(m.properties, want);
    assert_eq!(
        (m.exchange.as_deref(), m.routing_key.as_deref()),
        (Some("ex"), Some("rk"))
    );
    let m = to_amqp091(&record(&[(
        MESSAGE_ANNOTATIONS,
        map(
            &[
                ("x-basic-priority", Value::Uint(256)),
                ("x-basic-delivery-mode", Value::String(b"2")),
                ("x-exchange", Value::String(&[b'e'; 256])),
                ("x-routing-key", Value::Binary(b"rk")),
            ],
            true,
        ),
    )]))
    .unwrap();
    assert_eq!(m.properties, BasicProperties::default());
    assert_eq!((m.exchange, m.routing_key), (None, None));
    // Only symbol keys are annotations RabbitMQ looks up.
    let m = to_amqp091(&record(&[(
        MESSAGE_ANNOTATIONS,
        map(&[("x-basic-priority", Value::Ubyte(3))], false),
    )]));
    assert_eq!(m.unwrap().properties, BasicProperties::default());
}

#[test]
fn application_properties_to_091() {
    let uuid = Value::Uuid([7; 16]);
    let m = to_amqp091(&record(&[
        (
            APPLICATION_PROPERTIES,
            map(
                &[
                    ("s", Value::String(b"str")),
                    ("sy", Value::Symbol(b"sym")),
                    ("b", Value::Byte(-2)),
                    ("ub", Value::Ubyte(200)),
                    ("sh", Value::Short(-300)),
                    ("ush", Value::Ushort(60000)),
                    ("i", Value::Int(-70000)),
                    ("ui", Value::Uint(4_000_000_000)),
                    ("l", Value::Long(-5)),
                    ("ul", Value::Ulong(u64::MAX)),
                    ("f", Value::Float(2.5)),
                    ("d", Value::Double(-0.25)),
                    ("t", Value::Bool(true)),
                    ("ts", Value::Timestamp(1_600_000_000_999)),
                    ("bin", Value::Binary(b"\xff")),
                    ("nul", Value::Null),
                    ("list", Value::List(vec![Value::Int(1), uuid.clone()])),
                    ("map", map(&[("k", Value::Bool(false))], true)),
                    ("uuid", uuid),
                    ("char", Value::Opaque(b"\x73\0\0\0x")),
                    ("x-basic-type", Value::String(b"my-type")),
                    ("x-basic-app-id", Value::Symbol(b"my-app")),
                ],
                false,
            ),
        ),
        data(b"x"),
    ]))
    .unwrap();
    let mut want = FieldTable::default();
    for (k, v) in [
        ("s", AMQPValue::LongString("str".into())),
        ("sy", AMQPValue::LongString("sym".into())),
        ("b", AMQPValue::ShortShortInt(-2)),
        ("ub", AMQPValue::ShortShortUInt(200)),
        ("sh", AMQPValue::ShortInt(-300)),
        ("ush", AMQPValue::ShortUInt(60000)),
        ("i", AMQPValue::LongInt(-70000)),
        ("ui", AMQPValue::LongUInt(4_000_000_000)),
        ("l", AMQPValue::LongLongInt(-5)),
        ("ul", AMQPValue::LongLongInt(-1)),
        ("f", AMQPValue::Float(2.5)),
        ("d", AMQPValue::Double(-0.25)),
        ("t", AMQPValue::Boolean(true)),
        ("ts", AMQPValue::Timestamp(1_600_000_000)),
        ("bin", AMQPValue::ByteArray(vec![0xff].into())),
        ("nul", AMQPValue::Void),
        (
            "list",
            AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongInt(1)])),
        ),
        (
            "map",
            AMQPValue::FieldTable([("k", AMQPValue::Boolean(false))].into_iter().fold(
                FieldTable::default(),
                |mut t, (k, v)| {
                    t.insert(k.into(), v);
                    t
                },
            )),
        ),
    ] {
        want.insert(k.into(), v);
    }
    assert_eq!(headers(&m.properties), want);
    assert_eq!(*m.properties.kind(), s("my-type"));
    assert_eq!(*m.properties.app_id(), s("my-app"));
    // Keys that are not 0-9-1 short strings are left out.
    let long_key = String::from_utf8(vec![b'k'; 256]).unwrap();
    let m = to_amqp091(&record(&[(
        APPLICATION_PROPERTIES,
        Value::Map(vec![
            (Value::String(long_key.as_bytes()), Value::Null),
            (Value::String(b"\xff"), Value::Null),
            (Value::Ulong(1), Value::Null),
        ]),
    )]));
    assert_eq!(m.unwrap().properties, BasicProperties::default());
}

#[test]
fn bodies_to_091() {
    let value = record(&[(sections::AMQP_VALUE, Value::String(b"v"))]);
    let m = to_amqp091(&value).unwrap();
    assert_eq!(
        (m.body.clone(), m.properties.kind().clone()),
        (value.clone(), s(AMQP10_TYPE))
    );
    let typed = [
        &record(&[(
            APPLICATION_PROPERTIES,
            map(&[("x-basic-type", Value::String(b"mine"))], false),
        )])[..],
        &value,
    ]
    .concat();
    let m = to_amqp091(&Bytes::from(typed)).unwrap();
    assert_eq!(
        (&m.body[..], m.properties.kind().clone()),
        (&value[..], s("mine"))
    );
    let seqs = record(&[
        (sections::AMQP_SEQUENCE, Value::List(vec![Value::Int(1)])),
        (sections::AMQP_SEQUENCE, Value::List(vec![])),
    ]);
    let m = to_amqp091(
        &[
            &record(&[props_section(&[(0, Value::String(b"id"))])])[..],
            &seqs,
        ]
        .concat()
        .into(),
    );
    assert_eq!(m.unwrap().body, seqs);
    let m = to_amqp091(&record(&[data(b"one"), data(b"two")])).unwrap();
    assert_eq!(
        (&m.body[..], m.properties),
        (&b"two"[..], BasicProperties::default())
    );
    assert_eq!(to_amqp091(&Bytes::new()).unwrap().body, Bytes::new());
}
