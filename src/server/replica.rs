//! The broker state of a node that is not (or no longer) the master: a replica
//! fed only stable entries, in log order, so it is exactly the state a new
//! master must start from (I4).

use crate::broker::Broker;
use crate::broker::event::Event;
use crate::master::Master;
use stablemq_cluster::Entry;
use stablemq_cluster::replication::is_epoch_marker;

/// What the master task holds.
pub enum Core {
    /// This node serves clients.
    Serving(Box<Master>),
    /// This node keeps a replica and proxies clients to the master.
    Following(Broker),
}

impl Core {
    /// The broker state, for gauges.
    pub fn broker(&self) -> &Broker {
        match self {
            Core::Serving(m) => &m.broker,
            Core::Following(b) => b,
        }
    }

    /// The master core, while serving.
    pub fn master(&self) -> Option<&Master> {
        match self {
            Core::Serving(m) => Some(m),
            Core::Following(_) => None,
        }
    }
}

/// Apply stable entries to a replica, skipping epoch markers.
///
/// An entry this build cannot decode would leave the replica different from
/// the log (I4 broken), and a master built from it would serve wrong state; so
/// the process stops instead, as it does when its local store fails.
pub fn apply_entries(broker: &mut Broker, entries: &[Entry]) {
    for entry in entries {
        if is_epoch_marker(entry) {
            continue;
        }
        match Event::decode(&entry.payload) {
            Ok(event) => {
                broker.apply(&event, 0);
            }
            Err(err) => {
                tracing::error!(
                    index = entry.pos.index,
                    "stable entry does not decode ({err}); stopping (I4)"
                );
                std::process::exit(70);
            }
        }
    }
}
