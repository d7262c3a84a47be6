//! Strategies and helpers shared by the integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use stablemq_protocol::methods::{basic, channel, confirm, connection, exchange, queue, tx};
use stablemq_protocol::types::{ByteArray, DecimalValue};
use stablemq_protocol::{
    AMQPClass, AMQPValue, BasicProperties, FieldArray, FieldTable, Frame, FrameError, LongString,
    ShortString, decode_frame, encode_frame,
};

/// Any UTF-8 string that fits a shortstr, biased towards short ones but reaching
/// the 255-octet limit.
pub fn short_string() -> BoxedStrategy<ShortString> {
    prop_oneof![
        4 => "[a-zA-Z0-9._:/-]{0,24}",
        2 => ".{0,60}", // arbitrary Unicode, at most 240 octets
        1 => "[a-z]{250,255}",
    ]
    .prop_map(ShortString::from)
    .boxed()
}

pub fn long_string() -> BoxedStrategy<LongString> {
    prop::collection::vec(any::<u8>(), 0..64)
        .prop_map(LongString::from)
        .boxed()
}

/// Every field value amq-protocol round-trips. Not `AMQPValue::ShortString`
/// (serialised with type tag '_', which no parser accepts) and no NaN (NaN != NaN).
fn leaf_value() -> BoxedStrategy<AMQPValue> {
    prop_oneof![
        any::<bool>().prop_map(AMQPValue::Boolean),
        any::<i8>().prop_map(AMQPValue::ShortShortInt),
        any::<u8>().prop_map(AMQPValue::ShortShortUInt),
        any::<i16>().prop_map(AMQPValue::ShortInt),
        any::<u16>().prop_map(AMQPValue::ShortUInt),
        any::<i32>().prop_map(AMQPValue::LongInt),
        any::<u32>().prop_map(AMQPValue::LongUInt),
        any::<i64>().prop_map(AMQPValue::LongLongInt),
        any::<f32>()
            .prop_filter("NaN", |f| !f.is_nan())
            .prop_map(AMQPValue::Float),
        any::<f64>()
            .prop_filter("NaN", |f| !f.is_nan())
            .prop_map(AMQPValue::Double),
        (any::<u8>(), any::<u32>())
            .prop_map(|(scale, value)| AMQPValue::DecimalValue(DecimalValue { scale, value })),
        long_string().prop_map(AMQPValue::LongString),
        any::<u64>().prop_map(AMQPValue::Timestamp),
        prop::collection::vec(any::<u8>(), 0..32)
            .prop_map(|v| AMQPValue::ByteArray(ByteArray::from(v))),
        Just(AMQPValue::Void),
    ]
    .boxed()
}

pub fn field_value() -> BoxedStrategy<AMQPValue> {
    leaf_value()
        .prop_recursive(3, 24, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5)
                    .prop_map(|v| AMQPValue::FieldArray(FieldArray::from(v))),
                prop::collection::btree_map(short_string(), inner, 0..5)
                    .prop_map(|m| AMQPValue::FieldTable(FieldTable::from(m))),
            ]
        })
        .boxed()
}

pub fn field_table() -> BoxedStrategy<FieldTable> {
    prop::collection::btree_map(short_string(), field_value(), 0..6)
        .prop_map(FieldTable::from)
        .boxed()
}

pub fn properties() -> BoxedStrategy<BasicProperties> {
    let strings = (
        prop::option::of(short_string()),
        prop::option::of(short_string()),
        prop::option::of(short_string()),
        prop::option::of(short_string()),
        prop::option::of(short_string()),
        prop::option::of(short_string()),
        prop::option::of(short_string()),
    );
    let more_strings = (
        prop::option::of(short_string()),
        prop::option::of(short_string()),
        prop::option::of(short_string()),
    );
    let others = (
        prop::option::of(field_table()),
        prop::option::of(any::<u8>()),
        prop::option::of(any::<u8>()),
        prop::option::of(any::<u64>()),
    );
    (strings, more_strings, others)
        .prop_map(|(s, m, o)| {
            let mut p = BasicProperties::default();
            if let Some(v) = s.0 {
                p = p.with_content_type(v)
            }
            if let Some(v) = s.1 {
                p = p.with_content_encoding(v)
            }
            if let Some(v) = s.2 {
                p = p.with_correlation_id(v)
            }
            if let Some(v) = s.3 {
                p = p.with_reply_to(v)
            }
            if let Some(v) = s.4 {
                p = p.with_expiration(v)
            }
            if let Some(v) = s.5 {
                p = p.with_message_id(v)
            }
            if let Some(v) = s.6 {
                p = p.with_type(v)
            }
            if let Some(v) = m.0 {
                p = p.with_user_id(v)
            }
            if let Some(v) = m.1 {
                p = p.with_app_id(v)
            }
            if let Some(v) = m.2 {
                p = p.with_cluster_id(v)
            }
            if let Some(v) = o.0 {
                p = p.with_headers(v)
            }
            if let Some(v) = o.1 {
                p = p.with_delivery_mode(v)
            }
            if let Some(v) = o.2 {
                p = p.with_priority(v)
            }
            if let Some(v) = o.3 {
                p = p.with_timestamp(v)
            }
            p
        })
        .boxed()
}

fn connection_method() -> BoxedStrategy<AMQPClass> {
    use connection::*;
    prop_oneof![
        (
            any::<u8>(),
            any::<u8>(),
            field_table(),
            long_string(),
            long_string()
        )
            .prop_map(
                |(version_major, version_minor, server_properties, mechanisms, locales)| {
                    AMQPMethod::Start(Start {
                        version_major,
                        version_minor,
                        server_properties,
                        mechanisms,
                        locales,
                    })
                }
            ),
        (field_table(), short_string(), long_string(), short_string()).prop_map(
            |(client_properties, mechanism, response, locale)| {
                AMQPMethod::StartOk(StartOk {
                    client_properties,
                    mechanism,
                    response,
                    locale,
                })
            }
        ),
        long_string().prop_map(|challenge| AMQPMethod::Secure(Secure { challenge })),
        long_string().prop_map(|response| AMQPMethod::SecureOk(SecureOk { response })),
        (any::<u16>(), any::<u32>(), any::<u16>()).prop_map(
            |(channel_max, frame_max, heartbeat)| {
                AMQPMethod::Tune(Tune {
                    channel_max,
                    frame_max,
                    heartbeat,
                })
            }
        ),
        (any::<u16>(), any::<u32>(), any::<u16>()).prop_map(
            |(channel_max, frame_max, heartbeat)| {
                AMQPMethod::TuneOk(TuneOk {
                    channel_max,
                    frame_max,
                    heartbeat,
                })
            }
        ),
        short_string().prop_map(|virtual_host| AMQPMethod::Open(Open { virtual_host })),
        (any::<u16>(), short_string(), any::<u16>(), any::<u16>()).prop_map(
            |(reply_code, reply_text, class_id, method_id)| {
                AMQPMethod::Close(Close {
                    reply_code,
                    reply_text,
                    class_id,
                    method_id,
                })
            }
        ),
        short_string().prop_map(|reason| AMQPMethod::Blocked(Blocked { reason })),
        (long_string(), short_string()).prop_map(|(new_secret, reason)| AMQPMethod::UpdateSecret(
            UpdateSecret { new_secret, reason }
        )),
        Just(AMQPMethod::OpenOk(OpenOk {})),
        Just(AMQPMethod::CloseOk(CloseOk {})),
        Just(AMQPMethod::Unblocked(Unblocked {})),
        Just(AMQPMethod::UpdateSecretOk(UpdateSecretOk {})),
    ]
    .prop_map(AMQPClass::Connection)
    .boxed()
}

fn channel_method() -> BoxedStrategy<AMQPClass> {
    use channel::*;
    prop_oneof![
        Just(AMQPMethod::Open(Open {})),
        Just(AMQPMethod::OpenOk(OpenOk {})),
        any::<bool>().prop_map(|active| AMQPMethod::Flow(Flow { active })),
        any::<bool>().prop_map(|active| AMQPMethod::FlowOk(FlowOk { active })),
        (any::<u16>(), short_string(), any::<u16>(), any::<u16>()).prop_map(
            |(reply_code, reply_text, class_id, method_id)| {
                AMQPMethod::Close(Close {
                    reply_code,
                    reply_text,
                    class_id,
                    method_id,
                })
            }
        ),
        Just(AMQPMethod::CloseOk(CloseOk {})),
    ]
    .prop_map(AMQPClass::Channel)
    .boxed()
}

fn exchange_method() -> BoxedStrategy<AMQPClass> {
    use exchange::*;
    let flags5 = prop::array::uniform5(any::<bool>());
    prop_oneof![
        (short_string(), short_string(), flags5, field_table()).prop_map(
            |(exchange, kind, f, arguments)| {
                AMQPMethod::Declare(Declare {
                    exchange,
                    kind,
                    passive: f[0],
                    durable: f[1],
                    auto_delete: f[2],
                    internal: f[3],
                    nowait: f[4],
                    arguments,
                })
            }
        ),
        (short_string(), any::<bool>(), any::<bool>()).prop_map(|(exchange, if_unused, nowait)| {
            AMQPMethod::Delete(Delete {
                exchange,
                if_unused,
                nowait,
            })
        }),
        (
            short_string(),
            short_string(),
            short_string(),
            any::<bool>(),
            field_table()
        )
            .prop_map(|(destination, source, routing_key, nowait, arguments)| {
                AMQPMethod::Bind(Bind {
                    destination,
                    source,
                    routing_key,
                    nowait,
                    arguments,
                })
            }),
        (
            short_string(),
            short_string(),
            short_string(),
            any::<bool>(),
            field_table()
        )
            .prop_map(|(destination, source, routing_key, nowait, arguments)| {
                AMQPMethod::Unbind(Unbind {
                    destination,
                    source,
                    routing_key,
                    nowait,
                    arguments,
                })
            }),
        Just(AMQPMethod::DeclareOk(DeclareOk {})),
        Just(AMQPMethod::DeleteOk(DeleteOk {})),
        Just(AMQPMethod::BindOk(BindOk {})),
        Just(AMQPMethod::UnbindOk(UnbindOk {})),
    ]
    .prop_map(AMQPClass::Exchange)
    .boxed()
}

fn queue_method() -> BoxedStrategy<AMQPClass> {
    use queue::*;
    let flags5 = prop::array::uniform5(any::<bool>());
    prop_oneof![
        (short_string(), flags5, field_table()).prop_map(|(queue, f, arguments)| {
            AMQPMethod::Declare(Declare {
                queue,
                passive: f[0],
                durable: f[1],
                exclusive: f[2],
                auto_delete: f[3],
                nowait: f[4],
                arguments,
            })
        }),
        (short_string(), any::<u32>(), any::<u32>()).prop_map(
            |(queue, message_count, consumer_count)| {
                AMQPMethod::DeclareOk(DeclareOk {
                    queue,
                    message_count,
                    consumer_count,
                })
            }
        ),
        (
            short_string(),
            short_string(),
            short_string(),
            any::<bool>(),
            field_table()
        )
            .prop_map(|(queue, exchange, routing_key, nowait, arguments)| {
                AMQPMethod::Bind(Bind {
                    queue,
                    exchange,
                    routing_key,
                    nowait,
                    arguments,
                })
            }),
        (short_string(), any::<bool>())
            .prop_map(|(queue, nowait)| AMQPMethod::Purge(Purge { queue, nowait })),
        any::<u32>().prop_map(|message_count| AMQPMethod::PurgeOk(PurgeOk { message_count })),
        (short_string(), prop::array::uniform3(any::<bool>())).prop_map(|(queue, f)| {
            AMQPMethod::Delete(Delete {
                queue,
                if_unused: f[0],
                if_empty: f[1],
                nowait: f[2],
            })
        }),
        any::<u32>().prop_map(|message_count| AMQPMethod::DeleteOk(DeleteOk { message_count })),
        (
            short_string(),
            short_string(),
            short_string(),
            field_table()
        )
            .prop_map(|(queue, exchange, routing_key, arguments)| {
                AMQPMethod::Unbind(Unbind {
                    queue,
                    exchange,
                    routing_key,
                    arguments,
                })
            }),
        Just(AMQPMethod::BindOk(BindOk {})),
        Just(AMQPMethod::UnbindOk(UnbindOk {})),
    ]
    .prop_map(AMQPClass::Queue)
    .boxed()
}

fn basic_method() -> BoxedStrategy<AMQPClass> {
    use basic::*;
    let tag = any::<u64>();
    prop_oneof![
        (any::<u16>(), any::<bool>()).prop_map(|(prefetch_count, global)| AMQPMethod::Qos(Qos {
            prefetch_count,
            global
        })),
        Just(AMQPMethod::QosOk(QosOk {})),
        (
            short_string(),
            short_string(),
            prop::array::uniform4(any::<bool>()),
            field_table()
        )
            .prop_map(|(queue, consumer_tag, f, arguments)| {
                AMQPMethod::Consume(Consume {
                    queue,
                    consumer_tag,
                    no_local: f[0],
                    no_ack: f[1],
                    exclusive: f[2],
                    nowait: f[3],
                    arguments,
                })
            }),
        short_string().prop_map(|consumer_tag| AMQPMethod::ConsumeOk(ConsumeOk { consumer_tag })),
        (short_string(), any::<bool>()).prop_map(|(consumer_tag, nowait)| AMQPMethod::Cancel(
            Cancel {
                consumer_tag,
                nowait
            }
        )),
        short_string().prop_map(|consumer_tag| AMQPMethod::CancelOk(CancelOk { consumer_tag })),
        (short_string(), short_string(), any::<bool>(), any::<bool>()).prop_map(
            |(exchange, routing_key, mandatory, immediate)| {
                AMQPMethod::Publish(Publish {
                    exchange,
                    routing_key,
                    mandatory,
                    immediate,
                })
            }
        ),
        (any::<u16>(), short_string(), short_string(), short_string()).prop_map(
            |(reply_code, reply_text, exchange, routing_key)| {
                AMQPMethod::Return(Return {
                    reply_code,
                    reply_text,
                    exchange,
                    routing_key,
                })
            }
        ),
        deliver(),
        (short_string(), any::<bool>())
            .prop_map(|(queue, no_ack)| AMQPMethod::Get(Get { queue, no_ack })),
        (
            tag,
            any::<bool>(),
            short_string(),
            short_string(),
            any::<u32>()
        )
            .prop_map(
                |(delivery_tag, redelivered, exchange, routing_key, message_count)| {
                    AMQPMethod::GetOk(GetOk {
                        delivery_tag,
                        redelivered,
                        exchange,
                        routing_key,
                        message_count,
                    })
                }
            ),
        Just(AMQPMethod::GetEmpty(GetEmpty {})),
        (tag, any::<bool>()).prop_map(|(delivery_tag, multiple)| AMQPMethod::Ack(Ack {
            delivery_tag,
            multiple
        })),
        (tag, any::<bool>()).prop_map(|(delivery_tag, requeue)| AMQPMethod::Reject(Reject {
            delivery_tag,
            requeue
        })),
        any::<bool>().prop_map(|requeue| AMQPMethod::RecoverAsync(RecoverAsync { requeue })),
        any::<bool>().prop_map(|requeue| AMQPMethod::Recover(Recover { requeue })),
        Just(AMQPMethod::RecoverOk(RecoverOk {})),
        (tag, any::<bool>(), any::<bool>()).prop_map(|(delivery_tag, multiple, requeue)| {
            AMQPMethod::Nack(Nack {
                delivery_tag,
                multiple,
                requeue,
            })
        }),
    ]
    .prop_map(AMQPClass::Basic)
    .boxed()
}

fn deliver() -> BoxedStrategy<basic::AMQPMethod> {
    (
        short_string(),
        any::<u64>(),
        any::<bool>(),
        short_string(),
        short_string(),
    )
        .prop_map(
            |(consumer_tag, delivery_tag, redelivered, exchange, routing_key)| {
                basic::AMQPMethod::Deliver(basic::Deliver {
                    consumer_tag,
                    delivery_tag,
                    redelivered,
                    exchange,
                    routing_key,
                })
            },
        )
        .boxed()
}

fn confirm_and_tx_method() -> BoxedStrategy<AMQPClass> {
    prop_oneof![
        any::<bool>().prop_map(|nowait| AMQPClass::Confirm(confirm::AMQPMethod::Select(
            confirm::Select { nowait }
        ))),
        Just(AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(
            confirm::SelectOk {}
        ))),
        Just(AMQPClass::Tx(tx::AMQPMethod::Select(tx::Select {}))),
        Just(AMQPClass::Tx(tx::AMQPMethod::SelectOk(tx::SelectOk {}))),
        Just(AMQPClass::Tx(tx::AMQPMethod::Commit(tx::Commit {}))),
        Just(AMQPClass::Tx(tx::AMQPMethod::CommitOk(tx::CommitOk {}))),
        Just(AMQPClass::Tx(tx::AMQPMethod::Rollback(tx::Rollback {}))),
        Just(AMQPClass::Tx(tx::AMQPMethod::RollbackOk(tx::RollbackOk {}))),
    ]
    .boxed()
}

/// A method of any class the broker uses, with arbitrary arguments.
pub fn method() -> BoxedStrategy<AMQPClass> {
    prop_oneof![
        2 => connection_method(),
        1 => channel_method(),
        2 => exchange_method(),
        2 => queue_method(),
        3 => basic_method(),
        1 => confirm_and_tx_method(),
    ]
    .boxed()
}

pub fn body_bytes(max: usize) -> BoxedStrategy<Bytes> {
    prop::collection::vec(any::<u8>(), 0..max)
        .prop_map(Bytes::from)
        .boxed()
}

/// Any single frame.
pub fn frame() -> BoxedStrategy<Frame> {
    prop_oneof![
        (any::<u16>(), method()).prop_map(|(channel, method)| method_frame(channel, method)),
        (any::<u16>(), any::<u16>(), any::<u64>(), properties()).prop_map(
            |(channel, class_id, body_size, properties)| Frame::Header {
                channel,
                class_id,
                body_size,
                properties: Arc::new(properties)
            }
        ),
        (any::<u16>(), body_bytes(300))
            .prop_map(|(channel, payload)| Frame::Body { channel, payload }),
        any::<u16>().prop_map(|channel| Frame::Heartbeat { channel }),
    ]
    .boxed()
}

/// A method as the decoder hands it out: basic.publish in its own frame.
pub fn method_frame(channel: u16, method: AMQPClass) -> Frame {
    match method {
        AMQPClass::Basic(basic::AMQPMethod::Publish(p)) => Frame::Publish {
            channel,
            publish: p.into(),
        },
        method => Frame::Method { channel, method },
    }
}

pub fn encode(frame: &Frame) -> BytesMut {
    let mut out = BytesMut::new();
    encode_frame(frame, &mut out);
    out
}

/// Decodes frames until the buffer runs dry or an error; the buffer must be
/// empty at the end for a clean stream.
pub fn decode_all(buf: &mut BytesMut, frame_max: u32) -> Result<Vec<Frame>, FrameError> {
    let mut frames = Vec::new();
    while let Some(frame) = decode_frame(buf, frame_max)? {
        frames.push(frame);
    }
    Ok(frames)
}

/// A table holding `levels` nested tables, so its nesting depth is `levels + 1`.
pub fn nested_table(levels: usize) -> FieldTable {
    let mut table = FieldTable::default();
    for _ in 0..levels {
        let mut outer = BTreeMap::new();
        outer.insert(ShortString::from("k"), AMQPValue::FieldTable(table));
        table = FieldTable::from(outer);
    }
    table
}
