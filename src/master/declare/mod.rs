//! exchange.* and queue.*: declarations, bindings, purge and delete.
//!
//! [`exchange`] owns exchange.declare/delete and every bind/unbind (queue.bind
//! included: the binding code is one); [`queue`] owns queue.declare, purge and
//! delete, the arguments RabbitMQ checks, and auto-delete.

mod exchange;
mod queue;

use super::Master;
use super::inout::{ConnId, ToConn};
use crate::error::{AmqpError, AmqpResult, ReplyCode};
use stablemq_protocol::{AMQPClass, AMQPValue};

fn reserved(name: &str) -> bool {
    name.starts_with("amq.")
}

fn value_text(v: Option<&AMQPValue>) -> String {
    match v {
        None => "none".into(),
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        Some(AMQPValue::ShortString(s)) => s.as_str().to_string(),
        Some(AMQPValue::Boolean(b)) => b.to_string(),
        Some(AMQPValue::LongLongInt(i)) => i.to_string(),
        Some(AMQPValue::LongInt(i)) => i.to_string(),
        Some(AMQPValue::ShortInt(i)) => i.to_string(),
        Some(AMQPValue::LongUInt(i)) => i.to_string(),
        Some(AMQPValue::ShortUInt(i)) => i.to_string(),
        Some(AMQPValue::ShortShortInt(i)) => i.to_string(),
        Some(AMQPValue::ShortShortUInt(i)) => i.to_string(),
        Some(other) => format!("{other:?}"),
    }
}

fn inequivalent(
    what: &str,
    arg: &str,
    kind: &str,
    name: &str,
    vhost: &str,
    got: String,
    cur: String,
) -> AmqpError {
    AmqpError::precondition(format!(
        "inequivalent arg '{arg}' for {kind} '{name}' in vhost '{vhost}': received '{got}' but current is '{cur}'"
    ))
    .on(if what == "queue" { 50 } else { 40 }, 10)
}

impl Master {
    pub(in crate::master) fn exclusive_check(
        &self,
        conn: ConnId,
        vhost: &str,
        queue: &str,
    ) -> AmqpResult<()> {
        if let Some(q) = self.broker.queue(vhost, queue)
            && let Some(owner) = q.spec.exclusive_owner
            && owner != conn
        {
            return Err(AmqpError::new(
                ReplyCode::ResourceLocked,
                format!(
                    "cannot obtain exclusive access to locked queue '{queue}' in vhost '{vhost}'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn existing_queue(&self, conn: ConnId, vhost: &str, queue: &str) -> AmqpResult<()> {
        if self.broker.queue(vhost, queue).is_none() {
            return Err(AmqpError::no_queue(vhost, queue));
        }
        self.exclusive_check(conn, vhost, queue)
    }

    pub(in crate::master) fn send_method(&mut self, conn: ConnId, ch: u16, m: AMQPClass) {
        self.send(conn, ToConn::Method(ch, m));
    }
}
