//! An AMQP 1.0 message as a sequence of sections (spec part 3.2): splitting a
//! record into the sections the mapping reads, and writing sections.

use std::ops::Range;

use bytes::{BufMut, BytesMut};

use super::Amqp10Error;
use super::codec::{Reader, Value, encode};

/// The section descriptors' codes (`0x00000000:0x000000NN`) and symbolic names.
pub(crate) const HEADER: u8 = 0x70;
pub(crate) const DELIVERY_ANNOTATIONS: u8 = 0x71;
pub(crate) const MESSAGE_ANNOTATIONS: u8 = 0x72;
pub(crate) const PROPERTIES: u8 = 0x73;
pub(crate) const APPLICATION_PROPERTIES: u8 = 0x74;
pub(crate) const DATA: u8 = 0x75;
pub(crate) const AMQP_SEQUENCE: u8 = 0x76;
pub(crate) const AMQP_VALUE: u8 = 0x77;
pub(crate) const FOOTER: u8 = 0x78;

const NAMES: [(&[u8], u8); 9] = [
    (b"amqp:header:list", HEADER),
    (b"amqp:delivery-annotations:map", DELIVERY_ANNOTATIONS),
    (b"amqp:message-annotations:map", MESSAGE_ANNOTATIONS),
    (b"amqp:properties:list", PROPERTIES),
    (b"amqp:application-properties:map", APPLICATION_PROPERTIES),
    (b"amqp:data:binary", DATA),
    (b"amqp:amqp-sequence:list", AMQP_SEQUENCE),
    (b"amqp:amqp-value:*", AMQP_VALUE),
    (b"amqp:footer:map", FOOTER),
];

/// Where a message's body is in the record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Body {
    /// No body section.
    #[default]
    None,
    /// The payload of the last data section (RabbitMQ 3.10 keeps the last).
    Data(Range<usize>),
    /// The amqp-sequence sections, encoded.
    Sequence(Range<usize>),
    /// The amqp-value section, encoded.
    Value(Range<usize>),
}

/// The sections of one message that the mapping reads. A section that occurs
/// twice counts once, the last time (as RabbitMQ 3.10 decodes them).
#[derive(Debug, Default)]
pub(crate) struct Sections<'a> {
    /// The header's fields, if there is a header.
    pub header: Option<Vec<Value<'a>>>,
    pub message_annotations: Vec<(Value<'a>, Value<'a>)>,
    /// The properties' fields (empty without a properties section).
    pub properties: Vec<Value<'a>>,
    pub application_properties: Vec<(Value<'a>, Value<'a>)>,
    pub body: Body,
}

/// Splits `record` into its sections. Fails on anything that is not a sequence
/// of well-formed sections, on a section whose value has the wrong type, and on
/// body sections of different kinds (or split by another section).
pub(crate) fn parse(record: &[u8]) -> Result<Sections<'_>, Amqp10Error> {
    let mut reader = Reader::new(record);
    let mut sections = Sections::default();
    while !reader.at_end() {
        let start = reader.pos();
        let code = descriptor(&mut reader)?;
        let value = reader.value(1)?;
        let end = reader.pos();
        let wrong = || Amqp10Error::BadSection {
            code,
            offset: start,
        };
        match (code, value) {
            (HEADER, Value::List(fields)) => sections.header = Some(fields),
            (PROPERTIES, Value::List(fields)) => sections.properties = fields,
            (MESSAGE_ANNOTATIONS, Value::Map(pairs)) => sections.message_annotations = pairs,
            (APPLICATION_PROPERTIES, Value::Map(pairs)) => sections.application_properties = pairs,
            (DELIVERY_ANNOTATIONS | FOOTER, Value::Map(_) | Value::Null) => {}
            (DATA, Value::Binary(payload)) => {
                if matches!(sections.body, Body::Sequence(_) | Body::Value(_)) {
                    return Err(Amqp10Error::MixedBody { offset: start });
                }
                sections.body = Body::Data(end - payload.len()..end);
            }
            (AMQP_SEQUENCE, Value::List(_)) | (AMQP_VALUE, _) => {
                sections.body = amqp_body(&sections.body, code, start..end)?;
            }
            _ => return Err(wrong()),
        }
    }
    Ok(sections)
}

/// The body after one more amqp-sequence or amqp-value section at `at`: only
/// sequences may follow sequences, and only right after them.
fn amqp_body(body: &Body, code: u8, at: Range<usize>) -> Result<Body, Amqp10Error> {
    match (body, code) {
        (Body::None, AMQP_SEQUENCE) => Ok(Body::Sequence(at)),
        (Body::None, _) => Ok(Body::Value(at)),
        (Body::Sequence(prev), AMQP_SEQUENCE) if prev.end == at.start => {
            Ok(Body::Sequence(prev.start..at.end))
        }
        _ => Err(Amqp10Error::MixedBody { offset: at.start }),
    }
}

/// A section's 0x00 and descriptor (a ulong code or its symbolic name).
fn descriptor(reader: &mut Reader<'_>) -> Result<u8, Amqp10Error> {
    let offset = reader.pos();
    if reader.u8()? != 0x00 {
        return Err(Amqp10Error::NotASection { offset });
    }
    let code = match reader.value(1)? {
        Value::Ulong(code) => u8::try_from(code)
            .ok()
            .filter(|c| (HEADER..=FOOTER).contains(c)),
        Value::Symbol(name) => NAMES.iter().find(|(n, _)| *n == name).map(|&(_, c)| c),
        _ => None,
    };
    code.ok_or(Amqp10Error::UnknownSection { offset })
}

/// Appends a section: 0x00, the small-ulong descriptor, the value.
pub(crate) fn put_section(code: u8, value: &Value<'_>, out: &mut BytesMut) {
    out.put_slice(&[0x00, 0x53, code]);
    encode(value, out);
}
