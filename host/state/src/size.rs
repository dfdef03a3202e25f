//! Bounds on what the states hold on disk: one topology's states together
//! (`--max-state-mib`) and every topology's of a data dir
//! (`--max-total-state-mib`). A commit measures the states it wrote, in
//! its own write transaction, and is dropped unwritten when they would
//! pass a bound, so that a guest cannot fill the disk and nothing
//! committed before is lost.
//!
//! Measuring walks the pages of each state a commit wrote, so it costs
//! time in proportion to those states; states the commit did not write
//! keep the size measured when they last were. Without a bound nothing is
//! measured.

use super::error::{TOPOLOGY_FLAG, TOTAL_FLAG};
use super::table::{Layout, WriteTable};
use super::{StateError, StoreError};
use redb::{TableHandle, WriteTransaction};
use std::collections::BTreeMap;

/// The bounds, in bytes; `None`, unbounded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SizeLimits {
    /// One topology's states together.
    pub per_topology: Option<u64>,
    /// Every topology's states together.
    pub total: Option<u64>,
}

impl SizeLimits {
    fn any(&self) -> bool {
        self.per_topology.is_some() || self.total.is_some()
    }
}

/// Each state table's size as last measured, by table name.
pub(crate) type Sizes = BTreeMap<String, u64>;

/// The sizes of every state table once `written` (table names) of
/// `topology` are measured afresh in `txn`, or the bound they pass.
pub(crate) fn measure(
    txn: &WriteTransaction,
    limits: SizeLimits,
    known: &Sizes,
    topology: &str,
    written: &[String],
) -> Result<Option<Sizes>, StoreError> {
    if !limits.any() {
        return Ok(None);
    }
    let mut sizes = Sizes::new();
    // Tables deleted since (a topology's state dropped) leave the map.
    for table in txn.list_tables()? {
        let name = table.name();
        if !name.starts_with("state/") {
            continue;
        }
        let size = match known.get(name) {
            Some(size) if !written.iter().any(|w| w == name) => *size,
            _ => WriteTable::open(txn, name, Layout::Records)?.size()?,
        };
        sizes.insert(name.to_owned(), size);
    }
    let prefix = format!("state/{topology}/");
    let own: u64 = sizes.iter().filter(|(name, _)| name.starts_with(&prefix)).map(|(_, size)| size).sum();
    let all: u64 = sizes.values().sum();
    let over = |bytes: u64, limit: Option<u64>, flag: &'static str| -> Result<(), StoreError> {
        let Some(limit) = limit.filter(|limit| bytes > *limit) else { return Ok(()) };
        let (state, state_bytes) = written
            .iter()
            .filter_map(|name| Some((name.strip_prefix(&prefix)?, *sizes.get(name)?)))
            .max_by_key(|(_, size)| *size)
            .unwrap_or(("(none)", 0));
        let topology = topology.to_owned();
        let state = state.to_owned();
        Err(StateError::OverSize { topology, state, state_bytes, bytes, limit, flag }.into())
    };
    over(own, limits.per_topology, TOPOLOGY_FLAG)?;
    over(all, limits.total, TOTAL_FLAG)?;
    Ok(Some(sizes))
}
