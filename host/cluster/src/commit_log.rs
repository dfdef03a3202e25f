//! The commit log of a topology run across a cluster, kept in etcd behind
//! the coordinator's [`CommitLog`] seam: each batch's record, written
//! before the batch is processed (as Trident writes a transactional spout's
//! metadata to ZooKeeper), and the commit record, the last committed txid.
//! Only the leader writes either, each write a transaction that holds only
//! while its election key is the one etcd has, and the commit record moves
//! from t-1 to t by compare-and-swap, so that a deposed leader can neither
//! record nor commit anything.

use anyhow::{Context, Result, bail};
use etcd_client::{Client, Compare, CompareOp, DeleteOptions, GetOptions, LeaderKey, Txn, TxnOp, TxnResponse};
use std::sync::Mutex;
use weir_config::sync::Locked;
use weir_state::store::CommitLog;
use weir_state::{BatchRecord, Progress, StateError, StoreError};

/// The commit log of one cluster's topologies, as written by one leader.
pub struct EtcdCommitLog {
    client: Client,
    cluster: String,
    /// The leader's election key; each write compares it.
    leader: LeaderKey,
    /// Runs the client's calls: the coordinator calls from threads of its
    /// own, outside any runtime.
    runtime: tokio::runtime::Handle,
    /// The commit record this log wrote last: its topology, txid and
    /// revision, so that the next commit's compare-and-swap needs no read
    /// first (a record moved by anyone else fails the swap, which reads it).
    last_commit: Mutex<Option<(String, u64, i64)>>,
}

/// Txids in keys: zero-padded, so that etcd's byte order is txid order.
fn padded(txid: u64) -> String {
    format!("{txid:020}")
}

impl EtcdCommitLog {
    pub fn new(client: Client, cluster: &str, leader: LeaderKey, runtime: tokio::runtime::Handle) -> EtcdCommitLog {
        EtcdCommitLog { client, cluster: cluster.to_owned(), leader, runtime, last_commit: Mutex::new(None) }
    }

    fn batches_prefix(&self, topology: &str) -> String {
        format!("/weir/{}/batches/{topology}/", self.cluster)
    }

    fn committed_key(&self, topology: &str) -> String {
        committed_key(&self.cluster, topology)
    }

    fn leading(&self) -> Compare {
        Compare::create_revision(self.leader.key(), CompareOp::Equal, self.leader.rev())
    }

    /// Runs `txn`; fails, naming `what`, when etcd refuses it because this
    /// host no longer leads.
    fn write(&self, txn: Txn, what: &str) -> Result<TxnResponse> {
        let mut client = self.client.clone();
        let done = self.runtime.block_on(client.txn(txn)).with_context(|| format!("{what} in etcd"))?;
        if !done.succeeded() {
            bail!("{what}: this host no longer leads its cluster, so it records nothing");
        }
        Ok(done)
    }

    /// The last committed txid of `topology`, and the commit record's
    /// revision (0: none yet).
    fn last_committed(&self, topology: &str) -> Result<(u64, i64)> {
        let mut client = self.client.clone();
        self.runtime.block_on(commit_record(&mut client, &self.committed_key(topology)))
    }

    /// Records `txid` as `topology`'s last committed batch, if it follows
    /// the commit record, and forgets the records of the batches before it.
    pub fn commit(&self, topology: &str, txid: u64) -> Result<()> {
        let written = self.last_commit.locked().take().filter(|(of, _, _)| of == topology);
        let (last, revision) = match written {
            Some((_, last, revision)) if last + 1 == txid => (last, revision),
            _ => self.last_committed(topology)?,
        };
        if txid != last + 1 {
            return Err(StateError::NotNext { txid, last }.into());
        }
        let key = self.committed_key(topology);
        let prefix = self.batches_prefix(topology);
        let before = format!("{prefix}{}", padded(txid));
        let txn = Txn::new()
            .when([self.leading(), Compare::mod_revision(key.as_str(), CompareOp::Equal, revision)])
            .and_then([
                TxnOp::put(key.as_str(), txid.to_string(), None),
                TxnOp::delete(prefix.as_str(), Some(DeleteOptions::new().with_range(before))),
            ]);
        let done = self.write(txn, &format!("committing txid {txid} of topology {topology}")).map_err(|e| {
            // Another commit came between the read and the write.
            match self.last_committed(topology) {
                Ok((now, _)) if now != last => StateError::NotNext { txid, last: now }.into(),
                _ => e,
            }
        })?;
        // The transaction's revision is the commit record's now.
        if let Some(header) = done.header() {
            *self.last_commit.locked() = Some((topology.to_owned(), txid, header.revision()));
        }
        Ok(())
    }
}

/// The last committed txid of `topology` of `cluster`, as any host reads it.
pub async fn committed(client: &mut Client, cluster: &str, topology: &str) -> Result<u64> {
    Ok(commit_record(client, &committed_key(cluster, topology)).await?.0)
}

fn committed_key(cluster: &str, topology: &str) -> String {
    format!("/weir/{cluster}/committed/{topology}")
}

/// The txid the commit record `key` holds and its revision (0 and 0: none
/// yet).
async fn commit_record(client: &mut Client, key: &str) -> Result<(u64, i64)> {
    let got = client.get(key, None).await.context("reading the commit record")?;
    let Some(kv) = got.kvs().first() else { return Ok((0, 0)) };
    let last = kv.value_str()?.parse().with_context(|| format!("the commit record {key} is not a txid"))?;
    Ok((last, kv.mod_revision()))
}

impl EtcdCommitLog {
    /// [`CommitLog::progress`], read from etcd.
    fn read_progress(&self, topology: &str) -> Result<Progress> {
        let (last_committed, _) = self.last_committed(topology)?;
        let prefix = self.batches_prefix(topology);
        let from = format!("{prefix}{}", padded(last_committed));
        let options = GetOptions::new().with_range(format!("{prefix}~"));
        let mut client = self.client.clone();
        let got = self.runtime.block_on(client.get(from, Some(options))).context("reading the batch records")?;
        let mut batches = Vec::new();
        for kv in got.kvs() {
            let txid: u64 = kv.key_str()?[prefix.len()..].parse().context("a batch record's key is not a txid")?;
            batches.push((txid, BatchRecord::decode(kv.value())?));
        }
        Ok(Progress { last_committed, batches })
    }
}

// etcd's failures, and this host's loss of the lead, are another store's:
// a replay may find etcd back, or another leader may go on.
impl CommitLog for EtcdCommitLog {
    fn progress(&self, topology: &str) -> Result<Progress, StoreError> {
        self.read_progress(topology).map_err(StoreError::Backend)
    }

    fn record_batch(&self, topology: &str, txid: u64, record: &BatchRecord) -> Result<(), StoreError> {
        let key = format!("{}{}", self.batches_prefix(topology), padded(txid));
        let txn = Txn::new().when([self.leading()]).and_then([TxnOp::put(key, record.encode(), None)]);
        self.write(txn, &format!("recording batch {txid} of topology {topology}"))
            .map(drop)
            .map_err(StoreError::Backend)
    }
}
