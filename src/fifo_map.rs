//! An ordered map for keys that nearly always arrive in increasing order and
//! leave from the front: a queue's ready messages (a new publish gets the
//! next id, a delivery takes the head) and a channel's unacked deliveries
//! (tags count up, acks settle the oldest).
//!
//! The in-order keys live in a `VecDeque`, which appends and pops without
//! moving the other entries; a B-tree shifts the rest of a node on every
//! removal and allocates a node per few inserts. Keys that arrive out of
//! order (a requeued message, a higher priority) go to a B-tree beside it,
//! and the order is the merge of the two.
//!
//! An entry removed from the middle (an expiry, an ack out of order) leaves
//! a tombstone, so nothing shifts then either. Tombstones at either end are
//! dropped at once, the deque is compacted when they outnumber the live
//! entries, and it gives memory back once it is a quarter full.

use std::collections::{BTreeMap, VecDeque};

/// Below this many tombstones the deque is never compacted.
const COMPACT_MIN_TOMBSTONES: usize = 64;

/// Below this capacity the deque is never shrunk.
const SHRINK_MIN_CAPACITY: usize = 1024;

#[derive(Debug, Clone)]
struct Slot<K, V> {
    key: K,
    /// None: removed (a tombstone).
    value: Option<V>,
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct FifoMap<K, V> {
    /// Strictly increasing keys; the first and last slots are never tombstones.
    fifo: VecDeque<Slot<K, V>>,
    /// Live entries in `fifo`.
    fifo_live: usize,
    /// Entries that arrived below the deque's last key.
    sorted: BTreeMap<K, V>,
}

impl<K, V> Default for FifoMap<K, V> {
    fn default() -> Self {
        FifoMap {
            fifo: VecDeque::new(),
            fifo_live: 0,
            sorted: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Copy + std::fmt::Debug, V> FifoMap<K, V> {
    /// Live entries.
    pub fn len(&self) -> usize {
        self.fifo_live + self.sorted.len()
    }

    /// No live entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` holds an entry.
    pub fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// The first entry in key order.
    pub fn first(&self) -> Option<(&K, &V)> {
        let f = self
            .fifo
            .front()
            .and_then(|s| Some((&s.key, s.value.as_ref()?)));
        let s = self.sorted.first_key_value();
        match (f, s) {
            (Some(f), Some(s)) => Some(if f.0 < s.0 { f } else { s }),
            (f, s) => f.or(s),
        }
    }

    /// Add an entry; `key` must not hold one already (keys are ids here,
    /// never reused while present).
    pub fn insert(&mut self, key: K, m: V) {
        if self.fifo.back().is_none_or(|s| s.key < key) {
            self.fifo.push_back(Slot {
                key,
                value: Some(m),
            });
            self.fifo_live += 1;
        } else {
            debug_assert!(
                self.fifo_position(&key).is_err(),
                "key {key:?} is in the deque"
            );
            debug_assert!(
                !self.sorted.contains_key(&key),
                "key {key:?} is in the tree"
            );
            self.sorted.insert(key, m);
        }
    }

    /// Take the first entry in key order.
    pub fn pop_first(&mut self) -> Option<(K, V)> {
        let from_fifo = match (self.fifo.front(), self.sorted.first_key_value()) {
            (Some(f), Some((s, _))) => f.key < *s,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if !from_fifo {
            return self.sorted.pop_first();
        }
        let slot = self.fifo.pop_front()?;
        self.fifo_live -= 1;
        self.trim();
        debug_assert!(slot.value.is_some(), "a tombstone at the deque's front");
        Some((slot.key, slot.value?))
    }

    fn fifo_position(&self, key: &K) -> Result<usize, usize> {
        self.fifo.binary_search_by(|s| s.key.cmp(key))
    }

    /// The entry at `key`. A key may be a tombstone in the deque and live in the B-tree (removed,
    /// then inserted again), so a tombstone sends the lookup on to the tree.
    pub fn get(&self, key: &K) -> Option<&V> {
        match self.fifo_position(key) {
            Ok(i) if self.fifo[i].value.is_some() => self.fifo[i].value.as_ref(),
            _ => self.sorted.get(key),
        }
    }

    /// Take the entry at `key`.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let i = match self.fifo_position(key) {
            Ok(i) if self.fifo[i].value.is_some() => i,
            _ => return self.sorted.remove(key),
        };
        let m = self.fifo[i].value.take()?;
        self.fifo_live -= 1;
        self.trim();
        let tombstones = self.fifo.len() - self.fifo_live;
        if tombstones > COMPACT_MIN_TOMBSTONES && tombstones > self.fifo_live {
            self.fifo.retain(|s| s.value.is_some());
        }
        Some(m)
    }

    /// Drop tombstones at both ends, and give memory back once the deque is
    /// a quarter full: a B-tree frees its nodes as it drains, and a queue
    /// that once held a long window must not keep its peak for good.
    fn trim(&mut self) {
        while self.fifo.front().is_some_and(|s| s.value.is_none()) {
            self.fifo.pop_front();
        }
        while self.fifo.back().is_some_and(|s| s.value.is_none()) {
            self.fifo.pop_back();
        }
        let capacity = self.fifo.capacity();
        if capacity > SHRINK_MIN_CAPACITY && self.fifo.len() < capacity / 4 {
            self.fifo.shrink_to(self.fifo.len() * 2);
        }
    }

    /// Whether any key lies in `lo..=hi`.
    pub fn any_in(&self, lo: K, hi: K) -> bool {
        // The first live slot at or after `lo` (tombstones are skipped; the
        // last slot is always live).
        let (Ok(i) | Err(i)) = self.fifo_position(&lo);
        let in_fifo = self
            .fifo
            .range(i..)
            .find(|s| s.value.is_some())
            .is_some_and(|s| s.key <= hi);
        in_fifo || self.sorted.range(lo..=hi).next().is_some()
    }

    /// Every value, in no particular order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.fifo
            .iter_mut()
            .filter_map(|s| s.value.as_mut())
            .chain(self.sorted.values_mut())
    }

    /// Every entry in key order: the merge of the deque and the B-tree.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        let mut fifo = self
            .fifo
            .iter()
            .filter_map(|s| Some((&s.key, s.value.as_ref()?)))
            .peekable();
        let mut sorted = self.sorted.iter().peekable();
        std::iter::from_fn(move || match (fifo.peek(), sorted.peek()) {
            (Some(f), Some(s)) if f.0 < s.0 => fifo.next(),
            (_, Some(_)) => sorted.next(),
            (Some(_), None) => fifo.next(),
            (None, None) => None,
        })
    }

    /// The keys up to and including `upto`, in order.
    pub fn keys_through(&self, upto: K) -> impl Iterator<Item = K> + '_ {
        self.iter().map(|(k, _)| *k).take_while(move |k| *k <= upto)
    }

    /// Every value, in key order.
    pub fn into_values(self) -> impl Iterator<Item = V> {
        let mut fifo = self
            .fifo
            .into_iter()
            .filter_map(|s| Some((s.key, s.value?)))
            .peekable();
        let mut sorted = self.sorted.into_iter().peekable();
        std::iter::from_fn(move || {
            let take_fifo = match (fifo.peek(), sorted.peek()) {
                (Some(f), Some(s)) => f.0 < s.0,
                (f, _) => f.is_some(),
            };
            let next = if take_fifo {
                fifo.next()
            } else {
                sorted.next()
            };
            next.map(|(_, v)| v)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// (level, id): the shape of a ready key.
    type Key = (u8, u64);

    #[test]
    fn in_order_keys_stay_in_the_deque_and_others_go_to_the_tree() {
        let mut r = FifoMap::default();
        for id in [1, 2, 3, 5] {
            r.insert((0, id), id);
        }
        r.insert((0, 4), 4);
        assert_eq!((r.fifo.len(), r.sorted.len()), (4, 1));
        let ids: Vec<u64> = r.iter().map(|(k, _)| k.1).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5]);
        assert_eq!(r.first().map(|(k, _)| k.1), Some(1));
        assert_eq!(r.keys_through((0, 3)).count(), 3);
        assert_eq!(r.into_values().collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    }

    #[test]
    fn removing_from_the_middle_leaves_a_tombstone_that_the_front_drops() {
        let mut r = FifoMap::default();
        for id in 1..=4u64 {
            r.insert((0u8, id), id);
        }
        assert_eq!(r.remove(&(0, 2)), Some(2));
        assert_eq!(r.remove(&(0, 2)), None);
        assert_eq!((r.len(), r.fifo.len()), (3, 4));
        assert!(!r.contains_key(&(0, 2)));
        assert_eq!(r.pop_first().map(|(k, _)| k.1), Some(1));
        // The tombstone of 2 went with the front.
        assert_eq!(r.fifo.len(), 2);
        assert_eq!(r.first().map(|(k, _)| k.1), Some(3));
        assert!(r.any_in((0, 2), (0, 3)));
        assert!(!r.any_in((0, 5), (0, u64::MAX)));
    }

    #[test]
    fn many_tombstones_are_compacted() {
        let mut r = FifoMap::default();
        for id in 0..1000u64 {
            r.insert(id, id);
        }
        for id in 1..999 {
            r.remove(&id);
        }
        assert_eq!(r.len(), 2);
        assert!(
            r.fifo.len() <= 2 * COMPACT_MIN_TOMBSTONES + 2,
            "{}",
            r.fifo.len()
        );
        assert_eq!(r.iter().map(|(k, _)| *k).collect::<Vec<_>>(), [0, 999]);
    }

    #[test]
    fn a_drained_deque_gives_its_memory_back() {
        let mut r = FifoMap::default();
        for id in 0..100_000u64 {
            r.insert(id, [0u8; 64]);
        }
        assert!(r.fifo.capacity() >= 100_000);
        while r.len() > 10 {
            r.pop_first();
        }
        assert!(
            r.fifo.capacity() <= SHRINK_MIN_CAPACITY * 2,
            "{}",
            r.fifo.capacity()
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u64),
        Pop,
        Remove(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..3, 0u64..200).prop_map(|(p, id)| Op::Insert(p, id)),
            2 => Just(Op::Pop),
            2 => (0u64..200).prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// Against a plain B-tree: the same order, lengths, heads and ranges.
        #[test]
        fn behaves_as_an_ordered_map(ops in proptest::collection::vec(op(), 1..300)) {
            let mut r: FifoMap<Key, u64> = FifoMap::default();
            let mut model: BTreeMap<Key, u64> = BTreeMap::new();
            // Ids are unique, as in a queue: the level of each id present.
            let mut level_of: std::collections::HashMap<u64, u8> = Default::default();
            for op in ops {
                match op {
                    Op::Insert(p, id) => {
                        if level_of.contains_key(&id) {
                            continue;
                        }
                        level_of.insert(id, p);
                        r.insert((p, id), id);
                        model.insert((p, id), id);
                    }
                    Op::Pop => {
                        let want = model.pop_first();
                        prop_assert_eq!(r.pop_first(), want);
                        if let Some((k, _)) = want {
                            level_of.remove(&k.1);
                        }
                    }
                    Op::Remove(id) => {
                        let p = level_of.remove(&id).unwrap_or(0);
                        prop_assert_eq!(r.remove(&(p, id)), model.remove(&(p, id)));
                    }
                }
                prop_assert_eq!(r.len(), model.len());
                let got: Vec<(Key, u64)> = r.iter().map(|(k, v)| (*k, *v)).collect();
                let want: Vec<(Key, u64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
                prop_assert_eq!(&got, &want);
                prop_assert_eq!(r.first().map(|(k, _)| *k), model.first_key_value().map(|(k, _)| *k));
                for p in 0..3u8 {
                    let (lo, hi) = ((p, 50), (p, u64::MAX));
                    prop_assert_eq!(r.any_in(lo, hi), model.range(lo..=hi).next().is_some());
                }
                let through: Vec<Key> = r.keys_through((1, 100)).collect();
                let want_through: Vec<Key> = model.range(..=(1, 100)).map(|(k, _)| *k).collect();
                prop_assert_eq!(through, want_through);
                for k in model.keys() {
                    prop_assert!(r.contains_key(k));
                }
            }
            let values: Vec<u64> = r.into_values().collect();
            prop_assert_eq!(values, model.into_values().collect::<Vec<_>>());
        }
    }
}
