//! exchange.declare and exchange.delete, and bindings of every kind.

use super::{inequivalent, reserved, value_text};
use crate::broker::event::{Binding, Destination, Event, ExchangeKind, ExchangeSpec};
use crate::broker::routing::HeadersMatch;
use crate::error::{AmqpError, AmqpResult};
use crate::master::Master;
use crate::master::inout::ConnId;
use crate::users::Perm;
use stablemq_protocol::AMQPClass;
use stablemq_protocol::methods::exchange as mx;

impl Master {
    pub(in crate::master) fn exchange_method(
        &mut self,
        conn: ConnId,
        ch: u16,
        m: mx::AMQPMethod,
    ) -> AmqpResult<()> {
        let vhost = self.vhost_of(conn)?;
        match m {
            mx::AMQPMethod::Declare(d) => self.exchange_declare(conn, ch, &vhost, d),
            mx::AMQPMethod::Delete(d) => {
                let name = d.exchange.as_str();
                if name.is_empty() {
                    return Err(AmqpError::access_refused(
                        "operation not permitted on the default exchange",
                    ));
                }
                if reserved(name) {
                    return Err(AmqpError::access_refused(format!(
                        "operation not permitted on exchange '{name}' in vhost '{vhost}'"
                    )));
                }
                self.authorize(conn, Perm::Configure, "exchange", name)?;
                if let Some(x) = self.broker.exchange(&vhost, name) {
                    let used_as_dest = self.broker.vhost(&vhost).is_some_and(|v| {
                        v.exchanges.values().any(|e| {
                            e.bindings
                                .iter()
                                .any(|b| b.destination == Destination::Exchange(name.to_string()))
                        })
                    });
                    if d.if_unused && (!x.bindings.is_empty() || used_as_dest) {
                        return Err(AmqpError::precondition(format!(
                            "exchange '{name}' in vhost '{vhost}' in use"
                        )));
                    }
                    let logged = x.spec.durable;
                    self.emit(
                        Event::ExchangeDeleted {
                            vhost: vhost.to_string(),
                            name: name.to_string(),
                        },
                        logged,
                    );
                }
                if !d.nowait {
                    self.reply(
                        conn,
                        ch,
                        AMQPClass::Exchange(mx::AMQPMethod::DeleteOk(mx::DeleteOk {})),
                    );
                }
                Ok(())
            }
            mx::AMQPMethod::Bind(b) => {
                let binding = Binding {
                    source: b.source.to_string(),
                    destination: Destination::Exchange(b.destination.to_string()),
                    routing_key: b.routing_key.to_string(),
                    arguments: b.arguments,
                };
                let ok = AMQPClass::Exchange(mx::AMQPMethod::BindOk(mx::BindOk {}));
                self.bind_and_reply(conn, ch, &vhost, binding, true, (!b.nowait).then_some(ok))
            }
            mx::AMQPMethod::Unbind(b) => {
                let binding = Binding {
                    source: b.source.to_string(),
                    destination: Destination::Exchange(b.destination.to_string()),
                    routing_key: b.routing_key.to_string(),
                    arguments: b.arguments,
                };
                let ok = AMQPClass::Exchange(mx::AMQPMethod::UnbindOk(mx::UnbindOk {}));
                self.bind_and_reply(conn, ch, &vhost, binding, false, (!b.nowait).then_some(ok))
            }
            other => Err(AmqpError::command_invalid(format!(
                "unexpected exchange method {}",
                AMQPClass::Exchange(other).get_amqp_method_id()
            ))),
        }
    }

    pub(super) fn exchange_declare(
        &mut self,
        conn: ConnId,
        ch: u16,
        vhost: &str,
        d: mx::Declare,
    ) -> AmqpResult<()> {
        let name = d.exchange.as_str().to_string();
        let ok = AMQPClass::Exchange(mx::AMQPMethod::DeclareOk(mx::DeclareOk {}));
        if name.is_empty() {
            // Even a passive declare of the default exchange is refused, as in RabbitMQ.
            return Err(AmqpError::access_refused(
                "operation not permitted on the default exchange",
            ));
        }
        if d.passive {
            if self.broker.exchange(vhost, &name).is_none() {
                return Err(AmqpError::no_exchange(vhost, &name));
            }
            if !d.nowait {
                self.reply(conn, ch, ok);
            }
            return Ok(());
        }
        self.authorize(conn, Perm::Configure, "exchange", &name)?;
        if name.is_empty() {
            return Err(AmqpError::access_refused(
                "operation not permitted on the default exchange",
            ));
        }
        let Some(kind) = ExchangeKind::parse(d.kind.as_str()) else {
            // Newest RabbitMQ closes the channel with 406 here (3.10 closed the connection with 503).
            return Err(AmqpError::precondition(format!(
                "invalid exchange type '{}'",
                d.kind.as_str()
            )));
        };
        let spec = ExchangeSpec {
            kind,
            durable: d.durable,
            auto_delete: d.auto_delete,
            internal: d.internal,
            arguments: d.arguments,
        };
        if let Some(x) = self.broker.exchange(vhost, &name) {
            redeclare_matches(vhost, &name, &x.spec, &spec)?;
        } else if reserved(&name) {
            // Only new amq.* names are refused; redeclaring a predeclared one equivalently is fine.
            return Err(AmqpError::access_refused(format!(
                "exchange name '{name}' contains reserved prefix 'amq.*'"
            )));
        } else {
            // A new exchange with an alternate exchange: read on it, write on
            // the alternate, as RabbitMQ checks.
            if let Some(ae) = spec
                .arguments
                .inner()
                .get("alternate-exchange")
                .and_then(crate::broker::queue_args::text)
            {
                self.authorize(conn, Perm::Read, "exchange", &name)?;
                self.authorize(conn, Perm::Write, "exchange", &ae)?;
            }
            let logged = spec.durable;
            self.emit(
                Event::ExchangeDeclared {
                    vhost: vhost.to_string(),
                    name,
                    spec,
                },
                logged,
            );
        }
        if !d.nowait {
            self.reply(conn, ch, ok);
        }
        Ok(())
    }

    /// Add or remove a binding, then answer with `ok` (None: the client
    /// asked for no answer, `nowait`).
    pub(super) fn bind_and_reply(
        &mut self,
        conn: ConnId,
        ch: u16,
        vhost: &str,
        binding: Binding,
        add: bool,
        ok: Option<AMQPClass>,
    ) -> AmqpResult<()> {
        self.bind(conn, vhost, binding, add)?;
        if let Some(ok) = ok {
            self.reply(conn, ch, ok);
        }
        Ok(())
    }

    /// Add (`add`) or remove a binding after checking both ends exist.
    pub(super) fn bind(
        &mut self,
        conn: ConnId,
        vhost: &str,
        binding: Binding,
        add: bool,
    ) -> AmqpResult<()> {
        let default_refused =
            || AmqpError::access_refused("operation not permitted on the default exchange");
        // RabbitMQ's order: write on the destination, read on the source,
        // then the default-exchange rule, then topic read on the key.
        self.authorize_destination(conn, Perm::Write, &binding.destination)?;
        self.authorize(conn, Perm::Read, "exchange", &binding.source)?;
        if binding.source.is_empty() {
            return Err(default_refused());
        }
        self.authorize_topic(
            conn,
            Perm::Read,
            vhost,
            &binding.source,
            &binding.routing_key,
        )?;
        if !add {
            // Unbinding is idempotent in RabbitMQ: a binding whose queue or exchange
            // is already gone (an auto-deleted queue, say) is simply not there.
            let dest_missing = match &binding.destination {
                Destination::Queue(q) => self.broker.queue(vhost, q).is_none(),
                Destination::Exchange(x) => {
                    !x.is_empty() && self.broker.exchange(vhost, x).is_none()
                }
            };
            if dest_missing || self.broker.exchange(vhost, &binding.source).is_none() {
                return Ok(());
            }
        }
        let dest_logged = match &binding.destination {
            Destination::Queue(q) => {
                self.existing_queue(conn, vhost, q)?;
                self.broker.queue(vhost, q).is_some_and(|q| q.is_logged())
            }
            Destination::Exchange(x) => {
                if x.is_empty() {
                    return Err(default_refused());
                }
                self.broker
                    .exchange(vhost, x)
                    .ok_or_else(|| AmqpError::no_exchange(vhost, x))?
                    .spec
                    .durable
            }
        };
        let src = self
            .broker
            .exchange(vhost, &binding.source)
            .ok_or_else(|| AmqpError::no_exchange(vhost, &binding.source))?;
        if add
            && src.spec.kind == ExchangeKind::Headers
            && HeadersMatch::from_args(&binding.arguments).is_none()
        {
            return Err(AmqpError::precondition(format!(
                "Invalid x-match field value {}; expected all, any, all-with-x, or any-with-x",
                value_text(binding.arguments.inner().get("x-match"))
            )));
        }
        let exists = src.has_binding(&binding);
        let logged = src.spec.durable && dest_logged;
        let vhost = vhost.to_string();
        if add && !exists {
            self.emit(Event::Bound { vhost, binding }, logged);
        } else if !add && exists {
            self.emit(Event::Unbound { vhost, binding }, logged);
        }
        Ok(())
    }
}

/// A redeclare must match the exchange's type and flags, as RabbitMQ checks
/// them (406 PRECONDITION_FAILED, first mismatch named).
fn redeclare_matches(
    vhost: &str,
    name: &str,
    cur: &ExchangeSpec,
    spec: &ExchangeSpec,
) -> AmqpResult<()> {
    let mismatch = if cur.kind != spec.kind {
        Some((
            "type",
            spec.kind.as_str().to_string(),
            cur.kind.as_str().to_string(),
        ))
    } else if cur.durable != spec.durable {
        Some(("durable", spec.durable.to_string(), cur.durable.to_string()))
    } else if cur.auto_delete != spec.auto_delete {
        Some((
            "auto_delete",
            spec.auto_delete.to_string(),
            cur.auto_delete.to_string(),
        ))
    } else if cur.internal != spec.internal {
        Some((
            "internal",
            spec.internal.to_string(),
            cur.internal.to_string(),
        ))
    } else {
        None
    };
    if let Some((arg, got, was)) = mismatch {
        return Err(inequivalent(
            "exchange", arg, "exchange", name, vhost, got, was,
        ));
    }
    Ok(())
}
