//! One node's share of the cluster network, for a node that hosts a broker, a
//! store, or both.
//!
//! A co-located node (the default layout) is one [`NodeId`] with one listening
//! address: peers address its broker and its store by [`Endpoint`] service, not
//! by a second id or port. So the node owns one [`Transport`], and its two
//! drivers share it: sends go through a cloneable [`Outbox`] to the task that
//! owns the transport, and received envelopes are split by service into one
//! queue per driver. A message between the two halves of the node never
//! touches TCP (the transport loops it back).
//!
//! [`Endpoint`]: crate::replication::Endpoint

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::replication::{NodeId, Service};
use crate::transport::{Heard, Transport, TransportOptions};
use crate::wire::Envelope;

/// Aborts the network tasks once the last [`Outbox`] is dropped, which closes
/// every socket and frees the listening port.
struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Where a driver sends envelopes. Cloneable; never waits (the transport drops
/// what it cannot queue, and the engine resends).
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Envelope>,
    /// Keeps the transport alive as long as any driver can still send.
    _tasks: Arc<Tasks>,
}

impl Outbox {
    /// Queue `env` for its receiver.
    pub fn send(&self, env: Envelope) {
        // Fails only when the transport task is gone, i.e. the node is stopping.
        let _ = self.tx.send(env);
    }
}

/// A node's network: the outbox and one inbound queue per service.
pub struct NodeNet {
    /// Sends for both drivers.
    pub outbox: Outbox,
    /// Envelopes for the node's store.
    pub store_inbound: mpsc::Receiver<Envelope>,
    /// Envelopes for the node's broker.
    pub broker_inbound: mpsc::Receiver<Envelope>,
    /// When each peer was last heard on an authenticated connection.
    pub heard: Heard,
}

impl NodeNet {
    /// Start node `me`'s transport on `listener`. Must be called inside a tokio
    /// runtime. Envelopes for a service the node does not run are dropped once
    /// its receiver is dropped.
    pub fn start(
        me: NodeId,
        listener: TcpListener,
        peers: HashMap<NodeId, SocketAddr>,
        opts: TransportOptions,
    ) -> NodeNet {
        let queue = opts.inbound_queue.max(1);
        let (mut transport, mut inbound) = Transport::start(me, listener, peers, opts);
        let heard = transport.heard();
        let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Envelope>();
        let (store_tx, store_inbound) = mpsc::channel(queue);
        let (broker_tx, broker_inbound) = mpsc::channel(queue);
        let sender = tokio::spawn(async move {
            while let Some(env) = out_rx.recv().await {
                transport.send(env);
            }
        });
        let demux = tokio::spawn(async move {
            while let Some(env) = inbound.recv().await {
                let to = match env.to.service {
                    Service::Store => &store_tx,
                    Service::Broker => &broker_tx,
                };
                // Waiting here pushes back on the peers through TCP, as the
                // transport's own inbound queue does. A service whose driver is
                // gone (or absent) loses its messages.
                let _ = to.send(env).await;
            }
        });
        NodeNet {
            outbox: Outbox {
                tx: out_tx,
                _tasks: Arc::new(Tasks(vec![sender, demux])),
            },
            store_inbound,
            broker_inbound,
            heard,
        }
    }
}
