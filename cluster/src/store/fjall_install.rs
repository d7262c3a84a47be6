//! Installing a peer's state (snapshot catch-up) in a [`FjallStore`]: the
//! chunks are staged in new state keyspaces beside the live ones, then one
//! durable write in `meta` switches to it (see the parent module's docs for
//! why a crash at any point leaves one whole state).

use bytes::Bytes;

use super::{
    FjallStore, LOG_BASE_KEY, STABLE_INDEX_KEY, STATE_GEN_KEY, STATE_INDEX_KEY, StateSpaces,
    encode_position, held_at,
};
use crate::position::LogPosition;
use crate::store::StoreError;

impl FjallStore {
    /// One chunk of a peer's state into the staging keyspaces (new ones
    /// for the first chunk).
    pub(super) fn stage_chunk(
        &mut self,
        base: LogPosition,
        first: bool,
        pairs: &[(Bytes, Bytes)],
    ) -> Result<(), StoreError> {
        if first {
            if let Some((_, old)) = self.staging.take() {
                old.delete(&self.db)?;
            }
            // Above every generation used before, so a deleted keyspace
            // whose files are still going never shares a name.
            let generation = self.state.generation().max(self.staging_gen_used) + 1;
            self.staging_gen_used = generation;
            StateSpaces::open(&self.db, &self.meta, generation)?.delete(&self.db)?;
            self.staging = Some((base, StateSpaces::empty(generation, &self.meta)));
        }
        let Some((_, staged)) = self.staging.as_mut().filter(|(b, _)| *b == base) else {
            return Err(StoreError::Misuse(format!(
                "a chunk of the state at {base}, which is not being staged"
            )));
        };
        let mut write = self.db.batch();
        for (key, value) in pairs {
            let space = staged.make(&self.db, key, &mut write)?;
            write.insert(&space, key.as_ref(), value.as_ref());
        }
        write.commit()?;
        staged.rotate_full()?;
        self.dirty = true;
        self.fjall_dirty = true;
        Ok(())
    }

    /// Names the staged state in `meta` in one durable write, then drops
    /// the old state and any log that does not continue the new base.
    pub(super) fn install_chunks(&mut self, base: LogPosition) -> Result<(), StoreError> {
        if base.index <= self.base.index {
            return Err(StoreError::Misuse(format!(
                "installing a state at {base}, not above the log base {}",
                self.base
            )));
        }
        let Some((_, staged)) = self.staging.take_if(|(b, _)| *b == base) else {
            return Err(StoreError::Misuse(format!(
                "installing a state at {base}, which was not staged"
            )));
        };
        let keep = crate::store::keeps_suffix(held_at(&self.log, base.index)?, base);
        let mut write = self.db.batch();
        let stable = self.stable_index.max(base.index);
        write.insert(&self.meta, STATE_GEN_KEY, staged.generation().to_be_bytes());
        write.insert(&self.meta, STATE_INDEX_KEY, base.index.to_be_bytes());
        write.insert(&self.meta, LOG_BASE_KEY, encode_position(base));
        write.insert(&self.meta, STABLE_INDEX_KEY, stable.to_be_bytes());
        write.commit()?;
        let old = std::mem::replace(&mut self.state, staged);
        self.state_index = base.index;
        self.base = base;
        self.log.set_base(base);
        self.stable_index = stable;
        // Durable before the old state goes: a crash must find either the
        // old state named in meta, or the new one.
        self.persist(true)?;
        // Entries up to the new base die with the base (see the module
        // docs); a log that does not continue it is reset, after the base
        // is durable (`open` finishes it after a crash).
        if !keep {
            self.log.reset(base)?;
            self.last = base;
        }
        self.log.set_stable(stable)?;
        self.dirty = true;
        // Their files go once no pinned snapshot reads them any more.
        old.delete(&self.db)?;
        Ok(())
    }
}
