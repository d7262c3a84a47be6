//! I1, no confirmed loss: every entry ever reported stable keeps its position in
//! every later master's log, and every payload confirmed to the client oracle is
//! in that one stable history.
//!
//! The history is the longest stable prefix reported so far. Each report
//! (`Stable(i)` from a master, `BecameMaster` from a candidate) must agree with
//! it on the overlap and may extend it. Each incarnation's log is compared once
//! per index, so the check is linear in the log length.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::position::{Entry, LogPosition};

use super::{Incarnation, Violation};

/// The stable history and how far each incarnation's log has been compared.
#[derive(Debug, Default)]
pub struct History {
    /// `log[i]` is the stable entry at index `i + 1`.
    pub log: Vec<Entry>,
    /// Highest index of each incarnation's log already compared.
    checked: BTreeMap<Incarnation, u64>,
}

impl History {
    /// The stable entry at `index`.
    pub fn get(&self, index: u64) -> Option<&Entry> {
        let i = usize::try_from(index.checked_sub(1)?).ok()?;
        self.log.get(i)
    }

    /// Length of the stable history.
    pub fn len(&self) -> u64 {
        self.log.len() as u64
    }

    /// Whether nothing has been reported stable yet.
    pub fn is_empty(&self) -> bool {
        self.log.is_empty()
    }
}

/// `who` reports everything up to `stable` stable; `entry_at` reads its log.
pub fn on_stable_report(
    history: &mut History,
    who: Incarnation,
    stable: u64,
    base: u64,
    entry_at: impl Fn(u64) -> Option<Entry>,
) -> Result<(), Violation> {
    // Entries up to `base` left the node's memory after it applied them; its
    // Apply of each was checked against the history then (I4).
    let from = (history.checked.get(&who).copied().unwrap_or(0) + 1).max(base + 1);
    for index in from..=stable {
        let Some(entry) = entry_at(index) else {
            return Err(Violation::new(
                "I1",
                format!("node {who:?} reports {stable} stable but has no entry {index}"),
            ));
        };
        match history.get(index) {
            Some(known) if *known == entry => {}
            Some(known) => {
                return Err(Violation::new(
                    "I1",
                    format!(
                        "node {who:?} reports stable {} at index {index}, history has {}",
                        entry.pos, known.pos
                    ),
                ));
            }
            None => history.log.push(entry),
        }
    }
    if stable >= from {
        history.checked.insert(who, stable);
    }
    Ok(())
}

/// Every confirmed payload is in the history at the position it was confirmed at.
pub fn check_confirmed(
    history: &History,
    confirmed: &[(LogPosition, Bytes)],
) -> Result<(), Violation> {
    for (pos, payload) in confirmed {
        match history.get(pos.index) {
            Some(e) if e.pos == *pos && e.payload == *payload => {}
            other => {
                return Err(Violation::new(
                    "I1",
                    format!(
                        "confirmed {payload:?} at {pos}, stable history has {:?}",
                        other.map(|e| (e.pos, e.payload.clone()))
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// After the final recovery: the master's log holds every confirmed payload at
/// its position (this is "survives every crash while a quorum keeps its disks":
/// the sim crashed every node, losing all unsynced writes, before electing it).
pub fn check_final_master(
    confirmed: &[(LogPosition, Bytes)],
    base: u64,
    applied: u64,
    entry_at: impl Fn(u64) -> Option<Entry>,
) -> Result<(), Violation> {
    for (pos, payload) in confirmed {
        if pos.index <= base {
            if applied < pos.index {
                return Err(Violation::new(
                    "I1",
                    format!(
                        "confirmed {payload:?} at {pos}: the final master dropped it unapplied"
                    ),
                ));
            }
            continue;
        }
        match entry_at(pos.index) {
            Some(e) if e.pos == *pos && e.payload == *payload => {}
            other => {
                return Err(Violation::new(
                    "I1",
                    format!(
                        "confirmed {payload:?} at {pos} lost after recovery; final master has {:?}",
                        other.map(|e| e.pos)
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_that_rewrites_history_is_caught() {
        let mut h = History::default();
        let a = [Entry::new(1, 1, "a"), Entry::new(1, 2, "b")];
        let b = [Entry::new(1, 1, "a"), Entry::new(2, 2, "c")];
        on_stable_report(&mut h, (1, 0), 2, 0, |i| a.get(i as usize - 1).cloned()).unwrap();
        let err = on_stable_report(&mut h, (2, 0), 2, 0, |i| b.get(i as usize - 1).cloned());
        assert!(err.is_err());
        assert!(check_confirmed(&h, &[(LogPosition::new(1, 2), Bytes::from("b"))]).is_ok());
        assert!(check_confirmed(&h, &[(LogPosition::new(1, 3), Bytes::from("z"))]).is_err());
    }
}
