//! How topology, settings and message removals change the broker state:
//! the arms of [`Broker::apply`] by kind of event (I4: no clock, no
//! randomness; the same events give the same state everywhere).

use super::event::{Destination, Event, ExchangeSpec};
use super::exchange::{Exchange, PREDECLARED};
use super::policy::{self, Policy};
use super::queue::Queue;
use super::{Applied, Broker, destination_exists, parameters, remove_bindings_to, unbind};
use stablemq_protocol::FieldTable;

impl Broker {
    /// Vhosts, exchanges, queues and bindings come and go.
    pub(super) fn apply_topology(&mut self, ev: &Event, out: &mut Applied) {
        match ev {
            Event::VhostCreated { vhost } => {
                let v = self.vhosts.entry(vhost.clone()).or_default();
                for (name, kind) in PREDECLARED {
                    v.exchanges
                        .entry(name.to_string())
                        .or_insert_with(|| Exchange {
                            name: name.to_string(),
                            spec: ExchangeSpec {
                                kind,
                                durable: true,
                                auto_delete: false,
                                internal: false,
                                arguments: FieldTable::default(),
                            },
                            bindings: Vec::new(),
                            policy: None,
                        });
                }
                v.refresh_policies();
            }
            Event::ExchangeDeclared { vhost, name, spec } => {
                if let Some(v) = self.vhosts.get_mut(vhost) {
                    let policy = policy::pick(v.policies.values(), name, false);
                    v.exchanges.entry(name.clone()).or_insert_with(|| Exchange {
                        name: name.clone(),
                        spec: spec.clone(),
                        bindings: Vec::new(),
                        policy,
                    });
                }
            }
            Event::ExchangeDeleted { vhost, name } => {
                if let Some(v) = self.vhosts.get_mut(vhost)
                    && v.exchanges.remove(name).is_some()
                {
                    let dest = Destination::Exchange(name.clone());
                    remove_bindings_to(v, &dest);
                }
            }
            Event::QueueDeclared { vhost, name, spec } => {
                if let Some(v) = self.vhosts.get_mut(vhost) {
                    let policy = policy::pick(v.policies.values(), name, true);
                    v.queues.entry(name.clone()).or_insert_with(|| {
                        let mut q = Queue::new(name.clone(), spec.clone());
                        q.set_policy(policy);
                        q
                    });
                }
            }
            Event::QueueDeleted { vhost, name } => {
                if let Some(v) = self.vhosts.get_mut(vhost)
                    && let Some(q) = v.queues.remove(name)
                {
                    remove_bindings_to(v, &Destination::Queue(name.clone()));
                    out.deleted_queues.push((vhost.clone(), q));
                }
            }
            Event::Bound { vhost, binding } => {
                if let Some(v) = self.vhosts.get_mut(vhost)
                    && destination_exists(v, &binding.destination)
                    && let Some(x) = v.exchanges.get_mut(&binding.source)
                    && !x.has_binding(binding)
                {
                    x.bindings.push(binding.clone());
                }
            }
            Event::Unbound { vhost, binding } => {
                if let Some(v) = self.vhosts.get_mut(vhost) {
                    unbind(v, binding);
                }
            }
            _ => {}
        }
    }

    /// Policies and parameters, per vhost and global.
    pub(super) fn apply_settings(&mut self, ev: &Event) {
        match ev {
            Event::PolicySet {
                vhost,
                name,
                pattern,
                apply_to,
                priority,
                definition,
            } => {
                if let Some(v) = self.vhosts.get_mut(vhost) {
                    let p = Policy::from_event(name, pattern, apply_to, *priority, definition);
                    v.policies.insert(name.clone(), p);
                    v.refresh_policies();
                }
            }
            Event::PolicyCleared { vhost, name } => {
                if let Some(v) = self.vhosts.get_mut(vhost)
                    && v.policies.remove(name).is_some()
                {
                    v.refresh_policies();
                }
            }
            Event::ParameterSet {
                vhost,
                component,
                name,
                value,
            } => {
                if let Some(v) = self.vhosts.get_mut(vhost) {
                    let key = (component.clone(), name.clone());
                    v.parameters.insert(key, parameters::from_event(value));
                }
            }
            Event::ParameterCleared {
                vhost,
                component,
                name,
            } => {
                if let Some(v) = self.vhosts.get_mut(vhost) {
                    v.parameters.remove(&(component.clone(), name.clone()));
                }
            }
            Event::GlobalParameterSet { name, value } => {
                self.global_parameters
                    .insert(name.clone(), parameters::from_event(value));
            }
            Event::GlobalParameterCleared { name } => {
                self.global_parameters.remove(name);
            }
            _ => {}
        }
    }

    /// Messages leave a queue (acked, expired, dropped) or a stream's front.
    pub(super) fn apply_removals(&mut self, ev: &Event) {
        match ev {
            Event::Removed {
                vhost,
                queue,
                msg_ids,
            } => {
                if let Some(q) = self.queue_mut(vhost, queue) {
                    for id in msg_ids {
                        q.remove(*id);
                    }
                }
            }
            Event::StreamTruncated {
                vhost,
                queue,
                first_offset,
                ..
            } => {
                if let Some(s) = self.queue_mut(vhost, queue).and_then(|q| q.stream.as_mut()) {
                    s.truncate_to(*first_offset);
                }
            }
            Event::StreamTracked {
                vhost,
                queue,
                kind,
                reference,
                value,
            } => {
                if let Some(s) = self.queue_mut(vhost, queue).and_then(|q| q.stream.as_mut()) {
                    s.track(*kind, reference, *value);
                }
            }
            _ => {}
        }
    }
}
