//! What a stream protocol server sends: its responses, its one-way commands
//! (deliver, publish confirm and error, metadata update, heartbeat) and its own
//! requests (tune, close, consumer update).
//!
//! The broker encodes these ([`ServerMessage::encode`], and
//! [`encode_deliver_header`] for a chunk sent from a file); the decoder is for
//! tests and tools that play the client. Both follow what RabbitMQ writes, byte
//! for byte: the open answer and a SASL challenge are left out when empty, a
//! SASL challenge has a 16-bit length, and RabbitMQ 3.10 answers route and
//! partitions under the request key (no response bit), which the decoder
//! accepts and records.

use bytes::{BufMut, Bytes, BytesMut};

use super::chunk::ChunkHeader;
use super::client::{command_version, put_command_versions};
use super::code::ResponseCode;
use super::command::{Command, CommandVersion};
use super::error::StreamFrameError;
use super::frame::{FrameHeader, finish};
use super::types::{
    Broker, OffsetSpec, Properties, PublishingError, StreamMetadata, broker, optional_properties,
    publishing_error, put_optional_properties, response_code, stream_metadata,
};
use super::wire::{self, PResult, Slicer};

/// A frame from a server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // fields are named as the specification names them
pub enum ServerMessage {
    /// The server's peer properties.
    PeerPropertiesResponse {
        correlation_id: u32,
        code: ResponseCode,
        properties: Properties,
    },
    /// The SASL mechanisms offered.
    SaslHandshakeResponse {
        correlation_id: u32,
        code: ResponseCode,
        mechanisms: Vec<String>,
    },
    /// The outcome of a SASL step, with a challenge when there is one.
    SaslAuthenticateResponse {
        correlation_id: u32,
        code: ResponseCode,
        challenge: Option<Bytes>,
    },
    /// The server's tune: the frame_max and heartbeat it offers.
    Tune { frame_max: u32, heartbeat: u32 },
    /// The outcome of open, with connection properties (advertised host and port).
    OpenResponse {
        correlation_id: u32,
        code: ResponseCode,
        properties: Properties,
    },
    /// The server closes the connection.
    Close {
        correlation_id: u32,
        code: ResponseCode,
        reason: String,
    },
    /// The server's answer to the client's close.
    CloseResponse {
        correlation_id: u32,
        code: ResponseCode,
    },
    /// Heartbeat.
    Heartbeat,
    /// A response with only a code: declare/delete publisher, subscribe,
    /// unsubscribe, create/delete stream, create/delete super stream.
    Response {
        command: Command,
        correlation_id: u32,
        code: ResponseCode,
    },
    /// The last publishing id stored for a publisher reference (0 if none).
    QueryPublisherSequenceResponse {
        correlation_id: u32,
        code: ResponseCode,
        sequence: u64,
    },
    /// A stored consumer offset.
    QueryOffsetResponse {
        correlation_id: u32,
        code: ResponseCode,
        offset: u64,
    },
    /// Brokers and the streams' leaders and replicas.
    MetadataResponse {
        correlation_id: u32,
        brokers: Vec<Broker>,
        streams: Vec<StreamMetadata>,
    },
    /// A stream's topology changed, or it is gone (code: stream not available).
    MetadataUpdate { code: ResponseCode, stream: String },
    /// Publishing ids now confirmed.
    PublishConfirm {
        publisher_id: u8,
        publishing_ids: Vec<u64>,
    },
    /// Publishing ids that failed.
    PublishError {
        publisher_id: u8,
        errors: Vec<PublishingError>,
    },
    /// A chunk for a subscription: `chunk` is the Osiris chunk as stored
    /// (header and entries; see [`Chunk`](super::Chunk)), a slice of the frame.
    /// Version 2 carries the committed chunk id.
    Deliver {
        subscription_id: u8,
        committed_chunk_id: Option<u64>,
        chunk: Bytes,
    },
    /// Credit for an unknown subscription (no correlation id).
    CreditResponse {
        code: ResponseCode,
        subscription_id: u8,
    },
    /// The partitions a routing key goes to. `request_key`: sent under the
    /// request's key (RabbitMQ 3.10).
    RouteResponse {
        correlation_id: u32,
        code: ResponseCode,
        streams: Vec<String>,
        request_key: bool,
    },
    /// The partitions of a super stream. `request_key`: as for route.
    PartitionsResponse {
        correlation_id: u32,
        code: ResponseCode,
        streams: Vec<String>,
        request_key: bool,
    },
    /// Single active consumer: this subscription becomes active or not.
    ConsumerUpdate {
        correlation_id: u32,
        subscription_id: u8,
        active: bool,
    },
    /// The command versions the server speaks.
    ExchangeCommandVersionsResponse {
        correlation_id: u32,
        code: ResponseCode,
        commands: Vec<CommandVersion>,
    },
    /// A stream's statistics (`first_chunk_id`, `committed_chunk_id`, ...).
    StreamStatsResponse {
        correlation_id: u32,
        code: ResponseCode,
        stats: Vec<(String, i64)>,
    },
    /// A resolved offset specification (always an offset).
    ResolveOffsetSpecResponse {
        correlation_id: u32,
        code: ResponseCode,
        offset: OffsetSpec,
    },
}

impl ServerMessage {
    /// Calls `f` with each error code the frame carries: its response code
    /// when that is not OK, and each failed publishing id's. The codes a
    /// metadata response gives per stream are answers, not errors, and are
    /// left out; so are frames without a code.
    pub fn for_each_error(&self, mut f: impl FnMut(ResponseCode)) {
        use ServerMessage as M;
        let code = match self {
            M::PublishError { errors, .. } => {
                errors.iter().for_each(|e| f(e.code));
                return;
            }
            M::PeerPropertiesResponse { code, .. }
            | M::SaslHandshakeResponse { code, .. }
            | M::SaslAuthenticateResponse { code, .. }
            | M::OpenResponse { code, .. }
            | M::Close { code, .. }
            | M::CloseResponse { code, .. }
            | M::Response { code, .. }
            | M::QueryPublisherSequenceResponse { code, .. }
            | M::QueryOffsetResponse { code, .. }
            | M::MetadataUpdate { code, .. }
            | M::CreditResponse { code, .. }
            | M::RouteResponse { code, .. }
            | M::PartitionsResponse { code, .. }
            | M::ExchangeCommandVersionsResponse { code, .. }
            | M::StreamStatsResponse { code, .. }
            | M::ResolveOffsetSpecResponse { code, .. } => *code,
            M::Tune { .. }
            | M::Heartbeat
            | M::MetadataResponse { .. }
            | M::PublishConfirm { .. }
            | M::Deliver { .. }
            | M::ConsumerUpdate { .. } => return,
        };
        if code != ResponseCode::Ok {
            f(code);
        }
    }
}

/// The commands whose response is only a code.
fn code_only(command: Command) -> bool {
    matches!(
        command,
        Command::DeclarePublisher
            | Command::DeletePublisher
            | Command::Subscribe
            | Command::Unsubscribe
            | Command::CreateStream
            | Command::DeleteStream
            | Command::CreateSuperStream
            | Command::DeleteSuperStream
    )
}

/// Appends a deliver frame's head for a chunk of `chunk_len` bytes, which the
/// caller sends next (from a segment file, say) without copying it here.
pub fn encode_deliver_header(
    buf: &mut BytesMut,
    subscription_id: u8,
    committed_chunk_id: Option<u64>,
    chunk_len: usize,
) {
    let version = if committed_chunk_id.is_some() { 2 } else { 1 };
    let extra = if committed_chunk_id.is_some() { 8 } else { 0 };
    buf.put_u32((2 + 2 + 1 + extra + chunk_len) as u32);
    buf.put_u16(Command::Deliver.key());
    buf.put_u16(version);
    buf.put_u8(subscription_id);
    if let Some(id) = committed_chunk_id {
        buf.put_u64(id);
    }
}

fn stat(i: &[u8]) -> PResult<'_, (String, i64)> {
    let (i, key) = wire::string(i)?;
    let (i, value) = wire::i64(i)?;
    Ok((i, (key, value)))
}

/// The SASL challenge: absent, or a 16-bit length and bytes (RabbitMQ's form).
fn challenge<'a>(i: &'a [u8], s: &Slicer<'_>) -> PResult<'a, Option<Bytes>> {
    if i.is_empty() {
        return Ok((i, None));
    }
    let (i, len) = wire::u16(i)?;
    let (i, raw) = wire::take(usize::from(len))(i)?;
    Ok((i, Some(s.bytes(raw))))
}

/// A deliver's chunk: the rest of the frame, whose header must hold together.
fn deliver_chunk<'a>(i: &'a [u8], s: &Slicer<'_>) -> PResult<'a, Bytes> {
    match ChunkHeader::parse(i) {
        Ok((_, header)) if header.fits(i.len()) => Ok((&i[i.len()..], s.bytes(i))),
        Ok(_) => wire::malformed("chunk is shorter than its header says"),
        Err(e) => Err(e),
    }
}

mod decode;
mod encode;
