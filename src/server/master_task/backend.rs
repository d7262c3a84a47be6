//! Where the master's events go, and where stability comes from: the
//! embedded single node's local store, or the replication engine's driver.

use crate::metrics as m;
use bytes::Bytes;
use stablemq_cluster::LocalLog;
use stablemq_cluster::driver::{BrokerEvent, BrokerHandle};
use tokio::sync::{mpsc, watch};

/// Where the master's events go, and where stability comes from.
pub enum Backend {
    /// The embedded single node: one local store, a quorum of one.
    Local {
        /// The store thread.
        log: LocalLog,
        /// Its durable index.
        stable: watch::Receiver<u64>,
    },
    /// A cluster: the replication engine's driver.
    Replicated {
        /// Appends and status.
        handle: BrokerHandle,
        /// Stable, Apply, BecameMaster, SteppedDown.
        events: mpsc::UnboundedReceiver<BrokerEvent>,
        /// Whether this node serves clients itself (true from BecameMaster
        /// until SteppedDown); the accept loop proxies to the master otherwise.
        serving: watch::Sender<bool>,
    },
}

impl Backend {
    /// Append the entry the master numbered `index`; `waited_for`: a client
    /// waits for it (`Master::stable_needed`), else the single node may defer
    /// its commit to the next one that is.
    pub(super) fn append(&mut self, index: u64, payload: Bytes, waited_for: bool) {
        match self {
            Backend::Local { log, .. } => {
                let pos = if waited_for {
                    log.append(payload)
                } else {
                    log.append_deferred(payload)
                };
                // I3: the master numbers its appends as the log does; a gap
                // would make a confirm wait for (or skip) the wrong entry.
                assert_eq!(pos.index, index, "I3: master and log numbering");
            }
            Backend::Replicated { handle, .. } => {
                // Fails only when the driver is gone, i.e. the node is stopping.
                let _ = handle.append_expecting(index, payload);
            }
        }
    }

    /// A client waits for the entries up to `index`: the single node
    /// commits those it deferred now. (A replicated log defers none.)
    pub(super) fn sync_to(&mut self, index: u64) {
        if let Backend::Local { log, .. } = self {
            log.sync_to(index);
        }
    }

    /// The single node's quorum of one is timed here; the replication
    /// driver times its own appends.
    pub(super) fn appended_up_to(&self, index: u64) {
        if matches!(self, Backend::Local { .. }) {
            m::local_appended(index);
        }
    }

    /// The next thing the log layer has to say. The single node's store
    /// says only "stable up to N", in the same form the cluster's driver does.
    pub(super) async fn next(&mut self) -> Option<BrokerEvent> {
        match self {
            Backend::Local { stable, .. } => match stable.changed().await {
                Ok(()) => {
                    let index = *stable.borrow_and_update();
                    m::local_stable(index);
                    Some(BrokerEvent::Stable(index))
                }
                Err(_) => std::future::pending().await,
            },
            Backend::Replicated { events, .. } => match events.recv().await {
                Some(e) => Some(e),
                None => std::future::pending().await,
            },
        }
    }

    /// Tell the accept loop whether this node serves clients itself.
    pub(super) fn set_serving(&self, on: bool) {
        if let Backend::Replicated { serving, .. } = self {
            serving.send_replace(on);
        }
    }

    /// The local log, handed back at shutdown for flushing.
    pub(super) fn into_local_log(self) -> Option<LocalLog> {
        match self {
            Backend::Local { log, .. } => Some(log),
            Backend::Replicated { .. } => None,
        }
    }

    /// The single node's store epoch, for the status gauge.
    pub(super) fn local_epoch(&self) -> Option<u64> {
        match self {
            Backend::Local { log, .. } => Some(log.epoch()),
            Backend::Replicated { .. } => None,
        }
    }
}
