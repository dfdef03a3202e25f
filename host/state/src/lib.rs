//! `weir-state`: the store seam (`Store`, `CommitLog`, `Snapshot`,
//! `StateReader`), its redb and in-memory stores, and Trident's rules for
//! transactional, opaque and non-transactional values. It may not depend
//! on wasmtime, tokio, the network clients or any crate above it: state is
//! tested and fuzzed on its own.
//!
//! All state a host keeps, in one redb database per data directory.
//!
//! Tables, per topology:
//! - `state/<topology>/<state>`: key (order-preserving, see [`keys`]) to a
//!   [`rules::Stored`] value;
//! - `meta/<topology>`: the progress record (last committed txid);
//! - `meta/<topology>/batches`: per txid, the attempt and the spout's
//!   metadata, written before the batch is processed so that a replay emits
//!   exactly the same tuples; pruned below the last committed txid;
//! - `meta/<topology>/states`: each state's kind, recorded by the state's
//!   first commit, so that a topology declaring it with another kind is
//!   refused when it loads (data dirs written before it have none: the
//!   stored records' kind stands in).
//!
//! A batch's state changes and its progress record commit in one durable
//! write transaction, with those of the batches in its commit group
//! ([`commit`]).

pub mod json;

pub mod budget;
mod commit;
pub mod compact;
mod error;
pub mod handle;
pub mod keyed;
pub mod keys;
mod kind;
pub mod memory;
mod merge;
pub mod pending;
pub mod restore;
pub mod rules;
pub mod size;
pub mod skip;
pub mod store;
mod table;
pub mod view;
mod writes;

use crate::store::EachRecord;
use error::Context;
pub use error::{ContextError, DecodeError, StateError, StoreError};
pub(crate) use json::describe_key;
use redb::{Database, DatabaseError, Durability, ReadableDatabase, ReadableTable, TableDefinition, TableHandle};
use rules::{Stored, kind_name};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use store::{BatchCommit, CommitLog, OtherEntries, Snapshot, StateReader, Store, Written};
pub use store::{BatchRecord, Progress};
use table::ReadTable;
use weir_sdk::codec::Value;
use weir_sdk::topology::{StateDef, StateKind};
use writes::StateWrites;

const DB_FILE: &str = "weir.redb";
const LAST_COMMITTED: &str = "last-committed";

/// The host's database.
pub struct Db {
    db: Database,
    path: PathBuf,
    /// Bounds on the states' size, and the sizes last committed.
    size_limits: size::SizeLimits,
    sizes: std::sync::Mutex<size::Sizes>,
}

pub(crate) fn state_table(topology: &str, state: &str) -> String {
    format!("state/{topology}/{state}")
}

fn meta_table(topology: &str) -> String {
    format!("meta/{topology}")
}

fn batches_table(topology: &str) -> String {
    format!("meta/{topology}/batches")
}

fn kinds_table(topology: &str) -> String {
    format!("meta/{topology}/states")
}

fn others_prefix(topology: &str) -> String {
    format!("records/{topology}/")
}

fn others_def(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::new(name)
}

fn kinds_def(name: &str) -> TableDefinition<'_, &'static str, &'static str> {
    TableDefinition::new(name)
}

fn meta_def(name: &str) -> TableDefinition<'_, &'static str, u64> {
    TableDefinition::new(name)
}

fn batches_def(name: &str) -> TableDefinition<'_, u64, &'static [u8]> {
    TableDefinition::new(name)
}

/// Keys of a state with their stored values, sorted by key.
pub type Entries = Vec<(Vec<Value>, Stored)>;

impl Db {
    /// Opens (creating if needed) the database of `data_dir`, keeping the
    /// default of its pages in memory
    /// ([`DEFAULT_MAX_DB_CACHE_MIB`](weir_config::DEFAULT_MAX_DB_CACHE_MIB)).
    /// Fails with a clear message when another process has it open.
    /// (Opening is no part of the seam: its failures are reported, never
    /// told apart.)
    pub fn open(data_dir: &Path) -> anyhow::Result<Db> {
        Db::open_caching(data_dir, weir_config::DEFAULT_MAX_DB_CACHE_MIB << 20)
    }

    /// [`Db::open`], keeping at most `cache_bytes` of the database's pages
    /// in memory.
    pub fn open_caching(data_dir: &Path, cache_bytes: u64) -> anyhow::Result<Db> {
        let cannot_create = |e| anyhow::Error::new(e).context(format!("cannot create data dir {}", data_dir.display()));
        std::fs::create_dir_all(data_dir).map_err(cannot_create)?;
        let path = data_dir.join(DB_FILE);
        let mut builder = Database::builder();
        builder.set_cache_size(usize::try_from(cache_bytes).unwrap_or(usize::MAX));
        let db = builder.create(&path).map_err(|e| match e {
            DatabaseError::DatabaseAlreadyOpen => anyhow::anyhow!(
                "data dir {} is in use by another weir process (its database {} is locked)",
                data_dir.display(),
                path.display()
            ),
            other => anyhow::Error::from(other).context(format!("cannot open database {}", path.display())),
        })?;
        Ok(Db { db, path, size_limits: size::SizeLimits::default(), sizes: Default::default() })
    }

    /// Bounds the size of the states: a commit that would pass a bound
    /// fails with [`StateError::OverSize`] and writes nothing.
    pub fn limit_state_size(&mut self, limits: size::SizeLimits) {
        self.size_limits = limits;
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The topology's last committed txid and the batches recorded since.
    pub fn progress(&self, topology: &str) -> Result<Progress, StoreError> {
        let txn = self.db.begin_read()?;
        let meta_name = meta_table(topology);
        let last_committed = match table_if_written(&txn, meta_def(&meta_name))? {
            Some(table) => table.get(LAST_COMMITTED)?.map_or(0, |v| v.value()),
            None => 0,
        };
        let batches_name = batches_table(topology);
        let mut batches = Vec::new();
        if let Some(table) = table_if_written(&txn, batches_def(&batches_name))? {
            for entry in table.range(last_committed..)? {
                let (txid, record) = entry?;
                batches.push((txid.value(), BatchRecord::decode(record.value())?));
            }
        }
        Ok(Progress { last_committed, batches })
    }

    /// Records a batch's attempt and spout metadata before it is processed.
    /// Not flushed on its own: the batch's durable commit flushes it, and a
    /// batch whose commit never happened may be emitted afresh.
    pub fn record_batch(&self, topology: &str, txid: u64, record: &BatchRecord) -> Result<(), StoreError> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::None)?;
        {
            let name = batches_table(topology);
            let mut table = txn.open_table(batches_def(&name))?;
            table.insert(txid, record.encode().as_slice())?;
        }
        txn.commit()?;
        Ok(())
    }

    /// A snapshot of everything committed, for a batch's or a query's reads.
    pub fn begin_read(&self) -> Result<redb::ReadTransaction, StoreError> {
        Ok(self.db.begin_read()?)
    }

    /// Commits batch `txid`: its state writes and the progress record (the
    /// last committed txid and the batch's record), in one durable write
    /// transaction, keys in order.
    pub fn commit(
        &self,
        topology: &str,
        txid: u64,
        record: &BatchRecord,
        writes: &[StateWrites],
    ) -> Result<usize, StoreError> {
        self.commit_batch(&BatchCommit { topology, txid, record, writes, others: &[] })
    }

    /// Refuses the states `declared` for `topology` when one has another kind
    /// than the state's stored values have: its commits would meet values
    /// they cannot build on. Checked when a topology loads, before anything
    /// runs; the error is a [`StateError::KindChanged`].
    pub fn check_state_kinds(&self, topology: &str, declared: &BTreeMap<String, StateDef>) -> Result<(), StoreError> {
        let txn = self.db.begin_read()?;
        let kinds_name = kinds_table(topology);
        let kinds = table_if_written(&txn, kinds_def(&kinds_name))?;
        for (state, def) in declared {
            let recorded = match &kinds {
                Some(table) => {
                    table.get(state.as_str())?.map(|kind| parse_kind(topology, state, kind.value())).transpose()?
                }
                None => None,
            };
            let stored = match recorded {
                Some(kind) => Some(kind),
                // Written before kinds were recorded: its first record says.
                None => match ReadTable::open(&txn, &state_table(topology, state))? {
                    Some(table) => table.first_kind().with_context(|| format!("topology {topology}, state {state}"))?,
                    None => None,
                },
            };
            if let Some(stored) = stored.filter(|&stored| stored != def.kind) {
                let changed = StateError::KindChanged {
                    topology: topology.to_owned(),
                    state: state.clone(),
                    stored,
                    declared: def.kind,
                };
                return Err(changed.into());
            }
        }
        Ok(())
    }

    /// Every key of a state with its stored value, sorted by key.
    pub fn scan(&self, topology: &str, state: &str) -> Result<Entries, StoreError> {
        let txn = self.db.begin_read()?;
        let name = state_table(topology, state);
        let table = self.open_state(&txn, topology, state, &name)?;
        let entries = table.entries()?;
        entries.into_iter().map(|(key, stored)| Ok((keys::decode(&key)?, stored))).collect()
    }

    /// At most `limit` keys of a state after `after` (from its first,
    /// without one) with their stored values, sorted by key.
    pub fn page(
        &self,
        topology: &str,
        state: &str,
        after: Option<&[Value]>,
        limit: usize,
    ) -> Result<Entries, StoreError> {
        Ok(self.page_within(topology, state, after, limit, usize::MAX)?.0)
    }

    /// [`Db::page`], ending before the key that would take its keys and
    /// values past `max_bytes` (never before the first); with whether it
    /// ended so.
    pub fn page_within(
        &self,
        topology: &str,
        state: &str,
        after: Option<&[Value]>,
        limit: usize,
        max_bytes: usize,
    ) -> Result<(Entries, bool), StoreError> {
        let txn = self.db.begin_read()?;
        let name = state_table(topology, state);
        let table = self.open_state(&txn, topology, state, &name)?;
        let after = after.map(|key| keys::encode(key.iter().map(Value::as_ref)));
        let read = table.page_within(after.as_deref(), limit, max_bytes)?;
        let entries: Result<Vec<_>, StoreError> =
            read.entries.into_iter().map(|(key, stored)| Ok((keys::decode(&key)?, stored))).collect();
        Ok((entries?, read.cut))
    }

    /// Each committed key of a state from `from` up to (not including)
    /// `to`, in key order, handed to `each` until it returns false; a
    /// state not stored yet has none.
    pub fn keys_in(
        &self,
        topology: &str,
        state: &str,
        from: &[u8],
        to: &[u8],
        each: impl FnMut(&[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let txn = self.db.begin_read()?;
        match ReadTable::open(&txn, &state_table(topology, state))? {
            Some(table) => table.keys_in(from, to, each),
            None => Ok(()),
        }
    }

    /// The stored value of one key.
    pub fn get(&self, topology: &str, state: &str, key: &[Value]) -> Result<Option<Stored>, StoreError> {
        let txn = self.db.begin_read()?;
        let name = state_table(topology, state);
        let table = self.open_state(&txn, topology, state, &name)?;
        table.get(&keys::encode(key.iter().map(Value::as_ref)))
    }

    fn open_state(
        &self,
        txn: &redb::ReadTransaction,
        topology: &str,
        state: &str,
        name: &str,
    ) -> Result<ReadTable, StoreError> {
        if let Some(table) = ReadTable::open(txn, name)? {
            return Ok(table);
        }
        let present = self.topologies()?;
        if !present.iter().any(|t| t == topology) {
            return Err(StateError::NoTopology { topology: topology.to_owned(), present }.into());
        }
        let present = self.states(topology)?;
        Err(StateError::NoState { topology: topology.to_owned(), state: state.to_owned(), present }.into())
    }

    /// The redb database itself, for what a host keeps beside its
    /// topologies in the same file (a server's deployments).
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Deletes everything stored for `topology` (its states, their kinds,
    /// its progress and recorded batches) in `txn`.
    pub fn drop_topology(txn: &redb::WriteTransaction, topology: &str) -> Result<(), StoreError> {
        let prefixes = [format!("state/{topology}/"), others_prefix(topology)];
        let meta = [meta_table(topology), batches_table(topology), kinds_table(topology)];
        let doomed: Vec<_> = txn
            .list_tables()?
            .filter(|t| prefixes.iter().any(|p| t.name().starts_with(p)) || meta.iter().any(|m| m == t.name()))
            .collect();
        for table in doomed {
            txn.delete_table(table)?;
        }
        Ok(())
    }

    /// Names of the states stored for `topology`.
    pub fn states(&self, topology: &str) -> Result<Vec<String>, StoreError> {
        let txn = self.db.begin_read()?;
        let prefix = format!("state/{topology}/");
        Ok(txn.list_tables()?.filter_map(|t| t.name().strip_prefix(&prefix).map(str::to_owned)).collect())
    }

    /// Names of the topologies this data dir holds anything of (state,
    /// progress or a recorded batch), sorted.
    pub fn topologies(&self) -> Result<Vec<String>, StoreError> {
        let txn = self.db.begin_read()?;
        let mut names: Vec<String> = txn
            .list_tables()?
            .filter_map(|t| {
                let name = t.name();
                let rest = name.strip_prefix("state/").or_else(|| name.strip_prefix("meta/"))?;
                Some(rest.split('/').next().unwrap_or(rest).to_owned())
            })
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }
}

/// Records that `state` of `topology` holds values of `kind`, in its first
/// commit; a commit of another kind is refused.
fn record_kind(
    kinds: &mut redb::Table<'_, &'static str, &'static str>,
    topology: &str,
    state: &str,
    kind: StateKind,
) -> Result<(), StoreError> {
    let recorded = kinds.get(state)?.map(|k| parse_kind(topology, state, k.value())).transpose()?;
    if kind_to_record(topology, state, recorded, kind)? {
        kinds.insert(state, kind_name(kind))?;
    }
    Ok(())
}

/// Whether a commit writing `kind` to `state` records its kind (its first
/// commit does); a commit of another kind than the `recorded` one is refused.
pub(crate) fn kind_to_record(
    topology: &str,
    state: &str,
    recorded: Option<StateKind>,
    kind: StateKind,
) -> Result<bool, StateError> {
    match recorded {
        None => Ok(true),
        Some(stored) if stored != kind => Err(StateError::KindChanged {
            topology: topology.to_owned(),
            state: state.to_owned(),
            stored,
            declared: kind,
        }),
        Some(_) => Ok(false),
    }
}

impl CommitLog for Db {
    fn progress(&self, topology: &str) -> Result<Progress, StoreError> {
        Db::progress(self, topology)
    }

    fn record_batch(&self, topology: &str, txid: u64, record: &BatchRecord) -> Result<(), StoreError> {
        Db::record_batch(self, topology, txid, record)
    }
}

impl Store for Db {
    fn snapshot(&self) -> Result<Box<dyn Snapshot + '_>, StoreError> {
        Ok(Box::new(self.begin_read()?))
    }

    fn commit_group(&self, group: &[BatchCommit<'_>]) -> Result<usize, StoreError> {
        self.commit_group_in_redb(group, None)
    }

    fn commit_group_telling(&self, group: &[BatchCommit<'_>], written: &mut Written<'_>) -> Result<usize, StoreError> {
        self.commit_group_in_redb(group, Some(written))
    }

    fn remove_others(&self, topology: &str, table: &str, keys: &[Vec<u8>]) -> Result<(), StoreError> {
        self.remove_others_with(topology, table, keys, Durability::Immediate)
    }

    fn remove_others_lazily(&self, topology: &str, table: &str, keys: &[Vec<u8>]) -> Result<(), StoreError> {
        self.remove_others_with(topology, table, keys, Durability::None)
    }
}

impl Db {
    fn remove_others_with(
        &self,
        topology: &str,
        table: &str,
        keys: &[Vec<u8>],
        durability: Durability,
    ) -> Result<(), StoreError> {
        let name = format!("{}{table}", others_prefix(topology));
        let mut txn = self.db.begin_write()?;
        txn.set_durability(durability)?;
        {
            let mut table = txn.open_table(others_def(&name))?;
            for key in keys {
                table.remove(key.as_slice())?;
            }
        }
        txn.commit().with_context(|| format!("removing records of {name}"))?;
        Ok(())
    }
}

impl StateReader for ReadTable {
    fn get(&self, key: &[u8]) -> Result<Option<Stored>, StoreError> {
        ReadTable::get(self, key)
    }

    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<(Vec<u8>, Stored)>, StoreError> {
        ReadTable::range(self, from, to)
    }

    fn each_in(&self, from: &[u8], to: &[u8], each: &mut EachRecord<'_>) -> Result<(), StoreError> {
        ReadTable::each_in(self, from, to, each)
    }
}

/// Table `def` as `txn` reads it; `None` when nothing has written it yet
/// (redb makes a table at its first write).
pub fn table_if_written<K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: &redb::ReadTransaction,
    def: TableDefinition<K, V>,
) -> Result<Option<redb::ReadOnlyTable<K, V>>, redb::TableError> {
    match txn.open_table(def) {
        Ok(table) => Ok(Some(table)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

impl Snapshot for redb::ReadTransaction {
    fn state(&self, topology: &str, state: &str) -> Result<Option<Box<dyn StateReader>>, StoreError> {
        let table = ReadTable::open(self, &state_table(topology, state))?;
        Ok(table.map(|table| Box::new(table) as Box<dyn StateReader>))
    }

    fn others(&self, topology: &str, table: &str) -> Result<OtherEntries, StoreError> {
        let name = format!("{}{table}", others_prefix(topology));
        let Some(table) = table_if_written(self, others_def(&name))? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (key, value) = entry?;
            out.push((key.value().to_vec(), value.value().to_vec()));
        }
        Ok(out)
    }
}

fn parse_kind(topology: &str, state: &str, name: &str) -> Result<StateKind, StateError> {
    rules::kind_named(name).ok_or_else(|| {
        let name = serde_json::to_string(name).unwrap_or_default();
        StateError::Malformed(format!("topology {topology}: state {state} is recorded with an unknown kind {name}"))
    })
}

#[cfg(test)]
mod tests;
