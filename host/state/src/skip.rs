//! The way past a recorded batch that can never commit (a message the
//! guest, rightly, refuses): the batch commits with nothing written, its
//! spout metadata kept so that the next batch follows it, and the skip is
//! recorded with the commit, for good.

use super::store::{BatchCommit, OtherRecords, Store};
use super::{Db, StateError, StoreError};

/// The table of a topology's other records that keeps its skipped batches.
const SKIPPED: &str = "skipped";

/// A batch skipped: its txid and why, as the user gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The batch.
    pub txid: u64,
    /// The reason given, with when.
    pub note: String,
}

impl Db {
    /// Commits recorded batch `txid` of `topology`, the one after the last
    /// committed, with nothing written to its states or sinks, and records
    /// the skip and `note` in the same write. Refused, naming why, for any
    /// other batch.
    pub fn skip_batch(&self, topology: &str, txid: u64, note: &str) -> Result<(), StoreError> {
        let progress = self.progress(topology)?;
        let next = progress.last_committed + 1;
        let refuse = |why: String| StoreError::from(StateError::Malformed(format!("topology {topology}: {why}")));
        if txid != next {
            return Err(refuse(format!(
                "cannot skip txid {txid}: the last committed txid is {}, and only the next one ({next}) may be skipped",
                progress.last_committed
            )));
        }
        let Some((_, record)) = progress.batches.iter().find(|(t, _)| *t == txid) else {
            return Err(refuse(format!("txid {txid} is not recorded: there is no batch to skip (it never ran)")));
        };
        let others = [OtherRecords {
            table: SKIPPED.to_owned(),
            entries: vec![(txid.to_be_bytes().to_vec(), note.as_bytes().to_vec())],
        }];
        self.commit_group(&[BatchCommit { topology, txid, record, writes: &[], others: &others }])?;
        Ok(())
    }

    /// The batches of `topology` skipped so far, in txid order.
    pub fn skipped(&self, topology: &str) -> Result<Vec<Skipped>, StoreError> {
        let entries = self.snapshot()?.others(topology, SKIPPED)?;
        Ok(entries
            .into_iter()
            .filter_map(|(key, note)| {
                let txid = u64::from_be_bytes(key.try_into().ok()?);
                Some(Skipped { txid, note: String::from_utf8_lossy(&note).into_owned() })
            })
            .collect())
    }
}
