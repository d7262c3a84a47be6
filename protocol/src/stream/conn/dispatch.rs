//! After open: the client's frames, the requests the broker answers, and the
//! encoding of those answers under the client's correlation ids.
//!
//! A request is handed to the broker ([`Action::Request`]) and remembered by
//! its correlation id with the shape of its response. The broker's
//! [`Reply`] is encoded in that shape; a reply of the wrong kind is answered
//! as an internal error (0x0f), and a reply to no pending request is dropped.
//! A correlation id the client reuses while its first request is pending is
//! answered precondition failed (0x11) at once.

use std::time::Instant;

use super::{Action, CloseReason, Phase, Reply, Request, StreamConnection};
use crate::stream::client::ClientMessage;
use crate::stream::code::ResponseCode;
use crate::stream::command::{Command, supported_versions};
use crate::stream::server::ServerMessage;
use crate::stream::types::OffsetSpec;

/// The shape of the response a pending request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Pending {
    /// A code-only response under this command's key.
    Code(Command),
    /// Delete stream: on OK, the connection forgets the stream.
    DeleteStream(String),
    /// Declare publisher: on OK, the publisher is declared.
    DeclarePublisher(u8),
    /// Subscribe: on OK, the subscription starts.
    Subscribe(u8),
    Metadata,
    QueryOffset,
    QueryPublisherSequence,
    Route,
    Partitions,
    StreamStats,
    ResolveOffsetSpec,
}

impl StreamConnection {
    /// A frame while open.
    pub(super) fn on_open_message(&mut self, msg: ClientMessage, now: Instant) {
        use ClientMessage as C;
        match msg {
            C::Heartbeat => {}
            C::Close {
                correlation_id,
                code,
                reason,
            } => {
                let answer = ServerMessage::CloseResponse {
                    correlation_id,
                    code: ResponseCode::Ok,
                };
                self.send(&answer, now);
                self.close_now(CloseReason::ClientClosed { code, reason });
            }
            C::ExchangeCommandVersions {
                correlation_id,
                commands,
            } => {
                self.deliver_v2 = commands
                    .iter()
                    .any(|c| c.key == Command::Deliver.key() && c.max_version >= 2);
                let answer = ServerMessage::ExchangeCommandVersionsResponse {
                    correlation_id,
                    code: ResponseCode::Ok,
                    commands: supported_versions(),
                };
                self.send(&answer, now);
            }
            C::ConsumerUpdateResponse {
                correlation_id,
                code,
                offset,
            } => {
                // An answer to no request of ours is ignored, as RabbitMQ does.
                if let Some(subscription_id) = self.consumer_updates.remove(&correlation_id) {
                    self.push(Action::ConsumerUpdateAnswered {
                        subscription_id,
                        code,
                        offset,
                    });
                }
            }
            C::StoreOffset {
                reference,
                stream,
                offset,
            } => {
                // RabbitMQ drops a store with a reference over 255 bytes.
                if reference.len() <= 255 {
                    self.push(Action::StoreOffset {
                        reference,
                        stream,
                        offset,
                    });
                }
            }
            other => self.on_open_request(other, now),
        }
    }

    /// Publishers, subscriptions and the requests the broker answers.
    fn on_open_request(&mut self, msg: ClientMessage, now: Instant) {
        use ClientMessage as C;
        match msg {
            C::DeclarePublisher {
                correlation_id,
                publisher_id,
                reference,
                stream,
            } => self.on_declare_publisher(correlation_id, publisher_id, reference, stream, now),
            C::DeletePublisher {
                correlation_id,
                publisher_id,
            } => self.on_delete_publisher(correlation_id, publisher_id, now),
            C::Publish {
                version,
                publisher_id,
                messages,
            } => self.on_publish(version, publisher_id, messages, now),
            C::Subscribe {
                correlation_id,
                subscription_id,
                stream,
                offset,
                credit,
                properties,
            } => {
                let properties = properties.unwrap_or_default();
                let sub = (subscription_id, stream, offset, credit, properties);
                self.on_subscribe(correlation_id, sub, now);
            }
            C::Unsubscribe {
                correlation_id,
                subscription_id,
            } => self.on_unsubscribe(correlation_id, subscription_id, now),
            C::Credit {
                subscription_id,
                credit,
            } => self.on_credit(subscription_id, credit, now),
            other => match broker_request(other) {
                Ok((correlation_id, request, pending)) => {
                    self.request(correlation_id, request, pending, now);
                }
                // A handshake command or an answer we did not ask for:
                // RabbitMQ closes with unknown frame.
                Err(_) => self.send_close(
                    ResponseCode::UnknownFrame,
                    ResponseCode::UnknownFrame.description(),
                    now,
                ),
            },
        }
    }

    /// Hands a request to the broker, remembering the shape of its answer.
    pub(super) fn request(
        &mut self,
        correlation_id: u32,
        request: Request,
        pending: Pending,
        now: Instant,
    ) {
        if self.pending.contains_key(&correlation_id) {
            let answer = refusal(correlation_id, &pending, ResponseCode::PreconditionFailed);
            self.send(&answer, now);
            return;
        }
        self.pending.insert(correlation_id, pending);
        self.push(Action::Request {
            correlation_id,
            request,
        });
    }

    /// The broker's answer to a request.
    pub(super) fn on_reply(&mut self, correlation_id: u32, reply: Reply, now: Instant) {
        let Some(pending) = self.pending.remove(&correlation_id) else {
            return;
        };
        match (&pending, &reply) {
            (Pending::DeclarePublisher(id), Reply::Code(code)) => {
                self.on_publisher_declared(*id, *code);
            }
            (Pending::Subscribe(id), Reply::Code(code)) => {
                // The answer goes first, then any chunk queued meanwhile.
                let answer = response(correlation_id, &pending, reply.clone());
                self.send(&answer, now);
                self.on_subscribed(*id, *code, now);
                return;
            }
            (Pending::DeleteStream(stream), Reply::Code(ResponseCode::Ok)) => {
                let stream = stream.clone();
                let answer = response(correlation_id, &pending, reply);
                self.send(&answer, now);
                self.on_stream_gone(&stream, ResponseCode::StreamNotAvailable, now);
                return;
            }
            (Pending::DeclarePublisher(id), _) => self.on_publisher_declared(*id, reply.code()),
            (Pending::Subscribe(id), _) => {
                self.on_subscribed(*id, ResponseCode::InternalError, now)
            }
            _ => {}
        }
        let answer = response(correlation_id, &pending, reply);
        self.send(&answer, now);
    }

    /// A frame while the server's close awaits its answer.
    pub(super) fn on_close_sent_message(
        &mut self,
        msg: ClientMessage,
        code: ResponseCode,
        now: Instant,
    ) {
        match msg {
            ClientMessage::CloseResponse { .. } => {
                self.close_now(CloseReason::ServerClosed {
                    code,
                    answered: true,
                });
            }
            // Both sides closing at once: answer and end.
            ClientMessage::Close {
                correlation_id,
                code: client_code,
                reason,
            } => {
                let answer = ServerMessage::CloseResponse {
                    correlation_id,
                    code: ResponseCode::Ok,
                };
                self.send(&answer, now);
                self.close_now(CloseReason::ClientClosed {
                    code: client_code,
                    reason,
                });
            }
            // RabbitMQ ignores everything else in close_sent.
            _ => {}
        }
    }

    /// Sends the server's close and waits for its answer (RabbitMQ's
    /// correlation id for a server close is 1).
    pub(super) fn send_close(&mut self, code: ResponseCode, reason: &str, now: Instant) {
        let close = ServerMessage::Close {
            correlation_id: 1,
            code,
            reason: reason.to_owned(),
        };
        self.send(&close, now);
        self.phase = Phase::CloseSent {
            code,
            deadline: now + self.config.close_timeout,
        };
    }
}

/// A client request the broker answers, as the broker sees it. `Err`: the
/// message is not such a request.
#[allow(clippy::result_large_err)] // the message is handed back as it came
fn broker_request(msg: ClientMessage) -> Result<(u32, Request, Pending), ClientMessage> {
    use ClientMessage as C;
    Ok(match msg {
        C::CreateStream {
            correlation_id,
            stream,
            arguments,
        } => (
            correlation_id,
            Request::CreateStream { stream, arguments },
            Pending::Code(Command::CreateStream),
        ),
        C::DeleteStream {
            correlation_id,
            stream,
        } => (
            correlation_id,
            Request::DeleteStream {
                stream: stream.clone(),
            },
            Pending::DeleteStream(stream),
        ),
        C::CreateSuperStream {
            correlation_id,
            name,
            partitions,
            binding_keys,
            arguments,
        } => (
            correlation_id,
            Request::CreateSuperStream {
                name,
                partitions,
                binding_keys,
                arguments,
            },
            Pending::Code(Command::CreateSuperStream),
        ),
        C::DeleteSuperStream {
            correlation_id,
            name,
        } => (
            correlation_id,
            Request::DeleteSuperStream { name },
            Pending::Code(Command::DeleteSuperStream),
        ),
        other => return query_request(other),
    })
}

/// The read-only requests.
#[allow(clippy::result_large_err)] // the message is handed back as it came
fn query_request(msg: ClientMessage) -> Result<(u32, Request, Pending), ClientMessage> {
    use ClientMessage as C;
    Ok(match msg {
        C::Metadata {
            correlation_id,
            streams,
        } => (
            correlation_id,
            Request::Metadata { streams },
            Pending::Metadata,
        ),
        C::QueryOffset {
            correlation_id,
            reference,
            stream,
        } => (
            correlation_id,
            Request::QueryOffset { reference, stream },
            Pending::QueryOffset,
        ),
        C::QueryPublisherSequence {
            correlation_id,
            reference,
            stream,
        } => (
            correlation_id,
            Request::QueryPublisherSequence { reference, stream },
            Pending::QueryPublisherSequence,
        ),
        C::Route {
            correlation_id,
            routing_key,
            super_stream,
        } => (
            correlation_id,
            Request::Route {
                routing_key,
                super_stream,
            },
            Pending::Route,
        ),
        C::Partitions {
            correlation_id,
            super_stream,
        } => (
            correlation_id,
            Request::Partitions { super_stream },
            Pending::Partitions,
        ),
        C::StreamStats {
            correlation_id,
            stream,
        } => (
            correlation_id,
            Request::StreamStats { stream },
            Pending::StreamStats,
        ),
        C::ResolveOffsetSpec {
            correlation_id,
            stream,
            offset,
            properties,
        } => (
            correlation_id,
            Request::ResolveOffsetSpec {
                stream,
                offset,
                properties,
            },
            Pending::ResolveOffsetSpec,
        ),
        other => return Err(other),
    })
}

/// The response frame for a pending request and the broker's reply; a reply
/// of another kind is answered as an internal error.
pub(super) fn response(correlation_id: u32, pending: &Pending, reply: Reply) -> ServerMessage {
    use ServerMessage as M;
    match (pending, reply) {
        (Pending::Metadata, Reply::Metadata { brokers, streams }) => M::MetadataResponse {
            correlation_id,
            brokers,
            streams,
        },
        (Pending::QueryOffset, Reply::Offset { code, offset }) => M::QueryOffsetResponse {
            correlation_id,
            code,
            offset,
        },
        (Pending::ResolveOffsetSpec, Reply::Offset { code, offset }) => {
            M::ResolveOffsetSpecResponse {
                correlation_id,
                code,
                offset: OffsetSpec::Offset(offset),
            }
        }
        (Pending::QueryPublisherSequence, Reply::Sequence { code, sequence }) => {
            M::QueryPublisherSequenceResponse {
                correlation_id,
                code,
                sequence,
            }
        }
        (Pending::Route, Reply::Streams { code, streams }) => M::RouteResponse {
            correlation_id,
            code,
            streams,
            request_key: false,
        },
        (Pending::Partitions, Reply::Streams { code, streams }) => M::PartitionsResponse {
            correlation_id,
            code,
            streams,
            request_key: false,
        },
        (Pending::StreamStats, Reply::Stats { code, stats }) => M::StreamStatsResponse {
            correlation_id,
            code,
            stats,
        },
        (
            Pending::Code(_)
            | Pending::DeleteStream(_)
            | Pending::DeclarePublisher(_)
            | Pending::Subscribe(_),
            Reply::Code(code),
        ) => refusal(correlation_id, pending, code),
        (pending, _) => refusal(correlation_id, pending, ResponseCode::InternalError),
    }
}

/// A pending request's response carrying only `code` (empty values).
pub(super) fn refusal(correlation_id: u32, pending: &Pending, code: ResponseCode) -> ServerMessage {
    use ServerMessage as M;
    let command = match pending {
        Pending::Code(command) => *command,
        Pending::DeleteStream(_) => Command::DeleteStream,
        Pending::DeclarePublisher(_) => Command::DeclarePublisher,
        Pending::Subscribe(_) => Command::Subscribe,
        Pending::Metadata => {
            // Metadata has no code of its own: no brokers, no streams.
            return M::MetadataResponse {
                correlation_id,
                brokers: Vec::new(),
                streams: Vec::new(),
            };
        }
        Pending::QueryOffset => {
            return M::QueryOffsetResponse {
                correlation_id,
                code,
                offset: 0,
            };
        }
        Pending::ResolveOffsetSpec => {
            return M::ResolveOffsetSpecResponse {
                correlation_id,
                code,
                offset: OffsetSpec::Offset(0),
            };
        }
        Pending::QueryPublisherSequence => {
            return M::QueryPublisherSequenceResponse {
                correlation_id,
                code,
                sequence: 0,
            };
        }
        Pending::Route | Pending::Partitions => {
            let streams = Vec::new();
            return if *pending == Pending::Route {
                M::RouteResponse {
                    correlation_id,
                    code,
                    streams,
                    request_key: false,
                }
            } else {
                M::PartitionsResponse {
                    correlation_id,
                    code,
                    streams,
                    request_key: false,
                }
            };
        }
        Pending::StreamStats => {
            return M::StreamStatsResponse {
                correlation_id,
                code,
                stats: Vec::new(),
            };
        }
    };
    M::Response {
        command,
        correlation_id,
        code,
    }
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;
