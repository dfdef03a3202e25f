//! What a cluster's host does to its own copy of a topology's state besides
//! committing batches: reads records by their encoded keys, and puts slots
//! back as the topology's changelog holds them, setting where the copy
//! stands (`cluster::worker`).

use super::error::Context;
use super::rules::Stored;
use super::store::BatchRecord;
use super::table::{Layout, ReadTable, WriteTable};
use super::{
    Db, LAST_COMMITTED, StoreError, batches_def, batches_table, kinds_def, kinds_table, meta_def, meta_table,
    others_def, others_prefix, record_kind, state_table,
};
use redb::{ReadableDatabase, ReadableTable, TableHandle};
use std::collections::BTreeMap;
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

/// Everything a host keeps of one topology: each state's records, the
/// records other rooms commit with batches (a sink's outbox), and where it
/// stands. A cluster host running a topology whole replays its changelog
/// into one (`cluster::whole_log`) and puts it in place of its own copy.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Image {
    /// Each state's records, by encoded key.
    pub states: BTreeMap<String, BTreeMap<Vec<u8>, Stored>>,
    /// Each table of other records, by key.
    pub others: BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>,
    /// The last committed txid; 0 before the first commit.
    pub last_committed: u64,
    /// The last committed batch's record.
    pub record: Option<BatchRecord>,
}

impl Db {
    /// Everything this copy holds of `topology`, as one [`Image`].
    pub fn image(&self, topology: &str) -> Result<Image, StoreError> {
        let progress = self.progress(topology)?;
        let record = progress.batches.iter().find(|(txid, _)| *txid == progress.last_committed).map(|(_, r)| r.clone());
        let txn = self.db.begin_read()?;
        let names: Vec<String> = txn.list_tables()?.map(|t| t.name().to_owned()).collect();
        let mut image = Image { last_committed: progress.last_committed, record, ..Image::default() };
        let states = format!("state/{topology}/");
        let others = others_prefix(topology);
        for name in names {
            if let Some(state) = name.strip_prefix(&states) {
                let Some(table) = ReadTable::open(&txn, &name)? else { continue };
                image.states.insert(state.to_owned(), table.entries()?.into_iter().collect());
            } else if let Some(table_name) = name.strip_prefix(&others) {
                let table = txn.open_table(others_def(&name))?;
                let mut entries = BTreeMap::new();
                for entry in table.iter()? {
                    let (key, value) = entry?;
                    entries.insert(key.value().to_vec(), value.value().to_vec());
                }
                image.others.insert(table_name.to_owned(), entries);
            }
        }
        Ok(image)
    }

    /// Puts `image` in place of everything this copy holds of `topology`,
    /// in one durable write: what the copy held beyond it (a commit the
    /// changelog never took) is gone.
    pub fn replace_topology(&self, topology: &str, image: &Image) -> Result<(), StoreError> {
        let txn = self.db.begin_write()?;
        Db::drop_topology(&txn, topology)?;
        {
            let kinds_name = kinds_table(topology);
            let mut kinds = txn.open_table(kinds_def(&kinds_name))?;
            let mut encoded = Vec::new();
            for (state, values) in &image.states {
                let Some((_, first)) = values.first_key_value() else { continue };
                record_kind(&mut kinds, topology, state, first.kind())?;
                // Records hold every kind of value; a later commit keeps
                // writing to the table in whichever layout it finds.
                let mut table = WriteTable::open(&txn, &state_table(topology, state), Layout::Records)?;
                for (key, stored) in values {
                    table.insert(key, stored, &mut encoded).with_context(|| format!("state {state}"))?;
                }
            }
            for (name, entries) in &image.others {
                let full = format!("{}{name}", others_prefix(topology));
                let mut table = txn.open_table(others_def(&full))?;
                for (key, value) in entries {
                    table.insert(key.as_slice(), value.as_slice())?;
                }
            }
            let meta_name = meta_table(topology);
            let mut meta = txn.open_table(meta_def(&meta_name))?;
            meta.insert(LAST_COMMITTED, image.last_committed)?;
            if let Some(record) = &image.record {
                let batches_name = batches_table(topology);
                let mut batches = txn.open_table(batches_def(&batches_name))?;
                batches.insert(image.last_committed, record.encode().as_slice())?;
            }
        }
        txn.commit().with_context(|| format!("putting topology {topology}'s copy back from its changelog"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{BatchCommit, OtherRecords, Store};
    use crate::tests::{counts_of, key};

    #[test]
    fn an_image_put_in_place_holds_what_was_taken_and_drops_what_came_after() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let commit = |txid: u64, words: &[&str]| {
            let record = BatchRecord { attempt: 0, time_ms: txid, spout: txid.to_le_bytes().to_vec() };
            let writes = counts_of(StateKind::Transactional, words);
            let outbox = [OtherRecords { table: "outbox".into(), entries: vec![(vec![txid as u8], b"out".to_vec())] }];
            db.commit_batch(&BatchCommit { topology: "t", txid, record: &record, writes: &writes, others: &outbox })
                .unwrap();
        };
        commit(1, &["a", "b"]);
        commit(2, &["a"]);
        let taken = db.image("t").unwrap();
        assert_eq!(taken.last_committed, 2);
        assert_eq!(taken.record.as_ref().map(|r| r.time_ms), Some(2));
        assert_eq!(taken.states["counts"].len(), 2);
        assert_eq!(taken.others["outbox"].len(), 2);
        // A commit the image does not hold is dropped with the rest.
        commit(3, &["c"]);
        db.replace_topology("t", &taken).unwrap();
        assert_eq!(db.image("t").unwrap(), taken);
        assert_eq!(db.stored("t", "counts", &key("c")).unwrap(), None);
        // And the next commit follows the image's last.
        commit(3, &["a"]);
        assert_eq!(db.progress("t").unwrap().last_committed, 3);
    }
}
