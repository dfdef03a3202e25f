//! A [`Store`] in memory, for unit tests of what runs over the store (the
//! coordinator): the commit log and states of [`Db`](super::Db), under the
//! same rules ([`rules`]), without a file. A commit applies to a copy and
//! replaces the whole only when every write succeeded, as a redb write
//! transaction does (a group's commit: every batch of it); nothing
//! survives the process.

use super::error::Context;
use super::rules::{self, Stored};
use super::store::{BatchCommit, CommitLog, OtherEntries, Snapshot, StateReader, Store};
use super::{BatchRecord, Progress, StateError, StoreError, kind_to_record};
use crate::store::EachRecord;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{Excluded, Included};
use std::sync::{Arc, Mutex, MutexGuard};
use weir_config::sync::Locked;
use weir_sdk::topology::StateKind;

type Records = BTreeMap<Vec<u8>, Stored>;

/// What is kept of one topology.
#[derive(Clone, Default)]
struct Topology {
    last_committed: u64,
    batches: BTreeMap<u64, BatchRecord>,
    kinds: BTreeMap<String, StateKind>,
    states: BTreeMap<String, Arc<Records>>,
    others: BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>,
    /// Each commit's batch, in the order they committed.
    commits: Vec<(u64, BatchRecord)>,
    /// The first and last txid of each commit group, in order.
    groups: Vec<(u64, u64)>,
}

/// A store in memory.
#[derive(Default)]
pub struct MemoryStore {
    topologies: Mutex<BTreeMap<String, Topology>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Topology>> {
        // A panic elsewhere leaves whole values behind: every change
        // replaces a topology at once.
        self.topologies.locked()
    }

    /// The txid and record of each batch `topology` committed, in order.
    pub fn commits(&self, topology: &str) -> Vec<(u64, BatchRecord)> {
        self.lock().get(topology).map(|t| t.commits.clone()).unwrap_or_default()
    }

    /// The first and last txid of each group `topology` committed, in
    /// order.
    pub fn groups(&self, topology: &str) -> Vec<(u64, u64)> {
        self.lock().get(topology).map(|t| t.groups.clone()).unwrap_or_default()
    }

    /// Every key of a state with its stored value, sorted by key.
    pub fn scan(&self, topology: &str, state: &str) -> Vec<(Vec<u8>, Stored)> {
        let topologies = self.lock();
        let records = topologies.get(topology).and_then(|t| t.states.get(state));
        records.map(|r| r.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default()
    }
}

impl CommitLog for MemoryStore {
    fn progress(&self, topology: &str) -> Result<Progress, StoreError> {
        let topologies = self.lock();
        let Some(t) = topologies.get(topology) else { return Ok(Progress::default()) };
        let batches = t.batches.range(t.last_committed..).map(|(txid, r)| (*txid, r.clone())).collect();
        Ok(Progress { last_committed: t.last_committed, batches })
    }

    fn record_batch(&self, topology: &str, txid: u64, record: &BatchRecord) -> Result<(), StoreError> {
        self.lock().entry(topology.to_owned()).or_default().batches.insert(txid, record.clone());
        Ok(())
    }
}

/// The states and other records of every topology, as of one moment.
struct MemorySnapshot {
    states: BTreeMap<(String, String), Arc<Records>>,
    others: BTreeMap<(String, String), BTreeMap<Vec<u8>, Vec<u8>>>,
}

struct MemoryState(Arc<Records>);

impl StateReader for MemoryState {
    fn get(&self, key: &[u8]) -> Result<Option<Stored>, StoreError> {
        Ok(self.0.get(key).cloned())
    }

    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<(Vec<u8>, Stored)>, StoreError> {
        if from >= to {
            return Ok(Vec::new());
        }
        Ok(self.0.range(from.to_vec()..to.to_vec()).map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    fn each_in(&self, from: &[u8], to: &[u8], each: &mut EachRecord<'_>) -> Result<(), StoreError> {
        if from < to {
            for (key, stored) in self.0.range(from.to_vec()..to.to_vec()) {
                each(key, stored.clone())?;
            }
        }
        Ok(())
    }
}

impl Snapshot for MemorySnapshot {
    fn state(&self, topology: &str, state: &str) -> Result<Option<Box<dyn StateReader>>, StoreError> {
        let records = self.states.get(&(topology.to_owned(), state.to_owned()));
        Ok(records.map(|r| Box::new(MemoryState(Arc::clone(r))) as Box<dyn StateReader>))
    }

    fn others(&self, topology: &str, table: &str) -> Result<OtherEntries, StoreError> {
        let records = self.others.get(&(topology.to_owned(), table.to_owned()));
        Ok(records.map(|r| r.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default())
    }
}

impl Store for MemoryStore {
    fn snapshot(&self) -> Result<Box<dyn Snapshot + '_>, StoreError> {
        let topologies = self.lock();
        let mut snapshot = MemorySnapshot { states: BTreeMap::new(), others: BTreeMap::new() };
        for (name, t) in topologies.iter() {
            for (state, records) in &t.states {
                snapshot.states.insert((name.clone(), state.clone()), Arc::clone(records));
            }
            for (table, records) in &t.others {
                snapshot.others.insert((name.clone(), table.clone()), records.clone());
            }
        }
        Ok(Box::new(snapshot))
    }

    fn commit_group(&self, group: &[BatchCommit<'_>]) -> Result<usize, StoreError> {
        let (Some(first), Some(last)) = (group.first(), group.last()) else { return Ok(0) };
        let topology = first.topology;
        if let Some(other) = group.iter().find(|b| b.topology != topology) {
            let two = format!("a commit group holds batches of topologies {topology} and {}", other.topology);
            return Err(StoreError::Refused(two));
        }
        let mut topologies = self.lock();
        let mut t = topologies.get(topology).cloned().unwrap_or_default();
        let mut written = BTreeSet::new();
        for batch in group {
            apply(&mut t, batch, &mut written)?;
        }
        t.groups.push((first.txid, last.txid));
        topologies.insert(topology.to_owned(), t);
        Ok(written.len())
    }

    fn remove_others(&self, topology: &str, table: &str, keys: &[Vec<u8>]) -> Result<(), StoreError> {
        let mut topologies = self.lock();
        if let Some(records) = topologies.get_mut(topology).and_then(|t| t.others.get_mut(table)) {
            for key in keys {
                records.remove(key);
            }
        }
        Ok(())
    }
}

/// Applies `batch` to `t`, a copy of what is kept of its topology, adding
/// the state and key of each value it writes to `written`.
fn apply(
    t: &mut Topology,
    batch: &BatchCommit<'_>,
    written: &mut BTreeSet<(String, Vec<u8>)>,
) -> Result<(), StoreError> {
    let BatchCommit { topology, txid, record, writes, others } = *batch;
    if txid != t.last_committed + 1 {
        let not_next = StateError::NotNext { txid, last: t.last_committed };
        return Err(StoreError::from(not_next).context(format!("topology {topology}")));
    }
    for write in writes {
        let in_state = || format!("state {}", write.state);
        if let Some(kind) = write.kind()
            && kind_to_record(topology, &write.state, t.kinds.get(&write.state).copied(), kind)?
        {
            t.kinds.insert(write.state.clone(), kind);
        }
        let records = Arc::make_mut(t.states.entry(write.state.clone()).or_default());
        for (from, to) in &write.removed_ranges {
            let removed: Vec<Vec<u8>> =
                records.range::<[u8], _>((Included(&from[..]), Excluded(&to[..]))).map(|(k, _)| k.clone()).collect();
            for key in removed {
                records.remove(&key);
                written.insert((write.state.clone(), key));
            }
        }
        for (key, stored) in &write.records {
            records.insert(key.clone(), stored.clone());
            written.insert((write.state.clone(), key.clone()));
        }
        for key in &write.removed {
            records.remove(key);
            written.insert((write.state.clone(), key.clone()));
        }
        let Some(combines) = &write.combines else { continue };
        for (key, partial) in combines.partials.iter() {
            let context = || format!("{}, key {}", in_state(), super::describe_key(key));
            let value_for = |base| rules::with_partial(combines.builtin, base, partial);
            if let Some(new) = rules::apply(combines.kind, records.get(key), txid, value_for).with_context(context)? {
                records.insert(key.to_vec(), new);
                written.insert((write.state.clone(), key.to_vec()));
            }
        }
    }
    t.last_committed = txid;
    t.batches.insert(txid, record.clone());
    t.batches.retain(|&at, _| at >= txid);
    for other in others {
        t.others.entry(other.table.clone()).or_default().extend(other.entries.iter().cloned());
    }
    t.commits.push((txid, record.clone()));
    Ok(())
}
