//! What every spout is to the coordinator: the batches it emits, and
//! what it promises when one is replayed.

use anyhow::Result;
use std::collections::BTreeMap;
use std::time::Duration;
use weir_plan::SpoutKind;
use weir_sdk::codec::{Batch, Buffers};

/// A batch a spout emitted, and the metadata to find it again.
pub struct Emitted {
    /// Spout metadata of the batch (offsets, ranges), opaque to the host.
    pub meta: Vec<u8>,
    /// The batch's tuples.
    pub batch: Batch<'static>,
}

/// The host side of a spout.
pub trait Spout: Send {
    /// What the spout promises on replay.
    fn kind(&self) -> SpoutKind;

    /// Emits batch `txid`, the one after the batch whose metadata is
    /// `previous` (`None`: the first batch). `None` when nothing is left now.
    fn emit(&mut self, txid: u64, attempt: u32, previous: Option<&[u8]>) -> Result<Option<Emitted>>;

    /// For transactional spouts: exactly the batch recorded with `meta`.
    fn replay(&mut self, txid: u64, attempt: u32, meta: &[u8]) -> Result<Batch<'static>>;

    /// How far the committed batches are behind the source, where the spout
    /// knows: bytes of input for the file spouts, integers for the
    /// generator. `committed` is the last committed batch's metadata.
    fn lag(&mut self, committed: Option<&[u8]>) -> Option<u64> {
        let _ = committed;
        None
    }

    /// [`Spout::lag`] per partition, as of its last call, where the spout
    /// has partitions it can name (a JetStream spout's subjects, in
    /// messages); empty otherwise.
    fn partition_lag(&self) -> BTreeMap<String, u64> {
        BTreeMap::new()
    }

    /// Whether asking it again soon after it had nothing costs little (a
    /// file's read): a followed topology then asks again after each commit
    /// rather than once every batch in flight has committed, so that input
    /// that came meanwhile need not wait for them all.
    fn asks_cheaply(&self) -> bool {
        false
    }

    /// Buffers of a batch the process phase is done with, for the spout's
    /// next batch to be written into where it writes its own: a batch of
    /// megabytes allocated afresh each time has its pages faulted in again.
    fn recycle(&mut self, _buffers: Buffers) {}

    /// Waits up to `timeout` for more input, once the spout had nothing
    /// (a followed topology that has caught up); returns early when more
    /// has come, where the spout can tell.
    fn wait_for_input(&mut self, timeout: Duration) {
        std::thread::sleep(timeout);
    }
}

/// A message a spout read that can never become a tuple (not UTF-8, not the
/// declared JSON object): no replay changes it, so the topology halts at
/// once rather than after its retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable(pub String);

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unreadable {}
