//! A batch's view of its topology's states in the commit phase: reads see
//! what is committed and the batch's own writes; writes stay here until
//! the batch commits them in one write transaction. A cache of committed
//! values per state sits in front of redb (Trident's `CachedMap`).
//!
//! Queries use the same view, read-only, over what is committed.

use super::keys;
use super::rules::{self, Step, Stored};
use anyhow::{Context, Result, bail};
use redb::{ReadOnlyTable, ReadTransaction, TableDefinition};
use std::collections::{BTreeMap, HashMap};
use weir_sdk::codec::Value;
use weir_sdk::topology::StateDef;

/// Entries cached per state when the topology does not say.
pub const DEFAULT_CACHE_SIZE: usize = 100_000;

/// Committed values of one state, the most recently used kept: two
/// generations, the older dropped whole when the newer fills up, so that
/// an entry read or written within the last `capacity / 2` uses stays.
pub struct StateCache {
    half: usize,
    recent: HashMap<Vec<u8>, Option<Stored>, rustc_hash::FxBuildHasher>,
    older: HashMap<Vec<u8>, Option<Stored>, rustc_hash::FxBuildHasher>,
}

impl StateCache {
    /// A cache of about `capacity` entries (none when 0).
    pub fn new(capacity: usize) -> StateCache {
        StateCache { half: capacity / 2, recent: HashMap::default(), older: HashMap::default() }
    }

    fn get(&mut self, key: &[u8]) -> Option<Option<Stored>> {
        if let Some(hit) = self.recent.get(key) {
            return Some(hit.clone());
        }
        let hit = self.older.remove(key)?;
        self.put(key.to_vec(), hit.clone());
        Some(hit)
    }

    fn put(&mut self, key: Vec<u8>, stored: Option<Stored>) {
        if self.half == 0 {
            return;
        }
        if self.recent.len() >= self.half {
            self.older = std::mem::take(&mut self.recent);
        }
        self.recent.insert(key, stored);
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.recent.len() + self.older.len()
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A state's committed record and the batch's write of one key.
struct Write {
    before: Option<Stored>,
    after: Stored,
}

struct View {
    def: StateDef,
    table: Option<ReadOnlyTable<&'static [u8], &'static [u8]>>,
    cache: StateCache,
    writes: BTreeMap<Vec<u8>, Write>,
}

/// The states of one topology as a batch (or a query) sees them.
pub struct Views {
    topology: String,
    txid: u64,
    writable: bool,
    states: HashMap<String, View>,
}

/// What a batch wrote to one state, ready to store.
pub struct StateWrites {
    /// The state.
    pub state: String,
    /// Encoded key to the record to store, sorted by key.
    pub records: Vec<(Vec<u8>, Stored)>,
}

impl Views {
    /// Views over `read` (a snapshot of what is committed) for batch `txid`;
    /// `caches` holds each state's cache, taken back by [`Views::finish`].
    pub fn new(
        read: &ReadTransaction,
        topology: &str,
        states: &BTreeMap<String, StateDef>,
        caches: &mut HashMap<String, StateCache>,
        txid: u64,
        writable: bool,
    ) -> Result<Views> {
        let mut views = HashMap::new();
        for (name, def) in states {
            let table_name = super::state_table(topology, name);
            let table = match read.open_table(TableDefinition::<&[u8], &[u8]>::new(&table_name)) {
                Ok(table) => Some(table),
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(e.into()),
            };
            let capacity = def.cache_size.unwrap_or(DEFAULT_CACHE_SIZE);
            let cache = caches.remove(name).unwrap_or_else(|| StateCache::new(capacity));
            views.insert(name.clone(), View { def: def.clone(), table, cache, writes: BTreeMap::new() });
        }
        Ok(Views { topology: topology.to_owned(), txid, writable, states: views })
    }

    fn view(&mut self, state: &str) -> Result<&mut View> {
        let topology = &self.topology;
        self.states.get_mut(state).with_context(|| format!("topology {topology} has no state {state}"))
    }

    /// The committed record of `key`.
    fn committed(view: &mut View, key: &[u8]) -> Result<Option<Stored>> {
        if let Some(hit) = view.cache.get(key) {
            return Ok(hit);
        }
        let stored = match &view.table {
            Some(table) => table
                .get(key)?
                .map(|v| Stored::decode(v.value()))
                .transpose()
                .with_context(|| format!("state {} has an unreadable value", view.def.name))?,
            None => None,
        };
        view.cache.put(key.to_vec(), stored.clone());
        Ok(stored)
    }

    /// The kind of `state`.
    pub fn def(&self, state: &str) -> Option<&StateDef> {
        self.states.get(state).map(|v| &v.def)
    }

    /// What the batch starts from for `key`: its own write if it made one,
    /// else the committed value by Trident's rules (an opaque state's replay
    /// starts from the value before its first attempt); `None` when the key
    /// has none, or a transactional state applied this batch already.
    pub fn base(&mut self, state: &str, key: &[u8]) -> Result<Base> {
        let txid = self.txid;
        let view = self.view(state)?;
        if let Some(write) = view.writes.get(key) {
            return Ok(Base::Value(write.after.value().clone()));
        }
        let stored = Self::committed(view, key)?;
        let step = rules::step(view.def.kind, stored.as_ref(), txid)
            .with_context(|| format!("state {}, key {}", view.def.name, super::describe_key(key)))?;
        Ok(match step {
            Step::Skip => Base::Applied(stored.expect("skip has a stored value").value().clone()),
            Step::Fresh => Base::None,
            Step::Combine(value) => Base::Value(value),
        })
    }

    /// Writes `value` for `key`, to commit with the batch. A transactional
    /// key this batch applied already keeps its value.
    pub fn put(&mut self, state: &str, key: Vec<u8>, value: Value) -> Result<()> {
        let (txid, writable, topology) = (self.txid, self.writable, self.topology.clone());
        if !writable {
            bail!("topology {topology}: a query cannot write state {state}");
        }
        let view = self.view(state)?;
        let before = match view.writes.remove(&key) {
            Some(write) => write.before,
            None => Self::committed(view, &key)?,
        };
        if rules::step(view.def.kind, before.as_ref(), txid)? == Step::Skip {
            return Ok(());
        }
        let after = rules::updated(view.def.kind, before.clone(), txid, value);
        view.writes.insert(key, Write { before, after });
        Ok(())
    }

    /// What the batch wrote, and the caches back for the next batch, to be
    /// refreshed with [`refresh_caches`] once the writes are committed.
    pub fn finish(self, caches: &mut HashMap<String, StateCache>) -> Vec<StateWrites> {
        let mut out = Vec::new();
        for (name, view) in self.states {
            let records: Vec<(Vec<u8>, Stored)> = view.writes.into_iter().map(|(k, w)| (k, w.after)).collect();
            caches.insert(name.clone(), view.cache);
            if !records.is_empty() {
                out.push(StateWrites { state: name, records });
            }
        }
        out.sort_by(|a, b| a.state.cmp(&b.state));
        out
    }

    /// Key bytes for a tuple of values.
    pub fn key(values: &[Value]) -> Vec<u8> {
        keys::encode(values.iter().map(Value::as_ref))
    }
}

/// What a key's value is, for the batch.
#[derive(Clone, Debug, PartialEq)]
pub enum Base {
    /// No value.
    None,
    /// This value, to build on.
    Value(Value),
    /// A transactional state applied this batch to the key already: its value
    /// stays.
    Applied(Value),
}

impl Base {
    /// The value a reader sees.
    pub fn value(&self) -> Option<&Value> {
        match self {
            Base::None => None,
            Base::Value(v) | Base::Applied(v) => Some(v),
        }
    }
}

/// After a commit: the committed records become what the caches hold.
pub fn refresh_caches(caches: &mut HashMap<String, StateCache>, writes: Vec<StateWrites>) {
    for write in writes {
        if let Some(cache) = caches.get_mut(&write.state) {
            for (key, stored) in write.records {
                cache.put(key, Some(stored));
            }
        }
    }
}
