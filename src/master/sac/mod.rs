//! Single active consumer for the stream protocol (RabbitMQ 3.11+): the
//! master keeps the groups, because it is the one place that sees every
//! connection of the node, and a group spans connections.
//!
//! A stream connection's bridge registers a subscription that asked for
//! `single-active-consumer` with its `name` (and `super-stream`) through
//! [`Input::SingleActive`](super::inout::Input::SingleActive); the master
//! checks the stream and the user's read permission, answers
//! [`SacNote::Registered`], and from then on tells each subscription when it
//! becomes active or must give way ([`SacNote::Update`]). The bridge starts
//! the subscription's basic.consume only once it is active and its client
//! answered with an offset; the master's deliveries know nothing of groups.
//!
//! The groups are not events: they are not logged nor replicated, as
//! RabbitMQ keeps them in its stream coordinator's memory. After a failover
//! the clients connect to the new master and subscribe again.

mod groups;

pub(crate) use groups::Groups;

use super::Master;
use super::inout::{ConnId, SacNote, SacOp, ToConn};
use crate::error::{AmqpError, AmqpResult};
use crate::users::Perm;
use groups::{GroupKey, Notify};

impl Master {
    /// A bridge's single active consumer request.
    pub(super) fn single_active(&mut self, conn: ConnId, op: SacOp) {
        let Some(vhost) = self.sessions.get(conn).map(|s| s.vhost.to_string()) else {
            return;
        };
        let notes = match op {
            SacOp::Register {
                subscription,
                stream,
                name,
                super_stream,
            } => {
                if let Err(e) = self.may_join(conn, &vhost, &stream) {
                    let result = Err(e);
                    let note = SacNote::Registered {
                        subscription,
                        result,
                    };
                    self.send(conn, ToConn::SingleActive(note));
                    return;
                }
                let partition = super_stream.and_then(|ss| {
                    super::super_stream::partitions(&self.broker, &vhost, &ss)
                        .ok()?
                        .iter()
                        .position(|p| *p == stream)
                });
                let note = SacNote::Registered {
                    subscription,
                    result: Ok(()),
                };
                self.send(conn, ToConn::SingleActive(note));
                let key: GroupKey = (vhost, stream, name);
                self.sac.register(key, partition, (conn, subscription))
            }
            SacOp::Unregister {
                subscription,
                stream,
                name,
            } => self
                .sac
                .unregister(&(vhost, stream, name), (conn, subscription)),
            SacOp::SteppedDown {
                subscription,
                stream,
                name,
            } => self
                .sac
                .stepped_down(&(vhost, stream, name), (conn, subscription)),
        };
        self.tell(notes);
    }

    /// A connection is gone: its subscriptions leave their groups.
    pub(super) fn single_active_disconnect(&mut self, conn: ConnId) {
        let notes = self.sac.remove_connection(conn);
        self.tell(notes);
    }

    /// The stream exists, is a stream, and the user may read it: what
    /// RabbitMQ's subscribe checks before it registers a consumer.
    fn may_join(&self, conn: ConnId, vhost: &str, stream: &str) -> AmqpResult<()> {
        match self.broker.queue(vhost, stream) {
            Some(q) if q.stream.is_some() => {}
            _ => return Err(AmqpError::no_queue(vhost, stream)),
        }
        self.authorize(conn, Perm::Read, "queue", stream)
    }

    fn tell(&mut self, notes: Vec<Notify>) {
        for n in notes {
            let note = SacNote::Update {
                subscription: n.subscription,
                active: n.active,
                stepping_down: n.stepping_down,
            };
            self.send(n.conn, ToConn::SingleActive(note));
        }
    }
}
