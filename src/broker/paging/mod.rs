//! Paging: queues longer than RAM.
//!
//! Ready messages live in RAM up to a byte budget shared by every queue of the
//! process (`message_ram_budget_bytes`, 96 MiB by default). Past it, a queue
//! writes new messages to a broker-local body store: append-only segment files
//! under `<data-dir>/pages`, never fsynced and wiped at boot, because the event
//! store is the durable truth and restore rebuilds the queues from it. RAM then
//! holds a window at the head of each queue plus 16 bytes of index per paged
//! message (`run`), and reads records back ahead of delivery.
//!
//! What is in RAM and what is on disk never changes what the broker does (I4):
//! [`Ready`] keeps the queue's true head in RAM at all times (a paged message
//! that becomes the head is read back at once), counts and byte totals include
//! paged messages, and a paged record carries every field of the queued
//! message (TTL expiry, wait index, delivery count, redelivered flag). Slaves
//! and restores page by the same rule, with their own budget.

mod files;
mod ready;
mod record;
mod run;
mod stream;
#[cfg(test)]
mod tests;

pub use ready::Ready;
pub use stream::StreamEntries;

use crate::broker::message::QueuedMessage;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Default RAM budget for ready messages, for the whole process.
pub const DEFAULT_RAM_BUDGET_BYTES: u64 = 96 << 20;

/// What RAM costs per queued message besides its body and names: the queue
/// entry (the message inline in it), its map slot and key, and its share of
/// the buffers its parts are slices of.
const MESSAGE_OVERHEAD_BYTES: u64 = (std::mem::size_of::<QueuedMessage>() + 64) as u64;

/// Reading a paged message back failed.
#[derive(Debug, thiserror::Error)]
pub enum PagingError {
    /// The file could not be read.
    #[error("reading {0}: {1}")]
    Read(String, std::io::Error),
    /// A position the index names is in no file.
    #[error("position {0} is in no segment")]
    Missing(u64),
    /// The bytes do not decode.
    #[error(transparent)]
    Record(#[from] record::RecordError),
    /// The record at the position is another message.
    #[error("expected message {0}, read message {1}")]
    WrongRecord(u64, u64),
}

/// The body store of one process: where runs write and how much RAM ready
/// messages may take.
#[derive(Debug)]
pub struct Pager {
    dir: PathBuf,
    budget: u64,
    /// Bytes of ready messages in RAM, over every queue.
    used: AtomicU64,
    next_run: AtomicU64,
}

impl Pager {
    /// A pager writing under `dir`, which it empties first: what a previous
    /// process paged out is stale (the event store has it).
    pub fn open(dir: &Path, budget: u64) -> std::io::Result<Arc<Pager>> {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        std::fs::create_dir_all(dir)?;
        Ok(Arc::new(Pager {
            dir: dir.to_path_buf(),
            budget: budget.max(1),
            used: AtomicU64::new(0),
            next_run: AtomicU64::new(0),
        }))
    }

    /// Bytes of ready messages in RAM now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The budget.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    fn has_room(&self, cost: u64) -> bool {
        self.used() + cost <= self.budget
    }

    fn charge(&self, cost: u64) {
        self.used.fetch_add(cost, Ordering::Relaxed);
    }

    fn release(&self, cost: u64) {
        self.used.fetch_sub(cost, Ordering::Relaxed);
    }

    fn new_run(&self) -> run::Run {
        run::Run::new(
            self.dir.clone(),
            self.next_run.fetch_add(1, Ordering::Relaxed),
        )
    }

    fn new_files(&self) -> files::PageFiles {
        files::PageFiles::new(
            self.dir.clone(),
            self.next_run.fetch_add(1, Ordering::Relaxed),
        )
    }

    /// A queue's window is refilled when it holds less than this.
    fn refill_below(&self) -> u64 {
        (4 << 20).min(self.budget / 2)
    }

    /// Bytes of records read back in one go.
    fn batch_bytes(&self) -> usize {
        usize::try_from((1u64 << 20).min(self.budget / 8).max(1)).unwrap_or(1 << 20)
    }
}

/// What a ready message in RAM counts against the budget.
fn ram_cost(m: &QueuedMessage) -> u64 {
    (m.msg.body.len() + m.msg.exchange.len() + m.msg.routing_key.len()) as u64
        + MESSAGE_OVERHEAD_BYTES
}

static INSTALLED: OnceLock<Arc<Pager>> = OnceLock::new();

/// Make `pager` the process's body store: every queue created from now on
/// pages through it. The server calls this once at boot, before it builds any
/// broker; without it (unit tests, tools) queues keep everything in RAM.
/// A process-wide value because the budget is the process's RAM, shared by
/// the master's broker, a slave's replica and the one a deposed master rebuilds.
pub fn install(pager: Arc<Pager>) {
    if INSTALLED.set(pager).is_err() {
        tracing::warn!("paging: a body store was installed already; keeping the first");
    }
}

/// The installed body store, if any.
pub fn installed() -> Option<Arc<Pager>> {
    INSTALLED.get().cloned()
}

/// A paged message could not be read back. The queue in RAM would then differ
/// from the log (I4), so the process stops, as it does when the event store
/// fails; after a restart the queue is rebuilt from the event store.
fn fatal(e: PagingError) -> ! {
    tracing::error!("paging: {e}; stopping");
    eprintln!("stablemq: paging: {e}; stopping");
    std::process::exit(70);
}
