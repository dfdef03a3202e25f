//! What a cluster's host does to its own copy of a topology's state besides
//! committing batches: reads records by their encoded keys, and puts slots
//! back as the topology's changelog holds them, setting where the copy
//! stands (`cluster::worker`).

use super::error::Context;
use super::rules::Stored;
use super::table::{Layout, ReadTable, WriteTable};
use super::{Db, LAST_COMMITTED, StoreError, kinds_def, kinds_table, meta_def, meta_table, record_kind, state_table};
use redb::{ReadableDatabase, TableHandle};
use weir_sdk::topology::StateKind;

/// One state's slots put back: every key `drop` selects goes, then `values`
/// are stored.
pub struct Restored<'a> {
    pub state: &'a str,
    pub kind: StateKind,
    pub drop: &'a dyn Fn(&[u8]) -> bool,
    pub values: Vec<(Vec<u8>, Stored)>,
}

impl Db {
    /// The record of encoded key `key` in `state`; `None` when the state
    /// has no table yet.
    pub fn stored(&self, topology: &str, state: &str, key: &[u8]) -> Result<Option<Stored>, StoreError> {
        Ok(self.stored_each(topology, state, [key])?.pop().flatten())
    }

    /// The record of each of `keys` in `state`, read in one transaction.
    pub fn stored_each<'k>(
        &self,
        topology: &str,
        state: &str,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<Vec<Option<Stored>>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = ReadTable::open(&txn, &state_table(topology, state))?;
        keys.into_iter().map(|key| table.as_ref().map_or(Ok(None), |table| table.get(key))).collect()
    }

    /// Up to `limit` records of `state` after encoded key `after` whose keys
    /// `keep` selects, in key order.
    pub fn stored_page(
        &self,
        topology: &str,
        state: &str,
        after: Option<&[u8]>,
        limit: usize,
        keep: &dyn Fn(&[u8]) -> bool,
    ) -> Result<Vec<(Vec<u8>, Stored)>, StoreError> {
        let txn = self.db.begin_read()?;
        let Some(table) = ReadTable::open(&txn, &state_table(topology, state))? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        let mut from = after.map(<[u8]>::to_vec);
        let step = limit.clamp(1, 4096);
        loop {
            let page = table.page(from.as_deref(), step)?;
            let exhausted = page.len() < step;
            from = page.last().map(|(key, _)| key.clone()).or(from);
            for (key, stored) in page {
                if keep(&key) {
                    out.push((key, stored));
                    if out.len() == limit {
                        return Ok(out);
                    }
                }
            }
            if exhausted {
                return Ok(out);
            }
        }
    }

    /// Puts back `restored` states of `topology` and records `last_committed`
    /// as where its copy stands, in one durable write.
    pub fn restore(&self, topology: &str, restored: &[Restored<'_>], last_committed: u64) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        {
            let existing: Vec<String> = txn.list_tables()?.map(|t| t.name().to_owned()).collect();
            let kinds_name = kinds_table(topology);
            let mut kinds = txn.open_table(kinds_def(&kinds_name))?;
            let mut encoded = Vec::new();
            for Restored { state, kind, drop, values } in restored {
                let name = state_table(topology, state);
                if values.is_empty() && !existing.contains(&name) {
                    continue;
                }
                record_kind(&mut kinds, topology, state, *kind)?;
                let layout = [Layout::Counts, Layout::OpaqueCounts]
                    .into_iter()
                    .find(|l| !values.is_empty() && values.iter().all(|(_, v)| l.holds(v)))
                    .unwrap_or(Layout::Records);
                let mut table = WriteTable::open(&txn, &name, layout)?;
                let doomed: Vec<Vec<u8>> = table.keys()?.into_iter().filter(|key| drop(key)).collect();
                for key in doomed {
                    table.remove(&key)?;
                }
                for (key, stored) in values {
                    table.insert(key, stored, &mut encoded).with_context(|| format!("state {state}"))?;
                }
            }
            let meta_name = meta_table(topology);
            let mut meta = txn.open_table(meta_def(&meta_name))?;
            meta.insert(LAST_COMMITTED, last_committed)?;
        }
        txn.commit().with_context(|| format!("restoring topology {topology}'s slots"))?;
        Ok(())
    }
}
