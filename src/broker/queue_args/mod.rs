//! The `x-` arguments of a queue that change its behaviour, parsed once.
//!
//! Parsing is a pure function of the declared arguments, so every replica derives
//! the same settings from the same `QueueDeclared` event (I4). Validation follows
//! RabbitMQ: a bad value is refused at declare time with 406, in RabbitMQ's
//! words (`check.rs`: which arguments each queue type takes).

mod check;

pub use check::{QueueType, check_declared};

use stablemq_protocol::{AMQPValue, FieldTable};

/// What happens when a queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Drop (or dead-letter) the oldest ready message.
    #[default]
    DropHead,
    /// Refuse the new message (nack to confirming publishers).
    RejectPublish,
    /// Refuse the new message and dead-letter it.
    RejectPublishDlx,
}

/// Parsed queue arguments.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueArgs {
    /// `x-message-ttl` in ms.
    pub message_ttl: Option<u64>,
    /// `x-expires` in ms: delete the queue after this long unused.
    pub expires: Option<u64>,
    /// `x-max-length`: most ready messages.
    pub max_length: Option<u64>,
    /// `x-max-length-bytes`: most ready body bytes.
    pub max_length_bytes: Option<u64>,
    /// `x-overflow`.
    pub overflow: Overflow,
    /// `x-dead-letter-exchange`.
    pub dead_letter_exchange: Option<String>,
    /// `x-dead-letter-routing-key`.
    pub dead_letter_routing_key: Option<String>,
    /// `x-max-priority` (1..=255).
    pub max_priority: Option<u8>,
    /// `x-single-active-consumer`.
    pub single_active_consumer: bool,
    /// `x-delivery-limit` (quorum queues).
    pub delivery_limit: Option<u64>,
    /// `x-consumer-timeout` in ms.
    pub consumer_timeout: Option<u64>,
    /// `x-queue-type` is quorum.
    pub quorum: bool,
    /// `x-queue-type` is stream (`broker::stream`).
    pub stream: bool,
    /// `x-max-age` of a stream, in ms (policy key `max-age`).
    pub max_age_ms: Option<u64>,
    /// `x-stream-max-segment-size-bytes` (policy key
    /// `stream-max-segment-size-bytes`).
    pub max_segment_bytes: Option<u64>,
}

/// An integer argument of any AMQP integer type.
pub fn int(v: &AMQPValue) -> Option<i128> {
    Some(match v {
        AMQPValue::ShortShortInt(x) => *x as i128,
        AMQPValue::ShortShortUInt(x) => *x as i128,
        AMQPValue::ShortInt(x) => *x as i128,
        AMQPValue::ShortUInt(x) => *x as i128,
        AMQPValue::LongInt(x) => *x as i128,
        AMQPValue::LongUInt(x) => *x as i128,
        AMQPValue::LongLongInt(x) => *x as i128,
        AMQPValue::Timestamp(x) => *x as i128,
        _ => return None,
    })
}

/// The text of a string argument.
pub fn text(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        _ => None,
    }
}

/// A refused argument, in RabbitMQ's words (`message` gives the whole text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    /// A bad value: "invalid arg 'ARG' for queue 'Q' in vhost 'V': WHY", WHY
    /// as RabbitMQ prints it (`{value_negative,-1}`, `invalid_overflow`, ...).
    Value {
        /// The argument.
        arg: &'static str,
        /// Why, as RabbitMQ prints it.
        why: String,
    },
    /// An argument of another queue type.
    NotForType {
        /// The argument.
        arg: &'static str,
        /// The queue type's RabbitMQ module (`rabbit_quorum_queue`).
        queue_type: &'static str,
    },
    /// An `x-dead-letter-exchange` that is not a string, which RabbitMQ words
    /// apart from the rest.
    Type {
        /// The argument.
        arg: &'static str,
        /// The value's type, by RabbitMQ's name ([`type_name`]).
        type_name: &'static str,
    },
}

impl ArgError {
    /// RabbitMQ's text of the 406 for queue `queue` in vhost `vhost`.
    pub fn message(&self, vhost: &str, queue: &str) -> String {
        match self {
            ArgError::Value { arg, why } => {
                format!("invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}': {why}")
            }
            ArgError::NotForType { arg, queue_type } => format!(
                "invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}' of queue type {queue_type}"
            ),
            ArgError::Type { arg, type_name } => format!(
                "invalid type '{type_name}' for arg '{arg}' in queue '{queue}' in vhost '{vhost}'"
            ),
        }
    }

    /// The argument it names.
    pub fn arg(&self) -> &'static str {
        match self {
            ArgError::Value { arg, .. }
            | ArgError::NotForType { arg, .. }
            | ArgError::Type { arg, .. } => arg,
        }
    }

    pub(super) fn value(arg: &'static str, why: impl Into<String>) -> ArgError {
        ArgError::Value {
            arg,
            why: why.into(),
        }
    }
}

/// The name RabbitMQ gives a field table value's type in its errors.
pub fn type_name(v: &AMQPValue) -> &'static str {
    match v {
        AMQPValue::Boolean(_) => "bool",
        AMQPValue::ShortShortInt(_) => "byte",
        AMQPValue::ShortShortUInt(_) => "unsignedbyte",
        AMQPValue::ShortInt(_) => "short",
        AMQPValue::ShortUInt(_) => "unsignedshort",
        AMQPValue::LongInt(_) => "signedint",
        AMQPValue::LongUInt(_) => "unsignedint",
        AMQPValue::LongLongInt(_) => "long",
        AMQPValue::Float(_) => "float",
        AMQPValue::Double(_) => "double",
        AMQPValue::DecimalValue(_) => "decimal",
        AMQPValue::ShortString(_) => "shortstr",
        AMQPValue::LongString(_) => "longstr",
        AMQPValue::FieldArray(_) => "array",
        AMQPValue::Timestamp(_) => "timestamp",
        AMQPValue::FieldTable(_) => "table",
        AMQPValue::ByteArray(_) => "binary",
        AMQPValue::Void => "void",
    }
}

/// An integer argument, as RabbitMQ checks one: any AMQP integer type (not
/// a timestamp), else `"expected integer, got TYPE"`.
pub(super) fn integer(name: &'static str, v: &AMQPValue) -> Result<i128, ArgError> {
    match v {
        AMQPValue::Timestamp(_) => None,
        _ => int(v),
    }
    .ok_or_else(|| ArgError::value(name, format!("\"expected integer, got {}\"", type_name(v))))
}

/// A string argument, else RabbitMQ's `{unacceptable_type,TYPE}`.
pub(super) fn string(name: &'static str, v: &AMQPValue) -> Result<String, ArgError> {
    text(v).ok_or_else(|| ArgError::value(name, format!("{{unacceptable_type,{}}}", type_name(v))))
}

fn non_negative(name: &'static str, v: &AMQPValue) -> Result<u64, ArgError> {
    match integer(name, v)? {
        n if n >= 0 => Ok(u64::try_from(n).unwrap_or(u64::MAX)),
        n => Err(ArgError::value(name, format!("{{value_negative,{n}}}"))),
    }
}

pub(super) fn positive(name: &'static str, v: &AMQPValue) -> Result<u64, ArgError> {
    match non_negative(name, v)? {
        0 => Err(ArgError::value(name, "{value_zero,0}")),
        n => Ok(n),
    }
}

impl QueueArgs {
    /// Parse and validate; an error names the argument and why.
    pub fn parse(args: &FieldTable) -> Result<QueueArgs, ArgError> {
        let mut a = QueueArgs::default();
        for (k, v) in args.inner() {
            match k.as_str() {
                "x-message-ttl" => a.message_ttl = Some(non_negative("x-message-ttl", v)?),
                "x-expires" => a.expires = Some(positive("x-expires", v)?),
                "x-max-length" => a.max_length = Some(non_negative("x-max-length", v)?),
                "x-max-length-bytes" => {
                    a.max_length_bytes = Some(non_negative("x-max-length-bytes", v)?)
                }
                "x-overflow" => {
                    a.overflow = match string("x-overflow", v)?.as_str() {
                        "drop-head" => Overflow::DropHead,
                        "reject-publish" => Overflow::RejectPublish,
                        "reject-publish-dlx" => Overflow::RejectPublishDlx,
                        _ => return Err(ArgError::value("x-overflow", "invalid_overflow")),
                    }
                }
                "x-dead-letter-exchange" => {
                    a.dead_letter_exchange = Some(text(v).ok_or(ArgError::Type {
                        arg: "x-dead-letter-exchange",
                        type_name: type_name(v),
                    })?)
                }
                "x-dead-letter-routing-key" => {
                    a.dead_letter_routing_key = Some(string("x-dead-letter-routing-key", v)?)
                }
                "x-max-priority" => {
                    let n = non_negative("x-max-priority", v)?;
                    if n > 255 {
                        return Err(ArgError::value(
                            "x-max-priority",
                            format!("{{max_value_exceeded,{n}}}"),
                        ));
                    }
                    // 0 priority levels behaves like a queue without priorities.
                    a.max_priority = (n > 0).then_some(n as u8);
                }
                "x-single-active-consumer" => match v {
                    AMQPValue::Boolean(b) => a.single_active_consumer = *b,
                    _ => {
                        return Err(ArgError::value(
                            "x-single-active-consumer",
                            format!("{{unacceptable_type,{}}}", type_name(v)),
                        ));
                    }
                },
                "x-delivery-limit" => a.delivery_limit = Some(non_negative("x-delivery-limit", v)?),
                "x-consumer-timeout" => {
                    a.consumer_timeout = Some(positive("x-consumer-timeout", v)?)
                }
                "x-queue-type" => {
                    a.quorum = text(v).as_deref() == Some("quorum");
                    a.stream = text(v).as_deref() == Some("stream");
                }
                "x-max-age" => {
                    a.max_age_ms = Some(
                        super::stream::parse_age_ms(&string("x-max-age", v)?)
                            .ok_or(ArgError::value("x-max-age", "invalid_max_age"))?,
                    )
                }
                // 0 is accepted, as RabbitMQ 3.10 does: every entry closes its
                // segment. The upper bound is a stream's (declare checks it).
                "x-stream-max-segment-size-bytes" => {
                    a.max_segment_bytes = Some(non_negative("x-stream-max-segment-size-bytes", v)?)
                }
                _ => {}
            }
        }
        if a.dead_letter_routing_key.is_some() && a.dead_letter_exchange.is_none() {
            return Err(ArgError::value(
                "x-dead-letter-routing-key",
                "routing_key_but_no_dlx_defined",
            ));
        }
        Ok(a)
    }

    /// The arguments in force once a policy's definition is merged in, by
    /// RabbitMQ's rule: numeric limits take the smaller of argument and
    /// policy, every other key keeps the argument when there is one.
    pub fn with_policy(
        args: &FieldTable,
        policy: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> QueueArgs {
        // Declare validated the arguments; a log written by an older build that
        // fails validation gets the defaults rather than a crash.
        let mut a = QueueArgs::parse(args).unwrap_or_default();
        let Some(def) = policy else {
            return a;
        };
        use super::policy::{number, string};
        let min = |arg: Option<u64>, pol: Option<u64>| match (arg, pol) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        a.message_ttl = min(a.message_ttl, number(def, "message-ttl"));
        a.expires = min(a.expires, number(def, "expires").filter(|n| *n > 0));
        a.max_length = min(a.max_length, number(def, "max-length"));
        a.max_length_bytes = min(a.max_length_bytes, number(def, "max-length-bytes"));
        a.delivery_limit = min(a.delivery_limit, number(def, "delivery-limit"));
        if a.max_age_ms.is_none() {
            a.max_age_ms = string(def, "max-age")
                .as_deref()
                .and_then(super::stream::parse_age_ms);
        }
        if a.max_segment_bytes.is_none() {
            a.max_segment_bytes = number(def, "stream-max-segment-size-bytes").filter(|n| *n > 0);
        }
        let has = |k: &str| args.inner().contains_key(k);
        if !has("x-overflow") {
            a.overflow = match string(def, "overflow").as_deref() {
                Some("reject-publish") => Overflow::RejectPublish,
                Some("reject-publish-dlx") => Overflow::RejectPublishDlx,
                _ => a.overflow,
            };
        }
        if a.dead_letter_exchange.is_none() {
            a.dead_letter_exchange = string(def, "dead-letter-exchange");
        }
        if a.dead_letter_routing_key.is_none() {
            a.dead_letter_routing_key = string(def, "dead-letter-routing-key");
        }
        a
    }

    /// The delivery limit in force: quorum queues default to 20 since RabbitMQ 4.0.
    pub fn effective_delivery_limit(&self) -> Option<u64> {
        self.delivery_limit
            .or(if self.quorum { Some(20) } else { None })
    }

    /// The segment size a stream closes its open segment at.
    pub fn segment_bytes(&self) -> u64 {
        self.max_segment_bytes
            .unwrap_or(super::stream::DEFAULT_MAX_SEGMENT_BYTES)
    }

    /// The queue has a length limit.
    pub fn is_bounded(&self) -> bool {
        self.max_length.is_some() || self.max_length_bytes.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stablemq_protocol::{LongString, ShortString};

    fn t(pairs: &[(&str, AMQPValue)]) -> FieldTable {
        let mut f = FieldTable::default();
        for (k, v) in pairs {
            f.insert(ShortString::from(*k), v.clone());
        }
        f
    }

    #[test]
    fn parses_and_refuses_like_rabbitmq() {
        let a = QueueArgs::parse(&t(&[
            ("x-message-ttl", AMQPValue::LongInt(100)),
            ("x-max-priority", AMQPValue::ShortShortUInt(10)),
            (
                "x-overflow",
                AMQPValue::LongString(LongString::from("reject-publish")),
            ),
            (
                "x-dead-letter-exchange",
                AMQPValue::LongString(LongString::from("dlx")),
            ),
        ]))
        .unwrap();
        assert_eq!(a.message_ttl, Some(100));
        assert_eq!(a.max_priority, Some(10));
        assert_eq!(a.overflow, Overflow::RejectPublish);
        assert!(QueueArgs::parse(&t(&[("x-message-ttl", AMQPValue::LongInt(-1))])).is_err());
        assert!(QueueArgs::parse(&t(&[("x-max-priority", AMQPValue::LongInt(256))])).is_err());
        assert_eq!(
            QueueArgs::parse(&t(&[("x-max-priority", AMQPValue::LongInt(0))]))
                .unwrap()
                .max_priority,
            None
        );
        assert!(QueueArgs::parse(&t(&[("x-expires", AMQPValue::LongInt(0))])).is_err());
        assert!(
            QueueArgs::parse(&t(&[(
                "x-overflow",
                AMQPValue::LongString(LongString::from("x"))
            )]))
            .is_err()
        );
        assert!(
            QueueArgs::parse(&t(&[(
                "x-message-ttl",
                AMQPValue::LongString(LongString::from("1"))
            )]))
            .is_err()
        );
    }
}
