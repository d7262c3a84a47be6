//! The declare-time check of a queue's `x-` arguments, as RabbitMQ 3.10
//! answers it: which arguments each queue type takes, and the values of
//! those StableMQ keeps without acting on them.
//!
//! RabbitMQ knows a fixed set of arguments. It checks the values of those
//! the queue's type takes, then refuses the first one the type does not take
//! ("... of queue type rabbit_quorum_queue"); an argument outside the set
//! (`x-foo`) passes on every type. The lists below are what a RabbitMQ 3.10.8
//! node answered, argument by argument (`compat-tests/python/queue_args.py`
//! checks both brokers).
//!
//! Only a new declaration is checked. Replaying the log never is: a queue
//! declared by an older build keeps the arguments it was accepted with
//! ([`super::QueueArgs::parse`] stays as lenient as it was).

use super::{ArgError, QueueArgs, integer, positive, string};
use stablemq_protocol::{AMQPValue, FieldTable};

/// A queue's type, as `x-queue-type` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueType {
    /// `classic`, or no `x-queue-type`.
    Classic,
    /// `quorum`.
    Quorum,
    /// `stream`.
    Stream,
}

impl QueueType {
    /// The type `x-queue-type` names (none: classic); `None` for a type
    /// StableMQ does not have.
    pub fn declared(args: &FieldTable) -> Option<QueueType> {
        match args.inner().get("x-queue-type").map(super::text) {
            None => Some(QueueType::Classic),
            Some(name) => match name.as_deref() {
                Some("classic") => Some(QueueType::Classic),
                Some("quorum") => Some(QueueType::Quorum),
                Some("stream") => Some(QueueType::Stream),
                _ => None,
            },
        }
    }

    /// RabbitMQ's module name, which its refusals quote.
    fn module(self) -> &'static str {
        match self {
            QueueType::Classic => "rabbit_classic_queue",
            QueueType::Quorum => "rabbit_quorum_queue",
            QueueType::Stream => "rabbit_stream_queue",
        }
    }

    /// The known arguments this type does not take.
    fn refused(self) -> &'static [&'static str] {
        match self {
            QueueType::Classic => &[
                "x-max-in-memory-length",
                "x-max-in-memory-bytes",
                "x-initial-cluster-size",
                "x-delivery-limit",
                "x-dead-letter-strategy",
                "x-max-age",
                "x-stream-max-segment-size-bytes",
                "x-quorum-initial-group-size",
                "x-queue-leader-locator",
            ],
            QueueType::Quorum => &[
                "x-max-priority",
                "x-queue-mode",
                "x-queue-master-locator",
                "x-initial-cluster-size",
                "x-max-age",
                "x-stream-max-segment-size-bytes",
                "x-queue-version",
            ],
            QueueType::Stream => &[
                "x-expires",
                "x-message-ttl",
                "x-dead-letter-exchange",
                "x-dead-letter-routing-key",
                "x-max-length",
                "x-max-in-memory-length",
                "x-max-in-memory-bytes",
                "x-max-priority",
                "x-overflow",
                "x-queue-mode",
                "x-single-active-consumer",
                "x-queue-master-locator",
                "x-delivery-limit",
                "x-dead-letter-strategy",
                "x-quorum-initial-group-size",
                "x-queue-version",
            ],
        }
    }
}

/// Check the arguments of a new `queue_type` queue: the values of those it
/// takes, then that it takes them all. The first refusal, in RabbitMQ's words.
pub fn check_declared(args: &FieldTable, queue_type: QueueType) -> Result<(), ArgError> {
    let refused = queue_type.refused();
    let mut taken = FieldTable::default();
    for (k, v) in args.inner() {
        if !refused.contains(&k.as_str()) {
            taken.insert(k.clone(), v.clone());
        }
    }
    QueueArgs::parse(&taken)?;
    for (k, v) in taken.inner() {
        check_kept(k.as_str(), v)?;
    }
    // RabbitMQ names the first in the order the client sent them; the
    // decoded table is sorted by name, so StableMQ names the first by name.
    match args
        .inner()
        .keys()
        .find_map(|k| refused.iter().copied().find(|r| *r == k.as_str()))
    {
        Some(arg) => Err(ArgError::NotForType {
            arg,
            queue_type: queue_type.module(),
        }),
        None => Ok(()),
    }
}

/// The arguments StableMQ keeps without acting on them (a single node has
/// no leader to locate, memory limits and queue versions do not apply), but
/// whose values RabbitMQ checks.
fn check_kept(key: &str, v: &AMQPValue) -> Result<(), ArgError> {
    let one_of = |arg: &'static str, allowed: &[&str], why: &'static str| {
        let s = string(arg, v)?;
        match allowed.contains(&s.as_str()) {
            true => Ok(()),
            false => Err(ArgError::value(arg, why)),
        }
    };
    match key {
        "x-queue-mode" => {
            let s = string("x-queue-mode", v)?;
            match s.as_str() {
                "default" | "lazy" => Ok(()),
                _ => Err(ArgError::value(
                    "x-queue-mode",
                    format!("\"unsupported queue mode '{s}'\""),
                )),
            }
        }
        "x-queue-version" => match integer("x-queue-version", v)? {
            1 | 2 => Ok(()),
            n => Err(ArgError::value(
                "x-queue-version",
                format!("\"unsupported queue version '{n}'\""),
            )),
        },
        "x-quorum-initial-group-size" => positive("x-quorum-initial-group-size", v).map(drop),
        "x-initial-cluster-size" => positive("x-initial-cluster-size", v).map(drop),
        "x-max-in-memory-length" => non_negative_int("x-max-in-memory-length", v),
        "x-max-in-memory-bytes" => non_negative_int("x-max-in-memory-bytes", v),
        "x-dead-letter-strategy" => one_of(
            "x-dead-letter-strategy",
            &["at-most-once", "at-least-once"],
            "invalid_dlx_strategy",
        ),
        "x-queue-leader-locator" => one_of(
            "x-queue-leader-locator",
            &["client-local", "balanced", "random", "least-leaders"],
            "invalid_queue_locator_arg",
        ),
        _ => Ok(()),
    }
}

fn non_negative_int(arg: &'static str, v: &AMQPValue) -> Result<(), ArgError> {
    match integer(arg, v)? {
        n if n >= 0 => Ok(()),
        n => Err(ArgError::value(arg, format!("{{value_negative,{n}}}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stablemq_protocol::{LongString, ShortString};

    fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
        let mut f = FieldTable::default();
        for (k, v) in pairs {
            f.insert(ShortString::from(*k), v.clone());
        }
        f
    }

    fn s(x: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(x))
    }

    fn answer(pairs: &[(&str, AMQPValue)], t: QueueType) -> String {
        match check_declared(&table(pairs), t) {
            Ok(()) => "ok".into(),
            Err(e) => e.message("/", "q"),
        }
    }

    /// Arguments, the queue type, and the answer.
    type Case<'a> = (&'a [(&'a str, AMQPValue)], QueueType, &'a str);

    /// The answers of a RabbitMQ 3.10.8 node, recorded by hand.
    #[test]
    fn answers_as_rabbitmq() {
        use QueueType::*;
        let cases: &[Case] = &[
            (
                &[("x-max-priority", AMQPValue::LongInt(5))],
                Quorum,
                "invalid arg 'x-max-priority' for queue 'q' in vhost '/' of queue type rabbit_quorum_queue",
            ),
            (
                &[("x-delivery-limit", AMQPValue::LongInt(3))],
                Classic,
                "invalid arg 'x-delivery-limit' for queue 'q' in vhost '/' of queue type rabbit_classic_queue",
            ),
            (
                &[("x-delivery-limit", AMQPValue::LongInt(-1))],
                Classic,
                "invalid arg 'x-delivery-limit' for queue 'q' in vhost '/' of queue type rabbit_classic_queue",
            ),
            (
                &[("x-max-length", AMQPValue::LongInt(-1))],
                Stream,
                "invalid arg 'x-max-length' for queue 'q' in vhost '/' of queue type rabbit_stream_queue",
            ),
            // A value the type takes is checked before a refused argument.
            (
                &[
                    ("x-max-age", s("1h")),
                    ("x-max-length", AMQPValue::LongInt(-1)),
                ],
                Classic,
                "invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}",
            ),
            (
                &[("x-expires", AMQPValue::LongInt(0))],
                Classic,
                "invalid arg 'x-expires' for queue 'q' in vhost '/': {value_zero,0}",
            ),
            (
                &[("x-message-ttl", s("a"))],
                Classic,
                "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': \"expected integer, got longstr\"",
            ),
            (
                &[("x-max-length", AMQPValue::Timestamp(5))],
                Classic,
                "invalid arg 'x-max-length' for queue 'q' in vhost '/': \"expected integer, got timestamp\"",
            ),
            (
                &[("x-max-priority", AMQPValue::LongInt(256))],
                Classic,
                "invalid arg 'x-max-priority' for queue 'q' in vhost '/': {max_value_exceeded,256}",
            ),
            (
                &[("x-overflow", s("bad"))],
                Quorum,
                "invalid arg 'x-overflow' for queue 'q' in vhost '/': invalid_overflow",
            ),
            (
                &[("x-overflow", AMQPValue::LongInt(5))],
                Classic,
                "invalid arg 'x-overflow' for queue 'q' in vhost '/': {unacceptable_type,signedint}",
            ),
            (
                &[("x-single-active-consumer", s("yes"))],
                Classic,
                "invalid arg 'x-single-active-consumer' for queue 'q' in vhost '/': {unacceptable_type,longstr}",
            ),
            (
                &[("x-dead-letter-exchange", AMQPValue::LongInt(5))],
                Classic,
                "invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'",
            ),
            (
                &[("x-dead-letter-routing-key", s("k"))],
                Quorum,
                "invalid arg 'x-dead-letter-routing-key' for queue 'q' in vhost '/': routing_key_but_no_dlx_defined",
            ),
            (
                &[("x-queue-mode", s("bad"))],
                Classic,
                "invalid arg 'x-queue-mode' for queue 'q' in vhost '/': \"unsupported queue mode 'bad'\"",
            ),
            (
                &[("x-queue-version", AMQPValue::LongInt(0))],
                Classic,
                "invalid arg 'x-queue-version' for queue 'q' in vhost '/': \"unsupported queue version '0'\"",
            ),
            (
                &[("x-quorum-initial-group-size", AMQPValue::LongInt(0))],
                Quorum,
                "invalid arg 'x-quorum-initial-group-size' for queue 'q' in vhost '/': {value_zero,0}",
            ),
            (
                &[("x-initial-cluster-size", AMQPValue::LongInt(-1))],
                Stream,
                "invalid arg 'x-initial-cluster-size' for queue 'q' in vhost '/': {value_negative,-1}",
            ),
            (
                &[("x-max-in-memory-bytes", AMQPValue::LongInt(-1))],
                Quorum,
                "invalid arg 'x-max-in-memory-bytes' for queue 'q' in vhost '/': {value_negative,-1}",
            ),
            (
                &[("x-dead-letter-strategy", s("bad"))],
                Quorum,
                "invalid arg 'x-dead-letter-strategy' for queue 'q' in vhost '/': invalid_dlx_strategy",
            ),
            (
                &[("x-queue-leader-locator", s("bad"))],
                Stream,
                "invalid arg 'x-queue-leader-locator' for queue 'q' in vhost '/': invalid_queue_locator_arg",
            ),
            (
                &[("x-max-age", AMQPValue::LongInt(5))],
                Stream,
                "invalid arg 'x-max-age' for queue 'q' in vhost '/': {unacceptable_type,signedint}",
            ),
            (
                &[
                    ("x-foo", AMQPValue::LongInt(1)),
                    ("x-queue-leader-locator", s("balanced")),
                ],
                Quorum,
                "ok",
            ),
            (
                &[
                    ("x-queue-mode", s("lazy")),
                    ("x-max-priority", AMQPValue::LongInt(255)),
                ],
                Classic,
                "ok",
            ),
            (
                &[
                    ("x-delivery-limit", AMQPValue::LongInt(3)),
                    ("x-overflow", s("reject-publish-dlx")),
                ],
                Quorum,
                "ok",
            ),
            (
                &[
                    ("x-max-age", s("1Y")),
                    ("x-initial-cluster-size", AMQPValue::LongInt(3)),
                ],
                Stream,
                "ok",
            ),
        ];
        for (pairs, t, want) in cases {
            assert_eq!(answer(pairs, *t), *want, "{pairs:?} on {t:?}");
        }
    }

    /// What the log holds is read as before: a classic queue an older build
    /// took with `x-delivery-limit` keeps its other arguments.
    #[test]
    fn replay_is_not_checked() {
        let args = table(&[
            ("x-delivery-limit", AMQPValue::LongInt(3)),
            ("x-max-length", AMQPValue::LongInt(7)),
        ]);
        assert!(check_declared(&args, QueueType::Classic).is_err());
        let parsed = QueueArgs::parse(&args).expect("lenient");
        assert_eq!(parsed.max_length, Some(7));
        assert_eq!(parsed.delivery_limit, Some(3));
    }
}
