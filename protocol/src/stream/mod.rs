//! The RabbitMQ stream protocol (port 5552), sans-IO: frames in, typed
//! messages out, and back.
//!
//! It follows the protocol's public specification (rabbitmq-server,
//! `deps/rabbitmq_stream/docs/PROTOCOL.adoc`) and what RabbitMQ and its
//! clients put on the wire; `protocol/tests/stream_fixtures.rs` checks it
//! against sessions recorded between RabbitMQ 3.10 and the rstream client.
//!
//! - [`split_frame`]: one size-prefixed frame off a read buffer, frame_max
//!   checked from the size field alone; partial input is "need more".
//! - [`ClientMessage`]: what clients send (decoded by the broker).
//! - [`ServerMessage`]: what servers send (encoded by the broker);
//!   [`encode_deliver_header`] heads a chunk the caller sends from a file.
//! - [`Chunk`] and [`ChunkBuilder`]: the Osiris chunk a deliver carries.
//! - [`Command`], [`ResponseCode`]: the keys, versions and codes.
//! - [`conn`]: the server side of one connection as a sans-IO state machine
//!   ([`StreamConnection`]): handshake, heartbeats, publishers,
//!   subscriptions and their credit; the broker answers what it asks.
//!
//! Both message types decode and encode, so tests can play either side.
//! Decoding never panics on any input: every fault is a [`StreamFrameError`]
//! naming the response code a server answers it with.

mod chunk;
mod client;
mod code;
mod command;
pub mod conn;
mod error;
mod frame;
mod server;
mod types;
mod wire;

pub use chunk::{
    CHUNK_HEADER_LEN, CHUNK_MAGIC, CHUNK_TYPE_TRACKING_DELTA, CHUNK_TYPE_TRACKING_SNAPSHOT,
    CHUNK_TYPE_USER, CHUNK_VERSION, Chunk, ChunkBuilder, ChunkError, ChunkHeader, Entries, Entry,
    sub_batch_records,
};
pub use client::ClientMessage;
pub use code::ResponseCode;
pub use command::{Command, CommandVersion, RESPONSE_FLAG, supported_versions};
pub use conn::StreamConnection;
pub use error::StreamFrameError;
pub use frame::{DEFAULT_FRAME_MAX, FrameHeader, INITIAL_FRAME_MAX, split_frame};
pub use server::{ServerMessage, encode_deliver_header};
pub use types::{
    Broker, OffsetSpec, Properties, PublishedMessage, PublishingError, StreamMetadata,
};

use bytes::BytesMut;

/// Splits and decodes the next client frame in `buf` (`Ok(None)`: need more).
pub fn decode_client_frame(
    buf: &mut BytesMut,
    frame_max: u32,
) -> Result<Option<ClientMessage>, StreamFrameError> {
    match split_frame(buf, frame_max)? {
        Some(frame) => ClientMessage::decode(&frame).map(Some),
        None => Ok(None),
    }
}

/// Splits and decodes the next server frame in `buf` (`Ok(None)`: need more).
pub fn decode_server_frame(
    buf: &mut BytesMut,
    frame_max: u32,
) -> Result<Option<ServerMessage>, StreamFrameError> {
    match split_frame(buf, frame_max)? {
        Some(frame) => ServerMessage::decode(&frame).map(Some),
        None => Ok(None),
    }
}
