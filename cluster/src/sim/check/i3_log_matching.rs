//! I3, log matching: if two stores hold an entry at the same (epoch, index),
//! their logs are identical up to that index.

use crate::position::Entry;
use crate::replication::NodeId;

use super::Violation;

/// Check every pair of stores' logs.
pub fn check_logs(stores: &[(NodeId, &[Entry])]) -> Result<(), Violation> {
    for (i, (a, log_a)) in stores.iter().enumerate() {
        for (b, log_b) in stores.iter().skip(i + 1) {
            check_pair(*a, log_a, *b, log_b)?;
        }
    }
    Ok(())
}

/// The highest index where both logs have the same epoch bounds the prefix that
/// must be identical; checking that one prefix covers every lower shared
/// position too.
fn check_pair(a: NodeId, log_a: &[Entry], b: NodeId, log_b: &[Entry]) -> Result<(), Violation> {
    let shared = log_a
        .iter()
        .zip(log_b)
        .rposition(|(x, y)| x.pos == y.pos)
        .map_or(0, |i| i + 1);
    match log_a[..shared]
        .iter()
        .zip(&log_b[..shared])
        .find(|(x, y)| x != y)
    {
        None => Ok(()),
        Some((x, y)) => Err(Violation::new(
            "I3",
            format!(
                "stores {a} and {b} share {} but differ at index {}: {} vs {}",
                log_a[shared - 1].pos,
                x.pos.index,
                x.pos,
                y.pos
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divergence_below_a_shared_position_is_caught() {
        let a = [Entry::new(1, 1, "x"), Entry::new(2, 2, "y")];
        let b = [Entry::new(1, 1, "z"), Entry::new(2, 2, "y")];
        let c = [Entry::new(1, 1, "x"), Entry::new(3, 2, "q")];
        assert!(check_logs(&[(1, &a), (2, &b)]).is_err());
        // Same prefix, different later epochs: allowed (c's tail is unstable).
        assert!(check_logs(&[(1, &a), (3, &c)]).is_ok());
    }
}
