//! Management writes for users, vhosts, permissions and topic permissions,
//! and definitions import: operations that arrive from the HTTP API rather
//! than from an AMQP channel.
//!
//! Each operation is validated against the current state, turned into
//! events that are applied at once and appended to the log, and answered
//! only once those events are stable (I1): the HTTP client that got 201 or
//! 204 can rely on the change surviving a crash or a failover. The answer
//! goes back through a callback ([`AdminReply`]) that the master task wraps
//! around a oneshot channel; the core itself does no I/O.
//!
//! This is the master's one home for management writes: also what they do
//! beyond their events (trimming queues a policy puts over a length limit,
//! closing a connection an operator asked to close). The HTTP side of the
//! same writes is `management/writes.rs`.

use super::Master;
use super::inout::ToConn;
use crate::broker::event::Event;
use crate::error::{AmqpError, ReplyCode};
use crate::users::{AccessTable, HashAlgorithm};
use std::collections::VecDeque;
use std::sync::Arc;

/// A management write.
#[derive(Debug, Clone)]
pub enum AdminOp {
    /// Create or replace a user (the hash is computed by the caller).
    PutUser {
        /// Name.
        name: String,
        /// base64 hash, empty for no password.
        password_hash: String,
        /// Its algorithm.
        hashing_algorithm: HashAlgorithm,
        /// Tags.
        tags: Vec<String>,
    },
    /// Delete users; `must_exist` makes a missing one a 404 (single DELETE),
    /// bulk-delete ignores missing names as RabbitMQ does.
    DeleteUsers {
        /// Names.
        names: Vec<String>,
        /// 404 when the (single) user does not exist.
        must_exist: bool,
    },
    /// Create a vhost or update its metadata.
    PutVhost {
        /// Name.
        name: String,
        /// Description (None keeps the current one).
        description: Option<String>,
        /// Tags (None keeps the current ones).
        tags: Option<Vec<String>>,
        /// Default queue type (None keeps the current one).
        default_queue_type: Option<String>,
        /// The API user creating it: RabbitMQ grants it full permissions on
        /// a vhost it creates.
        acting_user: Option<String>,
    },
    /// Delete a vhost with everything in it.
    DeleteVhost {
        /// Name.
        name: String,
    },
    /// Set a user's permissions on a vhost (regexes already validated).
    SetPermission {
        /// User.
        user: String,
        /// Vhost.
        vhost: String,
        /// Configure regex.
        configure: String,
        /// Write regex.
        write: String,
        /// Read regex.
        read: String,
    },
    /// Clear a user's permissions on a vhost.
    ClearPermission {
        /// User.
        user: String,
        /// Vhost.
        vhost: String,
    },
    /// Set a user's topic permissions on an exchange.
    SetTopicPermission {
        /// User.
        user: String,
        /// Vhost.
        vhost: String,
        /// Exchange.
        exchange: String,
        /// Write regex.
        write: String,
        /// Read regex.
        read: String,
    },
    /// Clear topic permissions (one exchange, or all of the vhost).
    ClearTopicPermission {
        /// User.
        user: String,
        /// Vhost.
        vhost: String,
        /// Exchange, or every exchange.
        exchange: Option<String>,
    },
    /// Import definitions: a list of events, already checked for shape, in
    /// RabbitMQ's import order. Events referring to something missing are
    /// skipped and reported.
    Import {
        /// The events, in order.
        events: Vec<Event>,
    },
}

/// How a write went, in the terms of the HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminOutcome {
    /// A new object: 201.
    Created,
    /// An existing object changed or removed: 204.
    Done,
    /// An import, with what was skipped and why.
    Imported {
        /// One line per skipped item.
        skipped: Vec<String>,
    },
}

/// Why a write was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// The object does not exist: 404.
    #[error("not found")]
    NotFound,
    /// The request refers to something missing or invalid: 400 with reason.
    #[error("{0}")]
    BadRequest(String),
}

/// The outcome of one write.
pub type AdminResult = Result<AdminOutcome, AdminError>;

/// The callback behind an [`AdminReply`].
type ReplyFn = Box<dyn FnOnce(AdminResult, &Arc<AccessTable>) + Send>;

/// Where an answer goes (the master task sends it on to the HTTP handler).
/// It also gets the access table as of the answer, so the master task can
/// publish it first: a client told "201 Created" can log in at once.
pub struct AdminReply(ReplyFn);

impl AdminReply {
    /// Wrap a callback.
    pub fn new(f: impl FnOnce(AdminResult, &Arc<AccessTable>) + Send + 'static) -> AdminReply {
        AdminReply(Box::new(f))
    }
}

impl std::fmt::Debug for AdminReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminReply")
    }
}

/// Answers that wait for the stable index.
#[derive(Debug, Default)]
pub struct AdminWaiting {
    queue: VecDeque<(u64, AdminReply, AdminResult)>,
}

impl Master {
    /// Seed a fresh node from the config (see [`crate::users::seed_events`]):
    /// logged events, so slaves and restarts see the same users. A node
    /// whose log already has users ignores the config's users and says so.
    pub fn seed_from_config(&mut self, config: &crate::config::Config) {
        if !self.broker.access.initialized {
            for ev in crate::users::seed_events(config) {
                self.emit(ev, true);
            }
            // As RabbitMQ names a new cluster at first boot; a definitions
            // import may replace it, as RabbitMQ's does.
            self.emit(
                Event::GlobalParameterSet {
                    name: "internal_cluster_id".into(),
                    value: serde_json::Value::String(crate::users::new_cluster_id()).to_string(),
                },
                true,
            );
            return;
        }
        for u in &config.users {
            if !self.broker.access.users.contains_key(&u.name) {
                tracing::warn!(
                    user = %u.name,
                    "config user ignored: this node's log already holds users; manage them with the management API (docs/access-control.md)"
                );
            }
        }
    }

    /// Run one management write; the answer waits for the log.
    pub(super) fn admin(&mut self, op: AdminOp, reply: AdminReply) {
        let result = self.admin_op(op);
        if self.gate.settled() {
            (reply.0)(result, &self.broker.access);
        } else {
            let index = self.gate.last_appended();
            self.gate.need(index);
            self.admin_waiting.queue.push_back((index, reply, result));
        }
    }

    /// Send the answers whose events are now stable.
    pub(super) fn release_admin(&mut self) {
        while self
            .admin_waiting
            .queue
            .front()
            .is_some_and(|w| w.0 <= self.gate.stable())
        {
            if let Some((_, reply, result)) = self.admin_waiting.queue.pop_front() {
                (reply.0)(result, &self.broker.access);
            }
        }
    }

    /// One management write: a dispatcher, each arm one handler below.
    fn admin_op(&mut self, op: AdminOp) -> AdminResult {
        match op {
            AdminOp::PutUser {
                name,
                password_hash,
                hashing_algorithm,
                tags,
            } => Ok(self.put_user(name, password_hash, hashing_algorithm, tags)),
            AdminOp::DeleteUsers { names, must_exist } => self.delete_users(names, must_exist),
            AdminOp::PutVhost {
                name,
                description,
                tags,
                default_queue_type,
                acting_user,
            } => Ok(self.put_vhost(name, description, tags, default_queue_type, acting_user)),
            AdminOp::DeleteVhost { name } => self.delete_vhost(name),
            AdminOp::SetPermission {
                user,
                vhost,
                configure,
                write,
                read,
            } => self.set_permission(user, vhost, configure, write, read),
            AdminOp::ClearPermission { user, vhost } => {
                if self.broker.access.permission(&user, &vhost).is_none() {
                    return Err(AdminError::NotFound);
                }
                self.emit(Event::PermissionCleared { user, vhost }, true);
                Ok(AdminOutcome::Done)
            }
            AdminOp::SetTopicPermission {
                user,
                vhost,
                exchange,
                write,
                read,
            } => self.set_topic_permission(user, vhost, exchange, write, read),
            AdminOp::ClearTopicPermission {
                user,
                vhost,
                exchange,
            } => self.clear_topic_permission(user, vhost, exchange),
            AdminOp::Import { events } => Ok(AdminOutcome::Imported {
                skipped: self.import(events),
            }),
        }
    }

    fn put_user(
        &mut self,
        name: String,
        password_hash: String,
        hashing_algorithm: HashAlgorithm,
        tags: Vec<String>,
    ) -> AdminOutcome {
        let existed = self.broker.access.users.contains_key(&name);
        self.emit(
            Event::UserPut {
                name,
                password_hash,
                hashing_algorithm,
                tags,
            },
            true,
        );
        created_unless(existed)
    }

    fn delete_users(&mut self, names: Vec<String>, must_exist: bool) -> AdminResult {
        let access = self.broker.access.clone();
        if must_exist && names.iter().any(|n| !access.users.contains_key(n)) {
            return Err(AdminError::NotFound);
        }
        for name in names {
            if access.users.contains_key(&name) {
                self.emit(Event::UserDeleted { name: name.clone() }, true);
                self.close_sessions(|s| s.user == name, &format!("user '{name}' was deleted"));
            }
        }
        Ok(AdminOutcome::Done)
    }

    /// Create or update a vhost; its creator gets full permissions on it, as
    /// with RabbitMQ.
    fn put_vhost(
        &mut self,
        name: String,
        description: Option<String>,
        tags: Option<Vec<String>>,
        default_queue_type: Option<String>,
        acting_user: Option<String>,
    ) -> AdminOutcome {
        let access = self.broker.access.clone();
        let existed = self.broker.vhost(&name).is_some();
        if !existed {
            self.emit(
                Event::VhostCreated {
                    vhost: name.clone(),
                },
                true,
            );
            if let Some(user) = acting_user.filter(|u| access.users.contains_key(u)) {
                self.emit(
                    Event::PermissionSet {
                        user,
                        vhost: name.clone(),
                        configure: ".*".into(),
                        write: ".*".into(),
                        read: ".*".into(),
                    },
                    true,
                );
            }
        }
        let cur = access.vhost_meta.get(&name).cloned().unwrap_or_default();
        self.emit(
            Event::VhostMetadata {
                vhost: name,
                description: description.unwrap_or(cur.description),
                tags: tags.unwrap_or(cur.tags),
                default_queue_type: default_queue_type.or(cur.default_queue_type),
            },
            true,
        );
        created_unless(existed)
    }

    fn delete_vhost(&mut self, name: String) -> AdminResult {
        if self.broker.vhost(&name).is_none() {
            return Err(AdminError::NotFound);
        }
        // Clients of the vhost go first, as in RabbitMQ, so no
        // channel is left pointing at queues that are gone.
        self.close_sessions(|s| *s.vhost == *name, &format!("vhost '{name}' is deleted"));
        self.emit(Event::VhostDeleted { vhost: name }, true);
        Ok(AdminOutcome::Done)
    }

    /// A permission names a user and a vhost that both exist (400 otherwise,
    /// as RabbitMQ's API answers).
    fn user_and_vhost_exist(&self, user: &str, vhost: &str) -> Result<(), AdminError> {
        if !self.broker.access.users.contains_key(user) || self.broker.vhost(vhost).is_none() {
            return Err(AdminError::BadRequest("vhost_or_user_not_found".into()));
        }
        Ok(())
    }

    fn set_permission(
        &mut self,
        user: String,
        vhost: String,
        configure: String,
        write: String,
        read: String,
    ) -> AdminResult {
        self.user_and_vhost_exist(&user, &vhost)?;
        let access = &self.broker.access;
        let existed = access.permission(&user, &vhost).is_some();
        self.emit(
            Event::PermissionSet {
                user,
                vhost,
                configure,
                write,
                read,
            },
            true,
        );
        Ok(created_unless(existed))
    }

    fn set_topic_permission(
        &mut self,
        user: String,
        vhost: String,
        exchange: String,
        write: String,
        read: String,
    ) -> AdminResult {
        self.user_and_vhost_exist(&user, &vhost)?;
        let access = &self.broker.access;
        let existed = access
            .topic_permissions
            .get(&user)
            .and_then(|m| m.get(&vhost))
            .is_some_and(|m| m.contains_key(&exchange));
        self.emit(
            Event::TopicPermissionSet {
                user,
                vhost,
                exchange,
                write,
                read,
            },
            true,
        );
        Ok(created_unless(existed))
    }

    fn clear_topic_permission(
        &mut self,
        user: String,
        vhost: String,
        exchange: Option<String>,
    ) -> AdminResult {
        let has = self
            .broker
            .access
            .topic_permissions
            .get(&user)
            .and_then(|m| m.get(&vhost))
            .is_some_and(|m| exchange.as_ref().is_none_or(|x| m.contains_key(x)));
        if !has {
            return Err(AdminError::NotFound);
        }
        self.emit(
            Event::TopicPermissionCleared {
                user,
                vhost,
                exchange,
            },
            true,
        );
        Ok(AdminOutcome::Done)
    }

    /// Apply imported events in order; returns what was skipped.
    fn import(&mut self, events: Vec<Event>) -> Vec<String> {
        let mut skipped = Vec::new();
        for ev in events {
            match self.import_one(&ev) {
                Ok(Some(logged)) => {
                    self.emit(ev, logged);
                }
                Ok(None) => {}
                Err(why) => {
                    tracing::warn!("definitions import: {why}");
                    skipped.push(why);
                }
            }
        }
        skipped
    }

    /// Whether an imported event applies: Some(logged) to emit it, None when
    /// it is already in place, Err when it refers to something missing.
    fn import_one(&self, ev: &Event) -> Result<Option<bool>, String> {
        let vhost_missing = |v: &str| format!("vhost '{v}' does not exist");
        match ev {
            Event::VhostCreated { vhost } => Ok(self.broker.vhost(vhost).is_none().then_some(true)),
            Event::PermissionSet { user, vhost, .. }
            | Event::TopicPermissionSet { user, vhost, .. } => {
                if self.broker.vhost(vhost).is_none() {
                    Err(vhost_missing(vhost))
                } else if !self.broker.access.users.contains_key(user) {
                    Err(format!("user '{user}' does not exist"))
                } else {
                    Ok(Some(true))
                }
            }
            Event::QueueDeclared { vhost, name, spec } => {
                if self.broker.vhost(vhost).is_none() {
                    return Err(vhost_missing(vhost));
                }
                if self.broker.queue(vhost, name).is_some() {
                    return Ok(None);
                }
                use crate::broker::queue_args::{QueueType, check_declared};
                // The same answer as a declare (an unknown type is left to it).
                if let Some(queue_type) = QueueType::declared(&spec.arguments)
                    && let Err(e) = check_declared(&spec.arguments, queue_type)
                {
                    return Err(e.message(vhost, name));
                }
                Ok(Some(spec.durable))
            }
            Event::ExchangeDeclared { vhost, name, spec } => {
                if self.broker.vhost(vhost).is_none() {
                    return Err(vhost_missing(vhost));
                }
                if self.broker.exchange(vhost, name).is_some() {
                    return Ok(None);
                }
                Ok(Some(spec.durable))
            }
            Event::Bound { vhost, binding } => {
                use crate::broker::event::Destination;
                let Some(src) = self.broker.exchange(vhost, &binding.source) else {
                    return Err(format!(
                        "binding from '{}' in vhost '{vhost}': no such exchange",
                        binding.source
                    ));
                };
                let dest_durable = match &binding.destination {
                    Destination::Queue(q) => self.broker.queue(vhost, q).map(|q| q.is_logged()),
                    Destination::Exchange(x) => {
                        self.broker.exchange(vhost, x).map(|x| x.spec.durable)
                    }
                };
                let Some(dest_durable) = dest_durable else {
                    return Err(format!(
                        "binding to {:?} in vhost '{vhost}': no such destination",
                        binding.destination
                    ));
                };
                if src.has_binding(binding) {
                    return Ok(None);
                }
                Ok(Some(src.spec.durable && dest_durable))
            }
            Event::VhostMetadata { vhost, .. } => {
                if self.broker.vhost(vhost).is_none() {
                    return Err(vhost_missing(vhost));
                }
                Ok(Some(true))
            }
            Event::ParameterSet { vhost, .. } | Event::ParameterCleared { vhost, .. } => {
                if self.broker.vhost(vhost).is_none() {
                    return Err(vhost_missing(vhost));
                }
                Ok(Some(true))
            }
            Event::UserLimitsSet { name, .. } if !self.broker.access.users.contains_key(name) => {
                Err(format!("user '{name}' does not exist"))
            }
            // Users and anything else the importer built: always applies.
            _ => Ok(Some(true)),
        }
    }

    /// Close every connection whose session matches, with 320 as RabbitMQ
    /// does when an operator deletes its user or vhost.
    fn close_sessions(&mut self, which: impl Fn(&super::session::Session) -> bool, why: &str) {
        let conns: Vec<_> = self
            .sessions
            .iter()
            .filter(|(_, s)| which(s))
            .map(|(c, _)| *c)
            .collect();
        for conn in conns {
            let e = AmqpError::new(ReplyCode::ConnectionForced, why.to_string());
            self.send(conn, ToConn::CloseConnection(e));
            self.disconnect(conn);
        }
    }
}

/// What the master does for management writes beyond applying their events:
/// trimming queues when a policy brings in a length limit, and closing a
/// connection an operator asked to close.
impl Master {
    /// Trim every queue of `vhost` that is now over a length limit, as
    /// RabbitMQ does when a policy brings one in: the master drops (or
    /// dead-letters) the excess heads, and those removals are events of
    /// their own, so replicas follow without deciding anything (I4). A
    /// stream of the vhost gets its retention under the limits now in force
    /// (whole segments, `Master::every_stream_retention`).
    pub(super) fn after_policy_change(&mut self, vhost: &str) {
        let Some(v) = self.broker.vhost(vhost) else {
            return;
        };
        let mut over: Vec<String> = v
            .queues
            .iter()
            .filter(|(_, q)| q.is_over_limit())
            .map(|(name, _)| name.clone())
            .collect();
        // Sorted, so the removals are appended in the same order whatever
        // the hash map's order.
        over.sort();
        for q in over {
            self.enforce_length_limit(vhost, &q);
        }
        self.every_stream_retention(Some(vhost));
    }

    /// Close a client's connection with 320 CONNECTION_FORCED and the
    /// operator's reason (`DELETE /api/connections/{name}`).
    pub(super) fn force_close(&mut self, conn: super::inout::ConnId, reason: &str) {
        if self.sessions.get(conn).is_none() {
            return;
        }
        let e = crate::error::AmqpError::new(
            crate::error::ReplyCode::ConnectionForced,
            reason.to_string(),
        );
        self.send(conn, super::inout::ToConn::CloseConnection(e));
        self.disconnect(conn);
    }
}

/// A put's answer: 201 Created for a new object, 204 for an update (as
/// RabbitMQ's management API answers).
fn created_unless(existed: bool) -> AdminOutcome {
    if existed {
        AdminOutcome::Done
    } else {
        AdminOutcome::Created
    }
}
