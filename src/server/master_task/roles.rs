//! What the log layer says to the master task: stability, and (in a cluster)
//! role changes, each of which swaps the core between serving and following.

use super::{MasterTask, not_master, now_ms};
use crate::broker::Broker;
use crate::broker::state::RestoreBuilder;
use crate::master::Master;
use crate::master::inout::{Input, ToConn};
use crate::metrics as m;
use crate::server::replica::{self, Core};
use stablemq_cluster::driver::BrokerEvent;

impl MasterTask {
    /// React to the log layer: stability, or (in a cluster) a role change.
    pub(super) fn on_log_event(&mut self, event: BrokerEvent) {
        if !matches!(
            event,
            BrokerEvent::Restore { .. } | BrokerEvent::Campaign { .. }
        ) {
            // A transfer the engine abandoned (it caught up otherwise, or its
            // role changed): its partial state goes.
            self.restoring = None;
        }
        match (&mut self.core, event) {
            // The two steady-state events change the core in place.
            (Core::Serving(master), BrokerEvent::Stable(index)) => {
                master.set_now(now_ms());
                master.handle(Input::Stable { index });
                self.dirty = true;
                self.flush();
            }
            (Core::Following(broker), BrokerEvent::Apply(entries)) => {
                replica::apply_entries(broker, &entries);
                if let Some(last) = entries.last() {
                    self.applied.send_replace(last.pos.index);
                }
            }
            (
                Core::Following(_),
                BrokerEvent::Restore {
                    base,
                    first,
                    pairs,
                    done,
                },
            ) => self.on_restore_chunk(base, first, pairs, done),
            (Core::Following(_), BrokerEvent::BecameMaster { epoch, stable }) => {
                self.become_master(epoch, stable)
            }
            (_, BrokerEvent::SteppedDown { epoch }) => {
                // I2: nothing past the last stable index may be shown to anyone.
                // Pending confirms are neither acked nor nacked: the clients see
                // their connection close (320) and republish.
                tracing::warn!(epoch, "deposed: closing every client connection (320)");
                self.backend.set_serving(false);
                self.outboxes
                    .close_all(|| ToConn::CloseConnection(not_master()));
                // The engine restarts as a fresh slave: the stable state arrives
                // again through Apply, from index 1.
                self.core = Core::Following(Broker::new());
            }
            (_, BrokerEvent::Campaign { epoch }) => {
                tracing::info!(epoch, "campaigning for mastership");
            }
            (_, event) => {
                // Apply while serving, Stable while following: the engine never
                // does this; a debug build says so.
                debug_assert!(false, "log event {event:?} does not fit the current role");
            }
        }
    }

    /// A store compacted the entries this replica needed: its state of the
    /// stable log up to `base` replaces ours wholesale, and `Apply` continues
    /// after it (state + suffix == full replay, I4). It arrives in chunks, in
    /// key order, each built into the new broker as it comes, so the whole
    /// state is never held twice.
    fn on_restore_chunk(
        &mut self,
        base: stablemq_cluster::LogPosition,
        first: bool,
        pairs: Vec<(bytes::Bytes, bytes::Bytes)>,
        done: bool,
    ) {
        // No configured vhosts: a replica starts from nothing and gets
        // them from the log, as the store's reducer did.
        if first {
            self.restoring = Some(RestoreBuilder::new(&[]));
        }
        let Some(builder) = self.restoring.as_mut() else {
            // The engine takes a later chunk only after the first.
            tracing::error!(%base, "a snapshot chunk without its start; exiting");
            std::process::exit(70);
        };
        if let Err(err) = builder.feed(pairs) {
            // The stores' state does not decode: serving from a
            // guess would break I4. Stop; another node can serve.
            tracing::error!(%base, "snapshot state does not decode: {err}; exiting");
            std::process::exit(70);
        }
        if !done {
            return;
        }
        let Some(builder) = self.restoring.take() else {
            return;
        };
        // The old replica goes before the new one is finished.
        self.core = Core::Following(Broker::new());
        tracing::info!(%base, "replica restored from a store's snapshot");
        self.core = Core::Following(builder.finish());
        self.applied.send_replace(base.index);
    }

    /// This node won an election: its replica, which holds exactly the
    /// stable log, becomes the master's state.
    fn become_master(&mut self, epoch: u64, stable: u64) {
        let Core::Following(broker) =
            std::mem::replace(&mut self.core, Core::Following(Broker::new()))
        else {
            return;
        };
        let mut broker = broker;
        if epoch > 1 {
            // Epoch 1 is the cluster's first master: nothing failed over.
            metrics::counter!(m::FAILOVERS).increment(1);
        }
        broker.mark_redelivered();
        let mut master = Master::new(self.config.clone(), broker, stable);
        // The cluster's first master seeds users and vhosts from the
        // config; later ones find them in the log.
        master.seed_from_config(&self.config);
        tracing::info!(epoch, stable, "serving clients as master");
        self.backend.set_serving(true);
        self.core = Core::Serving(Box::new(master));
    }
}
