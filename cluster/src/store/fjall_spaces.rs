//! The keyspaces one generation of a [`super::FjallStore`]'s state is kept
//! in: one per tag (a key's first byte), and one per *sequence*, for the
//! keys of a sequence tag ([`SEQUENCE_TAG_MIN`]; why: `fjall_state`'s
//! module docs). A tag's keyspace is `state.<gen>.<tag in hex>`, a
//! sequence's `state.<gen>.<tag in hex>.<n>`, made when its first key is
//! written. A sequence's name (its keys but their last 8 bytes) does not
//! fit in a keyspace name, so `meta` keeps it under `seq.<gen>.<n>`,
//! written in the batch that first writes to it; deleting the sequence by
//! prefix removes that key in its batch, and the keyspace goes once the
//! batch is durable. So `open` finds a sequence's keyspace without its
//! `meta` key only when a crash came between the two, and drops it.

use std::collections::BTreeMap;

use bytes::Bytes;
use fjall::{AbstractTree, Database, Keyspace, OwnedWriteBatch};

use super::StoreError;
use super::fjall::{MEMTABLE_BYTES_MAX, STATE_KEYSPACE};
use super::fjall_state::state_options;
use super::state::SEQUENCE_TAG_MIN;

/// The most the state's unsealed memtables hold together before the
/// largest are sealed for their flush ([`StateSpaces::rotate_full`]): two
/// full memtables' worth, as one keyspace held at most one and a half.
const ACTIVE_MEMTABLES_MAX: u64 = 2 * MEMTABLE_BYTES_MAX;

/// `meta`'s keys of sequence names start with this.
const SEQUENCE_META: &str = "seq.";

/// One generation of the state; see the module docs.
pub(super) struct StateSpaces {
    generation: u64,
    meta: Keyspace,
    /// By space key (a tag's one byte, or a sequence's name), so in key
    /// order.
    spaces: BTreeMap<Bytes, Space>,
    /// The number the next sequence's keyspace gets.
    next_sequence: u64,
    /// Sequences a batch deleted: their keyspaces go once it is durable.
    dead: Vec<Keyspace>,
}

struct Space {
    keyspace: Keyspace,
    /// A sequence's number (`None`: a tag's keyspace).
    sequence: Option<u64>,
}

/// What a keyspace's name says it is, in one generation.
enum Name {
    Tag,
    Sequence(u64),
}

impl StateSpaces {
    /// Generation `generation` with no keyspace yet.
    pub(super) fn empty(generation: u64, meta: &Keyspace) -> StateSpaces {
        StateSpaces {
            generation,
            meta: meta.clone(),
            spaces: BTreeMap::new(),
            next_sequence: 1,
            dead: Vec::new(),
        }
    }

    /// Generation `generation` with the keyspaces `db` holds for it; a
    /// sequence's keyspace whose name `meta` no longer has (a deletion a
    /// crash interrupted) is dropped.
    pub(super) fn open(
        db: &Database,
        meta: &Keyspace,
        generation: u64,
    ) -> Result<StateSpaces, StoreError> {
        let mut state = StateSpaces::empty(generation, meta);
        for name in db.list_keyspace_names() {
            let name: &str = name.as_ref();
            let Some((tag, kind)) = parse_name(generation, name) else {
                continue;
            };
            let keyspace = db.keyspace(name, state_options)?;
            let (key, sequence) = match kind {
                Name::Tag => (Bytes::copy_from_slice(&[tag]), None),
                Name::Sequence(n) => {
                    state.next_sequence = state.next_sequence.max(n + 1);
                    match meta.get(sequence_meta_key(generation, n))? {
                        Some(key) if key.first() == Some(&tag) => {
                            (Bytes::copy_from_slice(&key), Some(n))
                        }
                        Some(_) => {
                            return Err(StoreError::Corrupt(format!(
                                "meta names keyspace {name:?} with another tag"
                            )));
                        }
                        None => {
                            db.delete_keyspace(keyspace)?;
                            continue;
                        }
                    }
                }
            };
            state.spaces.insert(key, Space { keyspace, sequence });
        }
        Ok(state)
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// The keyspace `key` belongs in, if one was made.
    pub(super) fn of_key(&self, key: &[u8]) -> Option<&Keyspace> {
        let space = space_key(key).ok()?;
        self.spaces.get(space).map(|s| &s.keyspace)
    }

    /// The keyspace `key` belongs in, made if it is the first key there (a
    /// sequence's name goes into `meta` in `write`). A clone of the handle
    /// (a reference count), so the caller may go on making others.
    pub(super) fn make(
        &mut self,
        db: &Database,
        key: &[u8],
        write: &mut OwnedWriteBatch,
    ) -> Result<Keyspace, StoreError> {
        let space = space_key(key)?;
        if let Some(s) = self.spaces.get(space) {
            return Ok(s.keyspace.clone());
        }
        let tag = space[0];
        let (name, sequence) = if space.len() == 1 {
            (format!("{}{tag:02x}", self.prefix()), None)
        } else {
            let n = self.next_sequence;
            self.next_sequence += 1;
            write.insert(&self.meta, sequence_meta_key(self.generation, n), space);
            (format!("{}{tag:02x}.{n}", self.prefix()), Some(n))
        };
        let keyspace = db.keyspace(&name, state_options)?;
        self.spaces.insert(
            Bytes::copy_from_slice(space),
            Space {
                keyspace: keyspace.clone(),
                sequence,
            },
        );
        Ok(keyspace)
    }

    /// Removes every key that starts with `prefix`, in `write`: a
    /// sequence the prefix covers whole goes at once (its name leaves
    /// `meta` in `write`; its keyspace waits in the dead list for
    /// [`StateSpaces::drop_dead`]), other keyspaces key by key.
    pub(super) fn delete_prefix(
        &mut self,
        prefix: &[u8],
        write: &mut OwnedWriteBatch,
    ) -> Result<(), StoreError> {
        let mut whole = Vec::new();
        for (space, s) in &self.spaces {
            match s.sequence {
                Some(n) if space.starts_with(prefix) => {
                    write.remove(&self.meta, sequence_meta_key(self.generation, n));
                    whole.push(space.clone());
                }
                _ if space.starts_with(prefix) || prefix.starts_with(space) => {
                    for guard in s.keyspace.prefix(prefix) {
                        write.remove(&s.keyspace, guard.key()?);
                    }
                }
                _ => {}
            }
        }
        for space in whole {
            if let Some(s) = self.spaces.remove(&space) {
                self.dead.push(s.keyspace);
            }
        }
        Ok(())
    }

    /// Whether deleted sequences wait for their batch to be durable.
    pub(super) fn has_dead(&self) -> bool {
        !self.dead.is_empty()
    }

    /// Deletes the keyspaces of deleted sequences: only once the batches
    /// that deleted them are durable.
    pub(super) fn drop_dead(&mut self, db: &Database) -> Result<(), StoreError> {
        for keyspace in self.dead.drain(..) {
            db.delete_keyspace(keyspace)?;
        }
        Ok(())
    }

    /// The keyspaces with their space keys, in key order.
    pub(super) fn list(&self) -> Vec<(Bytes, Keyspace)> {
        self.spaces
            .iter()
            .map(|(key, s)| (key.clone(), s.keyspace.clone()))
            .collect()
    }

    /// Seals each keyspace's memtable that is over [`MEMTABLE_BYTES_MAX`], and,
    /// while the memtables not yet sealed hold more than
    /// [`ACTIVE_MEMTABLES_MAX`] together, the largest of them.
    ///
    /// Why the first: fjall asks its workers to seal a full memtable,
    /// through the queue where a flush or a long compaction may be ahead
    /// (one worker, `fjall::WORKER_THREADS`); meanwhile the memtable kept
    /// growing, past anything [`MEMTABLE_BYTES_MAX`] meant (filling 1.5M
    /// messages of S6: 521 MiB peak RSS, 354 with fjall's two workers).
    /// Sealed here, at once, the memtable goes to the flush queue, and fjall
    /// holds writers back while four sealed ones wait for it, which bounds
    /// the RAM.
    ///
    /// Why the second: fjall flushes a memtable when it is full, and
    /// caps its journal (so what memtables hold) only when it flushes one.
    /// With one keyspace per stream, 600 streams of 200 KB each filled no
    /// memtable, so nothing was ever flushed: the broker held all 120 MB in
    /// memtables (405 MiB resident, against 259 MiB with one keyspace for
    /// every stream), and would have held any amount.
    pub(super) fn rotate_full(&self) -> Result<(), StoreError> {
        let mut active = Vec::new();
        let mut total = 0;
        for s in self.spaces.values() {
            let size = s.keyspace.tree.active_memtable().size();
            if size > MEMTABLE_BYTES_MAX {
                s.keyspace.rotate_memtable()?;
            } else if size > 0 {
                total += size;
                active.push((size, &s.keyspace));
            }
        }
        if total > ACTIVE_MEMTABLES_MAX {
            active.sort_unstable_by_key(|a| std::cmp::Reverse(a.0));
            for (size, keyspace) in active {
                keyspace.rotate_memtable()?;
                total -= size;
                if total <= ACTIVE_MEMTABLES_MAX / 2 {
                    break;
                }
            }
        }
        Ok(())
    }

    /// What the unsealed memtables of this generation's keyspaces hold.
    #[cfg(test)]
    pub(super) fn active_bytes(&self) -> u64 {
        self.spaces
            .values()
            .map(|s| s.keyspace.tree.active_memtable().size())
            .sum()
    }

    /// Deletes every keyspace of this generation and its sequences' names
    /// (fjall removes the files once no snapshot reads them).
    pub(super) fn delete(mut self, db: &Database) -> Result<(), StoreError> {
        self.drop_dead(db)?;
        for s in self.spaces.into_values() {
            if let Some(n) = s.sequence {
                self.meta.remove(sequence_meta_key(self.generation, n))?;
            }
            db.delete_keyspace(s.keyspace)?;
        }
        Ok(())
    }

    /// Whether `name` is one of this generation's keyspaces.
    pub(super) fn owns(&self, name: &str) -> bool {
        parse_name(self.generation, name).is_some()
    }

    /// Removes `meta`'s sequence names of every other generation (what a
    /// crash left of a staged or replaced state).
    pub(super) fn drop_stale_names(&self) -> Result<(), StoreError> {
        let own = format!("{SEQUENCE_META}{}.", self.generation);
        for guard in self.meta.prefix(SEQUENCE_META) {
            let key = guard.key()?;
            if !key.starts_with(own.as_bytes()) {
                self.meta.remove(key)?;
            }
        }
        Ok(())
    }

    fn prefix(&self) -> String {
        format!("{STATE_KEYSPACE}.{}.", self.generation)
    }
}

/// The space `key` belongs to: its tag, or for a sequence tag everything
/// but the last 8 bytes.
fn space_key(key: &[u8]) -> Result<&[u8], StoreError> {
    match key.first() {
        None => Err(StoreError::Misuse("an empty state key".into())),
        Some(tag) if *tag < SEQUENCE_TAG_MIN => Ok(&key[..1]),
        Some(_) if key.len() < 9 => Err(StoreError::Misuse(format!(
            "a sequence's key of {} bytes",
            key.len()
        ))),
        Some(_) => Ok(&key[..key.len() - 8]),
    }
}

/// The tag and kind a keyspace name gives in `generation`, if it is one of
/// its state keyspaces.
fn parse_name(generation: u64, name: &str) -> Option<(u8, Name)> {
    let rest = name.strip_prefix(&format!("{STATE_KEYSPACE}.{generation}."))?;
    let (hex, n) = match rest.split_once('.') {
        Some((hex, n)) => (hex, Some(n.parse::<u64>().ok()?)),
        None => (rest, None),
    };
    if hex.len() != 2 {
        return None;
    }
    let tag = u8::from_str_radix(hex, 16).ok()?;
    match n {
        None if tag < SEQUENCE_TAG_MIN => Some((tag, Name::Tag)),
        Some(n) if tag >= SEQUENCE_TAG_MIN => Some((tag, Name::Sequence(n))),
        _ => None,
    }
}

/// `meta`'s key of sequence `n`'s name in `generation`.
fn sequence_meta_key(generation: u64, n: u64) -> String {
    format!("{SEQUENCE_META}{generation}.{n}")
}
