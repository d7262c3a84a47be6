//! Per-connection traffic counters: bytes and socket reads/writes in and out,
//! what RabbitMQ reports per connection as `recv_oct`, `recv_cnt`, `send_oct`,
//! `send_cnt` and `send_pend` in the management API and as
//! `rabbitmq_connection_{incoming,outgoing}_{bytes,packets}_total` in Prometheus.
//!
//! The socket task owns the socket, so it counts; the master task owns the
//! sessions, so the management API and the Prometheus endpoint list those and
//! look each one's counters up here by connection id. A connection registers
//! when its task starts and is forgotten when the task ends ([`Registration`]'s
//! drop). Counting is a relaxed atomic add per socket read or write: no lock on
//! the hot path, one short lock per connection open and close and per scrape.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

/// A connection id as the master task numbers connections.
pub type ConnId = u64;

/// The live counters of one connection.
#[derive(Debug, Default)]
pub struct ConnStats {
    /// Bytes read from the socket.
    recv_oct: AtomicU64,
    /// Socket reads that returned data (RabbitMQ counts TCP packets received).
    recv_cnt: AtomicU64,
    /// Bytes written to the socket.
    send_oct: AtomicU64,
    /// Socket writes (RabbitMQ counts TCP packets sent).
    send_cnt: AtomicU64,
    /// Bytes handed to the socket and not yet written.
    send_pend: AtomicU64,
    /// Work the client's frames made: the actions decoding them produced (at
    /// least one per read). With the reads and writes, StableMQ's stand-in for
    /// the Erlang process reductions RabbitMQ reports.
    frames_in: AtomicU64,
}

impl ConnStats {
    /// `n` bytes were read.
    pub fn received(&self, n: usize) {
        self.recv_oct.fetch_add(n as u64, Ordering::Relaxed);
        self.recv_cnt.fetch_add(1, Ordering::Relaxed);
    }

    /// Decoding a read produced `n` actions.
    pub fn frames(&self, n: usize) {
        self.frames_in.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// `n` bytes are about to be written.
    pub fn sending(&self, n: usize) {
        self.send_pend.store(n as u64, Ordering::Relaxed);
    }

    /// `n` bytes were written.
    pub fn sent(&self, n: usize) {
        self.send_oct.fetch_add(n as u64, Ordering::Relaxed);
        self.send_cnt.fetch_add(1, Ordering::Relaxed);
        self.send_pend.store(0, Ordering::Relaxed);
    }

    /// A copy of the counters.
    pub fn read(&self) -> Traffic {
        Traffic {
            recv_oct: self.recv_oct.load(Ordering::Relaxed),
            recv_cnt: self.recv_cnt.load(Ordering::Relaxed),
            send_oct: self.send_oct.load(Ordering::Relaxed),
            send_cnt: self.send_cnt.load(Ordering::Relaxed),
            send_pend: self.send_pend.load(Ordering::Relaxed),
            reductions: self.frames_in.load(Ordering::Relaxed)
                + self.recv_cnt.load(Ordering::Relaxed)
                + self.send_cnt.load(Ordering::Relaxed),
        }
    }
}

/// One reading of a connection's counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes received.
    pub recv_oct: u64,
    /// Socket reads.
    pub recv_cnt: u64,
    /// Bytes sent.
    pub send_oct: u64,
    /// Socket writes.
    pub send_cnt: u64,
    /// Bytes waiting to be written.
    pub send_pend: u64,
    /// Work units: actions decoded plus socket reads and writes (RabbitMQ:
    /// Erlang reductions of the connection process).
    pub reductions: u64,
}

/// Counters of the connections whose tasks are running.
static REGISTRY: LazyLock<Mutex<HashMap<ConnId, Arc<ConnStats>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// A connection's place in the registry; dropping it forgets the connection.
#[derive(Debug)]
pub struct Registration {
    id: ConnId,
    stats: Arc<ConnStats>,
}

impl Registration {
    /// The counters to add to.
    pub fn stats(&self) -> &ConnStats {
        &self.stats
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut map) = REGISTRY.lock() {
            map.remove(&self.id);
        }
    }
}

/// Start counting for connection `id`.
pub fn register(id: ConnId) -> Registration {
    let stats = Arc::new(ConnStats::default());
    if let Ok(mut map) = REGISTRY.lock() {
        map.insert(id, stats.clone());
    }
    Registration { id, stats }
}

/// The counters of connection `id`, if its task is running (zeros otherwise:
/// a connection the master still lists while its task ends).
pub fn traffic(id: ConnId) -> Traffic {
    REGISTRY
        .lock()
        .ok()
        .and_then(|map| map.get(&id).map(|s| s.read()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_while_registered_and_forgets_after() {
        let id = 9_000_001;
        let reg = register(id);
        reg.stats().received(100);
        reg.stats().received(20);
        reg.stats().frames(3);
        reg.stats().sending(50);
        assert_eq!(traffic(id).send_pend, 50);
        reg.stats().sent(50);
        let t = traffic(id);
        assert_eq!(
            t,
            Traffic {
                recv_oct: 120,
                recv_cnt: 2,
                send_oct: 50,
                send_cnt: 1,
                send_pend: 0,
                reductions: 3 + 2 + 1,
            }
        );
        drop(reg);
        assert_eq!(traffic(id), Traffic::default());
    }
}
