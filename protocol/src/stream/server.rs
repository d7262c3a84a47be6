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

impl ServerMessage {
    /// The command of the message.
    pub fn command(&self) -> Command {
        use ServerMessage as M;
        match self {
            M::PeerPropertiesResponse { .. } => Command::PeerProperties,
            M::SaslHandshakeResponse { .. } => Command::SaslHandshake,
            M::SaslAuthenticateResponse { .. } => Command::SaslAuthenticate,
            M::Tune { .. } => Command::Tune,
            M::OpenResponse { .. } => Command::Open,
            M::Close { .. } | M::CloseResponse { .. } => Command::Close,
            M::Heartbeat => Command::Heartbeat,
            M::Response { command, .. } => *command,
            M::QueryPublisherSequenceResponse { .. } => Command::QueryPublisherSequence,
            M::QueryOffsetResponse { .. } => Command::QueryOffset,
            M::MetadataResponse { .. } => Command::Metadata,
            M::MetadataUpdate { .. } => Command::MetadataUpdate,
            M::PublishConfirm { .. } => Command::PublishConfirm,
            M::PublishError { .. } => Command::PublishError,
            M::Deliver { .. } => Command::Deliver,
            M::CreditResponse { .. } => Command::Credit,
            M::RouteResponse { .. } => Command::Route,
            M::PartitionsResponse { .. } => Command::Partitions,
            M::ConsumerUpdate { .. } => Command::ConsumerUpdate,
            M::ExchangeCommandVersionsResponse { .. } => Command::ExchangeCommandVersions,
            M::StreamStatsResponse { .. } => Command::StreamStats,
            M::ResolveOffsetSpecResponse { .. } => Command::ResolveOffsetSpec,
        }
    }

    /// Decodes a frame (as [`split_frame`](super::split_frame) returns it) sent by a server.
    pub fn decode(frame: &Bytes) -> Result<ServerMessage, StreamFrameError> {
        let header = FrameHeader::read(frame)?;
        let command = header.command()?;
        let body = &frame[4..];
        let s = Slicer(frame);
        let result = if header.is_response() {
            Self::response_body(command, body, &s)
        } else {
            Self::command_body(command, header.version, body, &s)
        };
        match result {
            Err(nom::Err::Error(super::wire::WireError::Malformed(WRONG_DIRECTION))) => {
                Err(StreamFrameError::WrongDirection {
                    command,
                    key: header.key,
                    sender: "server",
                })
            }
            other => finish(command, other),
        }
    }

    /// A one-way command or a request of the server (no response bit).
    fn command_body<'a>(
        command: Command,
        version: u16,
        i: &'a [u8],
        s: &Slicer<'_>,
    ) -> PResult<'a, ServerMessage> {
        use ServerMessage as M;
        use wire::{u8, u32, u64};
        match command {
            Command::Tune => {
                let (i, frame_max) = u32(i)?;
                let (i, heartbeat) = u32(i)?;
                Ok((
                    i,
                    M::Tune {
                        frame_max,
                        heartbeat,
                    },
                ))
            }
            Command::Heartbeat => Ok((i, M::Heartbeat)),
            Command::Close => {
                let (i, correlation_id) = u32(i)?;
                let (i, code) = response_code(i)?;
                let (i, reason) = wire::string(i)?;
                Ok((
                    i,
                    M::Close {
                        correlation_id,
                        code,
                        reason,
                    },
                ))
            }
            Command::MetadataUpdate => {
                let (i, code) = response_code(i)?;
                let (i, stream) = wire::string(i)?;
                Ok((i, M::MetadataUpdate { code, stream }))
            }
            Command::PublishConfirm => {
                let (i, publisher_id) = u8(i)?;
                let (i, publishing_ids) = wire::array(i, u64)?;
                Ok((
                    i,
                    M::PublishConfirm {
                        publisher_id,
                        publishing_ids,
                    },
                ))
            }
            Command::PublishError => {
                let (i, publisher_id) = u8(i)?;
                let (i, errors) = wire::array(i, publishing_error)?;
                Ok((
                    i,
                    M::PublishError {
                        publisher_id,
                        errors,
                    },
                ))
            }
            Command::Deliver => {
                let (i, subscription_id) = u8(i)?;
                let (i, committed_chunk_id) = if version >= 2 {
                    u64(i).map(|(i, c)| (i, Some(c)))?
                } else {
                    (i, None)
                };
                let (i, chunk) = deliver_chunk(i, s)?;
                Ok((
                    i,
                    M::Deliver {
                        subscription_id,
                        committed_chunk_id,
                        chunk,
                    },
                ))
            }
            Command::ConsumerUpdate => {
                let (i, correlation_id) = u32(i)?;
                let (i, subscription_id) = u8(i)?;
                let (i, active) = u8(i)?;
                let active = match active {
                    0 => false,
                    1 => true,
                    _ => return wire::malformed("active is neither 0 nor 1"),
                };
                Ok((
                    i,
                    M::ConsumerUpdate {
                        correlation_id,
                        subscription_id,
                        active,
                    },
                ))
            }
            // RabbitMQ 3.10 answers these under the request key.
            Command::Route | Command::Partitions => {
                let (i, m) = Self::response_body(command, i, s)?;
                Ok((i, m.with_request_key()))
            }
            _ => wire::malformed(WRONG_DIRECTION),
        }
    }

    fn with_request_key(self) -> ServerMessage {
        match self {
            ServerMessage::RouteResponse {
                correlation_id,
                code,
                streams,
                ..
            } => ServerMessage::RouteResponse {
                correlation_id,
                code,
                streams,
                request_key: true,
            },
            ServerMessage::PartitionsResponse {
                correlation_id,
                code,
                streams,
                ..
            } => ServerMessage::PartitionsResponse {
                correlation_id,
                code,
                streams,
                request_key: true,
            },
            other => other,
        }
    }

    /// A response (response bit set).
    fn response_body<'a>(
        command: Command,
        i: &'a [u8],
        s: &Slicer<'_>,
    ) -> PResult<'a, ServerMessage> {
        use ServerMessage as M;
        if command == Command::Credit {
            let (i, code) = response_code(i)?;
            let (i, subscription_id) = wire::u8(i)?;
            return Ok((
                i,
                M::CreditResponse {
                    code,
                    subscription_id,
                },
            ));
        }
        if matches!(
            command,
            Command::Publish
                | Command::PublishConfirm
                | Command::PublishError
                | Command::Deliver
                | Command::StoreOffset
                | Command::MetadataUpdate
                | Command::Heartbeat
                | Command::Tune
                | Command::ConsumerUpdate
        ) {
            return wire::malformed(WRONG_DIRECTION);
        }
        let (i, correlation_id) = wire::u32(i)?;
        let c = correlation_id;
        if command == Command::Metadata {
            let (i, brokers) = wire::array(i, broker)?;
            let (i, streams) = wire::array(i, stream_metadata)?;
            return Ok((
                i,
                M::MetadataResponse {
                    correlation_id: c,
                    brokers,
                    streams,
                },
            ));
        }
        let (i, code) = response_code(i)?;
        match command {
            _ if code_only(command) => Ok((
                i,
                M::Response {
                    command,
                    correlation_id: c,
                    code,
                },
            )),
            Command::Close => Ok((
                i,
                M::CloseResponse {
                    correlation_id: c,
                    code,
                },
            )),
            Command::PeerProperties => {
                let (i, properties) = wire::properties(i)?;
                Ok((
                    i,
                    M::PeerPropertiesResponse {
                        correlation_id: c,
                        code,
                        properties,
                    },
                ))
            }
            Command::SaslHandshake => {
                let (i, mechanisms) = wire::strings(i)?;
                Ok((
                    i,
                    M::SaslHandshakeResponse {
                        correlation_id: c,
                        code,
                        mechanisms,
                    },
                ))
            }
            Command::SaslAuthenticate => {
                let (i, challenge) = challenge(i, s)?;
                Ok((
                    i,
                    M::SaslAuthenticateResponse {
                        correlation_id: c,
                        code,
                        challenge,
                    },
                ))
            }
            Command::Open => {
                let (i, properties) = optional_properties(i)?;
                Ok((
                    i,
                    M::OpenResponse {
                        correlation_id: c,
                        code,
                        properties,
                    },
                ))
            }
            Command::QueryPublisherSequence => {
                let (i, sequence) = wire::u64(i)?;
                Ok((
                    i,
                    M::QueryPublisherSequenceResponse {
                        correlation_id: c,
                        code,
                        sequence,
                    },
                ))
            }
            Command::QueryOffset => {
                let (i, offset) = wire::u64(i)?;
                Ok((
                    i,
                    M::QueryOffsetResponse {
                        correlation_id: c,
                        code,
                        offset,
                    },
                ))
            }
            Command::Route => {
                let (i, streams) = wire::strings(i)?;
                let m = M::RouteResponse {
                    correlation_id: c,
                    code,
                    streams,
                    request_key: false,
                };
                Ok((i, m))
            }
            Command::Partitions => {
                let (i, streams) = wire::strings(i)?;
                let m = M::PartitionsResponse {
                    correlation_id: c,
                    code,
                    streams,
                    request_key: false,
                };
                Ok((i, m))
            }
            Command::ExchangeCommandVersions => {
                let (i, commands) = wire::array(i, command_version)?;
                Ok((
                    i,
                    M::ExchangeCommandVersionsResponse {
                        correlation_id: c,
                        code,
                        commands,
                    },
                ))
            }
            Command::StreamStats => {
                let (i, stats) = wire::array(i, stat)?;
                Ok((
                    i,
                    M::StreamStatsResponse {
                        correlation_id: c,
                        code,
                        stats,
                    },
                ))
            }
            Command::ResolveOffsetSpec => {
                let (i, offset) = OffsetSpec::parse(i, false)?;
                Ok((
                    i,
                    M::ResolveOffsetSpecResponse {
                        correlation_id: c,
                        code,
                        offset,
                    },
                ))
            }
            _ => wire::malformed(WRONG_DIRECTION),
        }
    }
}

/// The reason parsers give for a command the server never sends this way;
/// [`ServerMessage::decode`] turns it into [`StreamFrameError::WrongDirection`].
const WRONG_DIRECTION: &str = "not sent by a server";

impl ServerMessage {
    /// Appends the message as one frame (size field included).
    pub fn encode(&self, buf: &mut BytesMut) {
        use ServerMessage as M;
        let command = self.command();
        if let M::Deliver {
            subscription_id,
            committed_chunk_id,
            chunk,
        } = self
        {
            encode_deliver_header(buf, *subscription_id, *committed_chunk_id, chunk.len());
            buf.put_slice(chunk);
            return;
        }
        let key = match self {
            M::Tune { .. }
            | M::Close { .. }
            | M::Heartbeat
            | M::MetadataUpdate { .. }
            | M::PublishConfirm { .. }
            | M::PublishError { .. }
            | M::ConsumerUpdate { .. }
            | M::RouteResponse {
                request_key: true, ..
            }
            | M::PartitionsResponse {
                request_key: true, ..
            } => command.key(),
            _ => command.response_key(),
        };
        let start = wire::begin_frame(buf, key, 1);
        self.encode_body(buf);
        wire::end_frame(buf, start);
    }

    fn encode_body(&self, buf: &mut BytesMut) {
        use ServerMessage as M;
        use wire::{put_string, put_strings};
        match self {
            M::PeerPropertiesResponse {
                correlation_id,
                code,
                properties,
            } => {
                put_head(buf, *correlation_id, *code);
                wire::put_properties(buf, properties);
            }
            M::SaslHandshakeResponse {
                correlation_id,
                code,
                mechanisms,
            } => {
                put_head(buf, *correlation_id, *code);
                put_strings(buf, mechanisms);
            }
            M::SaslAuthenticateResponse {
                correlation_id,
                code,
                challenge,
            } => {
                put_head(buf, *correlation_id, *code);
                if let Some(ch) = challenge {
                    let ch = &ch[..ch.len().min(usize::from(u16::MAX))];
                    buf.put_u16(ch.len() as u16);
                    buf.put_slice(ch);
                }
            }
            M::Tune {
                frame_max,
                heartbeat,
            } => {
                buf.put_u32(*frame_max);
                buf.put_u32(*heartbeat);
            }
            M::OpenResponse {
                correlation_id,
                code,
                properties,
            } => {
                put_head(buf, *correlation_id, *code);
                put_optional_properties(buf, properties);
            }
            M::Close {
                correlation_id,
                code,
                reason,
            } => {
                put_head(buf, *correlation_id, *code);
                put_string(buf, reason);
            }
            M::CloseResponse {
                correlation_id,
                code,
            }
            | M::Response {
                correlation_id,
                code,
                ..
            } => put_head(buf, *correlation_id, *code),
            M::Heartbeat | M::Deliver { .. } => {}
            M::QueryPublisherSequenceResponse {
                correlation_id,
                code,
                sequence: n,
            }
            | M::QueryOffsetResponse {
                correlation_id,
                code,
                offset: n,
            } => {
                put_head(buf, *correlation_id, *code);
                buf.put_u64(*n);
            }
            M::MetadataResponse {
                correlation_id,
                brokers,
                streams,
            } => {
                buf.put_u32(*correlation_id);
                wire::put_count(buf, brokers.len());
                for b in brokers {
                    buf.put_u16(b.reference);
                    put_string(buf, &b.host);
                    buf.put_u32(b.port);
                }
                wire::put_count(buf, streams.len());
                for m in streams {
                    put_string(buf, &m.name);
                    buf.put_u16(m.code.as_u16());
                    buf.put_u16(m.leader);
                    wire::put_count(buf, m.replicas.len());
                    for r in &m.replicas {
                        buf.put_u16(*r);
                    }
                }
            }
            M::MetadataUpdate { code, stream } => {
                buf.put_u16(code.as_u16());
                put_string(buf, stream);
            }
            M::PublishConfirm {
                publisher_id,
                publishing_ids,
            } => {
                buf.put_u8(*publisher_id);
                wire::put_count(buf, publishing_ids.len());
                for id in publishing_ids {
                    buf.put_u64(*id);
                }
            }
            M::PublishError {
                publisher_id,
                errors,
            } => {
                buf.put_u8(*publisher_id);
                wire::put_count(buf, errors.len());
                for e in errors {
                    buf.put_u64(e.publishing_id);
                    buf.put_u16(e.code.as_u16());
                }
            }
            M::CreditResponse {
                code,
                subscription_id,
            } => {
                buf.put_u16(code.as_u16());
                buf.put_u8(*subscription_id);
            }
            M::RouteResponse {
                correlation_id,
                code,
                streams,
                ..
            }
            | M::PartitionsResponse {
                correlation_id,
                code,
                streams,
                ..
            } => {
                put_head(buf, *correlation_id, *code);
                put_strings(buf, streams);
            }
            M::ConsumerUpdate {
                correlation_id,
                subscription_id,
                active,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u8(*subscription_id);
                buf.put_u8(u8::from(*active));
            }
            M::ExchangeCommandVersionsResponse {
                correlation_id,
                code,
                commands,
            } => {
                put_head(buf, *correlation_id, *code);
                put_command_versions(buf, commands);
            }
            M::StreamStatsResponse {
                correlation_id,
                code,
                stats,
            } => {
                put_head(buf, *correlation_id, *code);
                wire::put_count(buf, stats.len());
                for (k, v) in stats {
                    put_string(buf, k);
                    buf.put_i64(*v);
                }
            }
            M::ResolveOffsetSpecResponse {
                correlation_id,
                code,
                offset,
            } => {
                put_head(buf, *correlation_id, *code);
                offset.put(buf);
            }
        }
    }
}

/// A correlation id and a response code, the start of most responses.
fn put_head(buf: &mut BytesMut, correlation_id: u32, code: ResponseCode) {
    buf.put_u32(correlation_id);
    buf.put_u16(code.as_u16());
}
