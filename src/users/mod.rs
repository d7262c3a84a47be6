//! Users, permissions and topic permissions: the replicated access-control
//! table, and the checks RabbitMQ makes with it.
//!
//! The table is part of the broker state: it changes only through
//! `Broker::apply` of user and permission events (I4), so every replica
//! agrees on who may log in and what they may touch. The master task
//! publishes each new version as an `Arc` snapshot ([`Snapshot`]) so
//! connection tasks and the management API check logins without asking the
//! master task.
//!
//! Permissions follow RabbitMQ's internal backend: per (user, vhost), three
//! regular expressions (configure, write, read) matched, unanchored, against
//! the resource name; an empty expression means `^$`. The default exchange
//! is named `amq.default` for these checks. Topic permissions, per (user,
//! vhost, exchange), match the routing key of publishes (write) and bindings
//! (read) on topic exchanges; `{username}` and `{vhost}` expand first. A
//! (user, vhost, exchange) without topic permissions is unrestricted.

mod apply;
pub mod limits;
pub mod password;

pub use password::HashAlgorithm;

use regex::Regex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A read-only view of the latest access table, updated by the master task.
pub type Snapshot = tokio::sync::watch::Receiver<Arc<AccessTable>>;

/// One user.
#[derive(Debug, Clone, PartialEq)]
pub struct User {
    /// Login name.
    pub name: String,
    /// base64(salt ‖ hash), RabbitMQ's format; empty = no password login.
    pub password_hash: String,
    /// Which hash `password_hash` uses.
    pub hashing_algorithm: HashAlgorithm,
    /// Tags (administrator, monitoring, management, policymaker, ...).
    pub tags: Vec<String>,
}

impl User {
    /// Whether `password` is this user's password.
    pub fn password_matches(&self, password: &str) -> bool {
        password::verify(self.hashing_algorithm, &self.password_hash, password)
    }
}

/// A compiled regular expression with its source text.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// As given (an empty string stays empty, for listing).
    pub source: String,
    re: Regex,
}

impl Pattern {
    /// Compile `source`; empty means `^$` as in RabbitMQ.
    pub fn new(source: &str) -> Result<Pattern, regex::Error> {
        let re = Regex::new(if source.is_empty() { "^$" } else { source })?;
        Ok(Pattern {
            source: source.to_string(),
            re,
        })
    }

    /// Compile for apply, which cannot fail: the master validated the
    /// expression before emitting the event, so a failure here means the
    /// event came from elsewhere; it then matches nothing (the safe side).
    fn or_nothing(source: &str) -> Pattern {
        Pattern::new(source).unwrap_or_else(|_| Pattern {
            source: source.to_string(),
            re: Regex::new(r"[^\s\S]").expect("constant regex"),
        })
    }

    /// Compile a topic permission expression: `{username}`, `{vhost}` and
    /// `{client_id}` are placeholders expanded per check, so they are
    /// checked here with sample values.
    pub fn new_topic(source: &str) -> Result<Pattern, regex::Error> {
        let sample = source
            .replace("{username}", "u")
            .replace("{vhost}", "v")
            .replace("{client_id}", "c");
        let p = Pattern::new(&sample)?;
        Ok(Pattern {
            source: source.to_string(),
            re: p.re,
        })
    }

    /// [`Pattern::new_topic`] for apply (see [`Pattern::or_nothing`]).
    fn topic_or_nothing(source: &str) -> Pattern {
        Pattern::new_topic(source).unwrap_or_else(|_| Pattern::or_nothing(source))
    }

    /// Unanchored match, as Erlang's `re:run/3`.
    pub fn is_match(&self, name: &str) -> bool {
        self.re.is_match(name)
    }
}

/// What an operation needs on a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Perm {
    /// Create, delete or change a queue or exchange.
    Configure,
    /// Put messages in (publish to an exchange, bind to a queue).
    Write,
    /// Take messages out (consume, get, purge, bind from an exchange).
    Read,
}

impl Perm {
    /// RabbitMQ's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Perm::Configure => "configure",
            Perm::Write => "write",
            Perm::Read => "read",
        }
    }
}

/// A user's rights in one vhost.
#[derive(Debug, Clone)]
pub struct Permission {
    /// Configure regex.
    pub configure: Pattern,
    /// Write regex.
    pub write: Pattern,
    /// Read regex.
    pub read: Pattern,
}

impl Permission {
    fn get(&self, p: Perm) -> &Pattern {
        match p {
            Perm::Configure => &self.configure,
            Perm::Write => &self.write,
            Perm::Read => &self.read,
        }
    }
}

/// A user's topic rights on one exchange of one vhost.
#[derive(Debug, Clone)]
pub struct TopicPermission {
    /// Write regex (routing keys it may publish with).
    pub write: Pattern,
    /// Read regex (binding keys it may bind with).
    pub read: Pattern,
}

/// Users by name; permissions by user then vhost; topic permissions by user,
/// vhost, then exchange.
#[derive(Debug, Clone, Default)]
pub struct AccessTable {
    /// Users.
    pub users: BTreeMap<String, User>,
    /// user → vhost → permission.
    pub permissions: BTreeMap<String, BTreeMap<String, Permission>>,
    /// user → vhost → exchange → topic permission.
    pub topic_permissions: BTreeMap<String, BTreeMap<String, BTreeMap<String, TopicPermission>>>,
    /// Vhost descriptions, tags and default queue types, by vhost.
    pub vhost_meta: BTreeMap<String, VhostMeta>,
    /// user → its limits (`limits`), for users that have some.
    pub user_limits: BTreeMap<String, serde_json::Map<String, serde_json::Value>>,
    /// Set by the first user or vhost event ever applied: from then on the
    /// config file's users and vhosts no longer seed anything.
    pub initialized: bool,
    /// Bumped by every access or vhost event applied to this table, so a
    /// permission check cached against one value (the master caches the last
    /// publish check per channel) is known stale once anything changed.
    pub generation: u64,
}

/// What RabbitMQ keeps about a vhost besides its contents.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VhostMeta {
    /// Free text.
    pub description: String,
    /// Tags.
    pub tags: Vec<String>,
    /// `default_queue_type`, if set.
    pub default_queue_type: Option<String>,
}

impl AccessTable {
    /// Add or replace a user.
    pub fn put_user(&mut self, user: User) {
        self.initialized = true;
        self.users.insert(user.name.clone(), user);
    }

    /// Remove a user with its permissions.
    pub fn delete_user(&mut self, name: &str) {
        self.initialized = true;
        self.users.remove(name);
        self.user_limits.remove(name);
        self.permissions.remove(name);
        self.topic_permissions.remove(name);
    }

    /// Forget every permission on a vhost (it was deleted).
    pub fn delete_vhost(&mut self, vhost: &str) {
        self.initialized = true;
        for per_vhost in self.permissions.values_mut() {
            per_vhost.remove(vhost);
        }
        for per_vhost in self.topic_permissions.values_mut() {
            per_vhost.remove(vhost);
        }
        self.permissions.retain(|_, m| !m.is_empty());
        self.topic_permissions.retain(|_, m| !m.is_empty());
        self.vhost_meta.remove(vhost);
    }

    /// Set a user's permissions on a vhost (a user that does not exist is
    /// skipped: the event refers to nothing).
    pub fn set_permission(&mut self, user: &str, vhost: &str, c: &str, w: &str, r: &str) {
        if !self.users.contains_key(user) {
            return;
        }
        self.permissions
            .entry(user.to_string())
            .or_default()
            .insert(
                vhost.to_string(),
                Permission {
                    configure: Pattern::or_nothing(c),
                    write: Pattern::or_nothing(w),
                    read: Pattern::or_nothing(r),
                },
            );
    }

    /// Clear a user's permissions on a vhost.
    pub fn clear_permission(&mut self, user: &str, vhost: &str) {
        if let Some(m) = self.permissions.get_mut(user) {
            m.remove(vhost);
            if m.is_empty() {
                self.permissions.remove(user);
            }
        }
    }

    /// Set a user's topic permissions on an exchange.
    pub fn set_topic_permission(
        &mut self,
        user: &str,
        vhost: &str,
        exchange: &str,
        w: &str,
        r: &str,
    ) {
        if !self.users.contains_key(user) {
            return;
        }
        self.topic_permissions
            .entry(user.to_string())
            .or_default()
            .entry(vhost.to_string())
            .or_default()
            .insert(
                exchange.to_string(),
                TopicPermission {
                    write: Pattern::topic_or_nothing(w),
                    read: Pattern::topic_or_nothing(r),
                },
            );
    }

    /// Clear one exchange's topic permissions, or all of the vhost's.
    pub fn clear_topic_permission(&mut self, user: &str, vhost: &str, exchange: Option<&str>) {
        let Some(per_vhost) = self.topic_permissions.get_mut(user) else {
            return;
        };
        match exchange {
            None => {
                per_vhost.remove(vhost);
            }
            Some(x) => {
                if let Some(m) = per_vhost.get_mut(vhost) {
                    m.remove(x);
                    if m.is_empty() {
                        per_vhost.remove(vhost);
                    }
                }
            }
        }
        if per_vhost.is_empty() {
            self.topic_permissions.remove(user);
        }
    }

    /// The permission of `user` on `vhost`, if any.
    pub fn permission(&self, user: &str, vhost: &str) -> Option<&Permission> {
        self.permissions.get(user)?.get(vhost)
    }

    /// Whether `user` may open a connection to `vhost`: RabbitMQ lets in any
    /// user with a permission entry there, whatever its expressions.
    pub fn may_use_vhost(&self, user: &str, vhost: &str) -> bool {
        self.permission(user, vhost).is_some()
    }

    /// Whether `user` may do `perm` on the resource `name` in `vhost`.
    pub fn allows(&self, user: &str, vhost: &str, perm: Perm, name: &str) -> bool {
        self.permission(user, vhost)
            .is_some_and(|p| p.get(perm).is_match(name))
    }

    /// Whether `user` may use `routing_key` on topic exchange `exchange`.
    /// Only `Write` (publish) and `Read` (bind) apply.
    pub fn allows_topic(
        &self,
        user: &str,
        vhost: &str,
        exchange: &str,
        perm: Perm,
        routing_key: &str,
    ) -> bool {
        let Some(tp) = self
            .topic_permissions
            .get(user)
            .and_then(|m| m.get(vhost))
            .and_then(|m| m.get(exchange))
        else {
            return true;
        };
        let pat = match perm {
            Perm::Read => &tp.read,
            _ => &tp.write,
        };
        if pat.source.contains('{') {
            // Variables depend on the connection, so expand and compile per
            // check; topic permissions with variables are rare.
            let src = pat
                .source
                .replace("{username}", user)
                .replace("{vhost}", vhost);
            return Pattern::new(&src).is_ok_and(|p| p.is_match(routing_key));
        }
        pat.is_match(routing_key)
    }
}

/// The events that seed a fresh node from the config file, as RabbitMQ
/// creates its default vhost and user on first boot: every configured vhost
/// (with RabbitMQ's description for `/`), every configured user with its
/// password hashed (SHA-256) and its tags, and full permissions (`.*`) for
/// every configured user on every configured vhost, which is what the config
/// file granted before permissions existed. The master emits them only while
/// the log holds no user or vhost event yet; after that the log is the only
/// source of users, and the config's users are ignored (a warning says so).
pub fn seed_events(config: &crate::config::Config) -> Vec<crate::broker::event::Event> {
    use crate::broker::event::Event;
    let mut out = Vec::new();
    for v in &config.vhosts {
        out.push(Event::VhostCreated { vhost: v.clone() });
        out.push(Event::VhostMetadata {
            vhost: v.clone(),
            description: if v == "/" {
                "Default virtual host".into()
            } else {
                String::new()
            },
            tags: Vec::new(),
            default_queue_type: None,
        });
    }
    for u in &config.users {
        out.push(Event::UserPut {
            name: u.name.clone(),
            password_hash: password::hash(&u.password),
            hashing_algorithm: HashAlgorithm::Sha256,
            tags: u.tags.clone(),
        });
        for v in &config.vhosts {
            out.push(Event::PermissionSet {
                user: u.name.clone(),
                vhost: v.clone(),
                configure: ".*".into(),
                write: ".*".into(),
                read: ".*".into(),
            });
        }
    }
    out
}

/// A new cluster's `internal_cluster_id`, in RabbitMQ's shape:
/// `rabbitmq-cluster-id-` and 16 random bytes, URL-safe base64 without
/// padding. Tools read it as an opaque identity; it is made once, at the
/// first master's first boot, and replicated like any global parameter.
pub fn new_cluster_id() -> String {
    use base64::Engine;
    let bytes: [u8; 16] = rand::random();
    format!(
        "rabbitmq-cluster-id-{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// The table a fresh node starts with, for code that runs without a master
/// (the connection machine's own tests, tools).
pub fn table_from_config(config: &crate::config::Config) -> AccessTable {
    let mut b = crate::broker::Broker::new();
    for e in seed_events(config) {
        b.apply(&e, 0);
    }
    (*b.access).clone()
}

/// The message RabbitMQ gives a refused operation on a resource.
pub fn refused_text(kind: &str, name: &str, vhost: &str, user: &str) -> String {
    format!("access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'")
}

/// The message RabbitMQ 3.10 gives a refused topic operation.
pub fn topic_refused_text(routing_key: &str, exchange: &str, vhost: &str, user: &str) -> String {
    format!(
        "access to topic '{routing_key}' in exchange '{exchange}' in vhost '{vhost}' refused for user '{user}'"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> AccessTable {
        let mut t = AccessTable::default();
        t.put_user(User {
            name: "u".into(),
            password_hash: password::hash("pw"),
            hashing_algorithm: HashAlgorithm::Sha256,
            tags: vec![],
        });
        t.set_permission("u", "/", "^cfg-", "", ".*");
        t.set_topic_permission("u", "/", "amq.topic", "^{username}\\.", "^a");
        t
    }

    #[test]
    fn regexes_are_unanchored_and_empty_means_nothing() {
        let t = table();
        assert!(t.may_use_vhost("u", "/"));
        assert!(!t.may_use_vhost("u", "other"));
        assert!(t.allows("u", "/", Perm::Configure, "cfg-q"));
        assert!(!t.allows("u", "/", Perm::Configure, "q-cfg-"));
        assert!(!t.allows("u", "/", Perm::Write, "x"));
        assert!(t.allows("u", "/", Perm::Read, "anything"));
        assert!(!t.allows("nobody", "/", Perm::Read, "anything"));
    }

    #[test]
    fn topic_permissions_expand_variables_and_default_to_allowed() {
        let t = table();
        assert!(t.allows_topic("u", "/", "amq.topic", Perm::Write, "u.x"));
        assert!(!t.allows_topic("u", "/", "amq.topic", Perm::Write, "v.x"));
        assert!(t.allows_topic("u", "/", "amq.topic", Perm::Read, "abc"));
        assert!(!t.allows_topic("u", "/", "amq.topic", Perm::Read, "b"));
        assert!(t.allows_topic("u", "/", "other", Perm::Write, "v.x"));
    }

    #[test]
    fn deleting_a_user_or_vhost_drops_its_permissions() {
        let mut t = table();
        t.delete_vhost("/");
        assert!(!t.may_use_vhost("u", "/"));
        let mut t = table();
        t.delete_user("u");
        assert!(t.permissions.is_empty() && t.topic_permissions.is_empty());
        t.set_permission("u", "/", ".*", ".*", ".*");
        assert!(t.permissions.is_empty(), "no such user");
    }
}
