//! I4 at this layer: what each broker applies is a prefix of the stable history:
//! same order, no gaps, no duplicates. (Determinism of the broker's `apply`
//! itself is tested in the broker.)

use crate::position::Entry;

use super::Violation;
use super::i1_no_confirmed_loss::History;

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
