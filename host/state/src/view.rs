//! A batch's view of its topology's states in the commit phase: reads see
//! what is committed and the batch's own writes; writes stay here until
//! the batch commits them in one write transaction. A cache of committed
//! values per state sits in front of redb (Trident's `CachedMap`).
//!
//! Queries use the same view, read-only, over what is committed.

use super::budget::{Access, Overrun, Usage};
use super::error::Context;
use super::keyed::KeyedValues;
use super::keys;
use super::rules::{self, Step, Stored};
use super::store::{Snapshot, StateReader};
pub use super::writes::{Combines, StateWrites};
use super::{StateError, StoreError};
use std::collections::{BTreeMap, HashMap};
use weir_config::{StateLimits, StateQuota};
use weir_sdk::codec::Value;
use weir_sdk::operator::Builtin;
use weir_sdk::topology::StateDef;

/// Entries cached per state when the topology does not say.
pub const DEFAULT_CACHE_SIZE: usize = 100_000;

/// Keys are what guests and inputs chose: a hash seeded per map, so that
/// no one can choose keys that all collide.
type CacheMap = HashMap<Vec<u8>, Option<Stored>, foldhash::fast::RandomState>;

/// Committed values of one state, the most recently used kept: two
/// generations, the older dropped whole when the newer fills up (in entries
/// or in bytes), so that an entry read or written within the last
/// `capacity / 2` uses stays, and the cache never holds more than its bytes.
pub struct StateCache {
    half: usize,
    half_bytes: usize,
    recent: CacheMap,
    recent_bytes: usize,
    older: CacheMap,
}

/// About what an entry takes in memory: its key and values, and the map's
/// and the values' own bookkeeping.
fn entry_size(key_len: usize, stored: &Option<Stored>) -> usize {
    const OVERHEAD: usize = 96;
    let value = |v: &Value| match v {
        Value::Str(s) => s.len(),
        Value::Bytes(b) => b.len(),
        _ => 0,
    };
    let values = match stored {
        None => 0,
        Some(Stored::Opaque { curr, prev, .. }) => value(curr) + prev.as_ref().map_or(0, value),
        Some(stored) => value(stored.value()),
    };
    OVERHEAD + key_len + values
}

impl StateCache {
    /// A cache of about `capacity` entries (none when 0) and at most
    /// `max_bytes`.
    pub fn new(capacity: usize, max_bytes: usize) -> StateCache {
        StateCache {
            half: capacity / 2,
            half_bytes: max_bytes / 2,
            recent: CacheMap::default(),
            recent_bytes: 0,
            older: CacheMap::default(),
        }
    }

    fn get(&mut self, key: &[u8]) -> Option<Option<Stored>> {
        if let Some(hit) = self.recent.get(key) {
            return Some(hit.clone());
        }
        let hit = self.older.remove(key)?;
        self.put(key.to_vec(), hit.clone());
        Some(hit)
    }

    /// Takes `key`'s entry out: the batch is about to write it, and the
    /// commit puts it back.
    fn take(&mut self, key: &[u8]) -> Option<Option<Stored>> {
        if let Some(hit) = self.recent.remove(key) {
            self.recent_bytes -= entry_size(key.len(), &hit);
            return Some(hit);
        }
        self.older.remove(key)
    }

    /// Forgets everything: after a failed commit, entries taken out for
    /// writes are missing.
    pub fn clear(&mut self) {
        self.recent.clear();
        self.recent_bytes = 0;
        self.older.clear();
    }

    fn put(&mut self, key: Vec<u8>, stored: Option<Stored>) {
        let size = entry_size(key.len(), &stored);
        // An entry larger than a generation is read from the store each time.
        if self.half == 0 || size > self.half_bytes {
            return;
        }
        if self.recent.len() >= self.half || self.recent_bytes + size > self.half_bytes {
            self.older = std::mem::take(&mut self.recent);
            self.recent_bytes = 0;
        }
        self.recent_bytes += size;
        // A key lives in one generation: an older entry of it is stale, and
        // taking the new one out must not leave the stale one behind.
        self.older.remove(&key);
        let key_len = key.len();
        if let Some(replaced) = self.recent.insert(key, stored) {
            self.recent_bytes -= entry_size(key_len, &replaced);
        }
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

/// A state's committed record and the batch's write of one key (`None`:
/// the batch removes the key).
struct Write {
    before: Option<Stored>,
    after: Option<Stored>,
}

struct View {
    def: StateDef,
    table: Option<Box<dyn StateReader>>,
    cache: StateCache,
    writes: BTreeMap<Vec<u8>, Write>,
    /// Key ranges `[from, to)` the batch removes, before its writes.
    removed_ranges: Vec<(Vec<u8>, Vec<u8>)>,
    combines: Option<Combines>,
}

impl View {
    /// Whether the batch removed `key` with a range of keys.
    fn range_removed(&self, key: &[u8]) -> bool {
        in_ranges(&self.removed_ranges, key)
    }

    /// Fails if the batch left a partial of a key from `from` to `to`
    /// (both included when equal, else `to` excluded) to the commit: the
    /// batch cannot read or write it any more.
    fn not_combined(&self, from: &[u8], to: &[u8]) -> Result<(), StoreError> {
        let Some(combines) = &self.combines else { return Ok(()) };
        let at = combines.partials.first_at_or_after(from);
        if at < combines.partials.len() {
            let key = combines.partials.key(at);
            if key == from || key < to {
                return Err(StoreError::Refused(format!(
                    "state {}, key {}: its partial was left to the commit; the batch cannot read or write it",
                    self.def.name,
                    super::describe_key(key)
                )));
            }
        }
        Ok(())
    }
}

/// The states of one topology as a batch (or a query) sees them.
pub struct Views {
    topology: String,
    txid: u64,
    writable: bool,
    states: HashMap<String, View>,
    limits: StateLimits,
    /// What the batch's guests read and wrote so far.
    usage: Usage,
}

impl Views {
    /// Views over `read` (a snapshot of what is committed) for batch `txid`;
    /// `caches` holds each state's cache, taken back by [`Views::finish`].
    /// Guests read and write through them within `limits`.
    pub fn new(
        read: &dyn Snapshot,
        topology: &str,
        states: &BTreeMap<String, StateDef>,
        caches: &mut HashMap<String, StateCache>,
        txid: u64,
        writable: bool,
        limits: &StateLimits,
    ) -> Result<Views, StoreError> {
        let mut views = HashMap::new();
        for (name, def) in states {
            let table = read.state(topology, name)?;
            let capacity = def.cache_size.unwrap_or(DEFAULT_CACHE_SIZE);
            let max_bytes = usize::try_from(limits.cache_bytes).unwrap_or(usize::MAX);
            let cache = caches.remove(name).unwrap_or_else(|| StateCache::new(capacity, max_bytes));
            views.insert(
                name.clone(),
                View {
                    def: def.clone(),
                    table,
                    cache,
                    writes: BTreeMap::new(),
                    removed_ranges: Vec::new(),
                    combines: None,
                },
            );
        }
        Ok(Views {
            topology: topology.to_owned(),
            txid,
            writable,
            states: views,
            limits: *limits,
            usage: Usage::default(),
        })
    }

    /// A query's refusal to write `state`.
    fn read_only(&self, state: &str) -> StoreError {
        StoreError::Refused(format!("topology {}: a query cannot write state {state}", self.topology))
    }

    /// What one guest call may read and write.
    pub fn call_quota(&self) -> &StateQuota {
        &self.limits.per_call
    }

    /// Counts a guest's read or write of one entry of `bytes` against the
    /// batch's quota.
    pub fn charge(&mut self, access: Access, bytes: u64) -> Result<(), Overrun> {
        self.usage.charge(&self.limits.per_batch, access, bytes)
    }

    fn view(&mut self, state: &str) -> Result<&mut View, StoreError> {
        let (topology, states) = (&self.topology, &mut self.states);
        if !states.contains_key(state) {
            let mut present: Vec<String> = states.keys().cloned().collect();
            present.sort();
            return Err(StateError::NoState { topology: topology.clone(), state: state.to_owned(), present }.into());
        }
        Ok(states.get_mut(state).expect("present"))
    }

    /// The committed record of `key`.
    fn committed(view: &mut View, key: &[u8]) -> Result<Option<Stored>, StoreError> {
        if view.range_removed(key) {
            return Ok(None);
        }
        if let Some(hit) = view.cache.get(key) {
            return Ok(hit);
        }
        let stored = Self::read(view, key)?;
        view.cache.put(key.to_vec(), stored.clone());
        Ok(stored)
    }

    /// The committed record of `key`, out of the cache: the batch writes it.
    fn committed_for_write(view: &mut View, key: &[u8]) -> Result<Option<Stored>, StoreError> {
        if view.range_removed(key) {
            return Ok(None);
        }
        match view.cache.take(key) {
            Some(hit) => Ok(hit),
            None => Self::read(view, key),
        }
    }

    fn read(view: &View, key: &[u8]) -> Result<Option<Stored>, StoreError> {
        Ok(match &view.table {
            Some(table) => {
                table.get(key).with_context(|| format!("state {} has an unreadable value", view.def.name))?
            }
            None => None,
        })
    }

    /// The kind of `state`.
    pub fn def(&self, state: &str) -> Option<&StateDef> {
        self.states.get(state).map(|v| &v.def)
    }

    /// What the batch starts from for `key`: its own write if it made one,
    /// else the committed value by Trident's rules (an opaque state's replay
    /// starts from the value before its first attempt); `None` when the key
    /// has none, or a transactional state applied this batch already.
    pub fn base(&mut self, state: &str, key: &[u8]) -> Result<Base, StoreError> {
        let txid = self.txid;
        let view = self.view(state)?;
        view.not_combined(key, key)?;
        if let Some(write) = view.writes.get(key) {
            return Ok(write.after.as_ref().map_or(Base::None, |after| Base::Value(after.value().clone())));
        }
        let stored = Self::committed(view, key)?;
        Self::base_of(&view.def, key, stored.as_ref(), txid)
    }

    fn base_of(def: &StateDef, key: &[u8], stored: Option<&Stored>, txid: u64) -> Result<Base, StoreError> {
        let step = rules::step(def.kind, stored, txid)
            .with_context(|| format!("state {}, key {}", def.name, super::describe_key(key)))?;
        Ok(match step {
            Step::Skip => Base::Applied(stored.expect("skip has a stored value").value().clone()),
            Step::Fresh => Base::None,
            Step::Combine(value) => Base::Value(value),
        })
    }

    /// The keys of `state` from `from` up to (not including) `to` that
    /// hold a value for the batch, with their bases (see [`Views::base`]),
    /// sorted by key: what is committed, under the batch's own writes.
    pub fn range(&mut self, state: &str, from: &[u8], to: &[u8]) -> Result<Vec<(Vec<u8>, Base)>, StoreError> {
        let mut found = Vec::new();
        self.range_each(state, from, to, false, |key, base| {
            found.push((key, base));
            Ok(())
        })?;
        Ok(found)
    }

    /// [`Views::range`], and every key from `from` up to `to` removed when
    /// the batch commits, at once: one read for both.
    pub fn take_range(&mut self, state: &str, from: &[u8], to: &[u8]) -> Result<Vec<(Vec<u8>, Base)>, StoreError> {
        let mut found = Vec::new();
        self.take_range_each(state, from, to, |key, base| {
            found.push((key, base));
            Ok(())
        })?;
        Ok(found)
    }

    /// [`Views::take_range`], each key and its base handed to `each`, in
    /// key order, as it is read: a range of any size taken without holding
    /// it whole.
    pub fn take_range_each(
        &mut self,
        state: &str,
        from: &[u8],
        to: &[u8],
        each: impl FnMut(Vec<u8>, Base) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if !self.writable {
            return Err(self.read_only(state));
        }
        self.range_each(state, from, to, true, each)
    }

    fn range_each(
        &mut self,
        state: &str,
        from: &[u8],
        to: &[u8],
        take: bool,
        mut each: impl FnMut(Vec<u8>, Base) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let txid = self.txid;
        let view = self.view(state)?;
        if from >= to {
            return Ok(());
        }
        view.not_combined(from, to)?;
        let View { def, table, cache, writes, removed_ranges, .. } = view;
        // The committed records under the batch's own writes, both sorted
        // by key: merged in one pass as the records are read.
        let bounds = (std::ops::Bound::Included(from), std::ops::Bound::Excluded(to));
        let mut written = writes.range_mut::<[u8], _>(bounds).peekable();
        let give_written =
            |each: &mut dyn FnMut(Vec<u8>, Base) -> Result<(), StoreError>, key: &Vec<u8>, write: &mut Write| {
                let after = if take { write.after.take() } else { write.after.clone() };
                match after {
                    Some(after) => each(key.clone(), Base::Value(after.value().clone())),
                    None => Ok(()),
                }
            };
        let mut committed = false;
        if let Some(table) = table {
            table
                .each_in(from, to, &mut |key, stored| {
                    if in_ranges(removed_ranges, key) {
                        return Ok(());
                    }
                    committed = true;
                    if take && !cache.is_empty() {
                        // Out of the cache, as keys written are.
                        cache.take(key);
                    }
                    let mut overridden = false;
                    while let Some((written_key, write)) = written.next_if(|(k, _)| k.as_slice() <= key) {
                        overridden = written_key.as_slice() == key;
                        give_written(&mut each, written_key, write)?;
                    }
                    if overridden {
                        return Ok(());
                    }
                    match Self::base_of(def, key, Some(&stored), txid)? {
                        Base::None => Ok(()),
                        base => each(key.to_vec(), base),
                    }
                })
                .with_context(|| format!("state {}: reading a range", def.name))?;
        }
        for (key, write) in written {
            give_written(&mut each, key, write)?;
        }
        // Only committed keys need the range removed: the batch's own
        // writes in it became removals above.
        if take && committed {
            removed_ranges.push((from.to_vec(), to.to_vec()));
        }
        Ok(())
    }

    /// Removes `key` from `state` when the batch commits.
    pub fn remove(&mut self, state: &str, key: &[u8]) -> Result<(), StoreError> {
        if !self.writable {
            return Err(self.read_only(state));
        }
        let view = self.view(state)?;
        view.not_combined(key, key)?;
        if let Some(write) = view.writes.get_mut(key) {
            write.after = None;
            return Ok(());
        }
        let before = Self::committed_for_write(view, key)?;
        view.writes.insert(key.to_vec(), Write { before, after: None });
        Ok(())
    }

    /// Writes `value` for `key`, to commit with the batch. A transactional
    /// key this batch applied already keeps its value.
    pub fn put(&mut self, state: &str, key: Vec<u8>, value: Value) -> Result<(), StoreError> {
        self.update(state, key, |_| Ok(value))
    }

    /// Writes for `key` what `new` makes of its base (see [`Views::base`]),
    /// in one lookup: how a batch's partial meets the stored value. A
    /// transactional key this batch applied already keeps its value. What
    /// `new` fails with is the update's error.
    pub fn update(
        &mut self,
        state: &str,
        key: Vec<u8>,
        new: impl FnOnce(Base) -> Result<Value, StoreError>,
    ) -> Result<(), StoreError> {
        let (txid, writable) = (self.txid, self.writable);
        if !writable {
            return Err(self.read_only(state));
        }
        let view = self.view(state)?;
        view.not_combined(&key, &key)?;
        let kind = view.def.kind;
        if let Some(write) = view.writes.get_mut(&key) {
            let base = write.after.as_ref().map_or(Base::None, |after| Base::Value(after.value().clone()));
            write.after = Some(rules::updated(kind, write.before.as_ref(), txid, new(base)?));
            return Ok(());
        }
        let before = Self::committed_for_write(view, &key)?;
        let after = rules::apply(kind, before.as_ref(), txid, |base| new(base.map_or(Base::None, Base::Value)))
            .with_context(|| format!("state {}, key {}", view.def.name, super::describe_key(&key)))?;
        match after {
            Some(after) => {
                view.writes.insert(key, Write { before, after: Some(after) });
            }
            // Applied already: the committed record stays, cached again.
            None => view.cache.put(key, before),
        }
        Ok(())
    }

    /// Leaves `partials` (sorted by key) to the commit, which combines each
    /// with its stored value in place: for keys the batch reads and writes
    /// no further, once for each batch. Later batches of the commit group
    /// read through them.
    pub fn combine_at_commit(
        &mut self,
        state: &str,
        builtin: Builtin,
        partials: KeyedValues,
    ) -> Result<(), StoreError> {
        if !self.writable {
            return Err(self.read_only(state));
        }
        let view = self.view(state)?;
        let written = view.writes.keys().any(|key| partials.find(key).is_some())
            || (!view.removed_ranges.is_empty() && partials.iter().any(|(key, _)| view.range_removed(key)));
        if view.combines.is_some() || written {
            return Err(StoreError::Refused(format!("state {state} is written twice in one batch")));
        }
        // Their cached records go stale here: the group's later batches
        // read them through this batch's partials.
        if !view.cache.is_empty() {
            for (key, _) in partials.iter() {
                view.cache.take(key);
            }
        }
        view.combines = Some(Combines { kind: view.def.kind, builtin, partials });
        Ok(())
    }

    /// What the batch wrote, and the caches back for the next batch, to be
    /// refreshed with [`refresh_caches`] once the writes are committed.
    pub fn finish(self, caches: &mut HashMap<String, StateCache>) -> Vec<StateWrites> {
        let mut out = Vec::new();
        for (name, view) in self.states {
            let (mut records, mut removed) = (Vec::new(), Vec::new());
            for (key, write) in view.writes {
                match write.after {
                    Some(after) => records.push((key, after)),
                    None => removed.push(key),
                }
            }
            caches.insert(name.clone(), view.cache);
            let removed_ranges = view.removed_ranges;
            if !records.is_empty() || !removed.is_empty() || !removed_ranges.is_empty() || view.combines.is_some() {
                out.push(StateWrites { state: name, records, removed, removed_ranges, combines: view.combines });
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

/// Whether `key` lies in one of `ranges`, each `[from, to)`.
pub(super) fn in_ranges(ranges: &[(Vec<u8>, Vec<u8>)], key: &[u8]) -> bool {
    ranges.iter().any(|(from, to)| from.as_slice() <= key && key < to.as_slice())
}

/// After a commit: the committed records become what the caches hold.
pub fn refresh_caches(caches: &mut HashMap<String, StateCache>, writes: Vec<StateWrites>) {
    for write in writes {
        if let Some(cache) = caches.get_mut(&write.state) {
            for (key, stored) in write.records {
                cache.put(key, Some(stored));
            }
            for key in write.removed {
                cache.put(key, None);
            }
            // What the commit combined in place, over what an earlier
            // batch of the group wrote, is not known here.
            if let Some(combines) = write.combines.filter(|_| !cache.is_empty()) {
                for (key, _) in combines.partials.iter() {
                    cache.take(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BatchRecord, Db};
    use weir_sdk::topology::StateKind;

    fn stored(n: i64) -> Option<Stored> {
        Some(Stored::Plain(Value::I64(n)))
    }

    /// Puts each of `entries` (key, stored integer) into `cache`, in order.
    fn put_all(cache: &mut StateCache, entries: &[(&str, i64)]) {
        for (key, n) in entries {
            cache.put(key.as_bytes().to_vec(), stored(*n));
        }
    }

    #[test]
    fn an_entry_put_again_after_its_generation_aged_leaves_no_stale_copy() {
        let mut cache = StateCache::new(4, 1 << 20);
        put_all(&mut cache, &[("k", 1), ("a", 2)]);
        // The generation of k = 1 ages; k is put again, newer.
        put_all(&mut cache, &[("b", 3), ("k", 4)]);
        // A batch takes k out to write it: nothing of k may be left for the
        // next batch, which must read the write instead.
        assert_eq!(cache.take(b"k"), Some(stored(4)));
        assert_eq!(cache.take(b"k"), None, "the aged k = 1 came back");
        assert_eq!(cache.get(b"k"), None);
    }

    #[test]
    fn the_cache_keeps_what_was_used_last() {
        let mut cache = StateCache::new(4, 1 << 20);
        put_all(&mut cache, &[("a", 1), ("b", 2), ("c", 3)]);
        assert_eq!(cache.get(b"a"), Some(stored(1)), "a recent entry of the older generation stays");
        put_all(&mut cache, &[("d", 4), ("e", 5)]);
        assert!(cache.len() <= 4, "{} entries", cache.len());
        assert_eq!(cache.get(b"b"), None, "the least recently used entry went");
        assert_eq!(cache.get(b"e"), Some(stored(5)));
        assert!(StateCache::new(0, 1 << 20).get(b"a").is_none());
    }

    #[test]
    fn the_cache_holds_no_more_than_its_bytes() {
        let big = |n: u8| Some(Stored::Plain(Value::Bytes(vec![n; 1000])));
        let mut cache = StateCache::new(1_000_000, 10_000);
        for n in 0..100u8 {
            cache.put(vec![n], big(n));
            assert!(cache.len() <= 2 * 10_000 / 1000, "{} entries of 1,000 bytes", cache.len());
        }
        assert_eq!(cache.get(&[99]), Some(big(99)), "the last entry stays");
        cache.put(vec![0], Some(Stored::Plain(Value::Bytes(vec![0; 6000]))));
        assert_eq!(cache.get(&[0]), None, "an entry larger than a generation is not kept");
        // Replacing and taking entries keeps the count of bytes exact.
        let mut cache = StateCache::new(1_000_000, 10_000);
        for _ in 0..1000 {
            cache.put(vec![1], big(1));
            assert_eq!(cache.take(&[1]), Some(big(1)));
            cache.put(vec![1], big(1));
        }
        assert_eq!(cache.recent_bytes, entry_size(1, &big(1)));
    }

    fn states() -> BTreeMap<String, StateDef> {
        let def = StateDef { name: "s".into(), kind: StateKind::Transactional, cache_size: Some(10) };
        [("s".to_owned(), def)].into()
    }

    #[test]
    fn a_batch_reads_its_own_writes_and_nothing_is_stored_before_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let mut caches = HashMap::new();
        let key = Views::key(&[Value::from("w")]);

        let read = db.begin_read().unwrap();
        let mut views = Views::new(&read, "t", &states(), &mut caches, 1, true, &StateLimits::default()).unwrap();
        assert_eq!(views.base("s", &key).unwrap(), Base::None);
        views.update("s", key.clone(), |base| Ok(Value::I64(base.value().map_or(0, |_| 100) + 2))).unwrap();
        views
            .update("s", key.clone(), |base| {
                Ok(Value::I64(if let Base::Value(Value::I64(n)) = base { n + 1 } else { 0 }))
            })
            .unwrap();
        assert_eq!(views.base("s", &key).unwrap(), Base::Value(Value::I64(3)), "reads see the batch's writes");
        assert!(db.states("t").unwrap().is_empty(), "nothing reaches redb before the commit");
        let writes = views.finish(&mut caches);
        db.commit("t", 1, &BatchRecord { attempt: 0, time_ms: 0, spout: vec![] }, &writes).unwrap();
        refresh_caches(&mut caches, writes);
        assert_eq!(
            db.get("t", "s", &[Value::from("w")]).unwrap(),
            Some(Stored::Transactional { txid: 1, value: Value::I64(3) })
        );

        // The next batch finds the value in the cache; a query cannot write.
        assert_eq!(caches["s"].len(), 1);
        let read = db.begin_read().unwrap();
        let mut views = Views::new(&read, "t", &states(), &mut caches, 2, true, &StateLimits::default()).unwrap();
        assert_eq!(views.base("s", &key).unwrap(), Base::Value(Value::I64(3)));
        let mut query =
            Views::new(&read, "t", &states(), &mut HashMap::new(), u64::MAX, false, &StateLimits::default()).unwrap();
        assert_eq!(query.base("s", &key).unwrap(), Base::Value(Value::I64(3)));
        let err = query.put("s", key, Value::I64(0)).unwrap_err();
        assert!(err.to_string().contains("a query cannot write state s"), "{err}");
    }
}
