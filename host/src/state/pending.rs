//! What the earlier batches of a commit group wrote, seen over a snapshot
//! of what is committed: a later batch of the group reads through it, as
//! it would read their writes once committed.

use super::rules::Stored;
use super::store::{Snapshot, StateReader};
use super::view::StateWrites;
use anyhow::{Result, bail};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A snapshot of `topology` with `layers` (each batch's writes, in txid
/// order) over it.
pub struct Pending<'a> {
    base: &'a dyn Snapshot,
    topology: &'a str,
    layers: Vec<Arc<Vec<StateWrites>>>,
}

impl<'a> Pending<'a> {
    /// `layers` of `topology` over `base`.
    pub fn new(base: &'a dyn Snapshot, topology: &'a str, layers: Vec<Arc<Vec<StateWrites>>>) -> Pending<'a> {
        Pending { base, topology, layers }
    }
}

impl Snapshot for Pending<'_> {
    fn state(&self, topology: &str, state: &str) -> Result<Option<Box<dyn StateReader>>> {
        let base = self.base.state(topology, state)?;
        let written = |layer: &Arc<Vec<StateWrites>>| layer.iter().any(|w| w.state == state);
        if topology != self.topology || !self.layers.iter().any(written) {
            return Ok(base);
        }
        let layers = self.layers.iter().filter(|layer| written(layer)).cloned().collect();
        Ok(Some(Box::new(PendingState { state: state.to_owned(), layers, base })))
    }

    fn others(&self, topology: &str, table: &str) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.base.others(topology, table)
    }
}

/// One state's records: the group's latest write of a key, else the
/// committed one.
struct PendingState {
    state: String,
    layers: Vec<Arc<Vec<StateWrites>>>,
    base: Option<Box<dyn StateReader>>,
}

impl StateReader for PendingState {
    fn get(&self, key: &[u8]) -> Result<Option<Stored>> {
        for layer in self.layers.iter().rev() {
            let Some(writes) = layer.iter().find(|w| w.state == self.state) else { continue };
            if writes.combines.is_some() {
                // The plan combines in place only states no batch reads.
                bail!("state {} is combined in place by an earlier batch of the group: it cannot be read", self.state);
            }
            if let Ok(at) = writes.records.binary_search_by(|(k, _)| k.as_slice().cmp(key)) {
                return Ok(Some(writes.records[at].1.clone()));
            }
            if writes.removed.binary_search_by(|k| k.as_slice().cmp(key)).is_ok() {
                return Ok(None);
            }
        }
        match &self.base {
            Some(base) => base.get(key),
            None => Ok(None),
        }
    }

    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<(Vec<u8>, Stored)>> {
        let mut found: BTreeMap<Vec<u8>, Stored> = match &self.base {
            Some(base) => base.range(from, to)?.into_iter().collect(),
            None => BTreeMap::new(),
        };
        let within = |key: &[u8]| from <= key && key < to;
        for layer in &self.layers {
            let Some(writes) = layer.iter().find(|w| w.state == self.state) else { continue };
            if writes.combines.is_some() {
                bail!("state {} is combined in place by an earlier batch of the group: it cannot be read", self.state);
            }
            for (key, stored) in writes.records.iter().filter(|(k, _)| within(k)) {
                found.insert(key.clone(), stored.clone());
            }
            for key in writes.removed.iter().filter(|k| within(k)) {
                found.remove(key);
            }
        }
        Ok(found.into_iter().collect())
    }
}
