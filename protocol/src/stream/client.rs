//! What a stream protocol client sends: its requests, its one-way commands
//! (publish, credit, store offset, heartbeat) and its answers to the server's
//! requests (tune, close, consumer update).
//!
//! The broker decodes these ([`ClientMessage::decode`]); the encoder is for
//! tests and tools that play the client.

use bytes::{BufMut, Bytes, BytesMut};

use super::chunk::Entry;
use super::code::ResponseCode;
use super::command::{Command, CommandVersion};
use super::error::StreamFrameError;
use super::frame::{FrameHeader, finish};
use super::types::{OffsetSpec, Properties, PublishedMessage, response_code};
use super::wire::{self, PResult, Slicer};

/// A frame from a client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // fields are named as the specification names them
pub enum ClientMessage {
    /// Peer properties: the first frame of a connection.
    PeerProperties {
        correlation_id: u32,
        properties: Properties,
    },
    /// Ask for the SASL mechanisms.
    SaslHandshake { correlation_id: u32 },
    /// A SASL response (`data` is null when the client sends none).
    SaslAuthenticate {
        correlation_id: u32,
        mechanism: String,
        data: Option<Bytes>,
    },
    /// The client's tune: the frame_max and heartbeat it settles on. `as_response`:
    /// the key had the response bit (the Java client's form; rstream sends the
    /// request key; RabbitMQ accepts both).
    Tune {
        frame_max: u32,
        heartbeat: u32,
        as_response: bool,
    },
    /// Open a virtual host.
    Open {
        correlation_id: u32,
        virtual_host: String,
    },
    /// The client closes the connection.
    Close {
        correlation_id: u32,
        code: u16,
        reason: String,
    },
    /// The client's answer to the server's close.
    CloseResponse {
        correlation_id: u32,
        code: ResponseCode,
    },
    /// Heartbeat.
    Heartbeat,
    /// Create a stream with arguments (`max-length-bytes`, `max-age`, ...).
    CreateStream {
        correlation_id: u32,
        stream: String,
        arguments: Properties,
    },
    /// Delete a stream.
    DeleteStream { correlation_id: u32, stream: String },
    /// Declare a publisher (`reference` empty: no deduplication).
    DeclarePublisher {
        correlation_id: u32,
        publisher_id: u8,
        reference: String,
        stream: String,
    },
    /// Delete a publisher.
    DeletePublisher {
        correlation_id: u32,
        publisher_id: u8,
    },
    /// Publish (version 1, or 2 with a filter value per message).
    Publish {
        version: u16,
        publisher_id: u8,
        messages: Vec<PublishedMessage>,
    },
    /// The last publishing id stored for a publisher reference on a stream.
    QueryPublisherSequence {
        correlation_id: u32,
        reference: String,
        stream: String,
    },
    /// Subscribe from an offset specification with an initial credit (chunks).
    /// `properties` is `None` when the frame ends before them (RabbitMQ's own
    /// form for none; rstream sends an empty array).
    Subscribe {
        correlation_id: u32,
        subscription_id: u8,
        stream: String,
        offset: OffsetSpec,
        credit: u16,
        properties: Option<Properties>,
    },
    /// Grant more chunks to a subscription.
    Credit { subscription_id: u8, credit: u16 },
    /// Store a consumer offset under a reference.
    StoreOffset {
        reference: String,
        stream: String,
        offset: u64,
    },
    /// Read the offset stored under a reference.
    QueryOffset {
        correlation_id: u32,
        reference: String,
        stream: String,
    },
    /// End a subscription.
    Unsubscribe {
        correlation_id: u32,
        subscription_id: u8,
    },
    /// Brokers, leaders and replicas of these streams.
    Metadata {
        correlation_id: u32,
        streams: Vec<String>,
    },
    /// The partitions of a super stream a routing key goes to.
    Route {
        correlation_id: u32,
        routing_key: String,
        super_stream: String,
    },
    /// The partitions of a super stream.
    Partitions {
        correlation_id: u32,
        super_stream: String,
    },
    /// The client's answer to a consumer update: where the now active
    /// consumer starts (`OffsetSpec::None`: where it was).
    ConsumerUpdateResponse {
        correlation_id: u32,
        code: ResponseCode,
        offset: OffsetSpec,
    },
    /// The command versions the client speaks.
    ExchangeCommandVersions {
        correlation_id: u32,
        commands: Vec<CommandVersion>,
    },
    /// A stream's statistics.
    StreamStats { correlation_id: u32, stream: String },
    /// Create a super stream: partitions, their binding keys, arguments.
    CreateSuperStream {
        correlation_id: u32,
        name: String,
        partitions: Vec<String>,
        binding_keys: Vec<String>,
        arguments: Properties,
    },
    /// Delete a super stream.
    DeleteSuperStream { correlation_id: u32, name: String },
    /// Resolve an offset specification to an offset (`properties` as in subscribe).
    ResolveOffsetSpec {
        correlation_id: u32,
        stream: String,
        offset: OffsetSpec,
        properties: Option<Properties>,
    },
}

/// A command version entry.
pub(crate) fn command_version(i: &[u8]) -> PResult<'_, CommandVersion> {
    let (i, key) = wire::u16(i)?;
    let (i, min_version) = wire::u16(i)?;
    let (i, max_version) = wire::u16(i)?;
    Ok((
        i,
        CommandVersion {
            key,
            min_version,
            max_version,
        },
    ))
}

/// Writes command version entries.
pub(crate) fn put_command_versions(buf: &mut BytesMut, commands: &[CommandVersion]) {
    wire::put_count(buf, commands.len());
    for c in commands {
        buf.put_u16(c.key);
        buf.put_u16(c.min_version);
        buf.put_u16(c.max_version);
    }
}

fn publish<'a>(i: &'a [u8], version: u16, s: &Slicer<'_>) -> PResult<'a, ClientMessage> {
    let (i, publisher_id) = wire::u8(i)?;
    let (i, messages) = wire::array(i, |i| {
        let (i, publishing_id) = wire::u64(i)?;
        let (i, filter_value) = if version >= 2 {
            wire::string(i).map(|(i, f)| (i, Some(f)))?
        } else {
            (i, None)
        };
        let (i, entry) = Entry::parse(i, s)?;
        Ok((
            i,
            PublishedMessage {
                publishing_id,
                filter_value,
                entry,
            },
        ))
    })?;
    Ok((
        i,
        ClientMessage::Publish {
            version,
            publisher_id,
            messages,
        },
    ))
}

/// Properties, or `None` if the frame ends where they would start.
fn maybe_properties(i: &[u8]) -> PResult<'_, Option<Properties>> {
    if i.is_empty() {
        Ok((i, None))
    } else {
        wire::properties(i).map(|(i, p)| (i, Some(p)))
    }
}

/// Whether a client sends this command with (`response`) or without the response bit.
fn sent_by_client(command: Command, response: bool) -> bool {
    match command {
        // Either key for tune (see ClientMessage::Tune); close both ways.
        Command::Tune | Command::Close => true,
        Command::ConsumerUpdate => response,
        Command::PublishConfirm
        | Command::PublishError
        | Command::Deliver
        | Command::MetadataUpdate => false,
        _ => !response,
    }
}

/// The consumer update answer's offset: RabbitMQ reads no value after types
/// 0-3, but rstream always writes 8 bytes; they are accepted and dropped.
fn consumer_update_offset(i: &[u8]) -> PResult<'_, OffsetSpec> {
    let (i, spec) = OffsetSpec::parse(i, true)?;
    match spec {
        OffsetSpec::Offset(_) | OffsetSpec::Timestamp(_) => Ok((i, spec)),
        _ if i.len() == 8 => Ok((&i[8..], spec)),
        _ => Ok((i, spec)),
    }
}

impl ClientMessage {
    /// The command of the message.
    pub fn command(&self) -> Command {
        use ClientMessage as M;
        match self {
            M::PeerProperties { .. } => Command::PeerProperties,
            M::SaslHandshake { .. } => Command::SaslHandshake,
            M::SaslAuthenticate { .. } => Command::SaslAuthenticate,
            M::Tune { .. } => Command::Tune,
            M::Open { .. } => Command::Open,
            M::Close { .. } | M::CloseResponse { .. } => Command::Close,
            M::Heartbeat => Command::Heartbeat,
            M::CreateStream { .. } => Command::CreateStream,
            M::DeleteStream { .. } => Command::DeleteStream,
            M::DeclarePublisher { .. } => Command::DeclarePublisher,
            M::DeletePublisher { .. } => Command::DeletePublisher,
            M::Publish { .. } => Command::Publish,
            M::QueryPublisherSequence { .. } => Command::QueryPublisherSequence,
            M::Subscribe { .. } => Command::Subscribe,
            M::Credit { .. } => Command::Credit,
            M::StoreOffset { .. } => Command::StoreOffset,
            M::QueryOffset { .. } => Command::QueryOffset,
            M::Unsubscribe { .. } => Command::Unsubscribe,
            M::Metadata { .. } => Command::Metadata,
            M::Route { .. } => Command::Route,
            M::Partitions { .. } => Command::Partitions,
            M::ConsumerUpdateResponse { .. } => Command::ConsumerUpdate,
            M::ExchangeCommandVersions { .. } => Command::ExchangeCommandVersions,
            M::StreamStats { .. } => Command::StreamStats,
            M::CreateSuperStream { .. } => Command::CreateSuperStream,
            M::DeleteSuperStream { .. } => Command::DeleteSuperStream,
            M::ResolveOffsetSpec { .. } => Command::ResolveOffsetSpec,
        }
    }

    /// Decodes a frame (as [`split_frame`](super::split_frame) returns it) sent by a client.
    pub fn decode(frame: &Bytes) -> Result<ClientMessage, StreamFrameError> {
        let header = FrameHeader::read(frame)?;
        let command = header.command()?;
        let body = &frame[4..];
        let s = Slicer(frame);
        if !sent_by_client(command, header.is_response()) {
            return Err(StreamFrameError::WrongDirection {
                command,
                key: header.key,
                sender: "client",
            });
        }
        if header.is_response() {
            return finish(command, Self::response_body(command, body));
        }
        finish(
            command,
            Self::request_body(command, header.version, body, &s),
        )
    }

    /// A client's answer to one of the server's requests.
    fn response_body(command: Command, i: &[u8]) -> PResult<'_, ClientMessage> {
        use ClientMessage as M;
        match command {
            Command::Tune => {
                let (i, frame_max) = wire::u32(i)?;
                let (i, heartbeat) = wire::u32(i)?;
                Ok((
                    i,
                    M::Tune {
                        frame_max,
                        heartbeat,
                        as_response: true,
                    },
                ))
            }
            Command::Close => {
                let (i, correlation_id) = wire::u32(i)?;
                let (i, code) = response_code(i)?;
                Ok((
                    i,
                    M::CloseResponse {
                        correlation_id,
                        code,
                    },
                ))
            }
            Command::ConsumerUpdate => {
                let (i, correlation_id) = wire::u32(i)?;
                let (i, code) = response_code(i)?;
                let (i, offset) = consumer_update_offset(i)?;
                Ok((
                    i,
                    M::ConsumerUpdateResponse {
                        correlation_id,
                        code,
                        offset,
                    },
                ))
            }
            _ => wire::malformed("a response the client never sends"),
        }
    }

    fn request_body<'a>(
        command: Command,
        version: u16,
        i: &'a [u8],
        s: &Slicer<'_>,
    ) -> PResult<'a, ClientMessage> {
        use ClientMessage as M;
        use wire::{string, u8, u16, u32, u64};
        if command == Command::Publish {
            return publish(i, version, s);
        }
        if command == Command::Credit {
            let (i, subscription_id) = u8(i)?;
            let (i, credit) = u16(i)?;
            return Ok((
                i,
                M::Credit {
                    subscription_id,
                    credit,
                },
            ));
        }
        if command == Command::StoreOffset {
            let (i, reference) = string(i)?;
            let (i, stream) = string(i)?;
            let (i, offset) = u64(i)?;
            return Ok((
                i,
                M::StoreOffset {
                    reference,
                    stream,
                    offset,
                },
            ));
        }
        if command == Command::Heartbeat {
            return Ok((i, M::Heartbeat));
        }
        if command == Command::Tune {
            let (i, frame_max) = u32(i)?;
            let (i, heartbeat) = u32(i)?;
            return Ok((
                i,
                M::Tune {
                    frame_max,
                    heartbeat,
                    as_response: false,
                },
            ));
        }
        let (i, correlation_id) = u32(i)?;
        let c = correlation_id;
        match command {
            Command::PeerProperties => {
                let (i, properties) = wire::properties(i)?;
                Ok((
                    i,
                    M::PeerProperties {
                        correlation_id: c,
                        properties,
                    },
                ))
            }
            Command::SaslHandshake => Ok((i, M::SaslHandshake { correlation_id: c })),
            Command::SaslAuthenticate => {
                let (i, mechanism) = string(i)?;
                let (i, data) = wire::nullable_bytes(i)?;
                let data = data.map(|d| s.bytes(d));
                Ok((
                    i,
                    M::SaslAuthenticate {
                        correlation_id: c,
                        mechanism,
                        data,
                    },
                ))
            }
            Command::Open => {
                let (i, virtual_host) = string(i)?;
                Ok((
                    i,
                    M::Open {
                        correlation_id: c,
                        virtual_host,
                    },
                ))
            }
            Command::Close => {
                let (i, code) = u16(i)?;
                let (i, reason) = string(i)?;
                Ok((
                    i,
                    M::Close {
                        correlation_id: c,
                        code,
                        reason,
                    },
                ))
            }
            Command::CreateStream => {
                let (i, stream) = string(i)?;
                let (i, arguments) = wire::properties(i)?;
                Ok((
                    i,
                    M::CreateStream {
                        correlation_id: c,
                        stream,
                        arguments,
                    },
                ))
            }
            Command::DeleteStream => {
                let (i, stream) = string(i)?;
                Ok((
                    i,
                    M::DeleteStream {
                        correlation_id: c,
                        stream,
                    },
                ))
            }
            Command::DeclarePublisher => {
                let (i, publisher_id) = u8(i)?;
                let (i, reference) = string(i)?;
                let (i, stream) = string(i)?;
                Ok((
                    i,
                    M::DeclarePublisher {
                        correlation_id: c,
                        publisher_id,
                        reference,
                        stream,
                    },
                ))
            }
            Command::DeletePublisher => {
                let (i, publisher_id) = u8(i)?;
                Ok((
                    i,
                    M::DeletePublisher {
                        correlation_id: c,
                        publisher_id,
                    },
                ))
            }
            Command::QueryPublisherSequence => {
                let (i, reference) = string(i)?;
                let (i, stream) = string(i)?;
                Ok((
                    i,
                    M::QueryPublisherSequence {
                        correlation_id: c,
                        reference,
                        stream,
                    },
                ))
            }
            Command::Subscribe => {
                let (i, subscription_id) = u8(i)?;
                let (i, stream) = string(i)?;
                let (i, offset) = OffsetSpec::parse(i, false)?;
                let (i, credit) = u16(i)?;
                let (i, properties) = maybe_properties(i)?;
                let m = M::Subscribe {
                    correlation_id: c,
                    subscription_id,
                    stream,
                    offset,
                    credit,
                    properties,
                };
                Ok((i, m))
            }
            Command::QueryOffset => {
                let (i, reference) = string(i)?;
                let (i, stream) = string(i)?;
                Ok((
                    i,
                    M::QueryOffset {
                        correlation_id: c,
                        reference,
                        stream,
                    },
                ))
            }
            Command::Unsubscribe => {
                let (i, subscription_id) = u8(i)?;
                Ok((
                    i,
                    M::Unsubscribe {
                        correlation_id: c,
                        subscription_id,
                    },
                ))
            }
            Command::Metadata => {
                let (i, streams) = wire::strings(i)?;
                Ok((
                    i,
                    M::Metadata {
                        correlation_id: c,
                        streams,
                    },
                ))
            }
            Command::Route => {
                let (i, routing_key) = string(i)?;
                let (i, super_stream) = string(i)?;
                Ok((
                    i,
                    M::Route {
                        correlation_id: c,
                        routing_key,
                        super_stream,
                    },
                ))
            }
            Command::Partitions => {
                let (i, super_stream) = string(i)?;
                Ok((
                    i,
                    M::Partitions {
                        correlation_id: c,
                        super_stream,
                    },
                ))
            }
            Command::ExchangeCommandVersions => {
                let (i, commands) = wire::array(i, command_version)?;
                Ok((
                    i,
                    M::ExchangeCommandVersions {
                        correlation_id: c,
                        commands,
                    },
                ))
            }
            Command::StreamStats => {
                let (i, stream) = string(i)?;
                Ok((
                    i,
                    M::StreamStats {
                        correlation_id: c,
                        stream,
                    },
                ))
            }
            Command::CreateSuperStream => {
                let (i, name) = string(i)?;
                let (i, partitions) = wire::strings(i)?;
                let (i, binding_keys) = wire::strings(i)?;
                let (i, arguments) = wire::properties(i)?;
                let m = M::CreateSuperStream {
                    correlation_id: c,
                    name,
                    partitions,
                    binding_keys,
                    arguments,
                };
                Ok((i, m))
            }
            Command::DeleteSuperStream => {
                let (i, name) = string(i)?;
                Ok((
                    i,
                    M::DeleteSuperStream {
                        correlation_id: c,
                        name,
                    },
                ))
            }
            Command::ResolveOffsetSpec => {
                let (i, stream) = string(i)?;
                let (i, offset) = OffsetSpec::parse(i, false)?;
                let (i, properties) = maybe_properties(i)?;
                Ok((
                    i,
                    M::ResolveOffsetSpec {
                        correlation_id: c,
                        stream,
                        offset,
                        properties,
                    },
                ))
            }
            // Sent only by the server (or handled above).
            _ => wire::malformed("a request the client never sends"),
        }
    }
}

impl ClientMessage {
    /// Appends the message as one frame (size field included).
    pub fn encode(&self, buf: &mut BytesMut) {
        use ClientMessage as M;
        use wire::{put_properties, put_string, put_strings};
        let command = self.command();
        let (key, version) = match self {
            M::Tune {
                as_response: true, ..
            }
            | M::CloseResponse { .. }
            | M::ConsumerUpdateResponse { .. } => (command.response_key(), 1),
            M::Publish { version, .. } => (command.key(), *version),
            _ => (command.key(), 1),
        };
        let start = wire::begin_frame(buf, key, version);
        match self {
            M::PeerProperties {
                correlation_id,
                properties,
            } => {
                buf.put_u32(*correlation_id);
                put_properties(buf, properties);
            }
            M::SaslHandshake { correlation_id } => buf.put_u32(*correlation_id),
            M::SaslAuthenticate {
                correlation_id,
                mechanism,
                data,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, mechanism);
                wire::put_nullable_bytes(buf, data.as_deref());
            }
            M::Tune {
                frame_max,
                heartbeat,
                ..
            } => {
                buf.put_u32(*frame_max);
                buf.put_u32(*heartbeat);
            }
            M::Open {
                correlation_id,
                virtual_host,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, virtual_host);
            }
            M::Close {
                correlation_id,
                code,
                reason,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u16(*code);
                put_string(buf, reason);
            }
            M::CloseResponse {
                correlation_id,
                code,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u16(code.as_u16());
            }
            M::Heartbeat => {}
            M::CreateStream {
                correlation_id,
                stream,
                arguments,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, stream);
                put_properties(buf, arguments);
            }
            M::DeleteStream {
                correlation_id,
                stream,
            }
            | M::StreamStats {
                correlation_id,
                stream,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, stream);
            }
            M::DeclarePublisher {
                correlation_id,
                publisher_id,
                reference,
                stream,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u8(*publisher_id);
                put_string(buf, reference);
                put_string(buf, stream);
            }
            M::DeletePublisher {
                correlation_id,
                publisher_id,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u8(*publisher_id);
            }
            M::Publish {
                version,
                publisher_id,
                messages,
            } => {
                buf.put_u8(*publisher_id);
                wire::put_count(buf, messages.len());
                for m in messages {
                    buf.put_u64(m.publishing_id);
                    if *version >= 2 {
                        put_string(buf, m.filter_value.as_deref().unwrap_or(""));
                    }
                    m.entry.put(buf);
                }
            }
            M::QueryPublisherSequence {
                correlation_id,
                reference,
                stream,
            }
            | M::QueryOffset {
                correlation_id,
                reference,
                stream,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, reference);
                put_string(buf, stream);
            }
            M::Subscribe {
                correlation_id,
                subscription_id,
                stream,
                offset,
                credit,
                properties,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u8(*subscription_id);
                put_string(buf, stream);
                offset.put(buf);
                buf.put_u16(*credit);
                if let Some(p) = properties {
                    put_properties(buf, p);
                }
            }
            M::Credit {
                subscription_id,
                credit,
            } => {
                buf.put_u8(*subscription_id);
                buf.put_u16(*credit);
            }
            M::StoreOffset {
                reference,
                stream,
                offset,
            } => {
                put_string(buf, reference);
                put_string(buf, stream);
                buf.put_u64(*offset);
            }
            M::Unsubscribe {
                correlation_id,
                subscription_id,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u8(*subscription_id);
            }
            M::Metadata {
                correlation_id,
                streams,
            } => {
                buf.put_u32(*correlation_id);
                put_strings(buf, streams);
            }
            M::Route {
                correlation_id,
                routing_key,
                super_stream,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, routing_key);
                put_string(buf, super_stream);
            }
            M::Partitions {
                correlation_id,
                super_stream: name,
            }
            | M::DeleteSuperStream {
                correlation_id,
                name,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, name);
            }
            M::ConsumerUpdateResponse {
                correlation_id,
                code,
                offset,
            } => {
                buf.put_u32(*correlation_id);
                buf.put_u16(code.as_u16());
                offset.put(buf);
            }
            M::ExchangeCommandVersions {
                correlation_id,
                commands,
            } => {
                buf.put_u32(*correlation_id);
                put_command_versions(buf, commands);
            }
            M::CreateSuperStream {
                correlation_id,
                name,
                partitions,
                binding_keys,
                arguments,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, name);
                put_strings(buf, partitions);
                put_strings(buf, binding_keys);
                put_properties(buf, arguments);
            }
            M::ResolveOffsetSpec {
                correlation_id,
                stream,
                offset,
                properties,
            } => {
                buf.put_u32(*correlation_id);
                put_string(buf, stream);
                offset.put(buf);
                if let Some(p) = properties {
                    put_properties(buf, p);
                }
            }
        }
        wire::end_frame(buf, start);
    }
}
