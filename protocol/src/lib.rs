//! The AMQP 0-9-1 frame layer of StableMQ: turns bytes into frames and frames into
//! bytes, the way RabbitMQ clients expect.
//!
//! It is:
//! - a streaming decoder ([`decode_frame`], and [`Decoder`] for a connection)
//!   that treats partial input as "need more", enforces `frame_max` from the
//!   7-octet frame header alone, and hands out message bodies, exchanges and
//!   routing keys as zero-copy slices of the read buffer;
//! - encoders for single frames ([`encode_frame`]), for a method with its content
//!   ([`encode_content`]) and a hand-written one for the hot path, basic.deliver
//!   ([`encode_deliver`]);
//! - the mapping from each decoding fault to the reply code and text RabbitMQ sends
//!   ([`FrameError`]).
//!
//! It is not:
//! - a connection or channel state machine: it does not know whether a method is
//!   allowed now, assemble method + header + bodies into a message, or check that
//!   body frames add up to the header's body size;
//! - I/O: no sockets, no async runtime, no clock.
//!
//! The [`stream`] module is the RabbitMQ stream protocol's codec (port 5552),
//! separate from AMQP 0-9-1; [`amqp10`] maps the AMQP 1.0 messages its records
//! hold to and from 0-9-1 messages.
//!
//! Method arguments and properties are amq-protocol's spec-generated types,
//! re-exported here so the broker depends on one crate.
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use stablemq_protocol::{decode_frame, encode_deliver, BasicProperties, Frame};
//!
//! let mut wire = BytesMut::new();
//! let body = Bytes::from_static(b"hello");
//! let props = BasicProperties::default().with_delivery_mode(2);
//! encode_deliver(1, "ctag", 1, false, "amq.direct", "rk", &props, &body, 131_072, &mut wire);
//!
//! let mut frames = Vec::new();
//! while let Some(frame) = decode_frame(&mut wire, 131_072).unwrap() {
//!     frames.push(frame);
//! }
//! assert_eq!(frames.len(), 3); // method, header, one body frame
//! assert!(matches!(&frames[2], Frame::Body { payload, .. } if payload == &body));
//! ```

#![warn(missing_docs)]

pub use amq_protocol::protocol::{self as methods, AMQPClass, BasicProperties};
pub use amq_protocol::types::{self, AMQPValue, FieldArray, FieldTable, LongString, ShortString};

pub mod amqp10;
mod content;
mod error;
mod frame;
mod nesting;
mod publish;
pub mod stream;

pub use bytestring::ByteString;
pub use content::{encode_content, encode_deliver};
pub use error::{FrameError, Snippet};
pub use frame::{Decoder, Frame, HeaderCheck, check_protocol_header, decode_frame, encode_frame};
pub use nesting::MAX_TABLE_DEPTH;
pub use publish::Publish;

/// What a client sends first to ask for AMQP 0-9-1.
pub const PROTOCOL_HEADER: [u8; 8] = *b"AMQP\x00\x00\x09\x01";
/// The octet that ends every frame; anything else there means lost sync.
pub const FRAME_END: u8 = 0xCE;
/// The spec's smallest `frame_max` a peer may negotiate. (RabbitMQ 4.1+ uses 8192
/// for its own minimum and initial frame_max; amq-protocol's generated
/// `methods::constants::FRAME_MIN_SIZE` follows RabbitMQ's 8192.)
pub const FRAME_MIN_SIZE: u32 = 4096;

#[doc(hidden)]
pub mod fuzz;
