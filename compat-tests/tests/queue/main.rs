//! AMQP class `queue`: declare (server-named, passive, exclusive, auto-delete,
//! quorum), bind, unbind, purge and delete, as RabbitMQ does them, and the
//! empty name that means the channel's last declared queue.

use compat_tests::common;

mod declare;
mod lifecycle;
mod shortcut;

use common::*;
use lapin::options::{
    BasicCancelOptions, BasicQosOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ExchangeKind};

fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..Default::default()
    }
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

fn exclusive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    }
}

fn args(pairs: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert((*k).into(), v.clone());
    }
    t
}

fn queue_type(t: &str) -> FieldTable {
    args(&[("x-queue-type", AMQPValue::LongString(t.into()))])
}

async fn try_declare(
    ch: &Channel,
    name: &str,
    opts: QueueDeclareOptions,
    args: FieldTable,
) -> lapin::Result<lapin::Queue> {
    within("queue.declare", ch.queue_declare(name.into(), opts, args)).await
}

async fn queue_exists(conn: &Connection, name: &str) -> bool {
    // A failed passive declare closes its channel, so use a throwaway one.
    let ch = channel(conn).await;
    match try_declare(&ch, name, passive(), FieldTable::default()).await {
        Ok(_) => true,
        Err(e) if reply_code(&e) == Some(NOT_FOUND) => false,
        Err(e) => panic!("passive queue.declare {name}: {e:?}"),
    }
}

async fn delete(ch: &Channel, name: &str, opts: QueueDeleteOptions) -> lapin::Result<u32> {
    within("queue.delete", ch.queue_delete(name.into(), opts)).await
}
