//! Values that several stream protocol commands share: offset specifications,
//! published messages, publishing errors, brokers and stream metadata.

use bytes::{BufMut, BytesMut};

use super::chunk::Entry;
use super::code::ResponseCode;
use super::wire::{self, PResult, WireError};

/// Key/value string pairs, in wire order (peer properties, stream arguments,
/// subscription properties).
pub type Properties = Vec<(String, String)>;

/// Where a subscription starts reading (subscribe, consumer update, resolve
/// offset spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// Type 0, only in a client's consumer update answer: no change.
    None,
    /// Type 1: the first offset still in the stream.
    First,
    /// Type 2: the first offset of the last chunk.
    Last,
    /// Type 3: the next offset to be written (only new messages).
    Next,
    /// Type 4: this offset.
    Offset(u64),
    /// Type 5: the first chunk at or after this time (milliseconds since the epoch).
    Timestamp(i64),
}

impl OffsetSpec {
    /// The wire value of the offset type.
    pub fn type_code(self) -> u16 {
        match self {
            OffsetSpec::None => 0,
            OffsetSpec::First => 1,
            OffsetSpec::Last => 2,
            OffsetSpec::Next => 3,
            OffsetSpec::Offset(_) => 4,
            OffsetSpec::Timestamp(_) => 5,
        }
    }

    /// Parses an offset specification; `None` (type 0) only if `allow_none`.
    pub(crate) fn parse(i: &[u8], allow_none: bool) -> PResult<'_, OffsetSpec> {
        let (i, kind) = wire::u16(i)?;
        match kind {
            0 if allow_none => Ok((i, OffsetSpec::None)),
            1 => Ok((i, OffsetSpec::First)),
            2 => Ok((i, OffsetSpec::Last)),
            3 => Ok((i, OffsetSpec::Next)),
            4 => wire::u64(i).map(|(i, o)| (i, OffsetSpec::Offset(o))),
            5 => wire::i64(i).map(|(i, t)| (i, OffsetSpec::Timestamp(t))),
            _ => wire::malformed("unknown offset type"),
        }
    }

    /// Writes the offset type and, for an offset or a timestamp, its value.
    pub(crate) fn put(self, buf: &mut BytesMut) {
        buf.put_u16(self.type_code());
        match self {
            OffsetSpec::Offset(o) => buf.put_u64(o),
            OffsetSpec::Timestamp(t) => buf.put_i64(t),
            _ => {}
        }
    }
}

/// One message of a publish frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedMessage {
    /// The publisher's id for the message, echoed in its confirm or error.
    pub publishing_id: u64,
    /// The filter value (publish version 2 only; RabbitMQ 3.13+ filtering).
    pub filter_value: Option<String>,
    /// The message as an Osiris entry, which the broker can append to a chunk
    /// as it is: one record (an AMQP 1.0 encoded message for RabbitMQ's
    /// clients), or a client's sub-entry batch. Slices of the frame.
    pub entry: Entry,
}

/// A publishing id that failed, with why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishingError {
    /// The failed message's publishing id.
    pub publishing_id: u64,
    /// Why it failed.
    pub code: ResponseCode,
}

/// A broker in a metadata answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    /// The broker's index, which stream entries refer to.
    pub reference: u16,
    /// Its advertised host.
    pub host: String,
    /// Its advertised stream port.
    pub port: u32,
}

/// A stream in a metadata answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamMetadata {
    /// The stream's name.
    pub name: String,
    /// OK, or why there is no leader (stream does not exist, not available).
    pub code: ResponseCode,
    /// The leader's broker reference (RabbitMQ sends 0xffff with an error code).
    pub leader: u16,
    /// The replicas' broker references.
    pub replicas: Vec<u16>,
}

/// A response code field.
pub(crate) fn response_code(i: &[u8]) -> PResult<'_, ResponseCode> {
    let (i, raw) = wire::u16(i)?;
    match ResponseCode::from_u16(raw) {
        Some(code) => Ok((i, code)),
        None => Err(nom::Err::Error(WireError::Malformed(
            "unknown response code",
        ))),
    }
}

/// Properties that may be left out entirely (RabbitMQ writes no count for an
/// empty map in subscribe and in the open answer).
pub(crate) fn optional_properties(i: &[u8]) -> PResult<'_, Properties> {
    if i.is_empty() {
        Ok((i, Vec::new()))
    } else {
        wire::properties(i)
    }
}

/// Writes properties, or nothing when there are none (RabbitMQ's form).
pub(crate) fn put_optional_properties(buf: &mut BytesMut, props: &[(String, String)]) {
    if !props.is_empty() {
        wire::put_properties(buf, props);
    }
}

/// A broker entry.
pub(crate) fn broker(i: &[u8]) -> PResult<'_, Broker> {
    let (i, reference) = wire::u16(i)?;
    let (i, host) = wire::string(i)?;
    let (i, port) = wire::u32(i)?;
    Ok((
        i,
        Broker {
            reference,
            host,
            port,
        },
    ))
}

/// A stream metadata entry.
pub(crate) fn stream_metadata(i: &[u8]) -> PResult<'_, StreamMetadata> {
    let (i, name) = wire::string(i)?;
    let (i, code) = response_code(i)?;
    let (i, leader) = wire::u16(i)?;
    let (i, replicas) = wire::array(i, wire::u16)?;
    Ok((
        i,
        StreamMetadata {
            name,
            code,
            leader,
            replicas,
        },
    ))
}

/// A publishing error entry.
pub(crate) fn publishing_error(i: &[u8]) -> PResult<'_, PublishingError> {
    let (i, publishing_id) = wire::u64(i)?;
    let (i, code) = response_code(i)?;
    Ok((
        i,
        PublishingError {
            publishing_id,
            code,
        },
    ))
}
