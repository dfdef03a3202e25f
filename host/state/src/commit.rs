//! The commit of a group of batches to redb: one durable write transaction
//! holding each batch's state writes, in txid order, each batch's other
//! records and the last batch's progress. A state's writes are gathered over
//! the group first, a key's records to its last one and its partials merged
//! ([`merge`](super::merge)): a hot key is updated once for the group, not
//! once for each of its batches.

use super::error::Context;
use super::merge::BatchPartials;
use super::rules::Stored;
use super::store::{BatchCommit, Written};
use super::table::{Layout, Told, WriteTable};
use super::writes::StateWrites;
use super::{
    Db, LAST_COMMITTED, StateError, StoreError, batches_def, batches_table, kinds_def, kinds_table, meta_def,
    meta_table, others_def, others_prefix, record_kind, size, state_table,
};
use redb::{ReadableTable, WriteTransaction};
use std::collections::BTreeMap;
use weir_config::fault;

/// A state's writes gathered over the batches of a group, to write at once.
enum Gathered<'a> {
    /// The latest record of each key; `None`, removed.
    Records(BTreeMap<&'a [u8], Option<&'a Stored>>),
    /// Each batch's partials, to combine in place, in txid order.
    Partials(Vec<BatchPartials<'a>>),
    /// Key ranges `[from, to)` to remove.
    Ranges(Vec<(&'a [u8], &'a [u8])>),
}

impl Db {
    /// The commit of [`Store::commit_group`](super::store::Store::commit_group),
    /// in one durable write transaction, keys in order, telling `written`
    /// (when given) what [`Store::commit_group_telling`](super::store::Store::commit_group_telling) tells.
    pub(super) fn commit_group_in_redb(
        &self,
        group: &[BatchCommit<'_>],
        mut written: Option<&mut Written<'_>>,
    ) -> Result<usize, StoreError> {
        let (Some(first), Some(last)) = (group.first(), group.last()) else { return Ok(0) };
        let topology = first.topology;
        if let Some(other) = group.iter().find(|b| b.topology != topology) {
            let two = format!("a commit group holds batches of topologies {topology} and {}", other.topology);
            return Err(StoreError::Refused(two));
        }
        let txn = self.db.begin_write()?;
        let meta_name = meta_table(topology);
        let mut count = 0;
        let mut written_states = Vec::new();
        {
            let mut meta = txn.open_table(meta_def(&meta_name))?;
            let mut committed = meta.get(LAST_COMMITTED)?.map_or(0, |v| v.value());
            let kinds_name = kinds_table(topology);
            let mut kinds = txn.open_table(kinds_def(&kinds_name))?;
            let batches_name = batches_table(topology);
            let mut batches = txn.open_table(batches_def(&batches_name))?;
            let mut encoded = Vec::with_capacity(32);
            // Each state's writes over the group, in runs of one way of
            // writing: a state written both ways keeps its batches' order.
            let mut gathered: BTreeMap<&str, Vec<Gathered<'_>>> = BTreeMap::new();
            for (at, batch) in group.iter().enumerate() {
                let BatchCommit { txid, record, writes, others, .. } = *batch;
                if txid != committed + 1 {
                    let not_next = StateError::NotNext { txid, last: committed };
                    return Err(StoreError::from(not_next).context(format!("topology {topology}")));
                }
                for writes in writes {
                    if let Some(kind) = writes.kind() {
                        record_kind(&mut kinds, topology, &writes.state, kind)?;
                    }
                    gather(gathered.entry(&writes.state).or_default(), txid, writes);
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
            written_states.extend(gathered.keys().map(|state| state_table(topology, state)));
            for (state, runs) in gathered {
                let layout = layout(&runs);
                // Partials of keys a later run's range removes need no combining.
                let removed_later: Vec<Vec<(&[u8], &[u8])>> =
                    (0..runs.len()).map(|at| ranges_in(&runs[at + 1..])).collect();
                for (at, run) in runs.into_iter().enumerate() {
                    let except = &removed_later[at];
                    count += write_gathered(&txn, topology, state, run, layout, except, &mut encoded, &mut written)
                        .with_context(|| format!("state {state}"))?;
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
        let mut sizes = self.sizes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Dropped unwritten, with the transaction, when past a bound.
        let measured = size::measure(&txn, self.size_limits, &sizes, topology, &written_states)
            .with_context(|| format!("committing {txids} of topology {topology}"))?;
        txn.commit().with_context(|| format!("committing {txids} of topology {topology}"))?;
        if let Some(measured) = measured {
            *sizes = measured;
        }
        Ok(count)
    }
}

/// Adds batch `txid`'s `writes` to its state's `runs`.
fn gather<'a>(runs: &mut Vec<Gathered<'a>>, txid: u64, writes: &'a StateWrites) {
    // A batch's ranges go before its records.
    if !writes.removed_ranges.is_empty() {
        let ranges = writes.removed_ranges.iter().map(|(from, to)| (from.as_slice(), to.as_slice())).collect();
        runs.push(Gathered::Ranges(ranges));
    }
    if !writes.records.is_empty() || !writes.removed.is_empty() {
        let written = writes.records.iter().map(|(key, stored)| (key.as_slice(), Some(stored)));
        let records = written.chain(writes.removed.iter().map(|key| (key.as_slice(), None)));
        match runs.last_mut() {
            Some(Gathered::Records(latest)) => latest.extend(records),
            _ => runs.push(Gathered::Records(records.collect())),
        }
    }
    if let Some(combines) = &writes.combines {
        // Partials join the last partials when no records or ranges since
        // touch their keys, so that the group combines each key once.
        let since = runs.iter().rposition(|run| matches!(run, Gathered::Partials(_)));
        let untouched = |run: &Gathered<'_>| match run {
            Gathered::Records(latest) => !latest.keys().any(|key| combines.partials.find(key).is_some()),
            Gathered::Ranges(ranges) => !ranges.iter().any(|(from, to)| {
                let at = combines.partials.first_at_or_after(from);
                at < combines.partials.len() && combines.partials.key(at) < *to
            }),
            Gathered::Partials(_) => true,
        };
        match since {
            Some(at) if runs[at + 1..].iter().all(untouched) => {
                let Gathered::Partials(batches) = &mut runs[at] else { unreachable!("a partials run") };
                batches.push((txid, combines));
            }
            _ => runs.push(Gathered::Partials(vec![(txid, combines)])),
        }
    }
}

/// The key ranges `runs` remove.
fn ranges_in<'a>(runs: &[Gathered<'a>]) -> Vec<(&'a [u8], &'a [u8])> {
    let ranges = runs.iter().filter_map(|run| match run {
        Gathered::Ranges(ranges) => Some(ranges.iter().copied()),
        _ => None,
    });
    ranges.flatten().collect()
}

/// The layout of a state's table, if this commit creates it: fixed-width
/// counts where its partials are counts and every record it is given is
/// one too (a window's watermark and late count are).
fn layout(runs: &[Gathered<'_>]) -> Layout {
    let first_partials = runs.iter().find_map(|run| match run {
        Gathered::Partials(batches) => batches.first().map(|(_, c)| *c),
        _ => None,
    });
    let Some(layout) = first_partials.map(Layout::for_combines) else { return Layout::Records };
    let records_fit = runs.iter().all(|run| match run {
        Gathered::Records(latest) => latest.values().all(|stored| stored.is_none_or(|s| layout.holds(s))),
        _ => true,
    });
    if records_fit { layout } else { Layout::Records }
}

/// Writes what a group gathered for `state` into its table (created in
/// `layout` when missing), keys in order, but for
/// partials of keys in the ranges `except`, telling `written` each key's
/// record. Returns the keys written.
#[allow(clippy::too_many_arguments)]
fn write_gathered(
    txn: &WriteTransaction,
    topology: &str,
    state: &str,
    gathered: Gathered<'_>,
    layout: Layout,
    except: &[(&[u8], &[u8])],
    encoded: &mut Vec<u8>,
    written: &mut Option<&mut Written<'_>>,
) -> Result<usize, StoreError> {
    let name = state_table(topology, state);
    match gathered {
        Gathered::Records(latest) => {
            let mut table = WriteTable::open(txn, &name, layout)?;
            for (key, stored) in &latest {
                match stored {
                    Some(stored) => table.insert(key, stored, encoded)?,
                    None => table.remove(key)?,
                }
                if let Some(written) = written {
                    written(state, key, *stored);
                }
            }
            Ok(latest.len())
        }
        Gathered::Ranges(ranges) => {
            let mut table = WriteTable::open(txn, &name, layout)?;
            let mut removed = 0;
            for (from, to) in ranges {
                removed += table.remove_range(from, to)?;
            }
            Ok(removed)
        }
        Gathered::Partials(batches) => {
            let mut told =
                written.as_mut().map(|written| move |key: &[u8], stored: &Stored| written(state, key, Some(stored)));
            let told = told.as_mut().map(|t| t as &mut Told<'_>);
            WriteTable::open(txn, &name, layout)?.combine_in_place_except(&batches, except, encoded, told)
        }
    }
}
