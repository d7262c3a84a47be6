//! queue.declare, purge and delete: the arguments RabbitMQ compares and
//! validates, exclusivity, and auto-delete.

use super::{inequivalent, reserved, value_text};
use crate::broker::event::{Binding, Destination, Event, QueueSpec};
use crate::error::{AmqpError, AmqpResult, ReplyCode};
use crate::master::Master;
use crate::master::inout::{ClientProtocol, ConnId, ToConn};
use crate::users::Perm;
use stablemq_protocol::methods::queue as mq;
use stablemq_protocol::{AMQPClass, FieldTable};

/// Queue arguments RabbitMQ compares on redeclare.
const EQUIVALENCE_ARGS: [&str; 12] = [
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-type",
    "x-single-active-consumer",
    "x-delivery-limit",
];

fn queue_type(args: &FieldTable) -> Option<String> {
    args.inner()
        .get("x-queue-type")
        .map(|v| value_text(Some(v)))
}

impl Master {
    pub(in crate::master) fn queue_method(
        &mut self,
        conn: ConnId,
        ch: u16,
        m: mq::AMQPMethod,
    ) -> AmqpResult<()> {
        let vhost = self.vhost_of(conn)?;
        match m {
            mq::AMQPMethod::Declare(d) => self.queue_declare(conn, ch, &vhost, d),
            mq::AMQPMethod::Bind(b) => {
                let queue = self.queue_shortcut(conn, ch, b.queue.as_str())?;
                let binding = Binding {
                    source: b.exchange.to_string(),
                    routing_key: key_shortcut(b.queue.as_str(), b.routing_key.as_str(), &queue),
                    destination: Destination::Queue(queue),
                    arguments: b.arguments,
                };
                let ok = AMQPClass::Queue(mq::AMQPMethod::BindOk(mq::BindOk {}));
                self.bind_and_reply(conn, ch, &vhost, binding, true, (!b.nowait).then_some(ok))
            }
            mq::AMQPMethod::Unbind(b) => {
                let queue = self.queue_shortcut(conn, ch, b.queue.as_str())?;
                let binding = Binding {
                    source: b.exchange.to_string(),
                    routing_key: key_shortcut(b.queue.as_str(), b.routing_key.as_str(), &queue),
                    destination: Destination::Queue(queue),
                    arguments: b.arguments,
                };
                // queue.unbind has no nowait flag.
                let ok = AMQPClass::Queue(mq::AMQPMethod::UnbindOk(mq::UnbindOk {}));
                self.bind_and_reply(conn, ch, &vhost, binding, false, Some(ok))
            }
            mq::AMQPMethod::Purge(p) => {
                let name = self.queue_shortcut(conn, ch, p.queue.as_str())?;
                self.authorize(conn, Perm::Read, "queue", &name)?;
                self.existing_queue(conn, &vhost, &name)?;
                if self.is_stream(&vhost, &name) {
                    return Err(crate::master::stream::not_supported(
                        "queue.purge",
                        &vhost,
                        &name,
                    ));
                }
                let count = self.purge(&vhost, &name);
                if !p.nowait {
                    self.reply(
                        conn,
                        ch,
                        AMQPClass::Queue(mq::AMQPMethod::PurgeOk(mq::PurgeOk {
                            message_count: count,
                        })),
                    );
                }
                Ok(())
            }
            mq::AMQPMethod::Delete(d) => {
                let name = self.queue_shortcut(conn, ch, d.queue.as_str())?;
                self.authorize(conn, Perm::Configure, "queue", &name)?;
                let mut count = 0;
                if let Some(q) = self.broker.queue(&vhost, &name) {
                    self.exclusive_check(conn, &vhost, &name)?;
                    if d.if_unused && self.consumer_count(&vhost, &name) > 0 {
                        return Err(AmqpError::precondition(format!(
                            "queue '{name}' in vhost '{vhost}' in use"
                        )));
                    }
                    // RabbitMQ counts ready messages only: unacked ones do not make a queue non-empty.
                    if d.if_empty && !q.ready.is_empty() {
                        return Err(AmqpError::precondition(format!(
                            "queue '{name}' in vhost '{vhost}' is not empty"
                        )));
                    }
                    count = q.ready.len() as u32;
                    self.delete_queue(&vhost, &name);
                }
                if !d.nowait {
                    self.reply(
                        conn,
                        ch,
                        AMQPClass::Queue(mq::AMQPMethod::DeleteOk(mq::DeleteOk {
                            message_count: count,
                        })),
                    );
                }
                Ok(())
            }
            other => Err(AmqpError::command_invalid(format!(
                "unexpected queue method {}",
                AMQPClass::Queue(other).get_amqp_method_id()
            ))),
        }
    }

    /// The queue a method names: an empty name is the channel's last
    /// declared queue, and with none, 404 as RabbitMQ answers.
    pub(in crate::master) fn queue_shortcut(
        &mut self,
        conn: ConnId,
        ch: u16,
        name: &str,
    ) -> AmqpResult<String> {
        if !name.is_empty() {
            return Ok(name.to_string());
        }
        match self.channel_mut(conn, ch) {
            Some(chan) if !chan.declared_queue.is_empty() => Ok(chan.declared_queue.clone()),
            _ => Err(AmqpError::new(
                ReplyCode::NotFound,
                "no previously declared queue",
            )),
        }
    }

    /// Remove every ready message; returns how many.
    pub(in crate::master) fn purge(&mut self, vhost: &str, name: &str) -> u32 {
        let Some(q) = self.broker.queue(vhost, name) else {
            return 0;
        };
        let ids = q.ready_ids();
        let logged = q.is_logged() && q.any_ready_persistent();
        let count = ids.len() as u32;
        if count > 0 {
            self.emit(
                Event::Removed {
                    vhost: vhost.to_string(),
                    queue: name.to_string(),
                    msg_ids: ids,
                },
                logged,
            );
        }
        count
    }

    /// Delete a queue (its consumers are cancelled by `after_apply`).
    pub(in crate::master) fn delete_queue(&mut self, vhost: &str, name: &str) {
        metrics::counter!(crate::metrics::QUEUES_DELETED).increment(1);
        let logged = self
            .broker
            .queue(vhost, name)
            .is_some_and(|q| q.is_logged());
        let stream = self.is_stream(vhost, name);
        self.emit(
            Event::QueueDeleted {
                vhost: vhost.to_string(),
                name: name.to_string(),
            },
            logged,
        );
        let mut told = Vec::new();
        for (conn, s) in self.sessions.conns.iter_mut() {
            if &*s.vhost == vhost {
                s.exclusive_queues.retain(|q| q != name);
                // Stream-protocol connections hear of a deleted stream even
                // when they only publish to it (their publishes carry no
                // consumer to cancel): RabbitMQ sends them a metadata update.
                if stream && s.info.protocol == ClientProtocol::Stream {
                    told.push(*conn);
                }
            }
        }
        for conn in told {
            self.send(conn, ToConn::StreamDeleted(name.into()));
        }
    }

    pub(super) fn queue_declare(
        &mut self,
        conn: ConnId,
        ch: u16,
        vhost: &str,
        d: mq::Declare,
    ) -> AmqpResult<()> {
        let mut name = d.queue.as_str().to_string();
        if d.passive {
            if name.is_empty() {
                return Err(AmqpError::no_queue(vhost, &name));
            }
            if name.starts_with(crate::master::reply_to::REPLY_TO_PREFIX)
                && self.reply_to_exists(&name)
            {
                self.reply(
                    conn,
                    ch,
                    AMQPClass::Queue(mq::AMQPMethod::DeclareOk(mq::DeclareOk {
                        queue: name.into(),
                        message_count: 0,
                        consumer_count: 1,
                    })),
                );
                return Ok(());
            }
            self.existing_queue(conn, vhost, &name)?;
        } else {
            if name.is_empty() {
                name = self.server_name("amq.gen-");
            } else if reserved(&name) {
                return Err(AmqpError::access_refused(format!(
                    "queue name '{name}' contains reserved prefix 'amq.*'"
                )));
            }
            // Server-named queues are checked under the name chosen for them.
            self.authorize(conn, Perm::Configure, "queue", &name)?;
            let spec = QueueSpec {
                durable: d.durable,
                auto_delete: d.auto_delete,
                exclusive_owner: d.exclusive.then_some(conn),
                arguments: d.arguments,
            };
            // RabbitMQ counts every non-passive declare that passes the name
            // checks, whether it then creates, matches or fails equivalence.
            metrics::counter!(crate::metrics::QUEUES_DECLARED).increment(1);
            if let Some(q) = self.broker.queue(vhost, &name) {
                self.exclusive_check(conn, vhost, &name)?;
                redeclare_matches(vhost, &name, &q.spec, &spec)?;
            } else {
                self.create_queue(conn, vhost, &name, spec)?;
            }
        }
        if let Some(chan) = self.channel_mut(conn, ch) {
            chan.declared_queue.clone_from(&name);
        }
        // A declare, passive or not, renews an `x-expires` queue's lease,
        // as in RabbitMQ (and starts a new queue's).
        self.touch_queue(vhost, &name);
        let (message_count, consumer_count) = match self.broker.queue(vhost, &name) {
            Some(q) => (
                q.ready.len() as u32,
                self.consumer_count(vhost, &name) as u32,
            ),
            None => (0, 0),
        };
        if !d.nowait {
            self.reply(
                conn,
                ch,
                AMQPClass::Queue(mq::AMQPMethod::DeclareOk(mq::DeclareOk {
                    queue: name.into(),
                    message_count,
                    consumer_count,
                })),
            );
        }
        Ok(())
    }

    /// Create a queue a declare named (not passive, not there yet), after
    /// the checks a new queue gets.
    fn create_queue(
        &mut self,
        conn: ConnId,
        vhost: &str,
        name: &str,
        spec: QueueSpec,
    ) -> AmqpResult<()> {
        validate_queue_spec(vhost, name, &spec)?;
        if let Some(e) = self.queue_limit_refusal(vhost, name) {
            return Err(e);
        }
        // A new queue with a dead-letter exchange: read on the queue,
        // write on the exchange, as RabbitMQ checks.
        if let Some(dlx) = spec
            .arguments
            .inner()
            .get("x-dead-letter-exchange")
            .and_then(crate::broker::queue_args::text)
        {
            self.authorize(conn, Perm::Read, "queue", name)?;
            self.authorize(conn, Perm::Write, "exchange", &dlx)?;
        }
        metrics::counter!(crate::metrics::QUEUES_CREATED).increment(1);
        let logged = spec.durable && spec.exclusive_owner.is_none();
        if spec.exclusive_owner.is_some()
            && let Some(s) = self.sessions.get_mut(conn)
        {
            s.exclusive_queues.push(name.to_string());
        }
        self.emit(
            Event::QueueDeclared {
                vhost: vhost.to_string(),
                name: name.to_string(),
                spec,
            },
            logged,
        );
        Ok(())
    }

    /// Queue auto-delete after its last consumer went.
    pub(in crate::master) fn maybe_auto_delete(&mut self, vhost: &str, queue: &str) {
        let key = (vhost.to_string(), queue.to_string());
        let unused = self
            .sessions
            .consumers
            .get(&key)
            .is_some_and(|qc| qc.ever_had_consumer && qc.list.is_empty());
        let auto = self
            .broker
            .queue(vhost, queue)
            .is_some_and(|q| q.spec.auto_delete);
        if unused && auto {
            self.delete_queue(vhost, queue);
        }
        if self
            .sessions
            .consumers
            .get(&key)
            .is_some_and(|qc| qc.list.is_empty())
        {
            self.sessions.consumers.remove(&key);
        }
    }
}

/// The routing key of a queue.bind/unbind: with both the queue and the key
/// empty, the (last declared) queue's name, as in RabbitMQ; else as sent.
fn key_shortcut(sent_queue: &str, sent_key: &str, queue: &str) -> String {
    if sent_queue.is_empty() && sent_key.is_empty() {
        queue.to_string()
    } else {
        sent_key.to_string()
    }
}

/// Check a new queue's arguments and properties in RabbitMQ's order: the
/// arguments' values and types (`queue_args::check_declared`), then, for a
/// quorum queue or a stream, auto-delete, exclusive and durable, then a
/// stream's sizes.
fn validate_queue_spec(vhost: &str, name: &str, spec: &QueueSpec) -> AmqpResult<()> {
    use crate::broker::queue_args::{QueueType, check_declared};
    let Some(queue_type) = QueueType::declared(&spec.arguments) else {
        let other = queue_type(&spec.arguments).unwrap_or_default();
        return Err(AmqpError::precondition(format!(
            "invalid arg 'x-queue-type' for queue '{name}' in vhost '{vhost}': unsupported queue type '{other}' (StableMQ supports classic, quorum and stream)"
        )));
    };
    check_declared(&spec.arguments, queue_type)
        .map_err(|e| AmqpError::precondition(e.message(vhost, name)))?;
    if queue_type == QueueType::Classic {
        return Ok(());
    }
    let property = if spec.auto_delete {
        Some("auto-delete")
    } else if spec.exclusive_owner.is_some() {
        Some("exclusive-owner")
    } else if !spec.durable {
        Some("non-durable")
    } else {
        None
    };
    if let Some(property) = property {
        return Err(AmqpError::precondition(format!(
            "invalid property '{property}' for queue '{name}' in vhost '{vhost}'"
        )));
    }
    if queue_type == QueueType::Stream {
        crate::master::stream::check_sizes(&spec.arguments)?;
    }
    Ok(())
}

/// A redeclare must match the queue's flags and arguments, as RabbitMQ
/// checks them (406 PRECONDITION_FAILED; an exclusive mismatch is 405).
fn redeclare_matches(vhost: &str, name: &str, cur: &QueueSpec, spec: &QueueSpec) -> AmqpResult<()> {
    let bad = |arg: &str, got: bool, was: bool| {
        inequivalent(
            "queue",
            arg,
            "queue",
            name,
            vhost,
            got.to_string(),
            was.to_string(),
        )
    };
    if cur.durable != spec.durable {
        return Err(bad("durable", spec.durable, cur.durable));
    }
    if cur.auto_delete != spec.auto_delete {
        return Err(bad("auto_delete", spec.auto_delete, cur.auto_delete));
    }
    if cur.exclusive_owner.is_some() != spec.exclusive_owner.is_some() {
        // RabbitMQ answers an exclusive mismatch as a lock: 405.
        return Err(AmqpError::new(
            ReplyCode::ResourceLocked,
            format!(
                "cannot obtain exclusive access to locked queue '{name}' in vhost '{vhost}'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
            ),
        ));
    }
    for arg in EQUIVALENCE_ARGS {
        let got = spec.arguments.inner().get(arg);
        let was = cur.arguments.inner().get(arg);
        // A redeclare without x-queue-type matches any type, as in RabbitMQ.
        if arg == "x-queue-type" && got.is_none() {
            continue;
        }
        if value_text(got) != value_text(was) {
            return Err(inequivalent(
                "queue",
                arg,
                "queue",
                name,
                vhost,
                value_text(got),
                value_text(was),
            ));
        }
    }
    Ok(())
}
