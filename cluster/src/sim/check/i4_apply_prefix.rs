//! I4 at this layer: what each broker applies is a prefix of the stable history:
//! same order, no gaps, no duplicates. (Determinism of the broker's `apply`
//! itself is tested in the broker.)

use bytes::Bytes;

use crate::position::{Entry, LogPosition};
use crate::sim::reducer::{Replay, State};

use super::Violation;
use super::i1_no_confirmed_loss::History;

/// An incarnation that had applied up to `*applied` replaced its state with
/// a store's snapshot at `base`: it must move forward, sit on the stable
/// history, and equal that history's prefix replayed.
pub fn on_restore(
    applied: &mut u64,
    base: LogPosition,
    pairs: &[(Bytes, Bytes)],
    history: &History,
    replay: &mut Replay,
) -> Result<(), Violation> {
    if base.index <= *applied {
        return Err(Violation::new(
            "I4",
            format!("restored a snapshot at {base} after applying {}", *applied),
        ));
    }
    let state: State = pairs.iter().cloned().collect();
    if state.len() != pairs.len() || !pairs.is_sorted_by(|a, b| a.0 < b.0) {
        return Err(Violation::new("I4", "snapshot pairs not in key order"));
    }
    check_state("a restored broker", base, &state, history, replay)?;
    *applied = base.index;
    Ok(())
}

/// `state`, said to cover the log up to `base`, equals the stable history's
/// prefix up to there, replayed with the simulator's reducer.
pub fn check_state(
    who: &str,
    base: LogPosition,
    state: &State,
    history: &History,
    replay: &mut Replay,
) -> Result<(), Violation> {
    if base.index > 0 && history.get(base.index).map(|e| e.pos) != Some(base) {
        return Err(Violation::new(
            "I4",
            format!(
                "{who} has state at {base}, stable history has {:?}",
                history.get(base.index).map(|e| e.pos)
            ),
        ));
    }
    let Some(expected) = replay.state_at(base.index, |i| history.get(i).cloned()) else {
        return Err(Violation::new(
            "I4",
            format!("{who}: history ends before {base}"),
        ));
    };
    if expected != state {
        return Err(Violation::new(
            "I4",
            format!("{who}: state at {base} differs from the stable log replayed"),
        ));
    }
    Ok(())
}

/// `entries` were applied by an incarnation that had applied up to `*applied`.
pub fn on_apply(applied: &mut u64, entries: &[Entry], history: &History) -> Result<(), Violation> {
    for entry in entries {
        let index = *applied + 1;
        if entry.pos.index != index {
            return Err(Violation::new(
                "I4",
                format!(
                    "applied {} after index {}: gap or duplicate",
                    entry.pos, *applied
                ),
            ));
        }
        match history.get(index) {
            Some(stable) if stable == entry => {}
            other => {
                return Err(Violation::new(
                    "I4",
                    format!(
                        "applied {} but stable history has {:?}",
                        entry.pos,
                        other.map(|e| e.pos)
                    ),
                ));
            }
        }
        *applied = index;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::check::i1_no_confirmed_loss::on_stable_report;

    #[test]
    fn gaps_and_foreign_entries_are_caught() {
        let log = [Entry::new(1, 1, "a"), Entry::new(1, 2, "b")];
        let mut h = History::default();
        on_stable_report(&mut h, (1, 0), 2, 0, |i| log.get(i as usize - 1).cloned()).unwrap();
        let mut applied = 0;
        assert!(on_apply(&mut applied, &log[..1], &h).is_ok());
        assert!(on_apply(&mut applied, &log[..1], &h).is_err()); // duplicate
        let mut applied = 0;
        assert!(on_apply(&mut applied, &[Entry::new(2, 1, "x")], &h).is_err());
    }
}
