//! Unit tests of streams.rs: publishers, subscriptions, credit and chunks.

use bytes::Bytes;

use super::super::testing::*;
use super::super::{Input, Reply};
use super::*;
use crate::stream::chunk::Entry;
use crate::stream::client::ClientMessage;
use crate::stream::command::CommandVersion;

fn declare(correlation_id: u32, publisher_id: u8, reference: &str) -> ClientMessage {
    ClientMessage::DeclarePublisher {
        correlation_id,
        publisher_id,
        reference: reference.into(),
        stream: "s".into(),
    }
}

fn publish(publisher_id: u8, ids: &[u64]) -> ClientMessage {
    ClientMessage::Publish {
        version: 1,
        publisher_id,
        messages: ids
            .iter()
            .map(|&publishing_id| PublishedMessage {
                publishing_id,
                filter_value: None,
                entry: Entry::Simple(Bytes::from_static(b"m")),
            })
            .collect(),
    }
}

fn subscribe(correlation_id: u32, subscription_id: u8, credit: u16) -> ClientMessage {
    ClientMessage::Subscribe {
        correlation_id,
        subscription_id,
        stream: "s".into(),
        offset: OffsetSpec::First,
        credit,
        properties: Some(vec![]),
    }
}

fn reply(conn: &mut StreamConnection, correlation_id: u32, code: ResponseCode) -> Vec<Seen> {
    let reply = Reply::Code(code);
    input(
        conn,
        Input::Reply {
            correlation_id,
            reply,
        },
        std::time::Instant::now(),
    )
}

fn chunk(n: u8) -> ChunkSource {
    ChunkSource::Bytes(Bytes::from(vec![n; 60]))
}

fn deliver(subscription_id: u8, n: u8) -> Input {
    Input::Deliver {
        subscription_id,
        committed_chunk_id: 7,
        chunk: chunk(n),
    }
}

fn write_chunk(subscription_id: u8, n: u8) -> Seen {
    let mut head = BytesMut::new();
    encode_deliver_header(&mut head, subscription_id, None, 60);
    Seen::Do(Action::WriteChunk {
        head: head.freeze(),
        chunk: chunk(n),
    })
}

#[test]
fn a_declared_publisher_publishes_and_gets_its_confirms() {
    let (mut conn, t0) = opened();
    assert_eq!(
        feed(&mut conn, &[declare(1, 3, "ref")], t0),
        vec![Seen::Do(Action::Request {
            correlation_id: 1,
            request: Request::DeclarePublisher {
                publisher_id: 3,
                reference: Some("ref".into()),
                stream: "s".into(),
            },
        })]
    );
    assert_eq!(
        reply(&mut conn, 1, ResponseCode::Ok),
        vec![code_response(
            Command::DeclarePublisher,
            1,
            ResponseCode::Ok
        )]
    );
    let ClientMessage::Publish { messages, .. } = publish(3, &[1, 2]) else {
        unreachable!()
    };
    assert_eq!(
        feed(&mut conn, &[publish(3, &[1, 2])], t0),
        vec![Seen::Do(Action::Publish {
            publisher_id: 3,
            stream: "s".into(),
            reference: Some("ref".into()),
            version: 1,
            messages,
        })]
    );
    let confirm = Input::PublishConfirm {
        publisher_id: 3,
        publishing_ids: vec![1, 2],
    };
    assert_eq!(
        input(&mut conn, confirm, t0),
        vec![Seen::Sent(ServerMessage::PublishConfirm {
            publisher_id: 3,
            publishing_ids: vec![1, 2]
        })]
    );
    let errors = vec![PublishingError {
        publishing_id: 3,
        code: ResponseCode::InternalError,
    }];
    let error = Input::PublishError {
        publisher_id: 3,
        errors: errors.clone(),
    };
    assert_eq!(
        input(&mut conn, error, t0),
        vec![Seen::Sent(ServerMessage::PublishError {
            publisher_id: 3,
            errors
        })]
    );
    // Deleted: answered OK, the broker told, later confirms dropped.
    let delete = ClientMessage::DeletePublisher {
        correlation_id: 2,
        publisher_id: 3,
    };
    assert_eq!(
        feed(&mut conn, &[delete], t0),
        vec![
            code_response(Command::DeletePublisher, 2, ResponseCode::Ok),
            Seen::Do(Action::DeletePublisher {
                publisher_id: 3,
                stream: "s".into(),
                reference: Some("ref".into()),
            }),
        ]
    );
    let confirm = Input::PublishConfirm {
        publisher_id: 3,
        publishing_ids: vec![4],
    };
    assert!(input(&mut conn, confirm, t0).is_empty());
}

#[test]
fn publisher_ids_and_references_are_unique() {
    let (mut conn, t0) = opened();
    feed(&mut conn, &[declare(1, 3, "ref")], t0);
    let long = "r".repeat(256);
    let out = feed(
        &mut conn,
        &[
            declare(2, 3, "other"),
            declare(3, 4, "ref"),
            declare(4, 5, &long),
        ],
        t0,
    );
    let refused = ResponseCode::PreconditionFailed;
    assert_eq!(
        out,
        vec![
            code_response(Command::DeclarePublisher, 2, refused),
            code_response(Command::DeclarePublisher, 3, refused),
            code_response(Command::DeclarePublisher, 4, refused),
        ]
    );
    // Two publishers without a reference may share the stream.
    let out = feed(&mut conn, &[declare(5, 6, ""), declare(6, 7, "")], t0);
    assert!(
        out.iter()
            .all(|a| matches!(a, Seen::Do(Action::Request { .. })))
    );
}

#[test]
fn a_declare_the_broker_refuses_frees_the_id() {
    let (mut conn, t0) = opened();
    feed(&mut conn, &[declare(1, 3, "")], t0);
    assert_eq!(
        reply(&mut conn, 1, ResponseCode::StreamDoesNotExist),
        vec![code_response(
            Command::DeclarePublisher,
            1,
            ResponseCode::StreamDoesNotExist
        )]
    );
    let out = feed(&mut conn, &[declare(2, 3, "")], t0);
    assert!(matches!(out[..], [Seen::Do(Action::Request { .. })]));
}

#[test]
fn publishing_without_a_live_publisher_fails_each_message() {
    let (mut conn, t0) = opened();
    // Undeclared, then declared but not yet answered by the broker.
    feed(&mut conn, &[declare(1, 1, "")], t0);
    let errors = |ids: &[u64]| {
        ids.iter()
            .map(|&publishing_id| PublishingError {
                publishing_id,
                code: ResponseCode::PublisherDoesNotExist,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        feed(&mut conn, &[publish(42, &[99]), publish(1, &[5, 6])], t0),
        vec![
            Seen::Sent(ServerMessage::PublishError {
                publisher_id: 42,
                errors: errors(&[99])
            }),
            Seen::Sent(ServerMessage::PublishError {
                publisher_id: 1,
                errors: errors(&[5, 6])
            }),
        ]
    );
    let delete = ClientMessage::DeletePublisher {
        correlation_id: 2,
        publisher_id: 42,
    };
    assert_eq!(
        feed(&mut conn, &[delete], t0),
        vec![code_response(
            Command::DeletePublisher,
            2,
            ResponseCode::PublisherDoesNotExist
        )]
    );
}

#[test]
fn a_subscription_gets_one_chunk_per_credit() {
    let (mut conn, t0) = opened();
    let out = feed(&mut conn, &[subscribe(1, 0, 1)], t0);
    assert_eq!(
        out,
        vec![Seen::Do(Action::Request {
            correlation_id: 1,
            request: Request::Subscribe {
                subscription_id: 0,
                stream: "s".into(),
                offset: OffsetSpec::First,
                credit: 1,
                properties: vec![],
            },
        })]
    );
    // A chunk before the broker's OK waits for it.
    assert!(input(&mut conn, deliver(0, 1), t0).is_empty());
    assert_eq!(
        reply(&mut conn, 1, ResponseCode::Ok),
        vec![
            code_response(Command::Subscribe, 1, ResponseCode::Ok),
            write_chunk(0, 1)
        ]
    );
    // No credit left: queued.
    assert!(input(&mut conn, deliver(0, 2), t0).is_empty());
    assert!(input(&mut conn, deliver(0, 3), t0).is_empty());
    let credit = ClientMessage::Credit {
        subscription_id: 0,
        credit: 1,
    };
    assert_eq!(
        feed(&mut conn, &[credit], t0),
        vec![
            write_chunk(0, 2),
            Seen::Do(Action::Credit {
                subscription_id: 0,
                credit: 1
            })
        ]
    );
    let credit = ClientMessage::Credit {
        subscription_id: 0,
        credit: 5,
    };
    assert_eq!(
        feed(&mut conn, &[credit], t0),
        vec![
            write_chunk(0, 3),
            Seen::Do(Action::Credit {
                subscription_id: 0,
                credit: 5
            })
        ]
    );
    assert_eq!(input(&mut conn, deliver(0, 4), t0), vec![write_chunk(0, 4)]);
    // Unsubscribed: answered, the broker told, leftovers dropped.
    let unsubscribe = ClientMessage::Unsubscribe {
        correlation_id: 2,
        subscription_id: 0,
    };
    assert_eq!(
        feed(&mut conn, &[unsubscribe], t0),
        vec![
            code_response(Command::Unsubscribe, 2, ResponseCode::Ok),
            Seen::Do(Action::Unsubscribe {
                subscription_id: 0,
                stream: "s".into()
            }),
        ]
    );
    assert!(input(&mut conn, deliver(0, 5), t0).is_empty());
}

#[test]
fn a_client_speaking_deliver_v2_gets_the_committed_chunk_id() {
    let (mut conn, t0) = opened();
    let commands = vec![CommandVersion {
        key: 8,
        min_version: 1,
        max_version: 2,
    }];
    let versions = ClientMessage::ExchangeCommandVersions {
        correlation_id: 1,
        commands,
    };
    feed(&mut conn, &[versions, subscribe(2, 0, 1)], t0);
    reply(&mut conn, 2, ResponseCode::Ok);
    let out = input(&mut conn, deliver(0, 1), t0);
    let mut head = BytesMut::new();
    encode_deliver_header(&mut head, 0, Some(7), 60);
    assert_eq!(
        out,
        vec![Seen::Do(Action::WriteChunk {
            head: head.freeze(),
            chunk: chunk(1)
        })]
    );
}

#[test]
fn an_external_chunk_is_headed_by_its_length() {
    let (mut conn, t0) = opened();
    feed(&mut conn, &[subscribe(1, 0, 1)], t0);
    reply(&mut conn, 1, ResponseCode::Ok);
    let chunk = ChunkSource::External {
        len: 1000,
        token: 9,
    };
    let deliver = Input::Deliver {
        subscription_id: 0,
        committed_chunk_id: 0,
        chunk: chunk.clone(),
    };
    let mut head = BytesMut::new();
    encode_deliver_header(&mut head, 0, None, 1000);
    assert_eq!(
        input(&mut conn, deliver, t0),
        vec![Seen::Do(Action::WriteChunk {
            head: head.freeze(),
            chunk
        })]
    );
}

#[test]
fn subscription_ids_are_unique_and_unknown_ones_are_refused() {
    let (mut conn, t0) = opened();
    feed(&mut conn, &[subscribe(1, 0, 1)], t0);
    let sac = ClientMessage::Subscribe {
        correlation_id: 3,
        subscription_id: 1,
        stream: "s".into(),
        offset: OffsetSpec::Next,
        credit: 1,
        properties: Some(vec![("single-active-consumer".into(), "true".into())]),
    };
    let out = feed(
        &mut conn,
        &[
            subscribe(2, 0, 1),
            sac,
            ClientMessage::Credit {
                subscription_id: 9,
                credit: 1,
            },
            ClientMessage::Unsubscribe {
                correlation_id: 4,
                subscription_id: 9,
            },
        ],
        t0,
    );
    assert_eq!(
        out,
        vec![
            code_response(
                Command::Subscribe,
                2,
                ResponseCode::SubscriptionIdAlreadyExists
            ),
            code_response(Command::Subscribe, 3, ResponseCode::PreconditionFailed),
            Seen::Sent(ServerMessage::CreditResponse {
                code: ResponseCode::SubscriptionIdDoesNotExist,
                subscription_id: 9,
            }),
            code_response(
                Command::Unsubscribe,
                4,
                ResponseCode::SubscriptionIdDoesNotExist
            ),
        ]
    );
    // Refused by the broker: the id is free again.
    reply(&mut conn, 1, ResponseCode::StreamDoesNotExist);
    let out = feed(&mut conn, &[subscribe(5, 0, 1)], t0);
    assert!(matches!(out[..], [Seen::Do(Action::Request { .. })]));
}

#[test]
fn a_stream_gone_takes_its_publishers_and_subscriptions() {
    let (mut conn, t0) = opened();
    feed(&mut conn, &[declare(1, 1, "p"), subscribe(2, 0, 1)], t0);
    reply(&mut conn, 1, ResponseCode::Ok);
    reply(&mut conn, 2, ResponseCode::Ok);
    let delete = ClientMessage::DeleteStream {
        correlation_id: 3,
        stream: "s".into(),
    };
    feed(&mut conn, &[delete], t0);
    // As in the recording: the delete's answer, then the metadata update.
    assert_eq!(
        reply(&mut conn, 3, ResponseCode::Ok),
        vec![
            code_response(Command::DeleteStream, 3, ResponseCode::Ok),
            Seen::Sent(ServerMessage::MetadataUpdate {
                code: ResponseCode::StreamNotAvailable,
                stream: "s".into(),
            }),
        ]
    );
    // The broker's own notice then finds nothing left: no second update.
    let gone = Input::StreamGone {
        stream: "s".into(),
        code: ResponseCode::StreamNotAvailable,
    };
    assert!(input(&mut conn, gone, t0).is_empty());
    let out = feed(&mut conn, &[publish(1, &[1])], t0);
    assert!(matches!(
        out[..],
        [Seen::Sent(ServerMessage::PublishError { .. })]
    ));
}

#[test]
fn consumer_updates_carry_their_own_correlation_ids() {
    let (mut conn, t0) = opened();
    feed(&mut conn, &[subscribe(1, 4, 1)], t0);
    reply(&mut conn, 1, ResponseCode::Ok);
    let update = Input::ConsumerUpdate {
        subscription_id: 4,
        active: true,
    };
    assert_eq!(
        input(&mut conn, update, t0),
        vec![Seen::Sent(ServerMessage::ConsumerUpdate {
            correlation_id: 0,
            subscription_id: 4,
            active: true,
        })]
    );
    let answer = ClientMessage::ConsumerUpdateResponse {
        correlation_id: 0,
        code: ResponseCode::Ok,
        offset: OffsetSpec::Offset(10),
    };
    assert_eq!(
        feed(&mut conn, &[answer.clone(), answer], t0),
        vec![Seen::Do(Action::ConsumerUpdateAnswered {
            subscription_id: 4,
            code: ResponseCode::Ok,
            offset: OffsetSpec::Offset(10),
        })]
    );
}
