//! Decoding the messages a server sends: a frame into its typed message.

use super::*;

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

    /// Decodes a frame (as [`split_frame`](crate::stream::split_frame) returns it) sent by a server.
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
            Command::Deliver => deliver(i, version, s),
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

    /// A response (response bit set): those without a code (credit,
    /// metadata) here, the rest in [`Self::coded_response`].
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
        Self::coded_response(command, c, code, i, s)
    }

    /// A response after its correlation id `c` and its code.
    ///
    /// One piece on purpose: a dispatcher whose arms each decode one
    /// response's fields in wire order, next to the message they build;
    /// splitting it would only scatter the wire format.
    fn coded_response<'a>(
        command: Command,
        c: u32,
        code: ResponseCode,
        i: &'a [u8],
        s: &Slicer<'_>,
    ) -> PResult<'a, ServerMessage> {
        use ServerMessage as M;
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

/// A deliver: the subscription, the committed chunk id (version 2 on), then
/// the chunk.
fn deliver<'a>(i: &'a [u8], version: u16, s: &Slicer<'_>) -> PResult<'a, ServerMessage> {
    let (i, subscription_id) = wire::u8(i)?;
    let (i, committed_chunk_id) = if version >= 2 {
        wire::u64(i).map(|(i, c)| (i, Some(c)))?
    } else {
        (i, None)
    };
    let (i, chunk) = deliver_chunk(i, s)?;
    Ok((
        i,
        ServerMessage::Deliver {
            subscription_id,
            committed_chunk_id,
            chunk,
        },
    ))
}

/// The reason parsers give for a command the server never sends this way;
/// [`ServerMessage::decode`] turns it into [`StreamFrameError::WrongDirection`].
const WRONG_DIRECTION: &str = "not sent by a server";
