//! Replication of opaque events for StableMQ.
//!
//! The broker turns every state change into an event and may act on it only once
//! the event is *stable*: on disk on a quorum of event stores. This crate owns
//! that promise.
//!
//! - [`replication`] is the sans-IO replication engine: store nodes, and broker
//!   nodes that are master, slave or candidate, as pure `step` functions that
//!   return commands. [`sim`] drives it deterministically under drops, delays,
//!   partitions and crashes, with one checker per invariant.
//! - [`wire`] frames the engine's messages (length prefix, version byte);
//!   [`transport`] moves them over TCP with reconnect and backoff, after both
//!   ends prove they hold the cluster cookie; [`driver`]
//!   runs a store node over the disk store ([`driver::run_store_node`]) and a broker node
//!   ([`driver::BrokerNodeDriver`]) on tokio.
//! - [`LocalLog`] assigns log positions and group-commits appends on a dedicated
//!   store thread (one fsync per batch), reporting the stable index by callback.
//! - [`EventStore`] is the synchronous storage trait, with [`FjallStore`] (the
//!   disk: the log in append-only segment files, meta and state in fjall) and [`MemoryStore`] (the simulator and the conformance
//!   suite).
//! - [`store::Materializer`] keeps a store's materialized `state`: a
//!   [`store::Reducer`] supplied by the broker turns stable entries into
//!   key/value ops, and the log behind the state (minus a retention window) is
//!   deleted, so disk use follows the live backlog. [`LocalLog::open_with_state`]
//!   and the replicated stores use it; a node behind a store's log base catches
//!   up from a snapshot of that state.
//!
//! It is not:
//!
//! - aware of AMQP: payloads are opaque [`bytes::Bytes`], encoded and decoded by
//!   the broker;
//! - a cluster manager: membership is the static node list of the config, and
//!   nodes cannot be added or removed while the cluster runs;
//! - encrypted by default: [`transport`] authenticates nodes with the cluster
//!   cookie and sends frames in clear unless TLS is configured
//!   ([`transport::tls`]);
//! - async at its core: the engine and the stores are synchronous (fjall blocks,
//!   so a store runs on its own thread); only [`transport`] and [`driver`] need
//!   a tokio runtime.
//!
//! ```
//! use stablemq_cluster::{FjallStore, LocalLog};
//! # let dir = tempfile::tempdir()?;
//! let store = FjallStore::open(dir.path())?;
//! let (mut log, recovered) = LocalLog::open(
//!     Box::new(store),
//!     |stable| println!("everything up to {stable} is on disk"),
//!     |err| eprintln!("store failed, stop acking: {err}"),
//! )?;
//! assert!(recovered.is_empty());
//! let pos = log.append(bytes::Bytes::from_static(b"an opaque event"));
//! assert_eq!(pos.index, 1);
//! log.shutdown()?; // returns once index 1 is durable
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

// The workspace's `[lints]` (Cargo.toml) add no unwrap outside tests; this
// crate also has no unsafe code at all.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod driver;
#[doc(hidden)]
pub mod fuzz;
mod local;
mod position;
pub mod replication;
pub mod sim;
pub mod store;
pub mod transport;
pub mod wire;

pub use local::{LocalLog, RecoveredLog};
pub use position::{Entry, LogPosition};
pub use store::{EventStore, FjallStore, MemoryStore, StoreError};

/// Names of the metrics recorded through the `metrics` facade, exported so the
/// broker can describe them and dashboards can be checked against one source.
pub mod metrics {
    /// Histogram: entries made durable by one fsync (the group-commit batch size).
    pub const FSYNC_BATCH_MESSAGES: &str = "stablemq_store_fsync_batch_messages";
    /// Histogram: wall time of one fsync, in seconds.
    pub const FSYNC_SECONDS: &str = "stablemq_store_fsync_seconds";
    /// Counter: fsyncs issued by the store (group commits, promises, truncations).
    pub const FSYNCS_TOTAL: &str = "stablemq_store_fsyncs_total";
    /// Histogram: from a master's append to its entry being stable on a quorum
    /// of stores, in seconds (per batch of appends).
    pub const QUORUM_ACK_SECONDS: &str = "stablemq_quorum_ack_seconds";

    /// Counter: snapshots of a store's state installed by this node (a broker
    /// or store catching up below a store's log base), by `role`.
    pub const SNAPSHOTS_INSTALLED: &str = "stablemq_snapshots_installed_total";

    /// Counter: node-to-node connections refused by the cookie handshake
    /// (either side: a wrong or missing cookie, or a misdialed address).
    pub const NODE_AUTH_FAILURES: &str = "stablemq_cluster_auth_failures_total";

    /// Register units and help texts with the installed recorder.
    pub fn describe() {
        use ::metrics::{Unit, describe_counter, describe_histogram};
        describe_histogram!(
            FSYNC_BATCH_MESSAGES,
            Unit::Count,
            "Log entries made durable by one fsync (group commit batch size)"
        );
        describe_histogram!(
            FSYNC_SECONDS,
            Unit::Seconds,
            "Duration of one event-store fsync"
        );
        describe_counter!(FSYNCS_TOTAL, Unit::Count, "Event-store fsyncs issued");
        describe_counter!(
            NODE_AUTH_FAILURES,
            Unit::Count,
            "Node-to-node connections refused by the cluster cookie handshake"
        );
        describe_counter!(
            SNAPSHOTS_INSTALLED,
            Unit::Count,
            "Snapshots of a store's state installed to catch up below a log base"
        );
        describe_histogram!(
            QUORUM_ACK_SECONDS,
            Unit::Seconds,
            "Time from a master's append to the entry being stable on a quorum of stores"
        );
    }
}
