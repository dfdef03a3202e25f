//! What the earlier batches of a commit group wrote, seen over a snapshot
//! of what is committed: a later batch of the group reads through it, as
//! it would read their writes once committed, partials left to the commit
//! combined with what they meet by Trident's rules.

use super::StoreError;
use super::error::Context;
use super::rules::{self, Stored};
use super::store::{OtherEntries, Snapshot, StateReader};
use super::view::in_ranges;
use super::writes::{Combines, StateWrites};
use crate::store::EachRecord;
use std::sync::Arc;
use weir_sdk::codec::Value;

/// One batch's writes, with its txid.
pub type Layer = (u64, Arc<Vec<StateWrites>>);

/// A snapshot of `topology` with `layers` (each batch's writes, in txid
/// order) over it.
pub struct Pending<'a> {
    base: &'a dyn Snapshot,
    topology: &'a str,
    layers: Vec<Layer>,
}

impl<'a> Pending<'a> {
    /// `layers` of `topology` over `base`.
    pub fn new(base: &'a dyn Snapshot, topology: &'a str, layers: Vec<Layer>) -> Pending<'a> {
        Pending { base, topology, layers }
    }
}

impl Snapshot for Pending<'_> {
    fn state(&self, topology: &str, state: &str) -> Result<Option<Box<dyn StateReader>>, StoreError> {
        let base = self.base.state(topology, state)?;
        let written = |(_, layer): &Layer| layer.iter().any(|w| w.state == state);
        if topology != self.topology || !self.layers.iter().any(written) {
            return Ok(base);
        }
        let layers = self.layers.iter().filter(|layer| written(layer)).cloned().collect();
        Ok(Some(Box::new(PendingState { state: state.to_owned(), layers, base })))
    }

    fn others(&self, topology: &str, table: &str) -> Result<OtherEntries, StoreError> {
        self.base.others(topology, table)
    }
}

/// One state's records: the group's latest write of a key, else the
/// committed one, with the partials combined in place since.
struct PendingState {
    state: String,
    layers: Vec<Layer>,
    base: Option<Box<dyn StateReader>>,
}

impl PendingState {
    /// Each layer's writes to the state, with its txid, oldest first.
    fn writes(&self) -> impl DoubleEndedIterator<Item = (u64, &StateWrites)> {
        self.layers.iter().filter_map(|(txid, layer)| Some((*txid, layer.iter().find(|w| w.state == self.state)?)))
    }

    /// The record of `key` once every layer is applied to `stored`, its
    /// committed one: each layer's removed ranges, then its records and
    /// removals, then its partials (a batch's records and partials are of
    /// different keys), oldest first, as [`StateReader::get`] finds it.
    fn layered(&self, key: &[u8], mut stored: Option<Stored>) -> Result<Option<Stored>, StoreError> {
        for (txid, writes) in self.writes() {
            if in_ranges(&writes.removed_ranges, key) {
                stored = None;
            }
            if let Ok(at) = writes.records.binary_search_by(|(k, _)| k.as_slice().cmp(key)) {
                stored = Some(writes.records[at].1.clone());
            } else if writes.removed.binary_search_by(|k| k.as_slice().cmp(key)).is_ok() {
                stored = None;
            }
            if let Some(combines) = &writes.combines
                && let Some(at) = combines.partials.find(key)
            {
                let partial = combines.partials.get(at).1;
                stored =
                    combined(combines, txid, key, partial, stored).with_context(|| format!("state {}", self.state))?;
            }
        }
        Ok(stored)
    }
}

/// `stored` after batch `txid` combined `partial` into it in place.
fn combined(
    combines: &Combines,
    txid: u64,
    key: &[u8],
    partial: &Value,
    stored: Option<Stored>,
) -> Result<Option<Stored>, StoreError> {
    let value_for = |base| rules::with_partial(combines.builtin, base, partial);
    let new = rules::apply(combines.kind, stored.as_ref(), txid, value_for)
        .with_context(|| format!("key {}", super::describe_key(key)))?;
    Ok(new.or(stored))
}

impl StateReader for PendingState {
    fn get(&self, key: &[u8]) -> Result<Option<Stored>, StoreError> {
        // The newest layer that wrote or removed the key, and the partials
        // combined in place after it.
        let mut after = Vec::new();
        let mut found = None;
        for (txid, writes) in self.writes().rev() {
            if let Ok(at) = writes.records.binary_search_by(|(k, _)| k.as_slice().cmp(key)) {
                found = Some(Some(writes.records[at].1.clone()));
            } else if writes.removed.binary_search_by(|k| k.as_slice().cmp(key)).is_ok()
                || in_ranges(&writes.removed_ranges, key)
            {
                found = Some(None);
            }
            // A batch's records and partials are of different keys.
            if let Some(combines) = &writes.combines {
                after.push((txid, combines));
            }
            if found.is_some() {
                break;
            }
        }
        let mut stored = match (found, &self.base) {
            (Some(stored), _) => stored,
            (None, Some(base)) => base.get(key)?,
            (None, None) => None,
        };
        for (txid, combines) in after.into_iter().rev() {
            if let Some(at) = combines.partials.find(key) {
                let partial = combines.partials.get(at).1;
                stored =
                    combined(combines, txid, key, partial, stored).with_context(|| format!("state {}", self.state))?;
            }
        }
        Ok(stored)
    }

    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<(Vec<u8>, Stored)>, StoreError> {
        let mut found = match &self.base {
            Some(base) => base.range(from, to)?,
            None => Vec::new(),
        };
        // Each layer merged into what is found, both sorted by key.
        let within = |key: &[u8]| from <= key && key < to;
        for (txid, writes) in self.writes() {
            if !writes.removed_ranges.is_empty() {
                found.retain(|(key, _)| !in_ranges(&writes.removed_ranges, key));
            }
            let records = writes.records.iter().filter(|(k, _)| within(k)).map(|(k, s)| (k.as_slice(), Some(s)));
            let removed = writes.removed.iter().filter(|k| within(k)).map(|k| (k.as_slice(), None));
            let mut edits: Vec<(&[u8], Option<&Stored>)> = records.chain(removed).collect();
            if !edits.is_empty() {
                edits.sort_unstable_by(|a, b| a.0.cmp(b.0));
                found = merged(found, edits.into_iter(), |_, _, edit| Ok(edit.cloned()))?;
            }
            let Some(combines) = &writes.combines else { continue };
            let partials = combines.partials.iter().skip(combines.partials.first_at_or_after(from));
            let partials = partials.take_while(|(key, _)| *key < to);
            found = merged(found, partials, |key, stored, partial| combined(combines, txid, key, partial, stored))
                .with_context(|| format!("state {}", self.state))?;
        }
        Ok(found)
    }

    fn each_in(&self, from: &[u8], to: &[u8], each: &mut EachRecord<'_>) -> Result<(), StoreError> {
        // The keys the layers wrote in the range (few, the group's), merged
        // into the committed ones as these are read, one at a time.
        let within = |key: &[u8]| from <= key && key < to;
        let mut written: Vec<&[u8]> = Vec::new();
        for (_, writes) in self.writes() {
            written.extend(writes.records.iter().map(|(k, _)| k.as_slice()).filter(|k| within(k)));
            written.extend(writes.removed.iter().map(Vec::as_slice).filter(|k| within(k)));
            if let Some(combines) = &writes.combines {
                let partials = combines.partials.iter().skip(combines.partials.first_at_or_after(from));
                written.extend(partials.map(|(key, _)| key).take_while(|key| *key < to));
            }
        }
        written.sort_unstable();
        written.dedup();
        let mut written = written.into_iter().peekable();
        let give = |key: &[u8], stored: Option<Stored>, each: &mut EachRecord<'_>| match self.layered(key, stored)? {
            Some(stored) => each(key, stored),
            None => Ok(()),
        };
        if let Some(base) = &self.base {
            base.each_in(from, to, &mut |key, stored| {
                while let Some(earlier) = written.next_if(|k| *k < key) {
                    give(earlier, None, each)?;
                }
                written.next_if(|k| *k == key);
                give(key, Some(stored), each)
            })?;
        }
        for key in written {
            give(key, None, each)?;
        }
        Ok(())
    }
}

/// `found` (sorted by key) with `edits` (sorted by key) merged in: each
/// edit's key takes what `edit` makes of the record found for it, if any;
/// `None` leaves the key out.
fn merged<'e, E>(
    found: Vec<(Vec<u8>, Stored)>,
    edits: impl Iterator<Item = (&'e [u8], E)>,
    mut edit: impl FnMut(&[u8], Option<Stored>, E) -> Result<Option<Stored>, StoreError>,
) -> Result<Vec<(Vec<u8>, Stored)>, StoreError> {
    let mut out = Vec::with_capacity(found.len());
    let mut found = found.into_iter().peekable();
    for (key, e) in edits {
        while let Some(earlier) = found.next_if(|(k, _)| k.as_slice() < key) {
            out.push(earlier);
        }
        let (owned, stored) = found.next_if(|(k, _)| k.as_slice() == key).unzip();
        if let Some(new) = edit(key, stored, e)? {
            out.push((owned.unwrap_or_else(|| key.to_vec()), new));
        }
    }
    out.extend(found);
    Ok(out)
}
