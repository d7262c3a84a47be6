//! The part of the AMQP 1.0 type system (OASIS AMQP 1.0, part 1) that message
//! sections use: a bounded decoder and an encoder that makes RabbitMQ 3.10's
//! choices (`amqp10_binary_generator`).
//!
//! Decoding borrows: strings, symbols and binaries are slices of the input, and
//! values nothing maps to AMQP 0-9-1 (arrays, described values, decimals, chars)
//! are kept as their encoded bytes after being checked. It never panics and
//! allocates at most in proportion to the input: every compound must fit in the
//! bytes its size field announces, its count may not exceed that size, and
//! compounds nest at most [`MAX_DEPTH`] deep (recursion is what a hostile record
//! would otherwise use to overflow the stack).

use bytes::{BufMut, BytesMut};

use super::Amqp10Error;

/// Deepest nesting of compound and described values accepted, counting a
/// section's own value as 1. The same bound as AMQP 0-9-1 field tables, so that
/// a mapped header table is one the 0-9-1 layer accepts.
pub(crate) const MAX_DEPTH: usize = crate::MAX_TABLE_DEPTH;

/// One decoded AMQP 1.0 value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value<'a> {
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
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
    Uuid([u8; 16]),
    Binary(&'a [u8]),
    /// The bytes of a `string`, not checked for UTF-8 (RabbitMQ does not either).
    String(&'a [u8]),
    Symbol(&'a [u8]),
    List(Vec<Value<'a>>),
    Map(Vec<(Value<'a>, Value<'a>)>),
    /// A checked value nothing here maps (array, described value, decimal,
    /// char), as its complete encoding, constructor included.
    Opaque(&'a [u8]),
}

impl<'a> Value<'a> {
    /// The bytes of a string or a symbol.
    pub(crate) fn as_text(&self) -> Option<&'a [u8]> {
        match *self {
            Value::String(s) | Value::Symbol(s) => Some(s),
            _ => None,
        }
    }
}

/// Reads values from `buf[pos..end]`; offsets in errors are offsets in `buf`.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            pos: 0,
            end: buf.len(),
        }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.end
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Amqp10Error> {
        let offset = self.pos;
        match offset.checked_add(n) {
            Some(stop) if stop <= self.end => {
                self.pos = stop;
                Ok(&self.buf[offset..stop])
            }
            _ => Err(Amqp10Error::Truncated { offset }),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Amqp10Error> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Amqp10Error> {
        Ok(self.array::<1>()?[0])
    }

    /// A size or count: one octet for the short encodings, four for the long.
    fn length(&mut self, wide: bool) -> Result<usize, Amqp10Error> {
        if wide {
            // A u32 always fits a usize on the targets this crate builds for.
            Ok(u32::from_be_bytes(self.array()?) as usize)
        } else {
            Ok(usize::from(self.u8()?))
        }
    }

    /// The next value, nested at `depth` (a section's value is at depth 1).
    pub(crate) fn value(&mut self, depth: usize) -> Result<Value<'a>, Amqp10Error> {
        let start = self.pos;
        let code = self.u8()?;
        if code == 0x00 {
            self.described(start, depth)?;
            return Ok(Value::Opaque(&self.buf[start..self.pos]));
        }
        self.primitive(code, start, depth)
    }

    /// A described value's descriptor and value, after its 0x00.
    fn described(&mut self, start: usize, depth: usize) -> Result<(), Amqp10Error> {
        if depth > MAX_DEPTH {
            return Err(Amqp10Error::TooDeep { offset: start });
        }
        self.value(depth + 1)?;
        self.value(depth + 1)?;
        Ok(())
    }

    /// The value whose constructor `code` (at `start`) has just been read.
    fn primitive(
        &mut self,
        code: u8,
        start: usize,
        depth: usize,
    ) -> Result<Value<'a>, Amqp10Error> {
        Ok(match code {
            0x40 => Value::Null,
            0x41 => Value::Bool(true),
            0x42 => Value::Bool(false),
            0x56 => match self.u8()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                _ => return Err(Amqp10Error::BadBoolean { offset: start }),
            },
            0x50 => Value::Ubyte(self.u8()?),
            0x51 => Value::Byte(i8::from_be_bytes(self.array()?)),
            0x60 => Value::Ushort(u16::from_be_bytes(self.array()?)),
            0x61 => Value::Short(i16::from_be_bytes(self.array()?)),
            0x43 => Value::Uint(0),
            0x52 => Value::Uint(u32::from(self.u8()?)),
            0x70 => Value::Uint(u32::from_be_bytes(self.array()?)),
            0x44 => Value::Ulong(0),
            0x53 => Value::Ulong(u64::from(self.u8()?)),
            0x80 => Value::Ulong(u64::from_be_bytes(self.array()?)),
            0x54 => Value::Int(i32::from(i8::from_be_bytes(self.array()?))),
            0x71 => Value::Int(i32::from_be_bytes(self.array()?)),
            0x55 => Value::Long(i64::from(i8::from_be_bytes(self.array()?))),
            0x81 => Value::Long(i64::from_be_bytes(self.array()?)),
            0x72 => Value::Float(f32::from_be_bytes(self.array()?)),
            0x82 => Value::Double(f64::from_be_bytes(self.array()?)),
            0x83 => Value::Timestamp(i64::from_be_bytes(self.array()?)),
            0x98 => Value::Uuid(self.array()?),
            // decimal32, char; decimal64; decimal128
            0x74 | 0x73 | 0x84 | 0x94 => {
                self.take(match code {
                    0x84 => 8,
                    0x94 => 16,
                    _ => 4,
                })?;
                Value::Opaque(&self.buf[start..self.pos])
            }
            0xa0 | 0xb0 => Value::Binary(self.variable(code == 0xb0)?),
            0xa1 | 0xb1 => Value::String(self.variable(code == 0xb1)?),
            0xa3 | 0xb3 => Value::Symbol(self.variable(code == 0xb3)?),
            0x45 => Value::List(Vec::new()),
            0xc0 | 0xd0 => Value::List(self.list(code == 0xd0, start, depth)?),
            0xc1 | 0xd1 => Value::Map(self.map(code == 0xd1, start, depth)?),
            0xe0 | 0xf0 => {
                self.array_value(code == 0xf0, start, depth)?;
                Value::Opaque(&self.buf[start..self.pos])
            }
            _ => {
                return Err(Amqp10Error::UnknownFormatCode {
                    code,
                    offset: start,
                });
            }
        })
    }

    fn variable(&mut self, wide: bool) -> Result<&'a [u8], Amqp10Error> {
        let len = self.length(wide)?;
        self.take(len)
    }

    /// The body of a list, map or array: a reader over exactly its `size`
    /// octets, and its element count (checked against the size and the depth).
    fn compound(
        &mut self,
        wide: bool,
        start: usize,
        depth: usize,
    ) -> Result<(Reader<'a>, usize), Amqp10Error> {
        if depth > MAX_DEPTH {
            return Err(Amqp10Error::TooDeep { offset: start });
        }
        let size = self.length(wide)?;
        let body_start = self.pos;
        self.take(size)?;
        let mut inner = Reader {
            buf: self.buf,
            pos: body_start,
            end: self.pos,
        };
        let count = inner.length(wide)?;
        if count > size {
            return Err(Amqp10Error::BadCompound {
                offset: start,
                reason: "count exceeds size",
            });
        }
        Ok((inner, count))
    }

    fn finish(inner: &Reader<'a>, start: usize) -> Result<(), Amqp10Error> {
        if inner.at_end() {
            Ok(())
        } else {
            Err(Amqp10Error::BadCompound {
                offset: start,
                reason: "size exceeds its elements",
            })
        }
    }

    fn list(
        &mut self,
        wide: bool,
        start: usize,
        depth: usize,
    ) -> Result<Vec<Value<'a>>, Amqp10Error> {
        let (mut inner, count) = self.compound(wide, start, depth)?;
        let mut items = Vec::new();
        for _ in 0..count {
            items.push(inner.value(depth + 1)?);
        }
        Self::finish(&inner, start)?;
        Ok(items)
    }

    fn map(
        &mut self,
        wide: bool,
        start: usize,
        depth: usize,
    ) -> Result<Vec<(Value<'a>, Value<'a>)>, Amqp10Error> {
        let (mut inner, count) = self.compound(wide, start, depth)?;
        if count % 2 != 0 {
            return Err(Amqp10Error::BadCompound {
                offset: start,
                reason: "odd map count",
            });
        }
        let mut pairs = Vec::new();
        for _ in 0..count / 2 {
            let key = inner.value(depth + 1)?;
            pairs.push((key, inner.value(depth + 1)?));
        }
        Self::finish(&inner, start)?;
        Ok(pairs)
    }

    /// Checks an array: one element constructor (possibly described), then
    /// `count` elements without constructors.
    fn array_value(&mut self, wide: bool, start: usize, depth: usize) -> Result<(), Amqp10Error> {
        let (mut inner, count) = self.compound(wide, start, depth)?;
        let ctor_at = inner.pos;
        let mut code = inner.u8()?;
        if code == 0x00 {
            inner.value(depth + 1)?;
            code = inner.u8()?;
            if code == 0x00 {
                return Err(Amqp10Error::UnknownFormatCode {
                    code,
                    offset: ctor_at,
                });
            }
        }
        for _ in 0..count {
            inner.primitive(code, ctor_at, depth + 1)?;
        }
        Self::finish(&inner, start)
    }
}

/// Appends `value`'s encoding, choosing the encodings RabbitMQ 3.10 does.
pub(crate) fn encode(value: &Value<'_>, out: &mut BytesMut) {
    match *value {
        Value::Null => out.put_u8(0x40),
        Value::Bool(b) => out.put_slice(&[0x56, u8::from(b)]),
        Value::Ubyte(v) => out.put_slice(&[0x50, v]),
        Value::Byte(v) => out.put_slice(&[0x51, v.to_be_bytes()[0]]),
        Value::Ushort(v) => {
            out.put_u8(0x60);
            out.put_u16(v);
        }
        Value::Short(v) => {
            out.put_u8(0x61);
            out.put_i16(v);
        }
        Value::Uint(0) => out.put_u8(0x43),
        Value::Uint(v @ 1..=255) => out.put_slice(&[0x52, v.to_be_bytes()[3]]),
        Value::Uint(v) => {
            out.put_u8(0x70);
            out.put_u32(v);
        }
        Value::Ulong(0) => out.put_u8(0x44),
        Value::Ulong(v @ 1..=255) => out.put_slice(&[0x53, v.to_be_bytes()[7]]),
        Value::Ulong(v) => {
            out.put_u8(0x80);
            out.put_u64(v);
        }
        Value::Int(v @ -128..=127) => out.put_slice(&[0x54, v.to_be_bytes()[3]]),
        Value::Int(v) => {
            out.put_u8(0x71);
            out.put_i32(v);
        }
        Value::Long(v @ -128..=127) => out.put_slice(&[0x55, v.to_be_bytes()[7]]),
        Value::Long(v) => {
            out.put_u8(0x81);
            out.put_i64(v);
        }
        Value::Float(v) => {
            out.put_u8(0x72);
            out.put_f32(v);
        }
        Value::Double(v) => {
            out.put_u8(0x82);
            out.put_f64(v);
        }
        Value::Timestamp(v) => {
            out.put_u8(0x83);
            out.put_i64(v);
        }
        Value::Uuid(v) => {
            out.put_u8(0x98);
            out.put_slice(&v);
        }
        // RabbitMQ: binary and string take the short form below 255 octets.
        Value::Binary(b) => variable(0xa0, 0xb0, 255, b, out),
        Value::String(s) => variable(0xa1, 0xb1, 255, s, out),
        Value::Symbol(s) => variable(0xa3, 0xb3, 256, s, out),
        Value::List(ref items) if items.is_empty() => out.put_u8(0x45),
        Value::List(ref items) => {
            let mut body = BytesMut::new();
            items.iter().for_each(|item| encode(item, &mut body));
            compound(0xc0, 0xd0, items.len(), &body, out);
        }
        Value::Map(ref pairs) => {
            let mut body = BytesMut::new();
            for (key, value) in pairs {
                encode(key, &mut body);
                encode(value, &mut body);
            }
            compound(0xc1, 0xd1, pairs.len() * 2, &body, out);
        }
        Value::Opaque(raw) => out.put_slice(raw),
    }
}

/// A binary, string or symbol: the one-octet length below `short_below`.
fn variable(short: u8, long: u8, short_below: usize, bytes: &[u8], out: &mut BytesMut) {
    match u8::try_from(bytes.len()) {
        Ok(len) if bytes.len() < short_below => out.put_slice(&[short, len]),
        _ => {
            out.put_u8(long);
            out.put_u32(len32(bytes.len()));
        }
    }
    out.put_slice(bytes);
}

/// A list or map header and body: the one-octet form while count and size fit
/// with room to spare (RabbitMQ's thresholds: count < 255, size + 1 < 256).
fn compound(short: u8, long: u8, count: usize, body: &[u8], out: &mut BytesMut) {
    match (u8::try_from(count), u8::try_from(body.len() + 1)) {
        (Ok(count @ 0..=254), Ok(size @ 0..=255)) => out.put_slice(&[short, size, count]),
        _ => {
            out.put_u8(long);
            out.put_u32(len32(body.len() + 4));
            out.put_u32(len32(count));
        }
    }
    out.put_slice(body);
}

/// A length for a 32-bit field. Every caller encodes a message the broker
/// holds in memory, which AMQP 0-9-1 and stream records already bound to far
/// less than 4 GiB.
fn len32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}
