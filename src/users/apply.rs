//! How user, vhost and permission events change the broker state (I4: no
//! clock, no randomness; the same events give the same table everywhere).

use super::{AccessTable, User, VhostMeta};
use crate::broker::event::Event;
use crate::broker::{Applied, Broker};
use std::sync::Arc;

impl Broker {
    /// Apply one access-control or vhost event. Called by `Broker::apply`.
    pub(crate) fn apply_access(&mut self, ev: &Event, out: &mut Applied) {
        let table: &mut AccessTable = Arc::make_mut(&mut self.access);
        table.generation = table.generation.wrapping_add(1);
        match ev {
            Event::VhostMetadata {
                vhost,
                description,
                tags,
                default_queue_type,
            } => {
                table.initialized = true;
                if self.vhosts.contains_key(vhost) {
                    table.vhost_meta.insert(
                        vhost.clone(),
                        VhostMeta {
                            description: description.clone(),
                            tags: tags.clone(),
                            default_queue_type: default_queue_type.clone(),
                        },
                    );
                }
            }
            Event::VhostDeleted { vhost } => {
                table.delete_vhost(vhost);
                if let Some(v) = self.vhosts.remove(vhost) {
                    let mut names: Vec<_> = v.queues.into_iter().collect();
                    // Deterministic order for the master's follow-up.
                    names.sort_by(|a, b| a.0.cmp(&b.0));
                    for (_, q) in names {
                        out.deleted_queues.push((vhost.clone(), q));
                    }
                }
            }
            Event::UserPut {
                name,
                password_hash,
                hashing_algorithm,
                tags,
            } => table.put_user(User {
                name: name.clone(),
                password_hash: password_hash.clone(),
                hashing_algorithm: *hashing_algorithm,
                tags: tags.clone(),
            }),
            Event::UserDeleted { name } => table.delete_user(name),
            Event::UserLimitsSet { name, value } => table.set_user_limits(name, value),
            // A permission on a vhost that does not exist refers to nothing.
            Event::PermissionSet {
                user,
                vhost,
                configure,
                write,
                read,
            } if self.vhosts.contains_key(vhost) => {
                table.set_permission(user, vhost, configure, write, read);
            }
            Event::PermissionCleared { user, vhost } => table.clear_permission(user, vhost),
            Event::TopicPermissionSet {
                user,
                vhost,
                exchange,
                write,
                read,
            } if self.vhosts.contains_key(vhost) => {
                table.set_topic_permission(user, vhost, exchange, write, read);
            }
            Event::TopicPermissionCleared {
                user,
                vhost,
                exchange,
            } => table.clear_topic_permission(user, vhost, exchange.as_deref()),
            _ => {}
        }
    }
}
