//! Requests the master answers on the control channel, one at a time:
//! create and delete stream (a passive declare first, for the stream
//! protocol's codes), declare publisher, metadata, the tracking queries, and
//! a super stream's route and partitions, create and delete super stream
//! (their steps: `super_stream`).

use super::*;
use crate::broker::stream::StartAt;
use crate::master::inout::NotResolved;
use subscribe::NewSubscription;
use super_stream::SuperStreamOp;

/// A request being answered on the control channel.
#[derive(Debug)]
pub(super) struct ControlOp {
    pub(super) correlation_id: u32,
    pub(super) kind: OpKind,
}

#[derive(Debug)]
pub(super) enum OpKind {
    /// Passive declare first (exists: 0x05), then the declare.
    Create {
        stream: String,
        arguments: FieldTable,
        probed: bool,
    },
    /// Passive declare first (queue.delete of a missing queue is ok in
    /// AMQP; the stream protocol answers 0x02), then the delete.
    Delete { stream: String, probed: bool },
    /// The stream must exist; with a reference, its last publishing id is
    /// fetched next (deduplication).
    DeclarePublisher {
        stream: String,
        publisher_id: u8,
        reference: Option<String>,
        probed: bool,
    },
    /// A stored offset or sequence.
    Query {
        stream: String,
        kind: Tracking,
        reference: String,
    },
    /// Answered from the state: a super stream's route or partitions (from
    /// its bindings), a stream's stats.
    Lookup(TrackOp),
    /// Each stream in turn, by passive declare.
    Metadata {
        todo: VecDeque<String>,
        done: Vec<StreamMetadata>,
    },
    /// Create or delete super stream, step by step.
    SuperStream(SuperStreamOp),
}

/// How the master answered the current control request.
pub(super) enum Outcome<'a> {
    /// declare-ok, delete-ok, bind-ok (of a queue or an exchange).
    Done,
    /// The channel was closed with this error.
    Refused(&'a AmqpError),
    /// A tracking or super stream query's answer.
    Tracked(TrackAnswer),
}

/// What the bridge does with a request.
enum Handling {
    /// Ask the master, on the control channel, after the requests before it.
    Ask(OpKind),
    /// Answer at once: the master has nothing to add, or StableMQ does not
    /// support the request.
    Answer(Reply),
    /// Subscribe, on a channel of the subscription's own.
    Subscribe(NewSubscription),
}

impl Bridge {
    /// One of the client's requests: asked of the master in turn, answered
    /// at once, or (a subscription) started.
    pub(super) fn on_request(
        &mut self,
        correlation_id: u32,
        request: Request,
        master: &mut Vec<Input>,
        conn: &mut Vec<sc::Input>,
    ) {
        match self.handling(request) {
            Handling::Ask(kind) => {
                self.ops.push_back(ControlOp {
                    correlation_id,
                    kind,
                });
                self.next_op(master);
            }
            Handling::Answer(reply) => conn.push(sc::Input::Reply {
                correlation_id,
                reply,
            }),
            Handling::Subscribe(new) => self.subscribe(correlation_id, new, master),
        }
    }

    /// How a request is handled, and the control op or the answer it makes.
    fn handling(&self, request: Request) -> Handling {
        match request {
            // As RabbitMQ: no empty name (it would be a server-named queue
            // in AMQP terms), none in the reserved `amq.` namespace.
            Request::CreateStream { stream, .. } if !valid_name(&stream) => {
                Handling::Answer(Reply::Code(ResponseCode::PreconditionFailed))
            }
            Request::CreateStream { stream, arguments } => match stream_arguments(&arguments) {
                Ok(arguments) => Handling::Ask(OpKind::Create {
                    stream,
                    arguments,
                    probed: false,
                }),
                Err(()) => Handling::Answer(Reply::Code(ResponseCode::PreconditionFailed)),
            },
            Request::DeleteStream { stream } => Handling::Ask(OpKind::Delete {
                stream,
                probed: false,
            }),
            // As RabbitMQ: no new publisher while a resource alarm lasts.
            Request::DeclarePublisher { .. } if self.alarm => {
                Handling::Answer(Reply::Code(ResponseCode::PreconditionFailed))
            }
            Request::DeclarePublisher {
                stream,
                publisher_id,
                reference,
            } => Handling::Ask(OpKind::DeclarePublisher {
                stream,
                publisher_id,
                reference,
                probed: false,
            }),
            // Nothing to ask the master: answered at once.
            Request::Metadata { streams } if streams.is_empty() => {
                Handling::Answer(Reply::Metadata {
                    brokers: self.advertised.brokers.clone(),
                    streams: Vec::new(),
                })
            }
            Request::Metadata { streams } => Handling::Ask(OpKind::Metadata {
                todo: streams.into(),
                done: Vec::new(),
            }),
            Request::Subscribe {
                subscription_id,
                stream,
                offset,
                credit,
                properties,
            } => Handling::Subscribe(NewSubscription {
                id: subscription_id,
                stream,
                offset,
                credit,
                properties,
            }),
            Request::QueryOffset { reference, stream } => Handling::Ask(OpKind::Query {
                stream,
                kind: Tracking::Offset,
                reference,
            }),
            Request::QueryPublisherSequence { reference, stream } => Handling::Ask(OpKind::Query {
                stream,
                kind: Tracking::Sequence,
                reference,
            }),
            Request::Route {
                routing_key,
                super_stream,
            } => Handling::Ask(OpKind::Lookup(TrackOp::Route {
                exchange: super_stream,
                routing_key,
            })),
            Request::Partitions { super_stream } => {
                Handling::Ask(OpKind::Lookup(TrackOp::Partitions {
                    exchange: super_stream,
                }))
            }
            Request::StreamStats { stream } => {
                Handling::Ask(OpKind::Lookup(TrackOp::Stats { stream }))
            }
            r @ (Request::CreateSuperStream { .. } | Request::DeleteSuperStream { .. }) => {
                match SuperStreamOp::new(r) {
                    Ok(op) => Handling::Ask(OpKind::SuperStream(op)),
                    Err(code) => Handling::Answer(Reply::Code(code)),
                }
            }
            Request::ResolveOffsetSpec { stream, offset, .. } => {
                Handling::Ask(OpKind::Lookup(TrackOp::Resolve {
                    stream,
                    at: start_at(offset),
                }))
            }
        }
    }

    /// Start the next control request if none is waiting for its answer.
    pub(super) fn next_op(&mut self, master: &mut Vec<Input>) {
        if self.current.is_some() {
            return;
        }
        let Some(op) = self.ops.pop_front() else {
            return;
        };
        self.send_op(op, master);
    }

    pub(super) fn ensure_control(&mut self, master: &mut Vec<Input>) {
        if !self.control_open {
            self.control_open = true;
            master.push(Input::ChannelOpen {
                conn: self.conn,
                ch: CONTROL,
            });
        }
    }

    pub(super) fn send_op(&mut self, op: ControlOp, master: &mut Vec<Input>) {
        self.ensure_control(master);
        let m = match &op.kind {
            OpKind::Create {
                stream,
                arguments,
                probed,
            } => declare(stream, !probed, arguments.clone()),
            OpKind::Delete {
                stream,
                probed: false,
            } => declare(stream, true, FieldTable::default()),
            OpKind::Delete { stream, .. } => {
                AMQPClass::Queue(queue::AMQPMethod::Delete(queue::Delete {
                    queue: ShortString::from(stream.as_str()),
                    if_unused: false,
                    if_empty: false,
                    nowait: false,
                }))
            }
            OpKind::DeclarePublisher {
                stream,
                reference: Some(reference),
                probed: true,
                ..
            } => {
                master.push(track_query(
                    self.conn,
                    stream,
                    Tracking::Sequence,
                    reference,
                ));
                self.current = Some(op);
                return;
            }
            OpKind::DeclarePublisher { stream, .. } => declare(stream, true, FieldTable::default()),
            OpKind::Query {
                stream,
                kind,
                reference,
            } => {
                master.push(track_query(self.conn, stream, *kind, reference));
                self.current = Some(op);
                return;
            }
            OpKind::Lookup(q) => {
                master.push(Input::StreamTrack {
                    conn: self.conn,
                    ch: CONTROL,
                    op: q.clone(),
                });
                self.current = Some(op);
                return;
            }
            OpKind::SuperStream(s) => match s.input(self.conn) {
                Some(input) => {
                    master.push(input);
                    self.current = Some(op);
                    return;
                }
                // Never: an op with no step left has been answered.
                None => return,
            },
            OpKind::Metadata { todo, .. } => match todo.front() {
                Some(s) => declare(s, true, FieldTable::default()),
                // Never: an empty request is answered in `on_request`, and
                // a metadata op is sent again only with streams left.
                None => return,
            },
        };
        master.push(method(self.conn, CONTROL, m));
        self.current = Some(op);
    }

    /// The control channel's answer to the current op.
    pub(super) fn on_control(
        &mut self,
        outcome: Outcome<'_>,
        master: &mut Vec<Input>,
        conn: &mut Vec<sc::Input>,
    ) {
        let Some(mut op) = self.current.take() else {
            return;
        };
        let code = outcome_code;
        let answer = match &mut op.kind {
            OpKind::Create { probed, .. } if !*probed => match outcome {
                Outcome::Refused(e) if e.code == ReplyCode::NotFound => {
                    *probed = true;
                    None
                }
                Outcome::Done => Some(Reply::Code(ResponseCode::StreamAlreadyExists)),
                o => Some(Reply::Code(code(&o))),
            },
            OpKind::Delete { probed, .. } if !*probed => match outcome {
                Outcome::Done => {
                    *probed = true;
                    None
                }
                o => Some(Reply::Code(code(&o))),
            },
            OpKind::DeclarePublisher {
                publisher_id,
                reference,
                probed,
                ..
            } => match (&outcome, reference.as_ref(), *probed) {
                (Outcome::Done, Some(_), false) => {
                    *probed = true;
                    None
                }
                (Outcome::Tracked(TrackAnswer::Value(Ok(last))), Some(r), true) => {
                    self.dedup.insert(
                        *publisher_id,
                        Deduplicated {
                            reference: r.clone(),
                            last: *last,
                        },
                    );
                    Some(Reply::Code(ResponseCode::Ok))
                }
                (o, _, _) => Some(Reply::Code(code(o))),
            },
            OpKind::Create { .. } | OpKind::Delete { .. } => Some(Reply::Code(code(&outcome))),
            OpKind::SuperStream(s) => s
                .on_outcome(&outcome)
                .or_else(|| {
                    s.input(self.conn)
                        .is_none()
                        .then_some(ResponseCode::InternalError)
                })
                .map(Reply::Code),
            OpKind::Query { kind, .. } => Some(query_reply(*kind, outcome)),
            OpKind::Lookup(TrackOp::Stats { .. }) => Some(stats_reply(outcome)),
            OpKind::Lookup(TrackOp::Resolve { .. }) => Some(resolved_reply(outcome)),
            OpKind::Lookup(_) => Some(streams_reply(outcome)),
            OpKind::Metadata { todo, done } => {
                if let Some(name) = todo.pop_front() {
                    done.push(self.stream_metadata(name, code(&outcome)));
                }
                todo.is_empty().then(|| Reply::Metadata {
                    brokers: self.advertised.brokers.clone(),
                    streams: std::mem::take(done),
                })
            }
        };
        match answer {
            Some(reply) => {
                if matches!(op.kind, OpKind::DeclarePublisher { .. })
                    && reply.code() == ResponseCode::Ok
                {
                    self.open_publish(master);
                }
                conn.push(sc::Input::Reply {
                    correlation_id: op.correlation_id,
                    reply,
                });
                self.next_op(master);
            }
            None => self.send_op(op, master),
        }
    }

    /// A stream's entry in a metadata answer: this node leads it, the
    /// others replicate it (nobody, if it does not exist).
    fn stream_metadata(&self, name: String, code: ResponseCode) -> StreamMetadata {
        let ok = code == ResponseCode::Ok;
        StreamMetadata {
            name,
            code,
            leader: if ok { self.advertised.leader } else { 0xffff },
            replicas: if ok { self.replicas() } else { Vec::new() },
        }
    }

    pub(super) fn replicas(&self) -> Vec<u16> {
        self.advertised
            .brokers
            .iter()
            .map(|b| b.reference)
            .filter(|r| *r != self.advertised.leader)
            .collect()
    }
}

/// The stream protocol's code for what the master answered.
fn outcome_code(o: &Outcome<'_>) -> ResponseCode {
    match o {
        Outcome::Refused(e) => stream_code(e.code),
        Outcome::Tracked(
            TrackAnswer::Value(Err(()))
            | TrackAnswer::Streams(Err(()))
            | TrackAnswer::Stats(Err(()))
            | TrackAnswer::Resolved(Err(NotResolved::NoStream)),
        ) => ResponseCode::StreamDoesNotExist,
        Outcome::Tracked(TrackAnswer::Resolved(Err(NotResolved::AccessRefused))) => {
            ResponseCode::AccessRefused
        }
        Outcome::Done
        | Outcome::Tracked(
            TrackAnswer::Value(Ok(_))
            | TrackAnswer::Streams(Ok(_))
            | TrackAnswer::Stats(Ok(_))
            | TrackAnswer::Resolved(Ok(_)),
        ) => ResponseCode::Ok,
        // Answers to a super stream's checks only.
        Outcome::Tracked(TrackAnswer::Permitted(_) | TrackAnswer::Exists(_)) => {
            ResponseCode::InternalError
        }
    }
}

/// The answer to route or partitions: the streams (none is an answer too,
/// as RabbitMQ 3.11+ answers a routing key nothing is bound with), or 0x02
/// when the super stream's exchange does not exist.
fn streams_reply(outcome: Outcome<'_>) -> Reply {
    match outcome {
        Outcome::Tracked(TrackAnswer::Streams(Ok(streams))) => Reply::Streams {
            code: ResponseCode::Ok,
            streams,
        },
        o => Reply::Streams {
            code: match outcome_code(&o) {
                ResponseCode::Ok => ResponseCode::InternalError,
                code => code,
            },
            streams: Vec::new(),
        },
    }
}

/// The answer to stream stats: the stats, or 0x02 for no such stream.
fn stats_reply(outcome: Outcome<'_>) -> Reply {
    match outcome {
        Outcome::Tracked(TrackAnswer::Stats(Ok(stats))) => Reply::Stats {
            code: ResponseCode::Ok,
            stats,
        },
        o => Reply::Stats {
            code: match outcome_code(&o) {
                ResponseCode::Ok => ResponseCode::InternalError,
                code => code,
            },
            stats: Vec::new(),
        },
    }
}

/// Where a subscribe with `offset` starts, as the master and a slave's
/// replica read it (type 0, which only a consumer update answer carries,
/// reads as `next`, a subscribe's default).
pub(in crate::server::stream) fn start_at(offset: OffsetSpec) -> StartAt {
    match offset {
        OffsetSpec::First => StartAt::First,
        OffsetSpec::Last => StartAt::Last,
        OffsetSpec::Next | OffsetSpec::None => StartAt::Next,
        OffsetSpec::Offset(n) => StartAt::Offset(n),
        OffsetSpec::Timestamp(ms) => StartAt::TimestampMs(u64::try_from(ms).unwrap_or(0)),
    }
}

/// The answer to resolve offset spec: the offset, or 0 with the code
/// (0x02 no such stream, 0x10 no read permission), as RabbitMQ 4.3's
/// rabbit_stream_reader answers.
fn resolved_reply(outcome: Outcome<'_>) -> Reply {
    match outcome {
        Outcome::Tracked(TrackAnswer::Resolved(Ok(offset))) => Reply::Offset {
            code: ResponseCode::Ok,
            offset,
        },
        o => Reply::Offset {
            code: match outcome_code(&o) {
                ResponseCode::Ok => ResponseCode::InternalError,
                code => code,
            },
            offset: 0,
        },
    }
}

/// The answer to query offset or query publisher sequence.
fn query_reply(kind: Tracking, outcome: Outcome<'_>) -> Reply {
    match (kind, outcome) {
        (Tracking::Offset, Outcome::Tracked(TrackAnswer::Value(Ok(Some(offset))))) => {
            Reply::Offset {
                code: ResponseCode::Ok,
                offset,
            }
        }
        (Tracking::Offset, Outcome::Tracked(TrackAnswer::Value(Ok(None)))) => Reply::Offset {
            code: ResponseCode::NoOffset,
            offset: 0,
        },
        (Tracking::Offset, o) => Reply::Offset {
            code: outcome_code(&o),
            offset: 0,
        },
        (Tracking::Sequence, Outcome::Tracked(TrackAnswer::Value(Ok(v)))) => Reply::Sequence {
            code: ResponseCode::Ok,
            sequence: v.unwrap_or(0),
        },
        (Tracking::Sequence, o) => Reply::Sequence {
            code: outcome_code(&o),
            sequence: 0,
        },
    }
}

pub(super) fn track_query(conn: ConnId, stream: &str, kind: Tracking, reference: &str) -> Input {
    Input::StreamTrack {
        conn,
        ch: CONTROL,
        op: TrackOp::Query {
            stream: stream.to_owned(),
            kind,
            reference: reference.to_owned(),
        },
    }
}

pub(super) fn declare(stream: &str, passive: bool, mut arguments: FieldTable) -> AMQPClass {
    if !passive {
        arguments.insert(
            ShortString::from("x-queue-type"),
            AMQPValue::LongString("stream".into()),
        );
    }
    AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: ShortString::from(stream),
        passive,
        durable: true,
        exclusive: false,
        auto_delete: false,
        nowait: false,
        arguments,
    }))
}

/// A create stream's arguments as queue arguments (RabbitMQ's names, with
/// `x-` in front); an unknown one is refused (0x11, as RabbitMQ).
pub(super) fn stream_arguments(args: &[(String, String)]) -> Result<FieldTable, ()> {
    let mut t = FieldTable::default();
    for (k, v) in args {
        let value = match k.as_str() {
            "max-length-bytes" | "stream-max-segment-size-bytes" | "initial-cluster-size" => {
                AMQPValue::LongLongInt(v.parse().map_err(|_| ())?)
            }
            "max-age" | "queue-leader-locator" => AMQPValue::LongString(v.as_str().into()),
            // The size of RabbitMQ 3.13's bloom filters (16 to 255, or
            // precondition failed as there): taken, and meaningless here,
            // whose filters are exact sets.
            "stream-filter-size-bytes" => match v.parse::<i64>() {
                Ok(n) if (16..=255).contains(&n) => AMQPValue::LongLongInt(n),
                _ => return Err(()),
            },
            _ => return Err(()),
        };
        t.insert(ShortString::from(format!("x-{k}")), value);
    }
    Ok(t)
}

/// Whether a new stream may have this name (RabbitMQ's stream plugin
/// refuses the empty name and the `amq.` prefix).
pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with("amq.")
}

/// The stream protocol's code for a refusal by the master.
pub(super) fn stream_code(code: ReplyCode) -> ResponseCode {
    match code {
        ReplyCode::NotFound => ResponseCode::StreamDoesNotExist,
        ReplyCode::AccessRefused => ResponseCode::AccessRefused,
        ReplyCode::PreconditionFailed => ResponseCode::PreconditionFailed,
        _ => ResponseCode::InternalError,
    }
}
