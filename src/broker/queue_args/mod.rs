//! The `x-` arguments of a queue that change its behaviour, parsed once.
//!
//! Parsing is a pure function of the declared arguments, so every replica derives
//! the same settings from the same `QueueDeclared` event (I4). Validation follows
//! RabbitMQ: a bad value is refused at declare time with 406.

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

/// A refused argument: (name, RabbitMQ-style explanation).
pub type ArgError = (&'static str, String);

fn non_negative(name: &'static str, v: &AMQPValue) -> Result<u64, ArgError> {
    match int(v) {
        Some(n) if n >= 0 => Ok(u64::try_from(n).unwrap_or(u64::MAX)),
        Some(n) => Err((name, format!("{n} must be non-negative"))),
        None => Err((name, format!("{v:?} is not an integer"))),
    }
}

fn positive(name: &'static str, v: &AMQPValue) -> Result<u64, ArgError> {
    match non_negative(name, v)? {
        0 => Err((name, "0 must be positive".into())),
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
                    a.overflow = match text(v).as_deref() {
                        Some("drop-head") => Overflow::DropHead,
                        Some("reject-publish") => Overflow::RejectPublish,
                        Some("reject-publish-dlx") => Overflow::RejectPublishDlx,
                        _ => {
                            return Err((
                                "x-overflow",
                                format!("{v:?} is not a valid overflow mode"),
                            ));
                        }
                    }
                }
                "x-dead-letter-exchange" => {
                    a.dead_letter_exchange = Some(
                        text(v)
                            .ok_or(("x-dead-letter-exchange", format!("{v:?} is not a string")))?,
                    )
                }
                "x-dead-letter-routing-key" => {
                    a.dead_letter_routing_key = Some(text(v).ok_or((
                        "x-dead-letter-routing-key",
                        format!("{v:?} is not a string"),
                    ))?)
                }
                "x-max-priority" => {
                    let n = non_negative("x-max-priority", v)?;
                    if n > 255 {
                        return Err(("x-max-priority", format!("{n} is out of range 0..255")));
                    }
                    // 0 priority levels behaves like a queue without priorities.
                    a.max_priority = (n > 0).then_some(n as u8);
                }
                "x-single-active-consumer" => match v {
                    AMQPValue::Boolean(b) => a.single_active_consumer = *b,
                    _ => {
                        return Err((
                            "x-single-active-consumer",
                            format!("{v:?} is not a boolean"),
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
                        text(v)
                            .as_deref()
                            .and_then(super::stream::parse_age_ms)
                            .ok_or(("x-max-age", "invalid_max_age".to_string()))?,
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
            return Err((
                "x-dead-letter-routing-key",
                "x-dead-letter-exchange must be set too".into(),
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
