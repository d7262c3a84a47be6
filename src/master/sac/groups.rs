//! The groups of single active consumers (the stream protocol's
//! `single-active-consumer`, RabbitMQ 3.11+), as pure state: who is in which
//! group, who is active, and whom to tell what when one joins, leaves or
//! answers. No I/O, no master: [`Groups`] takes what happened and returns
//! the consumer updates to send ([`Notify`]).
//!
//! A group is a (virtual host, stream, consumer name). Its members are in
//! arrival order. RabbitMQ's rules (rabbit_stream_sac_coordinator, 3.11+):
//! - a group of a plain stream: the first member is active; when the active
//!   one leaves, the first of the others becomes active;
//! - a group of a super stream's partition (partition index `p`): the
//!   member at `p % members` is active. When a join or a leave moves that
//!   place, the active member is told `active=false` first (it steps down);
//!   once it answered ([`Groups::stepped_down`]) the member now at that
//!   place is told `active=true`. Until then nobody of the group is active.
//!
//! One difference from RabbitMQ: a member that leaves while it steps down
//! (unsubscribed, its connection gone) hands over at once. RabbitMQ 3.13
//! waits for its answer, which then never comes, and the partition stays
//! without an active consumer.

use crate::master::inout::ConnId;
use std::collections::HashMap;

/// A group's key: virtual host, stream, consumer name.
pub(crate) type GroupKey = (String, String, String);

/// A subscription of a connection: (connection, subscription id).
pub(crate) type MemberId = (ConnId, u8);

/// A consumer update to send to a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Notify {
    /// The subscription's connection.
    pub(crate) conn: ConnId,
    /// The subscription.
    pub(crate) subscription: u8,
    /// Whether it becomes the active consumer.
    pub(crate) active: bool,
    /// It gives way to another: its answer must be reported with
    /// [`Groups::stepped_down`].
    pub(crate) stepping_down: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Inactive,
    Active,
    /// Told `active=false` to give way; its answer is awaited.
    SteppingDown,
}

#[derive(Debug, Clone, Copy)]
struct Member {
    id: MemberId,
    state: State,
}

#[derive(Debug)]
struct Group {
    /// The partition's index in its super stream (`None`: a plain stream).
    partition: Option<usize>,
    members: Vec<Member>,
}

impl Group {
    fn find(&self, id: MemberId) -> Option<usize> {
        self.members.iter().position(|m| m.id == id)
    }

    fn in_state(&self, state: State) -> Option<usize> {
        self.members.iter().position(|m| m.state == state)
    }

    /// Where the active member should be: the first (a plain stream), or
    /// the partition index modulo the size (a partition).
    fn due(&self) -> Option<usize> {
        match (self.members.len(), self.partition) {
            (0, _) => None,
            (_, None) => Some(0),
            (n, Some(p)) => Some(p % n),
        }
    }

    /// Make the member at `due()` active and say so.
    fn activate_due(&mut self, out: &mut Vec<Notify>) {
        if let Some(i) = self.due() {
            let m = &mut self.members[i];
            m.state = State::Active;
            out.push(notify(m.id, true, false));
        }
    }

    /// After a join or a leave: tell who must change. The active member
    /// that is no longer due steps down (a partition) or, if nobody is
    /// active nor stepping down, the due member becomes active.
    fn settle(&mut self, out: &mut Vec<Notify>) {
        if self.in_state(State::SteppingDown).is_some() {
            // The handover goes on when it answers.
            return;
        }
        match (self.in_state(State::Active), self.due()) {
            // A plain stream's active member stays until it leaves (the
            // first member is the due one then anyway).
            (Some(active), Some(due)) if active != due && self.partition.is_some() => {
                let m = &mut self.members[active];
                m.state = State::SteppingDown;
                out.push(notify(m.id, false, true));
            }
            (Some(_), _) => {}
            (None, _) => self.activate_due(out),
        }
    }
}

fn notify(id: MemberId, active: bool, stepping_down: bool) -> Notify {
    Notify {
        conn: id.0,
        subscription: id.1,
        active,
        stepping_down,
    }
}

/// Every group of the node (not replicated: RabbitMQ keeps them in its
/// stream coordinator's memory, and clients subscribe again after a
/// failover).
#[derive(Debug, Default)]
pub(crate) struct Groups {
    groups: HashMap<GroupKey, Group>,
}

impl Groups {
    /// A subscription joins its group (made with `partition` if new; a
    /// group keeps the partition index of its first member). Returns the
    /// updates to send.
    pub(crate) fn register(
        &mut self,
        key: GroupKey,
        partition: Option<usize>,
        id: MemberId,
    ) -> Vec<Notify> {
        let g = self.groups.entry(key).or_insert_with(|| Group {
            partition,
            members: Vec::new(),
        });
        let mut out = Vec::new();
        if g.find(id).is_some() {
            return out;
        }
        g.members.push(Member {
            id,
            state: State::Inactive,
        });
        g.settle(&mut out);
        out
    }

    /// A subscription leaves its group (unsubscribed, or its stream or
    /// connection gone).
    pub(crate) fn unregister(&mut self, key: &GroupKey, id: MemberId) -> Vec<Notify> {
        let mut out = Vec::new();
        let Some(g) = self.groups.get_mut(key) else {
            return out;
        };
        let Some(i) = g.find(id) else {
            return out;
        };
        g.members.remove(i);
        if g.members.is_empty() {
            self.groups.remove(key);
        } else {
            g.settle(&mut out);
        }
        out
    }

    /// A member that stepped down answered its consumer update: the member
    /// now due becomes active. An answer from a member that is not
    /// stepping down changes nothing.
    pub(crate) fn stepped_down(&mut self, key: &GroupKey, id: MemberId) -> Vec<Notify> {
        let mut out = Vec::new();
        let Some(g) = self.groups.get_mut(key) else {
            return out;
        };
        match g.find(id) {
            Some(i) if g.members[i].state == State::SteppingDown => {
                g.members[i].state = State::Inactive;
                g.settle(&mut out);
            }
            _ => {}
        }
        out
    }

    /// A connection is gone: each of its subscriptions leaves its group.
    pub(crate) fn remove_connection(&mut self, conn: ConnId) -> Vec<Notify> {
        let mut gone: Vec<(GroupKey, MemberId)> = Vec::new();
        for (key, g) in &self.groups {
            for m in g.members.iter().filter(|m| m.id.0 == conn) {
                gone.push((key.clone(), m.id));
            }
        }
        let mut out = Vec::new();
        for (key, id) in gone {
            out.extend(self.unregister(&key, id));
        }
        // Nothing goes to the connection that left.
        out.retain(|n| n.conn != conn);
        out
    }

    /// A stream was deleted: its groups go (their subscriptions are told by
    /// the stream's deletion).
    pub(crate) fn remove_stream(&mut self, vhost: &str, stream: &str) {
        self.groups
            .retain(|(v, s, _), _| !(v.as_str() == vhost && s.as_str() == stream));
    }

    /// The active member of a group, if one is.
    #[cfg(test)]
    pub(crate) fn active(&self, key: &GroupKey) -> Option<MemberId> {
        let g = self.groups.get(key)?;
        g.in_state(State::Active).map(|i| g.members[i].id)
    }

    /// Whether there is no group.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

#[cfg(test)]
#[path = "groups_tests.rs"]
mod tests;
