//! The mapping against what RabbitMQ 3.10.8 did (`rabbitmq-3.10.txt`).

use std::collections::BTreeMap;

use amq_protocol::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use bytes::{Bytes, BytesMut};

use crate::amqp10::codec::Value;
use crate::amqp10::sections::{self, Body};
use crate::amqp10::{from_amqp091, to_amqp091};
use crate::{BasicProperties, Frame, decode_frame};

const RECORDED: &str = include_str!("rabbitmq-3.10.txt");

pub(super) fn hex(text: &str) -> Vec<u8> {
    if text == "-" {
        return Vec::new();
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// (direction, case) → key → value.
type Cases = BTreeMap<(String, String), BTreeMap<String, String>>;

/// The recorded cases, and the run id the streams were named with.
fn recorded() -> (Cases, String) {
    let mut cases: BTreeMap<_, BTreeMap<_, _>> = BTreeMap::new();
    let mut run = String::new();
    for line in RECORDED.lines().filter(|l| !l.starts_with('#')) {
        let words: Vec<&str> = line.split(' ').collect();
        match words[..] {
            ["run", id] => run = id.to_owned(),
            [dir, case, key, value] => {
                let entry = cases.entry((dir.to_owned(), case.to_owned())).or_default();
                entry.insert(key.to_owned(), value.to_owned());
            }
            _ => panic!("bad fixture line {line}"),
        }
    }
    (cases, run)
}

/// The properties of a recorded content header frame, less the x-stream-offset
/// header RabbitMQ adds on delivery (the broker's job, not the mapping's).
fn delivered_properties(header_frame: &[u8]) -> BasicProperties {
    let mut buf = BytesMut::from(header_frame);
    let Some(Frame::Header { properties, .. }) = decode_frame(&mut buf, 1 << 20).unwrap() else {
        panic!("not a content header");
    };
    let mut headers = properties.headers().as_ref().unwrap().inner().clone();
    assert_eq!(
        headers.remove("x-stream-offset"),
        Some(AMQPValue::LongLongInt(0))
    );
    let props = without_headers(&properties);
    if headers.is_empty() {
        props
    } else {
        props.with_headers(FieldTable::from(headers))
    }
}

/// Every property of `o` but headers.
fn without_headers(o: &BasicProperties) -> BasicProperties {
    let mut p = BasicProperties::default();
    macro_rules! copy {
        ($($get:ident => $set:ident),*) => {$(
            if let Some(v) = o.$get().clone() { p = p.$set(v); }
        )*};
    }
    copy!(content_type => with_content_type, content_encoding => with_content_encoding,
          delivery_mode => with_delivery_mode, priority => with_priority,
          correlation_id => with_correlation_id, reply_to => with_reply_to,
          expiration => with_expiration, message_id => with_message_id,
          timestamp => with_timestamp, kind => with_type, user_id => with_user_id,
          app_id => with_app_id, cluster_id => with_cluster_id);
    p
}

#[test]
fn consumed_over_091_as_rabbitmq_delivered_it() {
    let (cases, run) = recorded();
    let mut checked = 0;
    for ((dir, case), fields) in &cases {
        if dir != "b" || !fields.contains_key("header") {
            continue;
        }
        let record = Bytes::from(hex(&fields["record"]));
        let got = to_amqp091(&record).unwrap_or_else(|e| panic!("{case}: {e}"));
        let want = delivered_properties(&hex(&fields["header"]));
        assert_eq!(got.properties, want, "{case}");
        assert_eq!(&got.body[..], &hex(&fields["body"])[..], "{case}");
        let exchange = got.exchange.as_deref().unwrap_or("");
        let stream = format!("gt-b-{run}-{case}");
        let routing_key = got.routing_key.as_deref().unwrap_or(&stream);
        assert_eq!(
            exchange,
            fields["exchange"].trim_start_matches('-'),
            "{case}"
        );
        assert_eq!(routing_key, fields["routing_key"], "{case}");
        checked += 1;
    }
    assert_eq!(checked, 13);
}

/// Records RabbitMQ 3.10 fails to deliver (541): mapped all the same.
#[test]
fn records_rabbitmq_310_cannot_deliver_are_mapped() {
    let (cases, _) = recorded();
    let get = |case: &str| {
        let fields = &cases[&("b".to_owned(), case.to_owned())];
        assert!(fields["error"].contains("541"), "{case}");
        to_amqp091(&Bytes::from(hex(&fields["record"]))).unwrap_or_else(|e| panic!("{case}: {e}"))
    };
    let header = get("rstream_header");
    assert_eq!(*header.properties.delivery_mode(), Some(2));
    assert_eq!(*header.properties.priority(), Some(7));
    assert_eq!(
        header.properties.expiration().as_ref().unwrap().as_str(),
        "1000"
    );
    assert_eq!(&header.body[..], b"with header");
    for case in ["rstream_value", "rstream_sequence"] {
        let m = get(case);
        assert_eq!(
            m.properties.kind().as_ref().unwrap().as_str(),
            crate::amqp10::AMQP10_TYPE
        );
        let record = hex(&cases[&("b".to_owned(), case.to_owned())]["record"]);
        assert!(
            record.ends_with(&m.body),
            "{case}: the body is the encoded body sections"
        );
        assert!(matches!(
            sections::parse(&m.body).unwrap().body,
            Body::Value(_) | Body::Sequence(_)
        ));
    }
    assert!(get("no_body").body.is_empty());
    assert_eq!(
        get("empty"),
        crate::amqp10::Amqp091Message {
            properties: BasicProperties::default(),
            body: Bytes::new(),
            exchange: None,
            routing_key: None,
        }
    );
    let long = get("ids_long_utf8").properties;
    let headers = long.headers().as_ref().unwrap().inner();
    assert_eq!(
        headers["x-message-id"],
        AMQPValue::LongString("m".repeat(300).into())
    );
    assert_eq!(
        headers["x-correlation-id"],
        AMQPValue::LongString("c".repeat(256).into())
    );
    assert!(long.message_id().is_none() && long.correlation_id().is_none());
    let binary = get("ids_binary_190").properties;
    let headers = binary.headers().as_ref().unwrap().inner();
    assert_eq!(
        headers["x-message-id"],
        AMQPValue::LongString(vec![0u8; 190].into())
    );
    assert_eq!(
        get("ann_symbol_exchange").exchange.as_deref(),
        Some("sym-exchange")
    );
    let header = |case: &str, key: &str| {
        get(case)
            .properties
            .headers()
            .as_ref()
            .and_then(|h| h.inner().get(key).cloned())
    };
    assert_eq!(header("app_ulong", "ul"), Some(AMQPValue::LongLongInt(5)));
    assert_eq!(
        header("app_symbol", "sy"),
        Some(AMQPValue::LongString("symval".into()))
    );
    assert_eq!(header("app_uuid", "uu"), None);
    assert_eq!(header("app_char", "ch"), None);
    assert_eq!(&get("delivery_ann").body[..], b"da");
    assert_eq!(&get("footer").body[..], b"ft");
}

fn table(pairs: Vec<(&str, AMQPValue)>) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert(ShortString::from(k), v);
    }
    t
}

fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

/// What pika published in direction a (see record-fixtures.py).
fn published(case: &str) -> (BasicProperties, Vec<u8>) {
    let p = BasicProperties::default();
    let s = ShortString::from;
    match case {
        "plain" => (p, b"x".to_vec()),
        "empty_body" => (p.with_delivery_mode(1), Vec::new()),
        "amqp10_type" => (
            p.with_type(s("amqp-1.0")),
            b"\x00\x53\x77\xa1\x01z".to_vec(),
        ),
        "shortstr_long_ids" => (
            p.with_message_id(s(&"m".repeat(255)))
                .with_correlation_id(s(&"c".repeat(255))),
            b"ids".to_vec(),
        ),
        "types091" => {
            let headers = table(vec![
                ("b", AMQPValue::ShortShortInt(-2)),
                ("B", AMQPValue::ShortShortUInt(200)),
                ("s", AMQPValue::ShortInt(-300)),
                ("u", AMQPValue::ShortUInt(60000)),
                ("I", AMQPValue::LongInt(-70000)),
                ("i", AMQPValue::LongUInt(4_000_000_000)),
                ("l", AMQPValue::LongLongInt(-5_000_000_000)),
                ("f", AMQPValue::Float(2.5)),
                ("d", AMQPValue::Double(-0.25)),
                ("t", AMQPValue::Boolean(true)),
                ("T", AMQPValue::Timestamp(1_600_000_000)),
                ("S", long("str")),
                ("x", AMQPValue::ByteArray(vec![0xff, 0].into())),
                ("V", AMQPValue::Void),
                (
                    "A",
                    AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::Boolean(true)])),
                ),
                ("F", AMQPValue::FieldTable(FieldTable::default())),
                ("x-amqp-1.0-properties", long("abc")),
            ]);
            (
                p.with_content_type(s("ct")).with_headers(headers),
                b"types".to_vec(),
            )
        }
        "rich" | "rich_sorted" => rich(case == "rich"),
        _ => panic!("no properties for {case}"),
    }
}

fn rich(unsorted: bool) -> (BasicProperties, Vec<u8>) {
    let s = ShortString::from;
    let p = BasicProperties::default();
    if unsorted {
        let headers = table(vec![
            ("str", long("v")),
            ("int", AMQPValue::LongInt(42)),
            ("big", AMQPValue::LongLongInt(5_000_000_000)),
            ("neg", AMQPValue::LongInt(-7)),
            ("bool", AMQPValue::Boolean(true)),
            ("bytes", AMQPValue::ByteArray(vec![0, 1].into())),
            ("none", AMQPValue::Void),
            ("ts", AMQPValue::Timestamp(1_600_000_000)),
            (
                "list",
                AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongInt(1), long("a")])),
            ),
            (
                "table",
                AMQPValue::FieldTable(table(vec![("k", long("v"))])),
            ),
            ("x-custom", long("xc")),
        ]);
        let p = p
            .with_content_type(s("text/plain"))
            .with_content_encoding(s("gzip"));
        let p = p
            .with_headers(headers)
            .with_delivery_mode(2)
            .with_priority(5);
        let p = p.with_correlation_id(s("corr")).with_reply_to(s("replyq"));
        let p = p.with_expiration(s("60000")).with_message_id(s("msg-1"));
        let p = p
            .with_timestamp(1_600_000_000)
            .with_type(s("my-type"))
            .with_user_id(s("guest"));
        return (
            p.with_app_id(s("my-app")).with_cluster_id(s("cluster")),
            b"hello from pika".to_vec(),
        );
    }
    let headers = table(vec![
        ("a-str", long("v")),
        ("b-int", AMQPValue::LongInt(42)),
        ("c-big", AMQPValue::LongLongInt(5_000_000_000)),
        ("d-neg", AMQPValue::LongInt(-7)),
        ("e-bool", AMQPValue::Boolean(false)),
        ("f-bytes", AMQPValue::ByteArray(vec![0, 1].into())),
        ("g-none", AMQPValue::Void),
        ("h-ts", AMQPValue::Timestamp(1_600_000_000)),
        ("x-custom", long("xc")),
    ]);
    let p = p
        .with_content_type(s("application/json"))
        .with_content_encoding(s("utf-8"));
    let p = p
        .with_headers(headers)
        .with_delivery_mode(1)
        .with_priority(0);
    let p = p
        .with_correlation_id(s("c1"))
        .with_reply_to(s("rq"))
        .with_expiration(s("1"));
    let p = p
        .with_message_id(s("m1"))
        .with_timestamp(0)
        .with_type(s("t"))
        .with_user_id(s("guest"));
    (
        p.with_app_id(s("a")).with_cluster_id(s("c")),
        vec![b'x'; 300],
    )
}

/// A record's sections with map entries in key order, to compare records whose
/// header order differs.
fn canonical(record: &[u8]) -> Vec<Value<'_>> {
    let parsed = sections::parse(record).unwrap();
    let mut app = parsed.application_properties.clone();
    app.sort_by(|a, b| format!("{:?}", a.0).cmp(&format!("{:?}", b.0)));
    let Body::Data(body) = parsed.body else {
        panic!("not a data body")
    };
    vec![
        Value::Map(parsed.message_annotations.clone()),
        Value::List(parsed.properties.clone()),
        Value::Map(app),
        Value::Binary(&record[body]),
    ]
}

#[test]
fn published_over_091_as_rabbitmq_stored_it() {
    let (cases, run) = recorded();
    let mut exact = Vec::new();
    for ((dir, case), fields) in &cases {
        if dir != "a" || !fields.contains_key("record") {
            continue;
        }
        let (props, body) = published(case);
        let mut out = BytesMut::new();
        from_amqp091(&props, &body, "", &format!("gt-a-{run}-{case}"), &mut out);
        let want = hex(&fields["record"]);
        assert_eq!(canonical(&out), canonical(&want), "{case}");
        if out[..] == want[..] {
            exact.push(case.as_str());
        }
    }
    // Byte for byte wherever the publisher's header order is the sorted one.
    exact.sort_unstable();
    assert_eq!(
        exact,
        [
            "amqp10_type",
            "empty_body",
            "plain",
            "rich_sorted",
            "shortstr_long_ids"
        ]
    );
}

/// RabbitMQ 3.10 closes the publisher's connection on a decimal header; here
/// the header is left out.
#[test]
fn decimal_header_is_left_out() {
    let (cases, _) = recorded();
    assert!(cases[&("a".to_owned(), "decimal".to_owned())]["error"].contains("541"));
    let dec = amq_protocol::types::DecimalValue {
        scale: 2,
        value: 125,
    };
    let props =
        BasicProperties::default().with_headers(table(vec![("dec", AMQPValue::DecimalValue(dec))]));
    let mut out = BytesMut::new();
    from_amqp091(&props, b"dec", "", "q", &mut out);
    assert!(
        sections::parse(&out)
            .unwrap()
            .application_properties
            .is_empty()
    );
}
