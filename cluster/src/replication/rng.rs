//! A tiny seeded PRNG, so the engine and the simulator need no dependency and
//! never touch global randomness (a replayed seed must make the same choices).

/// SplitMix64 (Steele, Lea, Flood 2014): one u64 of state, good enough
/// statistical quality for timeouts and fault injection. Not cryptographic.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    /// The whole state; the same seed always gives the same sequence.
    state: u64,
}

impl SplitMix64 {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0). The modulo bias is irrelevant at the
    /// ranges used here (timeouts, percentages, small node counts).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }

    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_bounds_hold() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
            let x = a.between(3, 5);
            assert!((3..=5).contains(&x));
            b.between(3, 5);
        }
        assert_eq!(a.below(0), 0);
    }
}
