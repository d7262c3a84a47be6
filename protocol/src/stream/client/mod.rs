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
            wire::nullable_string(i)?
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

mod decode;
mod encode;
