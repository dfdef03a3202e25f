//! The store a topology placed whole on one host commits through: the
//! host's own redb, each commit group's effect also published to the
//! topology's changelog ([`WholeLog`]) before the commit returns, so that
//! what the engine goes on from (the sink's publish of its outbox above
//! all) is never more than the changelog holds.
//!
//! A publish that fails (the server out of reach past its timeout, or the
//! log fenced by a host that took the topology over) leaves this copy
//! ahead of the changelog: the store refuses every later write and asks the
//! run to stop, and the host puts its copy back from the changelog before
//! it runs the topology again, if it still owns it.

use super::whole_log::{Op, WholeLog};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use weir_config::sync::Locked;
use weir_state::rules::Stored;
use weir_state::store::{BatchCommit, CommitLog, Snapshot, Store, Written};
use weir_state::{BatchRecord, Db, Progress, StoreError};

/// A host's redb, every change to one topology also in its changelog.
pub struct ReplicatedStore {
    db: Arc<Db>,
    topology: String,
    log: Mutex<WholeLog>,
    runtime: tokio::runtime::Handle,
    /// Txids between two snapshots of the copy in the changelog.
    snapshot_every: u64,
    /// Why the changelog fell behind this copy, once it did.
    failed: Mutex<Option<String>>,
    /// Set when the changelog fell behind: the run stops.
    stop: Arc<AtomicBool>,
}

fn backend(message: String) -> StoreError {
    StoreError::Backend(anyhow::anyhow!(message))
}

impl ReplicatedStore {
    /// The store of `topology` over `db`, publishing to `log` (fenced and
    /// read already) from `runtime`; sets `stop` once it cannot go on.
    pub fn new(
        db: Arc<Db>,
        topology: &str,
        log: WholeLog,
        runtime: tokio::runtime::Handle,
        snapshot_every: u64,
        stop: Arc<AtomicBool>,
    ) -> ReplicatedStore {
        ReplicatedStore {
            db,
            topology: topology.to_owned(),
            log: Mutex::new(log),
            runtime,
            snapshot_every: snapshot_every.max(1),
            failed: Mutex::new(None),
            stop,
        }
    }

    /// Why the changelog fell behind this copy, if it did.
    pub fn failure(&self) -> Option<String> {
        self.failed.locked().clone()
    }

    fn refuse_when_failed(&self) -> Result<(), StoreError> {
        match self.failure() {
            Some(why) => {
                Err(backend(format!("topology {}: the changelog fell behind this host: {why}", self.topology)))
            }
            None => Ok(()),
        }
    }

    /// Runs `publish` against the log; a failure stops the store for good.
    fn publish(
        &self,
        what: &str,
        publish: impl AsyncFnOnce(&mut WholeLog) -> anyhow::Result<()>,
    ) -> Result<(), StoreError> {
        let mut log = self.log.locked();
        match self.runtime.block_on(publish(&mut log)) {
            Ok(()) => Ok(()),
            Err(e) => {
                let why = format!("{what}: {e:#}");
                tracing::warn!("topology {}: {why}; it stops on this host", self.topology);
                *self.failed.locked() = Some(why.clone());
                self.stop.store(true, Ordering::SeqCst);
                Err(backend(why))
            }
        }
    }
}

impl CommitLog for ReplicatedStore {
    fn progress(&self, topology: &str) -> Result<Progress, StoreError> {
        self.db.progress(topology)
    }

    // Recorded here only: a batch the changelog never saw committed is cut
    // afresh by the next owner.
    fn record_batch(&self, topology: &str, txid: u64, record: &BatchRecord) -> Result<(), StoreError> {
        self.db.record_batch(topology, txid, record)
    }
}

impl Store for ReplicatedStore {
    fn snapshot(&self) -> Result<Box<dyn Snapshot + '_>, StoreError> {
        self.db.snapshot()
    }

    fn commit_group(&self, group: &[BatchCommit<'_>]) -> Result<usize, StoreError> {
        self.commit_group_telling(group, &mut |_, _, _| {})
    }

    fn commit_group_telling(&self, group: &[BatchCommit<'_>], written: &mut Written<'_>) -> Result<usize, StoreError> {
        self.refuse_when_failed()?;
        let (Some(first), Some(last)) = (group.first(), group.last()) else { return Ok(0) };
        if first.topology != self.topology || group.iter().any(|b| b.topology != self.topology) {
            return Err(StoreError::Refused(format!("this store commits topology {} only", self.topology)));
        }
        let mut ops = Vec::new();
        let count = self.db.commit_group_telling(group, &mut |state, key, stored| {
            ops.push(Op::Put { state: state.to_owned(), key: key.to_vec(), value: stored.map(Stored::encode) });
            written(state, key, stored);
        })?;
        // Ranges are not told: each goes as itself, then the keys it holds
        // now (written after it by the group), read back as committed.
        let snapshot = self.db.snapshot()?;
        for writes in group.iter().flat_map(|b| b.writes) {
            for (from, to) in &writes.removed_ranges {
                ops.push(Op::Range { state: writes.state.clone(), from: from.clone(), to: to.clone() });
                let Some(reader) = snapshot.state(&self.topology, &writes.state)? else { continue };
                for (key, stored) in reader.range(from, to)? {
                    written(&writes.state, &key, Some(&stored));
                    ops.push(Op::Put { state: writes.state.clone(), key, value: Some(stored.encode()) });
                }
            }
        }
        drop(snapshot);
        for other in group.iter().flat_map(|b| b.others) {
            for (key, value) in &other.entries {
                ops.push(Op::Other { table: other.table.clone(), key: key.clone(), value: Some(value.clone()) });
            }
        }
        ops.push(Op::Committed { txid: last.txid, record: last.record.encode() });
        let txid = last.txid;
        self.publish(&format!("txid {txid} was not taken by the changelog"), async |log| log.delta(txid, ops).await)?;
        // A snapshot when the group passes a multiple of `snapshot_every`.
        if (first.txid - 1) / self.snapshot_every != txid / self.snapshot_every {
            let image = self.db.image(&self.topology)?;
            self.publish(&format!("the snapshot at txid {txid} was not taken"), async |log| {
                log.snapshot(txid, &image).await
            })?;
        }
        Ok(count)
    }

    fn remove_others(&self, topology: &str, table: &str, keys: &[Vec<u8>]) -> Result<(), StoreError> {
        self.refuse_when_failed()?;
        self.db.remove_others(topology, table, keys)?;
        let ops: Vec<Op> =
            keys.iter().map(|key| Op::Other { table: table.to_owned(), key: key.clone(), value: None }).collect();
        let txid = self.db.progress(topology)?.last_committed;
        self.publish(&format!("removals from table {table} were not taken by the changelog"), async |log| {
            log.delta(txid, ops).await
        })
    }
}
