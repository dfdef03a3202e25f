//! The deployments a server runs, recorded in the data dir's database (the
//! table `serve/deployments`: a deployment's name to its record, as JSON)
//! so that a restarted server resumes them. The state store keeps the
//! topologies' state and progress; this table only says what runs.

use anyhow::{Context, Result};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use weir_state::Db;

/// What is remembered of a deployment across restarts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeploymentRecord {
    /// The bundle's file in the data dir's `bundles/`.
    pub bundle: String,
    /// The bundle's topology it runs; absent in records written before
    /// deployments had names of their own, whose name is their topology's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<String>,
    /// The input file or directory of the topology's spout, if it reads one.
    pub input: Option<PathBuf>,
    /// Whether it should be running.
    pub running: bool,
    /// When it was deployed, in milliseconds since the Unix epoch; absent
    /// in records written before deploy times were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_unix_ms: Option<u64>,
    /// Its last upgrades, oldest first, at most [`UPGRADES_KEPT`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upgrades: Vec<Upgrade>,
}

/// Upgrades a deployment's record keeps: the latest.
pub const UPGRADES_KEPT: usize = 16;

/// One upgrade of a deployment: when, and from which bundle to which.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Upgrade {
    pub at_unix_ms: u64,
    /// The bundles' files in the data dir's `bundles/` (`<sha256>.weir`).
    pub from: String,
    pub to: String,
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

const DEPLOYMENTS: TableDefinition<'static, &'static str, &'static [u8]> = TableDefinition::new("serve/deployments");

/// The deployment records of one data dir.
pub struct Registry {
    db: Arc<Db>,
}

impl Registry {
    /// The records kept in `db`.
    pub fn new(db: Arc<Db>) -> Registry {
        Registry { db }
    }

    /// Saves deployment `name`'s record, durably.
    pub fn save(&self, name: &str, record: &DeploymentRecord) -> Result<()> {
        let encoded = serde_json::to_vec(record).context("encoding the deployment")?;
        let txn = self.db.database().begin_write()?;
        txn.open_table(DEPLOYMENTS)?.insert(name, encoded.as_slice())?;
        txn.commit()?;
        Ok(())
    }

    /// Every deployment's name and record.
    pub fn list(&self) -> Result<Vec<(String, DeploymentRecord)>> {
        let txn = self.db.database().begin_read()?;
        let Some(table) = weir_state::table_if_written(&txn, DEPLOYMENTS)? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (name, record) = entry?;
            let name = name.value().to_owned();
            let record = serde_json::from_slice(record.value())
                .with_context(|| format!("the deployment record of {name} cannot be read"))?;
            out.push((name, record));
        }
        Ok(out)
    }

    /// Forgets deployment `name`; with `drop_state`, its state and progress
    /// go too, in the same transaction.
    pub fn forget(&self, name: &str, drop_state: bool) -> Result<()> {
        let txn = self.db.database().begin_write()?;
        txn.open_table(DEPLOYMENTS)?.remove(name)?;
        if drop_state {
            Db::drop_topology(&txn, name)?;
        }
        txn.commit()?;
        Ok(())
    }
}
