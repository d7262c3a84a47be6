//! I3, log matching: if two stores hold an entry at the same (epoch, index),
//! their logs are identical up to that index (over the part both still hold:
//! below a store's log base its state stands for the log, and the I4 state
//! check covers it).

use crate::position::Entry;
use crate::replication::NodeId;

use super::Violation;

/// Check every pair of stores' logs, each given as (node, log base index,
/// entries after the base).
pub fn check_logs(stores: &[(NodeId, u64, &[Entry])]) -> Result<(), Violation> {
    for (i, &(a, base_a, log_a)) in stores.iter().enumerate() {
        for &(b, base_b, log_b) in stores.iter().skip(i + 1) {
            let lo = base_a.max(base_b);
            let cut = |base: u64, log: &'_ [Entry]| {
                let skip = usize::try_from(lo - base).unwrap_or(usize::MAX);
                log.get(skip..).unwrap_or(&[]).to_vec()
            };
            check_pair(a, &cut(base_a, log_a), b, &cut(base_b, log_b))?;
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
        assert!(check_logs(&[(1, 0, &a), (2, 0, &b)]).is_err());
        // Same prefix, different later epochs: allowed (c's tail is unstable).
        assert!(check_logs(&[(1, 0, &a), (3, 0, &c)]).is_ok());
        // A compacted prefix is not compared.
        assert!(check_logs(&[(1, 0, &a), (2, 1, &b[1..])]).is_ok());
    }
}
