//! Decoding a published body, exchange and routing key as slices of the
//! buffer being decoded ([`Event::decode_shared`]). serde's derive has no way
//! to pass the source `Bytes` down to one field, so it is set for the
//! decode's duration in a thread-local; without one (or for a part from
//! elsewhere) it is copied.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use stablemq_protocol::{BasicProperties, ByteString};

thread_local! {
    static SOURCE: RefCell<Option<Bytes>> = const { RefCell::new(None) };
}

/// Run `f` with `src` as the buffer bodies may be sliced from.
pub(super) fn with_source<T>(src: &Bytes, f: impl FnOnce() -> T) -> T {
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            SOURCE.with_borrow_mut(|s| *s = None);
        }
    }
    SOURCE.with_borrow_mut(|s| *s = Some(src.clone()));
    let _clear = Clear;
    f()
}

pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
    d.deserialize_bytes(BodyVisitor)
}

/// A string as a slice of the source when it lies in it.
pub(super) fn deserialize_str<'de, D: Deserializer<'de>>(d: D) -> Result<ByteString, D::Error> {
    d.deserialize_str(StrVisitor)
}

thread_local! {
    /// The properties this thread decoded last.
    static LAST_PROPERTIES: RefCell<Option<Arc<BasicProperties>>> = const { RefCell::new(None) };
}

/// Properties equal to the last ones this thread decoded share their
/// `Arc`, as a connection's `Decoder` does: a publisher sends the same
/// properties again and again. Otherwise one allocation, the `Arc`'s
/// (serde's own `Arc<T>` decodes a `Box<T>`, then moves it into a new
/// `Arc`: two).
pub(super) fn deserialize_properties<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Arc<BasicProperties>, D::Error> {
    let decoded = BasicProperties::deserialize(d)?;
    Ok(LAST_PROPERTIES.with_borrow_mut(|last| match last {
        Some(known) if **known == decoded => Arc::clone(known),
        _ => Arc::clone(last.insert(Arc::new(decoded))),
    }))
}

struct StrVisitor;

impl<'de> Visitor<'de> for StrVisitor {
    type Value = ByteString;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<ByteString, E> {
        SOURCE.with_borrow(|src| match src {
            Some(src) if contains(src, v.as_bytes()) => {
                ByteString::try_from(src.slice_ref(v.as_bytes())).map_err(E::custom)
            }
            _ => Ok(ByteString::from(v)),
        })
    }

    fn visit_str<E>(self, v: &str) -> Result<ByteString, E> {
        Ok(ByteString::from(v))
    }

    fn visit_string<E>(self, v: String) -> Result<ByteString, E> {
        Ok(ByteString::from(v))
    }
}

struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = Bytes;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a message body")
    }

    fn visit_borrowed_bytes<E>(self, v: &'de [u8]) -> Result<Bytes, E> {
        Ok(SOURCE.with_borrow(|src| match src {
            Some(src) if contains(src, v) => src.slice_ref(v),
            _ => Bytes::copy_from_slice(v),
        }))
    }

    fn visit_bytes<E>(self, v: &[u8]) -> Result<Bytes, E> {
        Ok(Bytes::copy_from_slice(v))
    }

    fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Bytes, E> {
        Ok(Bytes::from(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Bytes, A::Error> {
        let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(b) = seq.next_element::<u8>()? {
            v.push(b);
        }
        Ok(Bytes::from(v))
    }
}

/// Whether `part` lies inside `src` (`Bytes::slice_ref` panics otherwise).
fn contains(src: &Bytes, part: &[u8]) -> bool {
    let start = src.as_ptr() as usize;
    let p = part.as_ptr() as usize;
    p >= start && p + part.len() <= start + src.len()
}
