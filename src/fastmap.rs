//! Hash maps for the per-message path.
//!
//! std's default SipHash showed as ~12% of the broker's instructions under a
//! 1x1 transient load: every publish and delivery looks up its queue,
//! exchange, consumers and channel by name. foldhash is several times
//! cheaper on short keys and still seeds each map at random, so names a
//! client picks cannot be chosen to collide.

/// A `HashMap` with foldhash's fast, randomly seeded hasher.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A `HashSet` with foldhash's fast, randomly seeded hasher.
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
