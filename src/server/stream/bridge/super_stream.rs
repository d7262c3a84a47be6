//! Create and delete super stream (RabbitMQ 3.13+, 0x1d and 0x1e) as a
//! sequence of steps on the control channel, each one master input answered
//! before the next goes, in the order rabbit_stream_reader and
//! rabbit_stream_manager take them.
//!
//! Create (its name checked first, 0x11): the user may configure the
//! exchange and the partitions, read the exchange and write the partitions
//! (else 0x10); the request is valid (no partition's name empty nor in
//! `amq.`, no partition twice, as many binding keys as partitions,
//! arguments create stream takes: else 0x11); neither the exchange nor any partition exists, as a queue of any
//! type (else 0x05). Then the durable direct exchange with `x-super-stream:
//! true`, one stream per partition with the arguments (and
//! `queue-leader-locator: balanced` unless given, as RabbitMQ adds), and a
//! binding of each with its key and `x-stream-partition-order: <index>`. A
//! step refused there undoes what was made (partitions newest first, then
//! the exchange) and is answered 0x0f, as RabbitMQ rolls back and answers.
//!
//! Delete: configure on the exchange (else 0x10), its partitions as
//! partitions answers them (no exchange: 0x02), the whole check on them
//! (0x10), then the exchange and every partition deleted, whatever each
//! answers (RabbitMQ logs and goes on), and OK. Each deleted stream tells
//! the connections that use it, this one too (a metadata update).

use super::control::{Outcome, stream_arguments};
use super::*;

/// A create or delete super stream in progress.
#[derive(Debug)]
pub(super) struct SuperStreamOp {
    name: String,
    partitions: Vec<String>,
    keys: Vec<String>,
    /// The partitions' queue arguments.
    arguments: FieldTable,
    /// Why a create is refused once the user may make it (0x11).
    invalid: bool,
    steps: VecDeque<Step>,
    /// What a create has made so far: the exchange, and partitions
    /// `0..declared`.
    exchange_made: bool,
    declared: usize,
    /// The answer once no step is left.
    answer: ResponseCode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Permissions: configure on the exchange, or (`whole`) the whole check.
    Permitted {
        whole: bool,
    },
    /// Nothing of the names exists.
    Free,
    /// The exchange's partitions (delete).
    Partitions,
    DeclareExchange,
    DeclarePartition(usize),
    Bind(usize),
    /// Deletes: their answers change nothing (a delete, or an undo).
    DeletePartition(usize),
    DeleteExchange,
}

impl SuperStreamOp {
    /// The op of a create or delete super stream request, or the answer it
    /// gets at once: a create's name is checked first, as RabbitMQ's reader
    /// checks it before anything else (0x11).
    pub(super) fn new(request: Request) -> Result<SuperStreamOp, ResponseCode> {
        match request {
            Request::CreateSuperStream { name, .. } if !super::control::valid_name(&name) => {
                Err(ResponseCode::PreconditionFailed)
            }
            Request::CreateSuperStream {
                name,
                partitions,
                binding_keys,
                arguments,
            } => Ok(SuperStreamOp::create(
                name,
                partitions,
                binding_keys,
                &arguments,
            )),
            Request::DeleteSuperStream { name } => Ok(SuperStreamOp::delete(name)),
            // Never: only those two are handed over.
            _ => Err(ResponseCode::InternalError),
        }
    }

    fn create(
        name: String,
        partitions: Vec<String>,
        keys: Vec<String>,
        arguments: &[(String, String)],
    ) -> SuperStreamOp {
        let mut args = stream_arguments(arguments);
        if let Ok(a) = &mut args
            && !a.contains_key("x-queue-leader-locator")
        {
            a.insert(
                "x-queue-leader-locator".into(),
                AMQPValue::LongString("balanced".into()),
            );
        }
        let invalid = args.is_err() || !valid_request(&name, &partitions, &keys);
        let mut steps = VecDeque::from([Step::Permitted { whole: true }, Step::Free]);
        steps.push_back(Step::DeclareExchange);
        steps.extend((0..partitions.len()).map(Step::DeclarePartition));
        steps.extend((0..partitions.len()).map(Step::Bind));
        SuperStreamOp {
            name,
            partitions,
            keys,
            arguments: args.unwrap_or_default(),
            invalid,
            steps,
            exchange_made: false,
            declared: 0,
            answer: ResponseCode::Ok,
        }
    }

    fn delete(name: String) -> SuperStreamOp {
        SuperStreamOp {
            name,
            partitions: Vec::new(),
            keys: Vec::new(),
            arguments: FieldTable::default(),
            invalid: false,
            steps: VecDeque::from([Step::Permitted { whole: false }, Step::Partitions]),
            exchange_made: false,
            declared: 0,
            answer: ResponseCode::Ok,
        }
    }

    /// The current step's input to the master (on the control channel).
    pub(super) fn input(&self, conn: ConnId) -> Option<Input> {
        let track = |op| Input::StreamTrack {
            conn,
            ch: CONTROL,
            op,
        };
        let m = |method| super::method(conn, CONTROL, method);
        Some(match *self.steps.front()? {
            Step::Permitted { whole } => track(TrackOp::SuperStreamPermitted {
                exchange: self.name.clone(),
                partitions: whole.then(|| self.partitions.clone()),
            }),
            Step::Free => track(TrackOp::AnyExists {
                exchange: self.name.clone(),
                queues: self.partitions.clone(),
            }),
            Step::Partitions => track(TrackOp::Partitions {
                exchange: self.name.clone(),
            }),
            Step::DeclareExchange => m(declare_exchange(&self.name)),
            Step::DeclarePartition(i) => m(super::control::declare(
                self.partitions.get(i)?,
                false,
                self.arguments.clone(),
            )),
            Step::Bind(i) => m(bind(
                &self.name,
                self.partitions.get(i)?,
                self.keys.get(i)?,
                i,
            )),
            Step::DeletePartition(i) => m(delete_queue(self.partitions.get(i)?)),
            Step::DeleteExchange => m(delete_exchange(&self.name)),
        })
    }

    /// The master answered the current step: `Some` answer when the op is
    /// done, `None` when there is a next step (`input`).
    pub(super) fn on_outcome(&mut self, outcome: &Outcome<'_>) -> Option<ResponseCode> {
        let step = self.steps.pop_front()?;
        let done = matches!(outcome, Outcome::Done);
        match (step, outcome) {
            (Step::Permitted { .. }, Outcome::Tracked(TrackAnswer::Permitted(true))) => {
                if self.invalid {
                    return Some(ResponseCode::PreconditionFailed);
                }
            }
            (Step::Permitted { .. }, Outcome::Tracked(TrackAnswer::Permitted(false))) => {
                return Some(ResponseCode::AccessRefused);
            }
            (Step::Free, Outcome::Tracked(TrackAnswer::Exists(false))) => {}
            (Step::Free, Outcome::Tracked(TrackAnswer::Exists(true))) => {
                return Some(ResponseCode::StreamAlreadyExists);
            }
            (Step::Partitions, Outcome::Tracked(TrackAnswer::Streams(Ok(streams)))) => {
                self.partitions = streams.clone();
                self.steps.push_back(Step::Permitted { whole: true });
                self.steps.push_back(Step::DeleteExchange);
                self.steps
                    .extend((0..self.partitions.len()).map(Step::DeletePartition));
            }
            (Step::Partitions, Outcome::Tracked(TrackAnswer::Streams(Err(())))) => {
                return Some(ResponseCode::StreamDoesNotExist);
            }
            (Step::DeclareExchange, _) if done => self.exchange_made = true,
            (Step::DeclarePartition(_), _) if done => self.declared += 1,
            (Step::Bind(_), _) if done => {}
            (Step::DeclareExchange | Step::DeclarePartition(_) | Step::Bind(_), _) => {
                self.undo();
            }
            (Step::DeletePartition(_) | Step::DeleteExchange, _) => {}
            // An answer of another kind.
            _ => return Some(ResponseCode::InternalError),
        }
        if self.steps.is_empty() {
            Some(self.answer)
        } else {
            None
        }
    }

    /// A create failed half way: what it made is deleted, newest first,
    /// and the answer is internal error (RabbitMQ's rollback and code).
    fn undo(&mut self) {
        self.answer = ResponseCode::InternalError;
        self.steps = (0..self.declared)
            .rev()
            .map(Step::DeletePartition)
            .collect();
        if self.exchange_made {
            self.steps.push_back(Step::DeleteExchange);
        }
    }
}

/// RabbitMQ's validation of a create: a correct name (not empty, not in
/// `amq.`) for the super stream and every partition, no partition twice, as
/// many binding keys as partitions.
fn valid_request(name: &str, partitions: &[String], keys: &[String]) -> bool {
    let distinct: HashSet<&String> = partitions.iter().collect();
    super::control::valid_name(name)
        && partitions.iter().all(|p| super::control::valid_name(p))
        && distinct.len() == partitions.len()
        && keys.len() == partitions.len()
}

fn declare_exchange(name: &str) -> AMQPClass {
    let mut arguments = FieldTable::default();
    arguments.insert("x-super-stream".into(), AMQPValue::Boolean(true));
    AMQPClass::Exchange(exchange::AMQPMethod::Declare(exchange::Declare {
        exchange: name.into(),
        kind: "direct".into(),
        durable: true,
        arguments,
        ..Default::default()
    }))
}

fn bind(exchange: &str, queue: &str, key: &str, order: usize) -> AMQPClass {
    let mut arguments = FieldTable::default();
    arguments.insert(
        crate::master::PARTITION_ORDER.into(),
        AMQPValue::LongLongInt(i64::try_from(order).unwrap_or(i64::MAX)),
    );
    AMQPClass::Queue(queue::AMQPMethod::Bind(queue::Bind {
        queue: queue.into(),
        exchange: exchange.into(),
        routing_key: key.into(),
        arguments,
        ..Default::default()
    }))
}

fn delete_queue(name: &str) -> AMQPClass {
    AMQPClass::Queue(queue::AMQPMethod::Delete(queue::Delete {
        queue: name.into(),
        ..Default::default()
    }))
}

fn delete_exchange(name: &str) -> AMQPClass {
    AMQPClass::Exchange(exchange::AMQPMethod::Delete(exchange::Delete {
        exchange: name.into(),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_request_is_valid_as_rabbitmq_validates_it() {
        let ok = |n, p: &[&str], k: &[&str]| valid_request(n, &keys(p), &keys(k));
        assert!(ok("ss", &["a", "b"], &["0", "1"]));
        assert!(ok("ss", &[], &[]));
        assert!(ok("ss", &["a"], &[""]), "an empty binding key is a key");
        assert!(!ok("", &["a"], &["0"]));
        assert!(!ok("amq.ss", &["a"], &["0"]));
        assert!(!ok("ss", &["a", ""], &["0", "1"]));
        assert!(!ok("ss", &["a", "amq.b"], &["0", "1"]));
        assert!(!ok("ss", &["a", "a"], &["0", "1"]));
        assert!(!ok("ss", &["a", "b"], &["0"]));
    }
}
