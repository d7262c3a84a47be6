//! The stream protocol's field types (PROTOCOL.adoc, "Types"): nom parsers for
//! decoding and `BytesMut` writers for encoding.
//!
//! Integers are big-endian. A string is an `int16` length and UTF-8 bytes (read
//! as unsigned, as RabbitMQ reads it); bytes are an `int32` length (-1: null) and
//! the bytes; an array is an `int32` count and its elements. Parsers work on the
//! frame's `&[u8]`; [`Slicer`] turns a parsed sub-slice back into a `Bytes` of
//! the frame, so message bodies and chunks are never copied.

use bytes::{BufMut, Bytes, BytesMut};
use nom::error::{ErrorKind, ParseError};
use nom::{IResult, Parser};

/// Why a field could not be parsed: the frame ended, or a value is not allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireError {
    /// The input ended inside the field.
    Truncated,
    /// The field's value is not allowed.
    Malformed(&'static str),
}

impl<'a> ParseError<&'a [u8]> for WireError {
    fn from_error_kind(_input: &'a [u8], kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::Eof | ErrorKind::Complete => WireError::Truncated,
            _ => WireError::Malformed("unexpected value"),
        }
    }

    fn append(_input: &'a [u8], _kind: ErrorKind, other: Self) -> Self {
        other
    }
}

/// A parser's result with [`WireError`].
pub(crate) type PResult<'a, T> = IResult<&'a [u8], T, WireError>;

/// A failure with a reason, for parsers that check values.
pub(crate) fn malformed<T>(reason: &'static str) -> PResult<'static, T> {
    Err(nom::Err::Error(WireError::Malformed(reason)))
}

pub(crate) use nom::number::complete::{
    be_i32 as i32, be_i64 as i64, be_u8 as u8, be_u16 as u16, be_u32 as u32, be_u64 as u64,
};

/// `n` raw bytes.
pub(crate) fn take(n: usize) -> impl Fn(&[u8]) -> PResult<'_, &[u8]> {
    move |i| nom::bytes::complete::take(n).parse(i)
}

/// A string: `int16` length, UTF-8 bytes.
pub(crate) fn string(i: &[u8]) -> PResult<'_, String> {
    let (i, len) = u16(i)?;
    let (i, raw) = take(usize::from(len))(i)?;
    match std::str::from_utf8(raw) {
        Ok(s) => Ok((i, s.to_owned())),
        Err(_) => Err(nom::Err::Error(WireError::Malformed("string is not UTF-8"))),
    }
}

/// A string that may be null: `int16` length -1 (publish v2's filter
/// value, which RabbitMQ's clients send as null when a message has none).
pub(crate) fn nullable_string(i: &[u8]) -> PResult<'_, Option<String>> {
    if let [0xff, 0xff, rest @ ..] = i {
        return Ok((rest, None));
    }
    string(i).map(|(i, s)| (i, Some(s)))
}

/// Bytes: `int32` length (-1 for null), then the bytes.
pub(crate) fn nullable_bytes(i: &[u8]) -> PResult<'_, Option<&[u8]>> {
    let (i, len) = i32(i)?;
    match len {
        -1 => Ok((i, None)),
        n if n < 0 => Err(nom::Err::Error(WireError::Malformed(
            "negative bytes length",
        ))),
        n => {
            let (i, raw) = take(n as usize)(i)?;
            Ok((i, Some(raw)))
        }
    }
}

/// An array: `int32` count, then that many elements. The capacity reserved up
/// front is bounded by the input left, so a huge count cannot make it allocate.
pub(crate) fn array<'a, T>(
    i: &'a [u8],
    mut element: impl FnMut(&'a [u8]) -> PResult<'a, T>,
) -> PResult<'a, Vec<T>> {
    let (mut i, count) = i32(i)?;
    if count < 0 {
        return Err(nom::Err::Error(WireError::Malformed(
            "negative array length",
        )));
    }
    let mut out = Vec::with_capacity((count as usize).min(i.len()));
    for _ in 0..count {
        let (rest, value) = element(i)?;
        out.push(value);
        i = rest;
    }
    Ok((i, out))
}

/// A key/value pair of strings.
pub(crate) fn property(i: &[u8]) -> PResult<'_, (String, String)> {
    let (i, key) = string(i)?;
    let (i, value) = string(i)?;
    Ok((i, (key, value)))
}

/// An array of key/value string pairs (peer properties, stream arguments...).
pub(crate) fn properties(i: &[u8]) -> PResult<'_, Vec<(String, String)>> {
    array(i, property)
}

/// An array of strings.
pub(crate) fn strings(i: &[u8]) -> PResult<'_, Vec<String>> {
    array(i, string)
}

/// Turns sub-slices of a frame back into `Bytes` sharing the frame's buffer.
pub(crate) struct Slicer<'f>(pub(crate) &'f Bytes);

impl Slicer<'_> {
    /// The part of the frame `part` points at (`part` is a slice of the frame).
    pub(crate) fn bytes(&self, part: &[u8]) -> Bytes {
        if part.is_empty() {
            Bytes::new()
        } else {
            self.0.slice_ref(part)
        }
    }
}

/// Writes a string: `int16` length, then the bytes. A string longer than 65535
/// bytes (nothing the protocol allows) is cut there.
pub(crate) fn put_string(buf: &mut BytesMut, s: &str) {
    let raw = &s.as_bytes()[..s.len().min(usize::from(u16::MAX))];
    buf.put_u16(raw.len() as u16);
    buf.put_slice(raw);
}

/// Writes a string that may be null (`None` as length -1).
pub(crate) fn put_nullable_string(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(buf, s),
        None => buf.put_i16(-1),
    }
}

/// Writes bytes: `int32` length, then the bytes; `None` as length -1.
pub(crate) fn put_nullable_bytes(buf: &mut BytesMut, b: Option<&[u8]>) {
    match b {
        Some(b) => put_bytes(buf, b),
        None => buf.put_i32(-1),
    }
}

/// Writes bytes: `int32` length, then the bytes.
pub(crate) fn put_bytes(buf: &mut BytesMut, b: &[u8]) {
    buf.put_u32(b.len() as u32);
    buf.put_slice(b);
}

/// Writes an array count.
pub(crate) fn put_count(buf: &mut BytesMut, n: usize) {
    buf.put_u32(n as u32);
}

/// Writes an array of key/value string pairs.
pub(crate) fn put_properties(buf: &mut BytesMut, props: &[(String, String)]) {
    put_count(buf, props.len());
    for (k, v) in props {
        put_string(buf, k);
        put_string(buf, v);
    }
}

/// Writes an array of strings.
pub(crate) fn put_strings(buf: &mut BytesMut, items: &[String]) {
    put_count(buf, items.len());
    for s in items {
        put_string(buf, s);
    }
}

/// Starts a frame: reserves its size field and writes key and version. Returns
/// where the frame starts, for [`end_frame`].
pub(crate) fn begin_frame(buf: &mut BytesMut, key: u16, version: u16) -> usize {
    let start = buf.len();
    buf.put_u32(0);
    buf.put_u16(key);
    buf.put_u16(version);
    start
}

/// Fills in the size field of the frame begun at `start`.
pub(crate) fn end_frame(buf: &mut BytesMut, start: usize) {
    let size = (buf.len() - start - 4) as u32;
    buf[start..start + 4].copy_from_slice(&size.to_be_bytes());
}
