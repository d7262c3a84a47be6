//! Decoding the messages a client sends: a frame into its typed message.

use super::*;

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

    /// Decodes a frame (as [`split_frame`](crate::stream::split_frame) returns it) sent by a client.
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

    /// A client's request or one-way command: the one-way commands (no
    /// correlation id; publish, credit and store offset are the busy ones)
    /// here, the requests in [`Self::correlated_request`].
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
        Self::correlated_request(command, correlation_id, i, s)
    }

    /// A client's request after its correlation id `c`.
    ///
    /// One piece on purpose: a dispatcher whose arms each decode one
    /// request's fields in wire order, next to the message they build;
    /// splitting it would only scatter the wire format.
    fn correlated_request<'a>(
        command: Command,
        c: u32,
        i: &'a [u8],
        s: &Slicer<'_>,
    ) -> PResult<'a, ClientMessage> {
        use ClientMessage as M;
        use wire::{string, u8, u16};
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
