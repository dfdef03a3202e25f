//! All state a host keeps, in one redb database per data directory.
//!
//! Tables, per topology:
//! - `state/<topology>/<state>`: key (order-preserving, see [`keys`]) to a
//!   [`rules::Stored`] value;
//! - `meta/<topology>`: the progress record (last committed txid);
//! - `meta/<topology>/batches`: per txid, the attempt and the spout's
//!   metadata, written before the batch is processed so that a replay emits
//!   exactly the same tuples; pruned below the last committed txid.
//!
//! A batch's state changes and its progress record commit in one durable
//! write transaction.

pub mod budget;
pub mod compact;
pub mod handle;
pub mod keyed;
pub mod keys;
pub mod rules;
pub mod table;
pub mod view;

use anyhow::{Context, Result, bail};
use redb::{Database, DatabaseError, Durability, ReadableDatabase, ReadableTable, TableDefinition, TableHandle};
use rules::Stored;
use std::path::{Path, PathBuf};
use table::{ReadTable, WriteTable};
use view::StateWrites;
use weir_sdk::codec::Value;

const DB_FILE: &str = "weir.redb";
const LAST_COMMITTED: &str = "last-committed";

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
    /// The spout's metadata for the batch (opaque to the store).
    pub spout: Vec<u8>,
}

impl BatchRecord {
    fn encode(&self) -> Vec<u8> {
        let mut out = self.attempt.to_le_bytes().to_vec();
        out.extend_from_slice(&self.spout);
        out
    }

    fn decode(bytes: &[u8]) -> Result<BatchRecord> {
        let Some((attempt, spout)) = bytes.split_first_chunk::<4>() else { bail!("truncated batch record") };
        Ok(BatchRecord { attempt: u32::from_le_bytes(*attempt), spout: spout.to_vec() })
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

fn deployments_def() -> TableDefinition<'static, &'static str, &'static [u8]> {
    TableDefinition::new("serve/deployments")
}

fn meta_def(name: &str) -> TableDefinition<'_, &'static str, u64> {
    TableDefinition::new(name)
}

fn batches_def(name: &str) -> TableDefinition<'_, u64, &'static [u8]> {
    TableDefinition::new(name)
}

impl Db {
    /// Opens (creating if needed) the database of `data_dir`. Fails with a
    /// clear message when another process has it open.
    pub fn open(data_dir: &Path) -> Result<Db> {
        std::fs::create_dir_all(data_dir).with_context(|| format!("cannot create data dir {}", data_dir.display()))?;
        let path = data_dir.join(DB_FILE);
        let db = Database::create(&path).map_err(|e| match e {
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
        let txn = self.db.begin_write()?;
        let meta_name = meta_table(topology);
        let mut written = 0;
        {
            let mut meta = txn.open_table(meta_def(&meta_name))?;
            let last = meta.get(LAST_COMMITTED)?.map_or(0, |v| v.value());
            if txid != last + 1 {
                bail!("cannot commit txid {txid} of topology {topology}: the last committed txid is {last}");
            }
            let mut encoded = Vec::with_capacity(32);
            for write in writes {
                let in_state = || format!("state {}", write.state);
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
            meta.insert(LAST_COMMITTED, txid)?;
            let batches_name = batches_table(topology);
            let mut batches = txn.open_table(batches_def(&batches_name))?;
            batches.insert(txid, record.encode().as_slice())?;
            batches.retain_in(..txid, |_, _| false)?;
        }
        txn.commit().with_context(|| format!("committing txid {txid} of topology {topology}"))?;
        Ok(written)
    }

    /// Every key of a state with its stored value, sorted by key.
    pub fn scan(&self, topology: &str, state: &str) -> Result<Vec<(Vec<Value>, Stored)>> {
        let txn = self.db.begin_read()?;
        let name = state_table(topology, state);
        let table = self.open_state(&txn, topology, state, &name)?;
        let entries = table.entries()?;
        entries.into_iter().map(|(key, stored)| Ok((keys::decode(&key)?, stored))).collect()
    }

    /// The stored value of one key.
    pub fn get(&self, topology: &str, state: &str, key: &[Value]) -> Result<Option<Stored>> {
        let txn = self.db.begin_read()?;
        let name = state_table(topology, state);
        let table = self.open_state(&txn, topology, state, &name)?;
        table.get(&keys::encode(key.iter().map(Value::as_ref)))
    }

    fn open_state(&self, txn: &redb::ReadTransaction, topology: &str, state: &str, name: &str) -> Result<ReadTable> {
        match ReadTable::open(txn, name)? {
            Some(table) => Ok(table),
            None => {
                let known = self.states(topology)?;
                bail!("topology {topology} has no state {state} in {} (states: {known:?})", self.path.display())
            }
        }
    }

    /// Saves a served topology's deployment record, durably.
    pub fn save_deployment(&self, name: &str, record: &[u8]) -> Result<()> {
        let txn = self.db.begin_write()?;
        txn.open_table(deployments_def())?.insert(name, record)?;
        txn.commit()?;
        Ok(())
    }

    /// Every served topology's deployment record.
    pub fn deployments(&self) -> Result<Vec<(String, Vec<u8>)>> {
        let txn = self.db.begin_read()?;
        let table = match txn.open_table(deployments_def()) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (name, record) = entry?;
            out.push((name.value().to_owned(), record.value().to_vec()));
        }
        Ok(out)
    }

    /// Forgets a served topology; with `drop_state`, its state and progress
    /// go too, in the same transaction.
    pub fn forget_deployment(&self, name: &str, drop_state: bool) -> Result<()> {
        let txn = self.db.begin_write()?;
        txn.open_table(deployments_def())?.remove(name)?;
        if drop_state {
            let states = format!("state/{name}/");
            let (meta, batches) = (meta_table(name), batches_table(name));
            let doomed: Vec<_> = txn
                .list_tables()?
                .filter(|t| t.name().starts_with(&states) || t.name() == meta || t.name() == batches)
                .collect();
            for table in doomed {
                txn.delete_table(table)?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Names of the states stored for `topology`.
    pub fn states(&self, topology: &str) -> Result<Vec<String>> {
        let txn = self.db.begin_read()?;
        let prefix = format!("state/{topology}/");
        Ok(txn.list_tables()?.filter_map(|t| t.name().strip_prefix(&prefix).map(str::to_owned)).collect())
    }
}

pub(crate) fn describe_key(key: &[u8]) -> String {
    match keys::decode(key) {
        Ok(values) => format!("{values:?}"),
        Err(_) => format!("{key:?}"),
    }
}
