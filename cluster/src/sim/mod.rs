//! Deterministic simulation of the replication engine.
//!
//! One thread, one seeded PRNG: a cluster of store and broker nodes (some
//! co-located) exchanging messages over a network that drops, delays, reorders
//! and duplicates them, with symmetric and asymmetric partitions, crashes that
//! lose unsynced disk writes, and restarts. A client oracle submits payloads to
//! whoever is master and records what was confirmed. One checker per invariant
//! runs as events happen ([`check`]); at the end every node is crashed at once
//! and restarted, and a new master must hold everything confirmed.
//!
//! A run is a pure function of its seed: `STABLEMQ_SIM_SEED=<seed>` replays a
//! failing one exactly (see `cluster/tests/sim_invariants.rs`), and
//! `STABLEMQ_SIM_TRACE=1` prints every event.
//!
//! This module is test support: it is public so the integration tests can drive
//! it, and it is not for use in the broker.

mod app;
pub mod check;
mod commands;
mod disk;
mod faults;
mod net;
mod oracle;
mod queue;
mod recovery;
pub mod reducer;
mod world;

pub use app::StreamBug;
pub use disk::{DiskState, SimDisk};
pub use net::NetParams;
pub use world::{SimStats, World};

use crate::replication::{Config, NodeId, SplitMix64};

use self::check::Violation;

/// Everything a run depends on; all drawn from the seed by
/// [`SimParams::from_seed`].
#[derive(Debug, Clone)]
pub struct SimParams {
    /// The seed of every random choice in the run.
    pub seed: u64,
    /// Members and (short) timings.
    pub cfg: Config,
    /// Network unreliability during the fault phase.
    pub net: NetParams,
    /// Length of the fault phase.
    pub main_ms: u64,
    /// Length of the recovery phase after it (no faults, all nodes restarted).
    pub heal_ms: u64,
    /// Range of the gap between two faults.
    pub fault_every_ms: (u64, u64),
    /// Range of the gap between two client bursts.
    pub client_every_ms: (u64, u64),
    /// Broker timer period.
    pub tick_ms: u64,
    /// Longest simulated fsync.
    pub fsync_max_ms: u64,
    /// Period of the store-log (I3) check.
    pub check_every_ms: u64,
    /// A run processing more events than this fails (a message storm).
    pub max_events: u64,
    /// Print every event to stderr.
    pub trace: bool,
    /// The recovery phase keeps the most up-to-date store down instead of
    /// restarting every node: the live quorum then has to include the
    /// stores that lag (often below their peers' log bases), as after
    /// SIGKILLing one node of a real 3-node cluster. The other nodes keep
    /// their memory, and a master on a broker-only node is restarted empty.
    /// The liveness check (a master, and new stable entries, by the end)
    /// then covers a lagging store catching up under a new master.
    pub heal_one_store_down: bool,
    /// At this time (if set), cut the link from the master to one slave,
    /// one way, until the heal: the slave hears no master while the stores
    /// (but for one co-located with that slave) still do. With pre-vote and
    /// leader stickiness the master must stay master.
    pub cut_slave_at_ms: Option<u64>,
    /// The cluster starts on new disks (every store must join, the
    /// bootstrap), and a crash of a store node may lose its whole disk: it
    /// restarts on a new, empty one and must rejoin before it votes. At
    /// most one store is without a joined disk at a time, so a quorum of
    /// intact stores always remains. Only with 3 or 5 stores and without
    /// `heal_one_store_down` (a rejoin needs `n - quorum + 1` live peers,
    /// which a store held down could take away for good).
    pub lose_disks: bool,
    /// A bug planted in the brokers' stream (the I6 tests); `None` but there.
    pub stream_bug: Option<StreamBug>,
}

impl SimParams {
    /// Topology, network and fault rates drawn from `seed`: 1, 3 or 5 stores,
    /// 1 to 3 brokers, some of them co-located with stores.
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed ^ 0xC1A5_7E55_EED5_0000);
        let stores_n = [1, 3, 3, 3, 5, 5][rng.below(6) as usize];
        let brokers_n = rng.between(1, 3);
        let colocated = rng.between(0, brokers_n.min(stores_n));
        let stores: Vec<NodeId> = (1..=stores_n).collect();
        let brokers: Vec<NodeId> = (1..=colocated)
            .chain(stores_n + 1..=stores_n + brokers_n - colocated)
            .collect();
        let mut cfg = Config::new(stores, brokers);
        cfg.heartbeat_ms = 10;
        cfg.election_timeout_ms = 100;
        cfg.election_jitter_ms = 100;
        cfg.retry_ms = 25;
        cfg.batch_entries_max = 16;
        cfg.window_entries_max = 64;
        cfg.fetch_entries_max = 512;
        // Stores compact, some keeping almost nothing behind the stable
        // index, so lagging nodes often need a snapshot.
        cfg.store_retention = Some(rng.below(48));
        let delay_max_ms = rng.between(2, 12);
        let fault_lo = rng.between(20, 120);
        // Drawn after everything above, so older seeds keep their topology
        // and network.
        let heal_one_store_down = stores_n >= 3 && rng.chance(500);
        // A wide window too (as in production, 8192 against a few thousand
        // entries here): then a lagging store still counts towards the
        // floor, the case where it must still learn to catch up from its
        // peers.
        cfg.window_entries_max = [64, 64, 4096][rng.below(3) as usize];
        // Check-quorum within the fault phase: a master cut off from the
        // stores steps down after 1.5 to 4 election timeouts.
        cfg.check_quorum_ms = rng.between(150, 400);
        // Half the seeds pace their stores' commits (as the real cluster
        // does); the window then opens 0 to 2 ms after it is asked for.
        // Decided by the seed alone, so no seed's other draws move.
        cfg.commit_interval_us = if seed % 2 == 1 { 1_000 } else { 0 };
        SimParams {
            seed,
            cfg,
            net: NetParams {
                drop_per_mille: rng.below(60),
                dup_per_mille: rng.below(40),
                delay_min_ms: 1,
                delay_max_ms,
            },
            main_ms: 2_500,
            heal_ms: 1_500,
            fault_every_ms: (fault_lo, fault_lo * 3),
            client_every_ms: (1, 6),
            tick_ms: 5,
            fsync_max_ms: 4,
            check_every_ms: 250,
            max_events: 2_000_000,
            trace: false,
            heal_one_store_down,
            cut_slave_at_ms: None,
            lose_disks: stores_n >= 3 && !heal_one_store_down,
            stream_bug: None,
        }
    }
}

/// The result of one seed.
#[derive(Debug)]
pub struct SimOutcome {
    /// The seed.
    pub seed: u64,
    /// What the run did.
    pub stats: SimStats,
    /// The first invariant violation, if any.
    pub result: Result<(), Violation>,
}

/// Run one seed with the parameters it implies.
pub fn run_seed(seed: u64, trace: bool) -> SimOutcome {
    let mut params = SimParams::from_seed(seed);
    params.trace = trace;
    run(params)
}

/// Run with explicit parameters.
pub fn run(params: SimParams) -> SimOutcome {
    let seed = params.seed;
    let mut world = World::new(params);
    let result = world.run();
    SimOutcome {
        seed,
        stats: world.stats.clone(),
        result,
    }
}
