//! Unit tests: the codec, sections, each mapped field both ways, round trips,
//! and hostile input; `fixtures` holds the ground truth from RabbitMQ 3.10.

mod codec;
mod fixtures;
mod from091;
mod hostile;
mod to091;

use amq_protocol::types::{FieldTable, ShortString};
use bytes::{Bytes, BytesMut};

use super::Amqp10Error;
use super::codec::{Reader, Value, encode};
use super::sections::{DATA, PROPERTIES, put_section};
use crate::BasicProperties;

fn enc(v: &Value<'_>) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode(v, &mut out);
    out.to_vec()
}

fn dec(bytes: &[u8]) -> Result<Value<'_>, Amqp10Error> {
    let mut r = Reader::new(bytes);
    let v = r.value(1)?;
    assert!(r.at_end(), "trailing bytes after {v:?}");
    Ok(v)
}

fn record(sections: &[(u8, Value<'_>)]) -> Bytes {
    let mut out = BytesMut::new();
    for (code, value) in sections {
        put_section(*code, value, &mut out);
    }
    out.freeze()
}

fn data(body: &[u8]) -> (u8, Value<'_>) {
    (DATA, Value::Binary(body))
}

/// The 13 properties fields with the given (index, value) ones set.
fn fields13<'a>(set: &[(usize, Value<'a>)]) -> Vec<Value<'a>> {
    let mut fields = vec![Value::Null; 13];
    for (i, v) in set {
        fields[*i] = v.clone();
    }
    fields
}

fn props_section<'a>(set: &[(usize, Value<'a>)]) -> (u8, Value<'a>) {
    (PROPERTIES, Value::List(fields13(set)))
}

fn map<'a>(pairs: &[(&'a str, Value<'a>)], symbol_keys: bool) -> Value<'a> {
    let key = |k: &'a str| {
        if symbol_keys {
            Value::Symbol(k.as_bytes())
        } else {
            Value::String(k.as_bytes())
        }
    };
    Value::Map(pairs.iter().map(|(k, v)| (key(k), v.clone())).collect())
}

fn headers(p: &BasicProperties) -> FieldTable {
    p.headers().clone().unwrap_or_default()
}

fn s(text: &str) -> Option<ShortString> {
    Some(ShortString::from(text))
}
