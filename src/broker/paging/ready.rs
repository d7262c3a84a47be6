//! A queue's ready messages: a window in RAM plus runs on disk.
//!
//! Order is by [`ReadyKey`] (priority level, then id). Per level, every
//! message in RAM comes before every message of that level's run: a run only
//! ever gains messages newer than all others of its level (new publishes, or a
//! restore in id order), and a requeued message, which was delivered from RAM,
//! is older than the run and goes back to RAM. The true head is always in RAM:
//! after every change, if the first run's first message comes before the RAM
//! head, it is read back at once ([`Ready::settle`]).

use super::run::Run;
use super::{Pager, fatal, ram_cost};
use crate::broker::message::{Message, QueuedMessage};
use crate::broker::queue::ReadyKey;
use crate::fifo_map::FifoMap;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// See the module docs.
#[derive(Debug)]
pub struct Ready {
    /// In order, as ready messages nearly always come and go (see [`FifoMap`]).
    ram: FifoMap<ReadyKey, QueuedMessage>,
    /// What `ram` counts against the pager's budget.
    ram_cost: u64,
    /// Paged-out messages by priority level (inverse priority, as in the key).
    runs: BTreeMap<u8, Run>,
    /// Messages in `runs`.
    paged: usize,
    /// Level of each message in RAM, for queues with priorities (removal by id).
    levels: Option<HashMap<u64, u8>>,
    /// None: never page (no body store installed).
    pager: Option<Arc<Pager>>,
}

impl Ready {
    /// An empty set; `prioritized` queues find RAM messages by id through a map.
    pub fn new(pager: Option<Arc<Pager>>, prioritized: bool) -> Ready {
        Ready {
            ram: FifoMap::default(),
            ram_cost: 0,
            runs: BTreeMap::new(),
            paged: 0,
            levels: prioritized.then(HashMap::new),
            pager,
        }
    }

    /// Messages, in RAM and paged out.
    pub fn len(&self) -> usize {
        self.ram.len() + self.paged
    }

    /// No messages at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Messages in RAM.
    pub fn ram_len(&self) -> usize {
        self.ram.len()
    }

    /// Body bytes of the paged-out messages.
    pub fn paged_bytes(&self) -> u64 {
        self.runs.values().map(Run::bytes).sum()
    }

    /// What the messages in RAM cost (bodies, names and a fixed overhead each),
    /// plus 16 bytes of index per paged-out message: the queue's memory as the
    /// management API reports it.
    pub fn memory_bytes(&self) -> u64 {
        self.ram_cost + 16 * self.paged as u64
    }

    /// The first message (always in RAM).
    pub fn first(&self) -> Option<&QueuedMessage> {
        self.ram.first().map(|(_, m)| m)
    }

    /// The messages in RAM that come before every paged one, in order: the
    /// head of the queue as far as RAM holds it.
    pub fn head_run(&self) -> impl Iterator<Item = &QueuedMessage> {
        let limit = self.first_paged_key();
        self.ram
            .iter()
            .take_while(move |(k, _)| limit.is_none_or(|l| **k < l))
            .map(|(_, m)| m)
    }

    fn first_paged_key(&self) -> Option<ReadyKey> {
        let (&level, run) = self.runs.first_key_value()?;
        Some(ReadyKey {
            inverse_priority: level,
            id: run.first_id()?,
        })
    }

    /// Add a message at `key`: to RAM while the budget allows, else to its
    /// level's run (see the module docs for why order holds).
    pub fn insert(&mut self, key: ReadyKey, m: QueuedMessage) {
        if let Some(pager) = &self.pager {
            let level = key.inverse_priority;
            let to_run = match self.runs.get(&level) {
                Some(run) => run.last_id().is_some_and(|last| key.id > last),
                // Only a new message starts a run, never a requeued one: a
                // run's first id must be above every message of its level that
                // is out for delivery, or one of those could come back with an
                // id inside the run, where neither RAM nor the run can hold it.
                None => {
                    !m.redelivered
                        && !pager.has_room(ram_cost(&m))
                        && self.ram.first().is_some_and(|(k, _)| *k < key)
                        && !self.ram.any_in(
                            key,
                            ReadyKey {
                                inverse_priority: level,
                                id: u64::MAX,
                            },
                        )
                }
            };
            if to_run {
                let persistent = m.msg.is_persistent();
                let run = self.runs.entry(level).or_insert_with(|| pager.new_run());
                run.append(&m, persistent);
                self.paged += 1;
                return;
            }
            debug_assert!(
                self.runs
                    .get(&level)
                    .and_then(Run::first_id)
                    .is_none_or(|first| key.id < first),
                "a message older than its level's run but newer than its head"
            );
        }
        self.insert_ram(key, m);
        self.settle();
    }

    fn insert_ram(&mut self, key: ReadyKey, m: QueuedMessage) {
        let cost = ram_cost(&m);
        self.ram_cost += cost;
        if let Some(p) = &self.pager {
            p.charge(cost);
        }
        if let Some(levels) = &mut self.levels {
            levels.insert(key.id, key.inverse_priority);
        }
        self.ram.insert(key, m);
    }

    fn took_from_ram(&mut self, key: &ReadyKey, m: &QueuedMessage) {
        let cost = ram_cost(m);
        self.ram_cost -= cost;
        if let Some(p) = &self.pager {
            p.release(cost);
        }
        if let Some(levels) = &mut self.levels {
            levels.remove(&key.id);
        }
    }

    /// Take the first message.
    pub fn pop_first(&mut self) -> Option<QueuedMessage> {
        let (k, m) = self.ram.pop_first()?;
        self.took_from_ram(&k, &m);
        self.settle();
        Some(m)
    }

    fn ram_key(&self, id: u64) -> Option<ReadyKey> {
        let inverse_priority = match &self.levels {
            Some(levels) => *levels.get(&id)?,
            None => 0,
        };
        Some(ReadyKey {
            inverse_priority,
            id,
        })
    }

    /// Remove a message wherever it is; returns its body length.
    pub fn remove(&mut self, id: u64) -> Option<u64> {
        if let Some(k) = self.ram_key(id)
            && let Some(m) = self.ram.remove(&k)
        {
            self.took_from_ram(&k, &m);
            self.settle();
            return Some(m.msg.body.len() as u64);
        }
        let (level, len) = self
            .runs
            .iter_mut()
            .find_map(|(level, run)| run.remove(id).map(|len| (*level, len)))?;
        self.paged -= 1;
        if self.runs.get(&level).is_some_and(|r| r.len() == 0) {
            self.runs.remove(&level);
        }
        self.settle();
        Some(len)
    }

    /// The content of a message, read from disk if it is paged out.
    pub fn get(&self, id: u64) -> Option<Message> {
        if let Some(k) = self.ram_key(id)
            && let Some(m) = self.ram.get(&k)
        {
            return Some(m.msg.clone());
        }
        for run in self.runs.values() {
            match run.get(id) {
                Ok(Some(m)) => return Some(m.msg),
                Ok(None) => {}
                Err(e) => fatal(e),
            }
        }
        None
    }

    /// Whether a message is persistent, without reading it.
    pub fn is_persistent(&self, id: u64) -> Option<bool> {
        if let Some(k) = self.ram_key(id)
            && let Some(m) = self.ram.get(&k)
        {
            return Some(m.msg.is_persistent());
        }
        self.runs.values().find_map(|run| run.is_persistent(id))
    }

    /// Flag every message redelivered.
    pub fn mark_redelivered(&mut self) {
        for m in self.ram.values_mut() {
            m.redelivered = true;
        }
        for run in self.runs.values_mut() {
            run.mark_redelivered();
        }
    }

    /// Visit `(id, body length, persistent)` of every message in queue order
    /// until `f` returns false.
    pub fn visit(&self, mut f: impl FnMut(u64, u64, bool) -> bool) {
        let mut runs = self.runs.iter().peekable();
        for (k, m) in self.ram.iter() {
            while let Some(&(&level, run)) = runs.peek() {
                if level >= k.inverse_priority {
                    break;
                }
                if !run.visit(&mut f) {
                    return;
                }
                runs.next();
            }
            if !f(k.id, m.msg.body.len() as u64, m.msg.is_persistent()) {
                return;
            }
        }
        for (_, run) in runs {
            if !run.visit(&mut f) {
                return;
            }
        }
    }

    /// Every message with its key, in queue order; paged ones are read from
    /// disk one by one (tests and diagnostics, not a delivery path).
    pub fn to_vec(&self) -> Vec<(ReadyKey, QueuedMessage)> {
        let mut out = Vec::with_capacity(self.len());
        let read_run = |out: &mut Vec<(ReadyKey, QueuedMessage)>, level: u8, run: &Run| {
            let mut ids = Vec::with_capacity(run.len());
            run.visit(&mut |id, _, _| {
                ids.push(id);
                true
            });
            for id in ids {
                match run.get(id) {
                    Ok(Some(m)) => out.push((
                        ReadyKey {
                            inverse_priority: level,
                            id,
                        },
                        m,
                    )),
                    Ok(None) => {}
                    Err(e) => fatal(e),
                }
            }
        };
        let mut runs = self.runs.iter().peekable();
        for (k, m) in self.ram.iter() {
            while let Some(&(&level, run)) = runs.peek() {
                if level >= k.inverse_priority {
                    break;
                }
                read_run(&mut out, level, run);
                runs.next();
            }
            out.push((*k, m.clone()));
        }
        for (&level, run) in runs {
            read_run(&mut out, level, run);
        }
        out
    }

    /// Restore the invariant (the head is in RAM) and keep the window filled
    /// while the budget allows. Reads are synchronous: a batch is read in one
    /// call, sequentially, usually from the page cache.
    fn settle(&mut self) {
        let Some(pager) = self.pager.clone() else {
            return;
        };
        loop {
            let Some(first_paged) = self.first_paged_key() else {
                return;
            };
            let need = self.ram.first().is_none_or(|(k, _)| first_paged < *k);
            let want = self.ram_cost < pager.refill_below() && pager.used() < pager.budget();
            if !need && !want {
                return;
            }
            self.load(first_paged.inverse_priority, pager.batch_bytes());
            if !need {
                return;
            }
        }
    }

    fn load(&mut self, level: u8, max_bytes: usize) {
        let Some(run) = self.runs.get_mut(&level) else {
            return;
        };
        let msgs = match run.pop_front(max_bytes) {
            Ok(m) => m,
            Err(e) => fatal(e),
        };
        if run.len() == 0 {
            self.runs.remove(&level);
        }
        self.paged -= msgs.len();
        for m in msgs {
            let key = ReadyKey {
                inverse_priority: level,
                id: m.msg.id,
            };
            self.insert_ram(key, m);
        }
    }
}

impl Drop for Ready {
    fn drop(&mut self) {
        if let Some(p) = &self.pager {
            p.release(self.ram_cost);
        }
    }
}
