//! The frame layer: the 8-octet protocol header, then frames of
//! `type:u8 channel:u16 size:u32 payload[size] 0xCE`.
//!
//! Decoding is streaming (a partial frame is not an error) and checks before it
//! parses: size against `frame_max`, then the end octet, then the payload. Method
//! arguments are (de)serialised by amq-protocol; content headers and bodies by
//! [`crate::content`], so bodies stay slices of the read buffer.

use std::io;
use std::sync::Arc;

use amq_protocol::frame::{BackToTheBuffer, GenError, SerializeFn, WriteContext};
use amq_protocol::protocol::{gen_class, parse_class};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use nom::{Parser, combinator::all_consuming};

use crate::error::{FrameError, Snippet};
use crate::publish::{self, Publish};
use crate::{AMQPClass, BasicProperties, FRAME_END, PROTOCOL_HEADER, content, nesting};

pub(crate) const FRAME_METHOD: u8 = 1;
pub(crate) const FRAME_HEADER: u8 = 2;
pub(crate) const FRAME_BODY: u8 = 3;
pub(crate) const FRAME_HEARTBEAT: u8 = 8;

/// Type, channel and size: what must be read before the payload length is known.
pub(crate) const FRAME_HEADER_LEN: usize = 7;
/// Header plus end octet: the cost of a frame beyond its payload (RabbitMQ's
/// `EMPTY_FRAME_SIZE`), which `frame_max` includes.
pub(crate) const FRAME_OVERHEAD: usize = FRAME_HEADER_LEN + 1;

/// One AMQP frame, decoded. Method arguments and content properties are owned
/// amq-protocol values; a body payload shares memory with the buffer it was read
/// from.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A method frame, with its decoded arguments.
    Method {
        /// The channel the frame travels on.
        channel: u16,
        /// The method and its arguments.
        method: AMQPClass,
    },
    /// Content header. `class_id` is kept, not assumed to be basic (60), because
    /// the channel must check it against the method it follows (RabbitMQ answers a
    /// mismatch with 505 UNEXPECTED_FRAME).
    Header {
        /// The channel the frame travels on.
        channel: u16,
        /// The content's class id (60 for basic).
        class_id: u16,
        /// The size of the whole body, over all body frames.
        body_size: u64,
        /// Shared, not inline: inline, the properties (~280 bytes) made every
        /// `Frame`, and every move of one on the publish path, that much
        /// larger. The `Arc` travels on into the queued message, and a
        /// [`Decoder`] hands the same one to headers with the same octets.
        properties: Arc<BasicProperties>,
    },
    /// A content body frame.
    Body {
        /// The channel the frame travels on.
        channel: u16,
        /// The body bytes, a slice of the read buffer.
        payload: Bytes,
    },
    /// basic.publish, whose strings are slices of the frame (see
    /// [`crate::Publish`]). A publish whose arguments the hand parser leaves to
    /// amq-protocol's generic one (not valid UTF-8, say) arrives as a
    /// [`Frame::Method`] instead, as any method does.
    Publish {
        /// The channel the frame travels on.
        channel: u16,
        /// The publish's arguments.
        publish: Publish,
    },
    /// Heartbeats belong on channel 0; the channel is kept so the connection can
    /// answer one elsewhere with 505 UNEXPECTED_FRAME as RabbitMQ does.
    Heartbeat {
        /// The channel the frame travels on.
        channel: u16,
    },
}

impl Frame {
    /// The channel the frame travels on.
    pub fn channel(&self) -> u16 {
        match *self {
            Frame::Method { channel, .. }
            | Frame::Header { channel, .. }
            | Frame::Body { channel, .. }
            | Frame::Publish { channel, .. }
            | Frame::Heartbeat { channel } => channel,
        }
    }
}

/// Verdict on the first octets of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderCheck {
    /// Fewer than 8 octets, all consistent with a header we accept: read more.
    Incomplete,
    /// A header we accept; the 8 octets can be consumed.
    Ok,
    /// Anything else. The broker should write [`PROTOCOL_HEADER`] (telling the
    /// client which version we speak, as RabbitMQ does) and close the socket.
    Bad,
}

/// The AMQP 0-9 header, which RabbitMQ also accepts and serves as 0-9-1
/// (`rabbit_reader:version_negotiation({1, 1, 0, 9}, ...)`); some old clients send it.
const PROTOCOL_HEADER_0_9: [u8; 8] = *b"AMQP\x01\x01\x00\x09";

/// Checks the 8-byte protocol header at the start of a connection. Answers `Bad`
/// as soon as a prefix rules out every accepted header, so an HTTP or TLS client
/// is turned away without waiting for 8 octets.
pub fn check_protocol_header(buf: &[u8]) -> HeaderCheck {
    let seen = buf.len().min(PROTOCOL_HEADER.len());
    let matches = |header: &[u8; 8]| buf[..seen] == header[..seen];
    if !matches(&PROTOCOL_HEADER) && !matches(&PROTOCOL_HEADER_0_9) {
        HeaderCheck::Bad
    } else if seen < PROTOCOL_HEADER.len() {
        HeaderCheck::Incomplete
    } else {
        HeaderCheck::Ok
    }
}

/// Streaming decode of one frame from the front of `buf`.
///
/// `Ok(None)`: incomplete input, `buf` untouched. `Ok(Some(frame))`: the frame's
/// octets have been consumed. `Err(_)`: `buf` is untouched and the connection is
/// beyond repair (every [`FrameError`] is a hard error).
///
/// A frame whose declared payload size + 8 exceeds `frame_max` is rejected as
/// soon as its 7-octet header is read. `frame_max == 0` means no limit. RabbitMQ
/// allows 8 octets more than that, because some clients are off by the frame
/// overhead; a broker that wants the same leniency passes `frame_max + 8`.
///
/// Body payloads are `buf.split_to(..).freeze()` slices: no copy.
pub fn decode_frame(buf: &mut BytesMut, frame_max: u32) -> Result<Option<Frame>, FrameError> {
    decode(buf, frame_max, None)
}

/// A connection's frame decoder: [`decode_frame`], plus a memo of the last
/// content header's properties.
///
/// A publisher sends the same properties with message after message. When a
/// header's property octets equal the last header's, it shares their decoded
/// value (an `Arc` clone) instead of parsing and allocating them again: no
/// allocation per message for the properties (issue 4). Identical octets
/// decode to an identical value, so the memo never changes a result.
#[derive(Debug, Default)]
pub struct Decoder {
    memo: content::PropertiesMemo,
}

impl Decoder {
    /// [`decode_frame`], with the memo.
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        frame_max: u32,
    ) -> Result<Option<Frame>, FrameError> {
        decode(buf, frame_max, Some(&mut self.memo))
    }
}

fn decode(
    buf: &mut BytesMut,
    frame_max: u32,
    memo: Option<&mut content::PropertiesMemo>,
) -> Result<Option<Frame>, FrameError> {
    let Some(head) = buf.first_chunk::<FRAME_HEADER_LEN>() else {
        return Ok(None);
    };
    let frame_type = head[0];
    let channel = u16::from_be_bytes([head[1], head[2]]);
    let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]);

    if frame_max != 0 && u64::from(size) + FRAME_OVERHEAD as u64 > u64::from(frame_max) {
        return Err(FrameError::TooLarge {
            frame_type,
            channel,
            size,
            frame_max,
        });
    }
    // u64 so a 4 GiB size cannot overflow usize on 32-bit targets.
    if (buf.len() as u64) < u64::from(size) + FRAME_OVERHEAD as u64 {
        return Ok(None);
    }
    let size = size as usize; // fits: buf.len() >= size
    let total = size + FRAME_OVERHEAD;
    let payload = &buf[FRAME_HEADER_LEN..FRAME_HEADER_LEN + size];
    let found = buf[total - 1];
    if found != FRAME_END {
        let payload = Snippet::of(payload);
        return Err(FrameError::BadFrameEnd {
            frame_type,
            channel,
            found,
            payload,
        });
    }

    let frame = match frame_type {
        FRAME_METHOD => {
            if let Some(at) = publish_layout(payload) {
                let mut raw = buf.split_to(total);
                raw.advance(FRAME_HEADER_LEN + METHOD_IDS_LEN);
                raw.truncate(size - METHOD_IDS_LEN);
                let publish = Publish::from_args(&raw.freeze(), &at);
                return Ok(Some(Frame::Publish { channel, publish }));
            }
            Frame::Method {
                channel,
                method: decode_method(channel, payload)?,
            }
        }
        FRAME_HEADER => content::decode_header(channel, payload, memo)?,
        FRAME_BODY => {
            let mut raw = buf.split_to(total);
            raw.advance(FRAME_HEADER_LEN);
            raw.truncate(size);
            return Ok(Some(Frame::Body {
                channel,
                payload: raw.freeze(),
            }));
        }
        FRAME_HEARTBEAT if size == 0 => Frame::Heartbeat { channel },
        FRAME_HEARTBEAT => {
            let payload = Snippet::of(payload);
            return Err(FrameError::BadPayloadLength {
                frame_type,
                channel,
                payload,
            });
        }
        _ => {
            let payload = Snippet::of(payload);
            return Err(FrameError::UnknownFrameType {
                frame_type,
                channel,
                payload,
            });
        }
    };
    buf.advance(total);
    Ok(Some(frame))
}

/// class-id and method-id, in front of a method's arguments.
const METHOD_IDS_LEN: usize = 4;

/// Where a method payload's strings lie when it is a basic.publish the hand
/// parser takes.
fn publish_layout(payload: &[u8]) -> Option<publish::Layout> {
    let (ids, args) = payload.split_first_chunk::<METHOD_IDS_LEN>()?;
    if *ids != [0, 60, 0, 40] {
        return None;
    }
    publish::layout(args)
}

fn decode_method(channel: u16, payload: &[u8]) -> Result<AMQPClass, FrameError> {
    let Some((ids, args)) = payload.split_first_chunk::<4>() else {
        let payload = Snippet::of(payload);
        return Err(FrameError::BadPayloadLength {
            frame_type: FRAME_METHOD,
            channel,
            payload,
        });
    };
    let class_id = u16::from_be_bytes([ids[0], ids[1]]);
    let method_id = u16::from_be_bytes([ids[2], ids[3]]);
    if !is_known_method(class_id, method_id) {
        return Err(FrameError::UnknownMethod {
            channel,
            class_id,
            method_id,
        });
    }
    // basic.publish opens every published message: parsed by hand. Anything
    // unusual (bad UTF-8, wrong length) falls through to the generic parser,
    // so errors stay the same.
    if (class_id, method_id) == (60, 10)
        && let Some(size) = args.first_chunk::<4>().map(|b| u32::from_be_bytes(*b))
        && size != 0
    {
        return Err(FrameError::PrefetchSizeNotSupported {
            channel,
            prefetch_size: size,
        });
    }
    if !nesting::method_args_ok(class_id, method_id, args) {
        return Err(FrameError::TooDeeplyNested {
            channel,
            frame_type: FRAME_METHOD,
            class_id,
            method_id,
        });
    }
    match all_consuming(parse_class).parse(payload) {
        Ok((_, method)) => Ok(method),
        Err(_) => Err(FrameError::BadMethodArguments {
            channel,
            class_id,
            method_id,
            args: Snippet::of(args),
        }),
    }
}

/// Whether amq-protocol (and RabbitMQ's `lookup_method_name/1`) knows this pair.
/// Checked before parsing so an unknown id is told apart from bad arguments.
pub(crate) fn is_known_method(class_id: u16, method_id: u16) -> bool {
    match class_id {
        // connection
        10 => matches!(
            method_id,
            10 | 11 | 20 | 21 | 30 | 31 | 40 | 41 | 50 | 51 | 60 | 61 | 70 | 71
        ),
        // channel
        20 => matches!(method_id, 10 | 11 | 20 | 21 | 40 | 41),
        // access
        30 => matches!(method_id, 10 | 11),
        // exchange (unbind-ok is 51, not 41: a RabbitMQ extension quirk)
        40 => matches!(method_id, 10 | 11 | 20 | 21 | 30 | 31 | 40 | 51),
        // queue
        50 => matches!(method_id, 10 | 11 | 20 | 21 | 30 | 31 | 40 | 41 | 50 | 51),
        // basic
        60 => matches!(
            method_id,
            10 | 11
                | 20
                | 21
                | 30
                | 31
                | 40
                | 50
                | 60
                | 70
                | 71
                | 72
                | 80
                | 90
                | 100
                | 110
                | 111
                | 120
        ),
        // confirm
        85 => matches!(method_id, 10 | 11),
        // tx
        90 => matches!(method_id, 10 | 11 | 20 | 21 | 30 | 31),
        _ => false,
    }
}

/// Append the wire encoding of one frame. Does not split: a body larger than the
/// peer's `frame_max` is the caller's mistake (use [`crate::encode_content`]).
pub fn encode_frame(frame: &Frame, out: &mut BytesMut) {
    match frame {
        Frame::Method { channel, method } => encode_method(*channel, method, out),
        Frame::Header {
            channel,
            class_id,
            body_size,
            properties,
        } => {
            content::encode_header(*channel, *class_id, *body_size, properties, out);
        }
        Frame::Body { channel, payload } => content::encode_body(*channel, payload, out),
        Frame::Publish { channel, publish } => encode_method(*channel, &publish.to_method(), out),
        Frame::Heartbeat { channel } => {
            out.reserve(FRAME_OVERHEAD);
            out.put_u8(FRAME_HEARTBEAT);
            out.put_u16(*channel);
            out.put_u32(0);
            out.put_u8(FRAME_END);
        }
    }
}

pub(crate) fn encode_method(channel: u16, method: &AMQPClass, out: &mut BytesMut) {
    put_frame(FRAME_METHOD, channel, out, |out| {
        write_with(out, gen_class(method))
    });
}

/// Writes a frame whose payload length is only known after writing it: the size
/// field is patched afterwards, in place.
pub(crate) fn put_frame(
    frame_type: u8,
    channel: u16,
    out: &mut BytesMut,
    payload: impl FnOnce(&mut BytesMut),
) {
    out.put_u8(frame_type);
    out.put_u16(channel);
    let size_at = out.len();
    out.put_u32(0);
    payload(out);
    let size = out.len() - size_at - 4;
    let size = u32::try_from(size).expect("frame payload exceeds 4 GiB");
    out[size_at..size_at + 4].copy_from_slice(&size.to_be_bytes());
    out.put_u8(FRAME_END);
}

/// Runs an amq-protocol (cookie-factory) serializer straight into `out`.
pub(crate) fn write_with<F: SerializeFn<Sink>>(out: &mut BytesMut, serialize: F) {
    let sink = Sink(std::mem::take(out));
    // Writing to memory cannot fail, and amq-protocol's types cannot hold values
    // its serializers reject (ShortString is length-checked on construction).
    let ctx = serialize(WriteContext::from(sink)).expect("serializing into memory failed");
    *out = ctx.write.0;
}

/// A `BytesMut` that cookie-factory can write into and seek back in (it patches
/// length prefixes of field tables). Owning, so the temporary context that
/// writes a prefix can be a `Sink` too.
pub(crate) struct Sink(BytesMut);

impl io::Write for Sink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl BackToTheBuffer for Sink {
    fn reserve_write_use<
        Tmp,
        Gen: Fn(WriteContext<Self>) -> Result<(WriteContext<Self>, Tmp), GenError>,
        Before: Fn(WriteContext<Self>, Tmp) -> Result<WriteContext<Self>, GenError>,
    >(
        s: WriteContext<Self>,
        reserved: usize,
        gen_body: &Gen,
        before: &Before,
    ) -> Result<WriteContext<Self>, GenError> {
        let WriteContext {
            write: mut sink,
            position,
        } = s;
        let start = sink.0.len();
        sink.0.resize(start + reserved, 0);
        let body_ctx = WriteContext {
            write: sink,
            position: position + reserved as u64,
        };
        let (mut ctx, tmp) = gen_body(body_ctx)?;
        let head_ctx = WriteContext {
            write: Sink(BytesMut::with_capacity(reserved)),
            position,
        };
        let head = before(head_ctx, tmp)?.write.0;
        if head.len() != reserved {
            return Err(GenError::BufferTooBig(reserved.abs_diff(head.len())));
        }
        ctx.write.0[start..start + reserved].copy_from_slice(&head);
        Ok(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::{basic, channel};

    #[test]
    fn protocol_header_verdicts() {
        assert_eq!(check_protocol_header(b""), HeaderCheck::Incomplete);
        assert_eq!(check_protocol_header(b"AMQ"), HeaderCheck::Incomplete);
        assert_eq!(
            check_protocol_header(b"AMQP\x00\x00\x09"),
            HeaderCheck::Incomplete
        );
        assert_eq!(check_protocol_header(&PROTOCOL_HEADER), HeaderCheck::Ok);
        assert_eq!(
            check_protocol_header(b"AMQP\x00\x00\x09\x01extra"),
            HeaderCheck::Ok
        );
        assert_eq!(check_protocol_header(&PROTOCOL_HEADER_0_9), HeaderCheck::Ok);
        assert_eq!(check_protocol_header(b"GET "), HeaderCheck::Bad);
        assert_eq!(
            check_protocol_header(b"AMQP\x00\x00\x08\x00"),
            HeaderCheck::Bad
        );
        assert_eq!(
            check_protocol_header(b"AMQP\x03\x01\x00\x00"),
            HeaderCheck::Bad
        );
        assert_eq!(check_protocol_header(b"\x16\x03\x01"), HeaderCheck::Bad);
    }

    #[test]
    fn is_known_method_agrees_with_amq_protocol() {
        // Zeroed arguments parse for every known method (empty strings and
        // tables, false flags); amq-protocol rejects unknown ids whatever follows.
        for class_id in 0..=100u16 {
            for method_id in 0..=130u16 {
                let mut payload = Vec::new();
                payload.extend_from_slice(&class_id.to_be_bytes());
                payload.extend_from_slice(&method_id.to_be_bytes());
                payload.extend_from_slice(&[0; 64]);
                let parsed = parse_class(&payload[..]).is_ok();
                assert_eq!(
                    parsed,
                    is_known_method(class_id, method_id),
                    "{class_id}.{method_id}"
                );
            }
        }
    }

    #[test]
    fn heartbeat_wire_format() {
        let mut out = BytesMut::new();
        encode_frame(&Frame::Heartbeat { channel: 0 }, &mut out);
        assert_eq!(&out[..], &[8, 0, 0, 0, 0, 0, 0, 0xCE]);
    }

    #[test]
    fn method_wire_format_matches_the_spec() {
        let mut out = BytesMut::new();
        let open = AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {}));
        encode_frame(
            &Frame::Method {
                channel: 1,
                method: open,
            },
            &mut out,
        );
        // channel.open: class 20, method 10, reserved shortstr "".
        assert_eq!(&out[..], &[1, 0, 1, 0, 0, 0, 5, 0, 20, 0, 10, 0, 0xCE]);

        out.clear();
        let ack = AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
            delivery_tag: 0x0102,
            multiple: true,
        }));
        encode_frame(
            &Frame::Method {
                channel: 0x0203,
                method: ack,
            },
            &mut out,
        );
        let expected = [
            1, 2, 3, 0, 0, 0, 13, 0, 60, 0, 80, 0, 0, 0, 0, 0, 0, 1, 2, 1, 0xCE,
        ];
        assert_eq!(&out[..], &expected);
    }

    #[test]
    fn errors_leave_the_buffer_untouched() {
        let mut buf = BytesMut::from(&[1, 0, 0, 0, 0, 0, 4, 0, 70, 0, 10, 0xCE][..]);
        let before = buf.clone();
        let err = decode_frame(&mut buf, 0).unwrap_err();
        assert_eq!(
            err,
            FrameError::UnknownMethod {
                channel: 0,
                class_id: 70,
                method_id: 10
            }
        );
        assert_eq!(buf, before);
    }
}
