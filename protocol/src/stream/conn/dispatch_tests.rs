//! Unit tests of dispatch.rs: requests, replies, close and faults after open.

use super::super::testing::*;
use super::super::{Action, CloseReason, Input, Reply, Request};
use super::*;
use crate::stream::command::CommandVersion;
use crate::stream::types::{Broker, StreamMetadata};

fn metadata(correlation_id: u32) -> ClientMessage {
    ClientMessage::Metadata {
        correlation_id,
        streams: vec!["s".into()],
    }
}

#[test]
fn requests_go_to_the_broker_and_replies_come_back_encoded() {
    let (mut conn, t0) = opened();
    assert_eq!(
        feed(&mut conn, &[metadata(5)], t0),
        vec![Seen::Do(Action::Request {
            correlation_id: 5,
            request: Request::Metadata {
                streams: vec!["s".into()]
            },
        })]
    );
    let brokers = vec![Broker {
        reference: 0,
        host: "h".into(),
        port: 5552,
    }];
    let streams = vec![StreamMetadata {
        name: "s".into(),
        code: ResponseCode::Ok,
        leader: 0,
        replicas: vec![],
    }];
    let reply = Reply::Metadata {
        brokers: brokers.clone(),
        streams: streams.clone(),
    };
    assert_eq!(
        input(
            &mut conn,
            Input::Reply {
                correlation_id: 5,
                reply: reply.clone()
            },
            t0
        ),
        vec![Seen::Sent(ServerMessage::MetadataResponse {
            correlation_id: 5,
            brokers,
            streams,
        })]
    );
    // A second reply to the same id has no request left: dropped.
    assert!(
        input(
            &mut conn,
            Input::Reply {
                correlation_id: 5,
                reply
            },
            t0
        )
        .is_empty()
    );
}

#[test]
fn every_reply_kind_is_encoded_in_its_responses_shape() {
    let (mut conn, t0) = opened();
    let s = || "s".to_owned();
    let requests = [
        ClientMessage::CreateStream {
            correlation_id: 10,
            stream: s(),
            arguments: vec![],
        },
        ClientMessage::QueryOffset {
            correlation_id: 11,
            reference: "r".into(),
            stream: s(),
        },
        ClientMessage::QueryPublisherSequence {
            correlation_id: 12,
            reference: "r".into(),
            stream: s(),
        },
        ClientMessage::Route {
            correlation_id: 13,
            routing_key: "k".into(),
            super_stream: s(),
        },
        ClientMessage::Partitions {
            correlation_id: 14,
            super_stream: s(),
        },
        ClientMessage::StreamStats {
            correlation_id: 15,
            stream: s(),
        },
        ClientMessage::ResolveOffsetSpec {
            correlation_id: 16,
            stream: s(),
            offset: OffsetSpec::Last,
            properties: None,
        },
        ClientMessage::DeleteSuperStream {
            correlation_id: 17,
            name: s(),
        },
    ];
    let out = feed(&mut conn, &requests, t0);
    assert_eq!(out.len(), requests.len());
    assert!(
        out.iter()
            .all(|a| matches!(a, Seen::Do(Action::Request { .. })))
    );
    let ok = ResponseCode::Ok;
    let replies = [
        (10, Reply::Code(ResponseCode::StreamAlreadyExists)),
        (
            11,
            Reply::Offset {
                code: ResponseCode::NoOffset,
                offset: 0,
            },
        ),
        (
            12,
            Reply::Sequence {
                code: ok,
                sequence: 5,
            },
        ),
        (
            13,
            Reply::Streams {
                code: ok,
                streams: vec!["p".into()],
            },
        ),
        (
            14,
            Reply::Streams {
                code: ok,
                streams: vec!["p".into()],
            },
        ),
        (
            15,
            Reply::Stats {
                code: ok,
                stats: vec![("first_chunk_id".into(), 0)],
            },
        ),
        (
            16,
            Reply::Offset {
                code: ok,
                offset: 42,
            },
        ),
        (17, Reply::Code(ok)),
    ];
    let mut sent = Vec::new();
    for (correlation_id, reply) in replies {
        sent.extend(input(
            &mut conn,
            Input::Reply {
                correlation_id,
                reply,
            },
            t0,
        ));
    }
    use ServerMessage as M;
    assert_eq!(
        sent,
        [
            code_response(Command::CreateStream, 10, ResponseCode::StreamAlreadyExists),
            Seen::Sent(M::QueryOffsetResponse {
                correlation_id: 11,
                code: ResponseCode::NoOffset,
                offset: 0
            }),
            Seen::Sent(M::QueryPublisherSequenceResponse {
                correlation_id: 12,
                code: ok,
                sequence: 5
            }),
            Seen::Sent(M::RouteResponse {
                correlation_id: 13,
                code: ok,
                streams: vec!["p".into()],
                request_key: false
            }),
            Seen::Sent(M::PartitionsResponse {
                correlation_id: 14,
                code: ok,
                streams: vec!["p".into()],
                request_key: false
            }),
            Seen::Sent(M::StreamStatsResponse {
                correlation_id: 15,
                code: ok,
                stats: vec![("first_chunk_id".into(), 0)]
            }),
            Seen::Sent(M::ResolveOffsetSpecResponse {
                correlation_id: 16,
                code: ok,
                offset: OffsetSpec::Offset(42)
            }),
            code_response(Command::DeleteSuperStream, 17, ok),
        ]
    );
}

#[test]
fn a_reply_of_the_wrong_kind_is_an_internal_error() {
    let (mut conn, t0) = opened();
    feed(
        &mut conn,
        &[ClientMessage::QueryOffset {
            correlation_id: 7,
            reference: "r".into(),
            stream: "s".into(),
        }],
        t0,
    );
    let reply = Reply::Code(ResponseCode::Ok);
    assert_eq!(
        input(
            &mut conn,
            Input::Reply {
                correlation_id: 7,
                reply
            },
            t0
        ),
        vec![Seen::Sent(ServerMessage::QueryOffsetResponse {
            correlation_id: 7,
            code: ResponseCode::InternalError,
            offset: 0,
        })]
    );
}

#[test]
fn a_correlation_id_reused_while_pending_is_refused() {
    let (mut conn, t0) = opened();
    let out = feed(
        &mut conn,
        &[
            metadata(5),
            ClientMessage::DeleteStream {
                correlation_id: 5,
                stream: "s".into(),
            },
        ],
        t0,
    );
    assert_eq!(out.len(), 2);
    assert_eq!(
        out[1],
        code_response(Command::DeleteStream, 5, ResponseCode::PreconditionFailed)
    );
}

#[test]
fn exchange_command_versions_is_answered_locally() {
    let (mut conn, t0) = opened();
    let commands = vec![CommandVersion {
        key: 8,
        min_version: 1,
        max_version: 2,
    }];
    let msg = ClientMessage::ExchangeCommandVersions {
        correlation_id: 9,
        commands,
    };
    assert_eq!(
        feed(&mut conn, &[msg], t0),
        vec![Seen::Sent(ServerMessage::ExchangeCommandVersionsResponse {
            correlation_id: 9,
            code: ResponseCode::Ok,
            commands: supported_versions(),
        })]
    );
    assert!(conn.deliver_v2);
}

#[test]
fn store_offset_has_no_answer() {
    let (mut conn, t0) = opened();
    let store = |reference: String| ClientMessage::StoreOffset {
        reference,
        stream: "s".into(),
        offset: 3,
    };
    assert_eq!(
        feed(&mut conn, &[store("c".into()), store("x".repeat(256))], t0),
        vec![Seen::Do(Action::StoreOffset {
            reference: "c".into(),
            stream: "s".into(),
            offset: 3,
        })]
    );
}

#[test]
fn the_clients_close_is_answered_and_ends_the_connection() {
    let (mut conn, t0) = opened();
    let close = ClientMessage::Close {
        correlation_id: 28,
        code: 1,
        reason: "OK".into(),
    };
    assert_eq!(
        feed(&mut conn, &[close, metadata(29)], t0),
        vec![
            Seen::Sent(ServerMessage::CloseResponse {
                correlation_id: 28,
                code: ResponseCode::Ok
            }),
            Seen::Do(Action::Closed(CloseReason::ClientClosed {
                code: 1,
                reason: "OK".into()
            })),
        ]
    );
    assert!(conn.is_closed());
}

#[test]
fn handshake_commands_after_open_close_with_unknown_frame() {
    for msg in [peer_properties(), tune(0, 0), open(9), sasl_plain(9)] {
        let (mut conn, t0) = opened();
        let close = Seen::Sent(ServerMessage::Close {
            correlation_id: 1,
            code: ResponseCode::UnknownFrame,
            reason: "unknown frame".into(),
        });
        // Once the close is sent, requests are ignored until its answer.
        assert_eq!(
            feed(&mut conn, &[msg.clone(), metadata(5)], t0),
            vec![close],
            "{msg:?}"
        );
        let answer = ClientMessage::CloseResponse {
            correlation_id: 1,
            code: ResponseCode::Ok,
        };
        assert_eq!(
            feed(&mut conn, &[answer], t0),
            vec![Seen::Do(Action::Closed(CloseReason::ServerClosed {
                code: ResponseCode::UnknownFrame,
                answered: true,
            }))]
        );
    }
}

#[test]
fn the_broker_can_close_an_open_connection() {
    let (mut conn, t0) = opened();
    let close = Input::Close {
        code: ResponseCode::InternalError,
        reason: "bye".into(),
    };
    assert_eq!(
        input(&mut conn, close, t0),
        vec![Seen::Sent(ServerMessage::Close {
            correlation_id: 1,
            code: ResponseCode::InternalError,
            reason: "bye".into(),
        })]
    );
    // Broker events are ignored while closing; a client close is answered.
    let confirm = Input::PublishConfirm {
        publisher_id: 0,
        publishing_ids: vec![1],
    };
    assert!(input(&mut conn, confirm, t0).is_empty());
    let close = ClientMessage::Close {
        correlation_id: 3,
        code: 1,
        reason: "x".into(),
    };
    let out = feed(&mut conn, &[close], t0);
    assert_eq!(out.len(), 2);
    assert!(conn.is_closed());
}

#[test]
fn an_abort_drops_the_connection_without_a_close_frame() {
    let (mut conn, t0) = opened();
    assert_eq!(
        input(&mut conn, Input::Abort, t0),
        vec![Seen::Do(Action::Closed(CloseReason::Aborted))]
    );
    assert!(conn.is_closed());
    // Once closed, a second abort does nothing.
    assert!(input(&mut conn, Input::Abort, t0).is_empty());
}
