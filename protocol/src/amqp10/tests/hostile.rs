//! Property tests: values survive encoding, and no input makes decoding panic.

use amq_protocol::types::{AMQPValue, FieldTable, LongString, ShortString};
use bytes::{Bytes, BytesMut};
use proptest::collection::vec;
use proptest::prelude::*;

use super::fixtures::hex;
use crate::BasicProperties;
use crate::amqp10::codec::{Reader, Value, encode};
use crate::amqp10::{from_amqp091, to_amqp091};

/// An owned AMQP 1.0 value, for proptest to generate.
#[derive(Debug, Clone)]
enum Owned {
    Null,
    Bool(bool),
    Ubyte(u8),
    Ushort(u16),
    Uint(u32),
    Ulong(u64),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Timestamp(i64),
    Uuid([u8; 16]),
    Binary(Vec<u8>),
    String(Vec<u8>),
    Symbol(Vec<u8>),
    List(Vec<Owned>),
    Map(Vec<(Owned, Owned)>),
}

fn view(o: &Owned) -> Value<'_> {
    match o {
        Owned::Null => Value::Null,
        Owned::Bool(v) => Value::Bool(*v),
        Owned::Ubyte(v) => Value::Ubyte(*v),
        Owned::Ushort(v) => Value::Ushort(*v),
        Owned::Uint(v) => Value::Uint(*v),
        Owned::Ulong(v) => Value::Ulong(*v),
        Owned::Byte(v) => Value::Byte(*v),
        Owned::Short(v) => Value::Short(*v),
        Owned::Int(v) => Value::Int(*v),
        Owned::Long(v) => Value::Long(*v),
        Owned::Float(v) => Value::Float(*v),
        Owned::Double(v) => Value::Double(*v),
        Owned::Timestamp(v) => Value::Timestamp(*v),
        Owned::Uuid(v) => Value::Uuid(*v),
        Owned::Binary(v) => Value::Binary(v),
        Owned::String(v) => Value::String(v),
        Owned::Symbol(v) => Value::Symbol(v),
        Owned::List(items) => Value::List(items.iter().map(view).collect()),
        Owned::Map(pairs) => Value::Map(pairs.iter().map(|(k, v)| (view(k), view(v))).collect()),
    }
}

fn owned() -> impl Strategy<Value = Owned> {
    let bytes = || vec(any::<u8>(), 0..300);
    let leaf = prop_oneof![
        Just(Owned::Null),
        any::<bool>().prop_map(Owned::Bool),
        any::<u8>().prop_map(Owned::Ubyte),
        any::<u16>().prop_map(Owned::Ushort),
        any::<u32>().prop_map(Owned::Uint),
        any::<u64>().prop_map(Owned::Ulong),
        any::<i8>().prop_map(Owned::Byte),
        any::<i16>().prop_map(Owned::Short),
        any::<i32>().prop_map(Owned::Int),
        any::<i64>().prop_map(Owned::Long),
        (-1e30f32..1e30).prop_map(Owned::Float),
        (-1e300f64..1e300).prop_map(Owned::Double),
        any::<i64>().prop_map(Owned::Timestamp),
        any::<[u8; 16]>().prop_map(Owned::Uuid),
        bytes().prop_map(Owned::Binary),
        bytes().prop_map(Owned::String),
        bytes().prop_map(Owned::Symbol),
    ];
    leaf.prop_recursive(4, 300, 20, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..300).prop_map(Owned::List),
            vec((inner.clone(), inner), 0..20).prop_map(Owned::Map),
        ]
    })
}

proptest! {
    #[test]
    fn values_survive_encoding(value in owned()) {
        let value = view(&value);
        let mut out = BytesMut::new();
        encode(&value, &mut out);
        let mut reader = Reader::new(&out);
        prop_assert_eq!(reader.value(1).unwrap(), value);
        prop_assert!(reader.at_end());
    }

    #[test]
    fn random_bytes_never_panic(bytes in vec(any::<u8>(), 0..512)) {
        let _ = to_amqp091(&Bytes::from(bytes));
    }

    #[test]
    fn random_sections_never_panic(code in 0x70u8..0x79, bytes in vec(any::<u8>(), 0..512)) {
        let _ = to_amqp091(&Bytes::from([&[0x00, 0x53, code][..], &bytes].concat()));
    }

    #[test]
    fn properties_survive_the_trip(
        strings in vec("[ -~]{0,255}", 9),
        numbers in (any::<u8>(), any::<u8>(), any::<u64>(), any::<i64>(), any::<u32>()),
        body in vec(any::<u8>(), 0..600),
    ) {
        let s = |i: usize| ShortString::from(strings[i].as_str());
        let mut headers = FieldTable::default();
        headers.insert(s(7), AMQPValue::LongLongInt(numbers.3));
        headers.insert(ShortString::from("u"), AMQPValue::LongUInt(numbers.4));
        headers.insert(ShortString::from("s"), AMQPValue::LongString(LongString::from(strings[8].as_str())));
        let props = BasicProperties::default()
            .with_content_type(s(0)).with_content_encoding(s(1)).with_headers(headers)
            .with_delivery_mode(numbers.0).with_priority(numbers.1).with_correlation_id(s(2))
            .with_reply_to(s(3)).with_expiration(s(4)).with_message_id(s(5))
            .with_timestamp(numbers.2 % (i64::MAX as u64 / 1000)).with_type(s(6)).with_user_id(s(8)).with_app_id(s(0));
        let mut out = BytesMut::new();
        from_amqp091(&props, &body, &strings[1], &strings[2], &mut out);
        let back = to_amqp091(&out.freeze()).unwrap();
        prop_assert_eq!(back.properties, props);
        prop_assert_eq!(&back.body[..], &body[..]);
        prop_assert_eq!(back.exchange.as_deref(), Some(strings[1].as_str()));
        prop_assert_eq!(back.routing_key.as_deref(), Some(strings[2].as_str()));
    }
}

/// A small xorshift generator: deterministic mutations without a seed file.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn recorded_records() -> Vec<Vec<u8>> {
    include_str!("rabbitmq-3.10.txt")
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            line.split_once(" record ")
                .map(|(_, hex_text)| hex(hex_text))
        })
        .filter(|record| !record.is_empty())
        .collect()
}

#[test]
fn mutated_records_never_panic() {
    let mut state = 0x9e37_79b9_7f4a_7c15;
    let records = recorded_records();
    assert!(records.len() > 30);
    for round in 0..20_000 {
        let mut record = records[round % records.len()].clone();
        for _ in 0..=next(&mut state) % 4 {
            let at = usize::try_from(next(&mut state)).unwrap() % record.len();
            record[at] = next(&mut state).to_le_bytes()[0];
        }
        let keep = usize::try_from(next(&mut state)).unwrap() % (record.len() + 1);
        record.truncate(keep.max(record.len() / 2));
        let _ = to_amqp091(&Bytes::from(record));
    }
}

#[test]
fn truncated_records_are_errors() {
    for record in recorded_records() {
        // Where the sections end: the only lengths at which a prefix is whole.
        let mut ends = Vec::new();
        let mut reader = Reader::new(&record);
        while !reader.at_end() {
            reader.u8().unwrap();
            reader.value(1).unwrap();
            reader.value(1).unwrap();
            ends.push(reader.pos());
        }
        for len in 1..record.len() {
            let prefix = Bytes::copy_from_slice(&record[..len]);
            assert_eq!(
                to_amqp091(&prefix).is_ok(),
                ends.contains(&len),
                "{len} of {}",
                record.len()
            );
        }
    }
}
