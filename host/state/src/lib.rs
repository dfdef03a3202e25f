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
pub mod handle;
pub mod keyed;
pub mod keys;
pub mod memory;
pub mod merge;
pub mod pending;
pub mod restore;
pub mod rules;
pub mod store;
pub mod table;
pub mod view;

use anyhow::{Context, Result, bail};
use redb::{Database, DatabaseError, Durability, ReadableDatabase, ReadableTable, TableDefinition, TableHandle};
use rules::{Stored, kind_name};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use store::{BatchCommit, CommitLog, Snapshot, StateReader, Store, Written};
use table::ReadTable;
use view::StateWrites;
use weir_sdk::codec::Value;
use weir_sdk::topology::{StateDef, StateKind};

const DB_FILE: &str = "weir.redb";
const LAST_COMMITTED: &str = "last-committed";

/// What is wrong with a topology's state such that replaying the batch
/// cannot cure it: the same records meet the same batch again. A batch
/// failing with one halts its topology at once, and a topology whose
/// states are of another kind is refused when it loads.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateError {
    /// The topology declares a state with another kind than its stored
    /// values have.
    KindChanged {
        /// The topology.
        topology: String,
        /// The state.
        state: String,
        /// The kind of what is stored.
        stored: StateKind,
        /// The kind the topology declares.
        declared: StateKind,
    },
    /// A stored value is of another kind than its state's.
    ValueOfAnotherKind {
        /// The kind of the value.
        stored: StateKind,
        /// The kind of the state.
        declared: StateKind,
    },
    /// A stored value was written by a later batch than the one committing.
    Ahead {
        /// The txid stored with the value.
        stored: u64,
        /// The batch's txid.
        txid: u64,
    },
    /// The batch is not the one after the last committed.
    NotNext {
        /// The batch's txid.
        txid: u64,
        /// The last committed txid.
        last: u64,
    },
    /// A stored record cannot be read, or a state cannot hold a record.
    Malformed(String),
    /// A partial cannot be combined with the stored value.
    Combine(String),
    /// The topology has no such state.
    NoState {
        /// The topology.
        topology: String,
        /// The state asked for.
        state: String,
        /// The states it has.
        present: Vec<String>,
    },
    /// The data dir holds no such topology.
    NoTopology {
        /// The topology asked for.
        topology: String,
        /// The topologies it holds.
        present: Vec<String>,
    },
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |names: &[String]| if names.is_empty() { "none".to_owned() } else { names.join(", ") };
        match self {
            StateError::KindChanged { topology, state, stored, declared } => write!(
                f,
                "topology {topology}: state {state} holds {} values, but the topology declares it {}: a state \
                 keeps the kind it was first committed with (run the topology under another name or on another \
                 data dir)",
                kind_name(*stored),
                kind_name(*declared)
            ),
            StateError::ValueOfAnotherKind { stored, declared } => write!(
                f,
                "the stored value is {} state, the topology declares {}",
                kind_name(*stored),
                kind_name(*declared)
            ),
            StateError::Ahead { stored, txid } => write!(
                f,
                "stored txid {stored} is ahead of batch txid {txid}: this state was written by a later batch than \
                 the one being committed, so applying it could count twice"
            ),
            StateError::NotNext { txid, last } => {
                write!(f, "cannot commit txid {txid}: the last committed txid is {last}")
            }
            StateError::Malformed(what) | StateError::Combine(what) => f.write_str(what),
            StateError::NoState { topology, state, present } => {
                write!(f, "topology {topology} has no state {state} (its states: {})", list(present))
            }
            StateError::NoTopology { topology, present } => {
                write!(f, "this data dir holds no topology {topology} (it holds: {})", list(present))
            }
        }
    }
}

impl std::error::Error for StateError {}

/// Whether replaying a batch that failed with `error` cannot succeed:
/// somewhere in its chain is a [`StateError`].
pub fn retry_cannot_help(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.is::<StateError>())
}

/// The host's database.
pub struct Db {
    db: Database,
    path: PathBuf,
}

/// What the host recorded about a batch before processing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchRecord {
    /// The attempt being processed.
    pub attempt: u32,
    /// When the batch was emitted, in milliseconds since the Unix epoch: the
    /// time its processing-time windows go by, the same on a replay.
    pub time_ms: u64,
    /// The spout's metadata for the batch (opaque to the store).
    pub spout: Vec<u8>,
}

impl BatchRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.attempt.to_le_bytes().to_vec();
        out.extend_from_slice(&self.time_ms.to_le_bytes());
        out.extend_from_slice(&self.spout);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<BatchRecord> {
        let Some((attempt, rest)) = bytes.split_first_chunk::<4>() else { bail!("truncated batch record") };
        let Some((time_ms, spout)) = rest.split_first_chunk::<8>() else { bail!("truncated batch record") };
        let (attempt, time_ms) = (u32::from_le_bytes(*attempt), u64::from_le_bytes(*time_ms));
        Ok(BatchRecord { attempt, time_ms, spout: spout.to_vec() })
    }
}

/// Where a topology stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Last committed txid; 0 before the first commit.
    pub last_committed: u64,
    /// Recorded batches from the last committed one on, in txid order.
    pub batches: Vec<(u64, BatchRecord)>,
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
    pub fn open(data_dir: &Path) -> Result<Db> {
        Db::open_caching(data_dir, weir_config::DEFAULT_MAX_DB_CACHE_MIB << 20)
    }

    /// [`Db::open`], keeping at most `cache_bytes` of the database's pages
    /// in memory.
    pub fn open_caching(data_dir: &Path, cache_bytes: u64) -> Result<Db> {
        std::fs::create_dir_all(data_dir).with_context(|| format!("cannot create data dir {}", data_dir.display()))?;
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
        Ok(Db { db, path })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The topology's last committed txid and the batches recorded since.
    pub fn progress(&self, topology: &str) -> Result<Progress> {
        let txn = self.db.begin_read()?;
        let meta_name = meta_table(topology);
        let last_committed = match txn.open_table(meta_def(&meta_name)) {
            Ok(table) => table.get(LAST_COMMITTED)?.map_or(0, |v| v.value()),
            Err(redb::TableError::TableDoesNotExist(_)) => 0,
            Err(e) => return Err(e.into()),
        };
        let batches_name = batches_table(topology);
        let mut batches = Vec::new();
        match txn.open_table(batches_def(&batches_name)) {
            Ok(table) => {
                for entry in table.range(last_committed..)? {
                    let (txid, record) = entry?;
                    batches.push((txid.value(), BatchRecord::decode(record.value())?));
                }
            }
            Err(redb::TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(Progress { last_committed, batches })
    }

    /// Records a batch's attempt and spout metadata before it is processed.
    /// Not flushed on its own: the batch's durable commit flushes it, and a
    /// batch whose commit never happened may be emitted afresh.
    pub fn record_batch(&self, topology: &str, txid: u64, record: &BatchRecord) -> Result<()> {
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
    pub fn begin_read(&self) -> Result<redb::ReadTransaction> {
        Ok(self.db.begin_read()?)
    }

    /// Commits batch `txid`: its state writes and the progress record (the
    /// last committed txid and the batch's record), in one durable write
    /// transaction, keys in order.
    pub fn commit(&self, topology: &str, txid: u64, record: &BatchRecord, writes: &[StateWrites]) -> Result<usize> {
        self.commit_batch(&BatchCommit { topology, txid, record, writes, others: &[] })
    }

    /// Refuses the states `declared` for `topology` when one has another kind
    /// than the state's stored values have: its commits would meet values
    /// they cannot build on. Checked when a topology loads, before anything
    /// runs; the error is a [`StateError::KindChanged`].
    pub fn check_state_kinds(&self, topology: &str, declared: &BTreeMap<String, StateDef>) -> Result<()> {
        let txn = self.db.begin_read()?;
        let kinds_name = kinds_table(topology);
        let kinds = match txn.open_table(kinds_def(&kinds_name)) {
            Ok(table) => Some(table),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(e.into()),
        };
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
                bail!(StateError::KindChanged {
                    topology: topology.to_owned(),
                    state: state.clone(),
                    stored,
                    declared: def.kind
                });
            }
        }
        Ok(())
    }

    /// Every key of a state with its stored value, sorted by key.
    pub fn scan(&self, topology: &str, state: &str) -> Result<Entries> {
        let txn = self.db.begin_read()?;
        let name = state_table(topology, state);
        let table = self.open_state(&txn, topology, state, &name)?;
        let entries = table.entries()?;
        entries.into_iter().map(|(key, stored)| Ok((keys::decode(&key)?, stored))).collect()
    }

    /// At most `limit` keys of a state after `after` (from its first,
    /// without one) with their stored values, sorted by key.
    pub fn page(&self, topology: &str, state: &str, after: Option<&[Value]>, limit: usize) -> Result<Entries> {
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
    ) -> Result<(Entries, bool)> {
        let txn = self.db.begin_read()?;
        let name = state_table(topology, state);
        let table = self.open_state(&txn, topology, state, &name)?;
        let after = after.map(|key| keys::encode(key.iter().map(Value::as_ref)));
        let read = table.page_within(after.as_deref(), limit, max_bytes)?;
        let entries: Result<Vec<_>> =
            read.entries.into_iter().map(|(key, stored)| Ok((keys::decode(&key)?, stored))).collect();
        Ok((entries?, read.cut))
    }

    /// The stored value of one key.
    pub fn get(&self, topology: &str, state: &str, key: &[Value]) -> Result<Option<Stored>> {
        let txn = self.db.begin_read()?;
        let name = state_table(topology, state);
        let table = self.open_state(&txn, topology, state, &name)?;
        table.get(&keys::encode(key.iter().map(Value::as_ref)))
    }

    fn open_state(&self, txn: &redb::ReadTransaction, topology: &str, state: &str, name: &str) -> Result<ReadTable> {
        if let Some(table) = ReadTable::open(txn, name)? {
            return Ok(table);
        }
        let present = self.topologies()?;
        if !present.iter().any(|t| t == topology) {
            bail!(StateError::NoTopology { topology: topology.to_owned(), present });
        }
        let present = self.states(topology)?;
        bail!(StateError::NoState { topology: topology.to_owned(), state: state.to_owned(), present })
    }

    /// The redb database itself, for what a host keeps beside its
    /// topologies in the same file (a server's deployments).
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Deletes everything stored for `topology` (its states, their kinds,
    /// its progress and recorded batches) in `txn`.
    pub fn drop_topology(txn: &redb::WriteTransaction, topology: &str) -> Result<()> {
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
    pub fn states(&self, topology: &str) -> Result<Vec<String>> {
        let txn = self.db.begin_read()?;
        let prefix = format!("state/{topology}/");
        Ok(txn.list_tables()?.filter_map(|t| t.name().strip_prefix(&prefix).map(str::to_owned)).collect())
    }

    /// Names of the topologies this data dir holds anything of (state,
    /// progress or a recorded batch), sorted.
    pub fn topologies(&self) -> Result<Vec<String>> {
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
) -> Result<()> {
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
) -> Result<bool> {
    match recorded {
        None => Ok(true),
        Some(stored) if stored != kind => bail!(StateError::KindChanged {
            topology: topology.to_owned(),
            state: state.to_owned(),
            stored,
            declared: kind
        }),
        Some(_) => Ok(false),
    }
}

impl CommitLog for Db {
    fn progress(&self, topology: &str) -> Result<Progress> {
        Db::progress(self, topology)
    }

    fn record_batch(&self, topology: &str, txid: u64, record: &BatchRecord) -> Result<()> {
        Db::record_batch(self, topology, txid, record)
    }
}

impl Store for Db {
    fn snapshot(&self) -> Result<Box<dyn Snapshot + '_>> {
        Ok(Box::new(self.begin_read()?))
    }

    fn commit_group(&self, group: &[BatchCommit<'_>]) -> Result<usize> {
        self.commit_group_in_redb(group, None)
    }

    fn commit_group_telling(&self, group: &[BatchCommit<'_>], written: &mut Written<'_>) -> Result<usize> {
        self.commit_group_in_redb(group, Some(written))
    }

    fn remove_others(&self, topology: &str, table: &str, keys: &[Vec<u8>]) -> Result<()> {
        let name = format!("{}{table}", others_prefix(topology));
        let txn = self.db.begin_write()?;
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
    fn get(&self, key: &[u8]) -> Result<Option<Stored>> {
        ReadTable::get(self, key)
    }

    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<(Vec<u8>, Stored)>> {
        ReadTable::range(self, from, to)
    }

    fn each_in(&self, from: &[u8], to: &[u8], each: &mut dyn FnMut(&[u8], Stored) -> Result<()>) -> Result<()> {
        ReadTable::each_in(self, from, to, each)
    }
}

impl Snapshot for redb::ReadTransaction {
    fn state(&self, topology: &str, state: &str) -> Result<Option<Box<dyn StateReader>>> {
        let table = ReadTable::open(self, &state_table(topology, state))?;
        Ok(table.map(|table| Box::new(table) as Box<dyn StateReader>))
    }

    fn others(&self, topology: &str, table: &str) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let name = format!("{}{table}", others_prefix(topology));
        let table = match self.open_table(others_def(&name)) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (key, value) = entry?;
            out.push((key.value().to_vec(), value.value().to_vec()));
        }
        Ok(out)
    }
}

fn parse_kind(topology: &str, state: &str, name: &str) -> Result<StateKind> {
    rules::kind_named(name).ok_or_else(|| {
        let name = serde_json::to_string(name).unwrap_or_default();
        StateError::Malformed(format!("topology {topology}: state {state} is recorded with an unknown kind {name}"))
            .into()
    })
}

/// An encoded key for messages: its values as a JSON array (the bytes
/// themselves, as `{"bytes": ...}`, if they do not decode).
pub(crate) fn describe_key(key: &[u8]) -> String {
    let json = match keys::decode(key) {
        Ok(values) => serde_json::Value::Array(values.iter().map(crate::json::to_json).collect()),
        Err(_) => crate::json::to_json(&Value::Bytes(key.to_vec())),
    };
    json.to_string()
}

#[cfg(test)]
mod tests;
