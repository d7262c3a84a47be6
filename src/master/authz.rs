//! Permission checks on AMQP operations, as RabbitMQ maps them (its
//! access-control guide has the table): configure to declare or delete,
//! write to publish to an exchange or bind to a destination, read to consume,
//! get, purge or bind from a source exchange. Passive declares need nothing.
//! The default exchange is checked under the name `amq.default`. Topic
//! permissions add a check of the routing key on topic exchanges.
//!
//! A refusal is a channel error 403 ACCESS_REFUSED with RabbitMQ's text. The
//! administrator tag grants nothing here: tags only matter to the management
//! API, as in RabbitMQ.

use super::Master;
use super::inout::ConnId;
use crate::broker::event::{Destination, ExchangeKind};
use crate::error::{AmqpError, AmqpResult};
use crate::users::{Perm, refused_text, topic_refused_text};

/// The name an exchange is checked under.
fn exchange_resource(name: &str) -> &str {
    if name.is_empty() { "amq.default" } else { name }
}

impl Master {
    /// Refuse unless the connection's user has `perm` on the resource.
    pub(super) fn authorize(
        &self,
        conn: ConnId,
        perm: Perm,
        kind: &str,
        name: &str,
    ) -> AmqpResult<()> {
        let Some(s) = self.sessions.get(conn) else {
            return Err(AmqpError::command_invalid("connection not open"));
        };
        let name = if kind == "exchange" {
            exchange_resource(name)
        } else {
            name
        };
        if self.broker.access.allows(&s.user, &s.vhost, perm, name) {
            Ok(())
        } else {
            Err(AmqpError::access_refused(refused_text(
                kind, name, &s.vhost, &s.user,
            )))
        }
    }

    /// Write on `exchange` for a publish on channel `ch`, through the
    /// channel's cache of its last granted check (see
    /// `Channel::write_permitted`): the user and vhost of a connection never
    /// change, so the exchange name and the table's generation are the key.
    pub(super) fn authorize_publish(
        &mut self,
        conn: ConnId,
        ch: u16,
        exchange: &str,
    ) -> AmqpResult<()> {
        let generation = self.broker.access.generation;
        let cached = self.channel_mut(conn, ch).is_some_and(|c| {
            c.write_permitted
                .as_ref()
                .is_some_and(|(g, x)| *g == generation && x == exchange)
        });
        if cached {
            return Ok(());
        }
        self.authorize(conn, Perm::Write, "exchange", exchange)?;
        if let Some(c) = self.channel_mut(conn, ch) {
            let (g, x) = c.write_permitted.get_or_insert_with(Default::default);
            *g = generation;
            x.clear();
            x.push_str(exchange);
        }
        Ok(())
    }

    /// `authorize` for either end of a binding.
    pub(super) fn authorize_destination(
        &self,
        conn: ConnId,
        perm: Perm,
        d: &Destination,
    ) -> AmqpResult<()> {
        match d {
            Destination::Queue(q) => self.authorize(conn, perm, "queue", q),
            Destination::Exchange(x) => self.authorize(conn, perm, "exchange", x),
        }
    }

    /// On a topic exchange, refuse unless the user's topic permissions (if
    /// any) allow `routing_key`: write for publishes, read for bindings.
    pub(super) fn authorize_topic(
        &self,
        conn: ConnId,
        perm: Perm,
        vhost: &str,
        exchange: &str,
        routing_key: &str,
    ) -> AmqpResult<()> {
        let Some(x) = self.broker.exchange(vhost, exchange) else {
            return Ok(());
        };
        if x.spec.kind != ExchangeKind::Topic {
            return Ok(());
        }
        let Some(s) = self.sessions.get(conn) else {
            return Ok(());
        };
        if self
            .broker
            .access
            .allows_topic(&s.user, vhost, exchange, perm, routing_key)
        {
            Ok(())
        } else {
            Err(AmqpError::access_refused(topic_refused_text(
                routing_key,
                exchange,
                vhost,
                &s.user,
            )))
        }
    }

    /// Whether `user` may open `vhost` (connection.open); RabbitMQ answers
    /// 530 NOT_ALLOWED otherwise.
    pub(super) fn may_open(&self, user: &str, vhost: &str) -> bool {
        self.broker.access.may_use_vhost(user, vhost)
    }
}
