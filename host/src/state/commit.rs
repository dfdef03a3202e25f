//! The commit of a group of batches to redb: one durable write transaction
//! holding each batch's state writes, in txid order, each batch's other
//! records and the last batch's progress.

use super::store::BatchCommit;
use super::table::{self, WriteTable};
use super::{
    Db, LAST_COMMITTED, StateError, batches_def, batches_table, kinds_def, kinds_table, meta_def, meta_table,
    others_def, others_prefix, record_kind, state_table,
};
use crate::fault;
use anyhow::{Context, Result, bail};
use redb::ReadableTable;

impl Db {
    /// The commit of [`Store::commit_group`](super::store::Store::commit_group),
    /// in one durable write transaction, keys in order.
    pub(super) fn commit_group_in_redb(&self, group: &[BatchCommit<'_>]) -> Result<usize> {
        let (Some(first), Some(last)) = (group.first(), group.last()) else { return Ok(0) };
        let topology = first.topology;
        if let Some(other) = group.iter().find(|b| b.topology != topology) {
            bail!("a commit group holds batches of topologies {topology} and {}", other.topology);
        }
        let txn = self.db.begin_write()?;
        let meta_name = meta_table(topology);
        let mut written = 0;
        {
            let mut meta = txn.open_table(meta_def(&meta_name))?;
            let mut committed = meta.get(LAST_COMMITTED)?.map_or(0, |v| v.value());
            let kinds_name = kinds_table(topology);
            let mut kinds = txn.open_table(kinds_def(&kinds_name))?;
            let batches_name = batches_table(topology);
            let mut batches = txn.open_table(batches_def(&batches_name))?;
            let mut encoded = Vec::with_capacity(32);
            for (at, batch) in group.iter().enumerate() {
                let BatchCommit { txid, record, writes, others, .. } = *batch;
                if txid != committed + 1 {
                    let not_next = StateError::NotNext { txid, last: committed };
                    return Err(anyhow::Error::new(not_next).context(format!("topology {topology}")));
                }
                for write in writes {
                    let in_state = || format!("state {}", write.state);
                    if let Some(kind) = write.kind() {
                        record_kind(&mut kinds, topology, &write.state, kind)?;
                    }
                    let name = state_table(topology, &write.state);
                    let counts = table::holds_counts(write.combines.as_ref());
                    let mut table = WriteTable::open(&txn, &name, counts).with_context(in_state)?;
                    for (key, stored) in &write.records {
                        table.insert(key, stored, &mut encoded).with_context(in_state)?;
                    }
                    written += write.records.len();
                    if let Some(combines) = &write.combines {
                        written += table.combine_in_place(txid, combines, &mut encoded).with_context(in_state)?;
                    }
                }
                batches.insert(txid, record.encode().as_slice())?;
                for other in others {
                    let name = format!("{}{}", others_prefix(topology), other.table);
                    let mut table = txn.open_table(others_def(&name))?;
                    for (key, value) in &other.entries {
                        table.insert(key.as_slice(), value.as_slice())?;
                    }
                }
                committed = txid;
                if at == 0 && group.len() > 1 {
                    fault::in_group_commit(txid, last.txid);
                }
            }
            meta.insert(LAST_COMMITTED, last.txid)?;
            batches.retain_in(..last.txid, |_, _| false)?;
        }
        let txids = if group.len() == 1 {
            format!("txid {}", last.txid)
        } else {
            format!("txids {}..={}", first.txid, last.txid)
        };
        txn.commit().with_context(|| format!("committing {txids} of topology {topology}"))?;
        Ok(written)
    }
}
