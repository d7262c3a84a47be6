//! One checker per invariant (named after it), each with nothing but the
//! evidence it needs. The world calls them as events happen, so a violation is
//! reported at the simulated time it occurs, not only at the end.

pub mod i1_no_confirmed_loss;
pub mod i2_one_writer;
pub mod i3_log_matching;
pub mod i4_apply_prefix;
pub mod i6_stream_offsets;

use std::fmt;

/// An invariant that did not hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// Which invariant (or "liveness", or "engine" for a failed internal check).
    pub invariant: &'static str,
    /// What was seen.
    pub detail: String,
}

impl Violation {
    /// Shorthand for the checkers.
    pub fn new(invariant: &'static str, detail: impl Into<String>) -> Self {
        Violation {
            invariant,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} violated: {}", self.invariant, self.detail)
    }
}

/// A broker node in one life: a restart starts from nothing, so progress is
/// tracked per incarnation.
pub type Incarnation = (crate::replication::NodeId, u64);
