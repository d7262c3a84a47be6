//! The node's connection limit, RabbitMQ's `connection_max`.
//!
//! RabbitMQ 3.10 enforces it in its listener (ranch's `max_connections`):
//! at the limit it stops accepting, so a further client's TCP connect
//! succeeds (the kernel's backlog) but nothing answers its protocol header
//! until another connection closes; then it is served as usual. No
//! connection.close is sent. StableMQ does the same one step later: the
//! socket is accepted, and its task waits for a free slot before it reads
//! anything, so the handshake timeout starts only once it is served, as in
//! RabbitMQ. The wait is bounded like a listen backlog: past
//! [`MAX_WAITING`] waiting clients, a new one is closed at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many clients may wait for a slot (a listen backlog's usual size).
pub(super) const MAX_WAITING: usize = 128;

/// The slots of the node's client connections (shared by every listener).
#[derive(Clone, Default)]
pub(super) struct Slots {
    /// None: no limit.
    sem: Option<Arc<Semaphore>>,
    waiting: Arc<AtomicUsize>,
}

/// A served client's slot, freed when dropped.
pub(super) struct Slot {
    _permit: Option<OwnedSemaphorePermit>,
}

/// Leaves the count of waiting clients when dropped (also when the wait is
/// cancelled by a shutdown).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Slots {
    /// Slots for at most `max` connections at once (None: no limit).
    pub(super) fn new(max: Option<u32>) -> Slots {
        Slots {
            sem: max.map(|n| Arc::new(Semaphore::new(n as usize))),
            waiting: Arc::default(),
        }
    }

    /// Wait for a free slot; None when too many clients wait already (the
    /// caller drops the socket).
    pub(super) async fn admit(&self) -> Option<Slot> {
        let Some(sem) = &self.sem else {
            return Some(Slot { _permit: None });
        };
        if let Ok(p) = sem.clone().try_acquire_owned() {
            return Some(Slot { _permit: Some(p) });
        }
        let before = self.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = Waiting(&self.waiting);
        if before >= MAX_WAITING {
            tracing::warn!(
                "connection limit reached and {MAX_WAITING} clients wait: closing one more"
            );
            return None;
        }
        if before == 0 {
            tracing::warn!("node connection limit is reached: new clients wait for a free slot");
        }
        sem.clone()
            .acquire_owned()
            .await
            .ok()
            .map(|p| Slot { _permit: Some(p) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// At the limit a client waits until a served one leaves; without a
    /// limit nobody waits.
    #[tokio::test]
    async fn a_client_over_the_limit_waits_for_a_slot() {
        let slots = Slots::new(Some(1));
        let first = slots.admit().await;
        assert!(first.is_some());
        let wait = tokio::time::timeout(Duration::from_millis(100), slots.admit()).await;
        assert!(wait.is_err(), "admitted over the limit");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), slots.admit()).await;
        assert!(matches!(second, Ok(Some(_))));
        let free = Slots::new(None);
        let mut held = Vec::new();
        for _ in 0..10 {
            held.push(free.admit().await);
        }
        assert!(held.iter().all(Option::is_some));
    }

    /// Past the backlog, a client is refused at once.
    #[tokio::test]
    async fn past_the_backlog_a_client_is_refused() {
        let slots = Slots::new(Some(0));
        let mut waiters = Vec::new();
        for _ in 0..MAX_WAITING {
            let s = slots.clone();
            waiters.push(tokio::spawn(async move { s.admit().await.is_some() }));
        }
        // Let every waiter register.
        for _ in 0..50 {
            if slots.waiting.load(Ordering::Relaxed) == MAX_WAITING {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(slots.waiting.load(Ordering::Relaxed), MAX_WAITING);
        let late = tokio::time::timeout(Duration::from_secs(5), slots.admit()).await;
        assert!(matches!(late, Ok(None)));
        for w in waiters {
            w.abort();
        }
    }
}
