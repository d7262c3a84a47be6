//! AMQP class `exchange`: declare, delete, bind, and the routing of the four
//! built-in exchange types, as RabbitMQ does them.

use compat_tests::common;
mod declare;
mod routing;

use common::*;
use lapin::options::{
    BasicPublishOptions, ExchangeBindOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    ExchangeUnbindOptions, QueueBindOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};

fn passive() -> ExchangeDeclareOptions {
    ExchangeDeclareOptions {
        passive: true,
        ..Default::default()
    }
}

async fn declare_exchange(ch: &Channel, name: &str, kind: ExchangeKind) {
    declare_exchange_with(ch, name, kind, ExchangeDeclareOptions::default()).await
}

async fn declare_exchange_with(
    ch: &Channel,
    name: &str,
    kind: ExchangeKind,
    opts: ExchangeDeclareOptions,
) {
    within(
        "exchange.declare",
        ch.exchange_declare(name.into(), kind, opts, FieldTable::default()),
    )
    .await
    .unwrap_or_else(|e| panic!("exchange.declare {name}: {e:?}"))
}

async fn try_declare(
    ch: &Channel,
    name: &str,
    kind: ExchangeKind,
    opts: ExchangeDeclareOptions,
) -> lapin::Result<()> {
    within(
        "exchange.declare",
        ch.exchange_declare(name.into(), kind, opts, FieldTable::default()),
    )
    .await
}

async fn exchange_exists(conn: &Connection, name: &str) -> bool {
    // A failed passive declare closes its channel, so use a throwaway one.
    let ch = channel(conn).await;
    match try_declare(&ch, name, ExchangeKind::Direct, passive()).await {
        Ok(()) => true,
        Err(e) if reply_code(&e) == Some(NOT_FOUND) => false,
        Err(e) => panic!("passive exchange.declare {name}: {e:?}"),
    }
}

async fn bind(ch: &Channel, queue: &str, exchange: &str, key: &str, args: FieldTable) {
    within(
        "queue.bind",
        ch.queue_bind(
            queue.into(),
            exchange.into(),
            key.into(),
            QueueBindOptions::default(),
            args,
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("queue.bind {queue} to {exchange} with {key:?}: {e:?}"))
}

/// Publish one message (awaiting its confirm, so routing is complete) and return
/// the indexes of the queues that received it. Every queue is left empty.
async fn routed_to(
    ch: &Channel,
    exchange: &str,
    key: &str,
    props: BasicProperties,
    queues: &[String],
) -> Vec<usize> {
    assert!(ch.status().confirm(), "routed_to needs a confirm channel");
    let c = publish_full(
        ch,
        exchange,
        key,
        BasicPublishOptions::default(),
        b"routed",
        props,
    )
    .await;
    assert!(c.is_ack(), "publish to {exchange}/{key:?} not acked: {c:?}");
    let mut hit = Vec::new();
    for (i, q) in queues.iter().enumerate() {
        let n = drain(ch, q).await.len();
        assert!(n <= 1, "queue {i} got {n} copies of one message");
        if n == 1 {
            hit.push(i);
        }
    }
    hit
}

/// Message headers as (key, long-string value) pairs.
type Headers<'a> = &'a [(&'a str, &'a str)];

fn header_props(t: FieldTable) -> BasicProperties {
    BasicProperties::default().with_headers(t)
}
