//! Drives the master directly, as the simulator will: inputs in, outputs
//! checked. One file per handler; the helpers here build inputs and read
//! outputs.

use super::Master;
use super::inout::{Input, Output, ToConn};
use crate::broker::Broker;
use crate::config::Config;
use bytes::Bytes;
use stablemq_protocol::methods::{basic, confirm, queue, tx};
use stablemq_protocol::{AMQPClass, BasicProperties, Publish};
use std::sync::Arc;

/// A master over a state seeded from the default config (unlogged here, so
/// the tests' log indexes start at their own first event).
pub(super) fn master() -> Master {
    let config = Config::default();
    let mut b = Broker::new();
    for e in crate::users::seed_events(&config) {
        b.apply(&e, 0);
    }
    Master::new(Arc::new(config), b, 0)
}

pub(super) fn open(m: &mut Master, conn: u64, ch: u16) {
    m.handle(Input::Open {
        conn,
        user: "guest".into(),
        vhost: "/".into(),
        info: Box::default(),
    });
    m.handle(Input::ChannelOpen { conn, ch });
    m.take_outputs();
}

pub(super) fn method(m: &mut Master, conn: u64, ch: u16, method: AMQPClass) -> Vec<Output> {
    m.handle(Input::Method { conn, ch, method });
    m.take_outputs()
}

pub(super) fn declare(name: &str, durable: bool) -> AMQPClass {
    AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: name.into(),
        durable,
        ..Default::default()
    }))
}

pub(super) fn publish(
    m: &mut Master,
    conn: u64,
    ch: u16,
    queue: &str,
    persistent: bool,
    body: &str,
) -> Vec<Output> {
    let props = if persistent {
        BasicProperties::default().with_delivery_mode(2)
    } else {
        BasicProperties::default()
    };
    m.handle(Input::Publish {
        conn,
        ch,
        publish: Publish {
            exchange: "".into(),
            routing_key: queue.into(),
            ..Default::default()
        },
        properties: Arc::new(props),
        body: Bytes::from(body.to_string()),
    });
    m.take_outputs()
}

pub(super) fn appends(out: &[Output]) -> usize {
    out.iter()
        .filter(|o| matches!(o, Output::Append { .. }))
        .count()
}

pub(super) fn confirms(out: &[Output]) -> Vec<u64> {
    out.iter()
        .filter_map(|o| match o {
            Output::ToConn(_, ToConn::Confirm { tag, ack: true, .. }) => Some(*tag),
            _ => None,
        })
        .collect()
}

pub(super) fn delivered(out: &[Output]) -> Vec<String> {
    out.iter()
        .filter_map(|o| match o {
            Output::ToConn(_, ToConn::Deliver { msg, .. }) => {
                Some(String::from_utf8_lossy(&msg.body).into_owned())
            }
            _ => None,
        })
        .collect()
}

mod acks;
mod gate;
mod needed;
mod recovery;
mod sac;
mod stable;
mod stream_records;
mod stream_retention;
mod stream_scan;
mod super_stream;
mod timers;
