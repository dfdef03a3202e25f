//! Guest spouts of each kind, over the integers 0 to [`TOTAL`] - 1. Each
//! topology sums the integers per last digit, exactly once; the function in
//! between fails the first attempt of txid 2, so every run replays a batch.
//! Spouts print what each attempt emitted, which the tests compare.

use std::sync::atomic::{AtomicU32, Ordering};
use weir_sdk::prelude::*;

/// How many integers each spout emits.
pub const TOTAL: u64 = 20_000;

/// Integers per batch of the batch spout: fixed, since a replay must emit
/// the same batch whatever the run's batch size.
const BATCH: u64 = 100;

/// Trident's `IBatchSpout`: batch n holds the integers of range n.
struct Numbers;

impl BatchSpout for Numbers {
    fn emit_batch(&self, info: &SpoutInfo, out: &mut SpoutEmitter<'_>) -> Result<bool, Error> {
        let Some(batch) = example_common::batch_range(info.txid, BATCH, TOTAL) else { return Ok(false) };
        println!("txid {} attempt {}: {}..{}", info.txid, info.attempt, batch.start, batch.end);
        for n in batch {
            out.emit([n as i64])?;
        }
        Ok(true)
    }
}

/// Two partitions, the even and the odd integers, read by position: a
/// partition's metadata is the range of positions a batch covered.
struct EvenOdd {
    /// Opaque: emit a different split on every replay.
    reshuffle: bool,
    /// Opaque: vary every batch's size with the clock, so that a batch
    /// emitted again after a crash differs too.
    jitter: bool,
    /// The attempt of the last emission, to change the split on a replay.
    attempt: AtomicU32,
}

fn range(meta: &[u8]) -> Result<(u64, u64), Error> {
    let bytes: [u8; 16] = meta.try_into().map_err(|_| Error::fatal("metadata must be 16 bytes"))?;
    let (start, end) = bytes.split_at(8);
    Ok((u64::from_le_bytes(start.try_into().unwrap()), u64::from_le_bytes(end.try_into().unwrap())))
}

fn emit_range(partition: &str, start: u64, end: u64, out: &mut SpoutEmitter<'_>) -> Result<(), Error> {
    let parity = u64::from(partition == "odd");
    for position in start..end {
        out.emit([(position * 2 + parity) as i64])?;
    }
    Ok(())
}

impl PartitionedSpout for EvenOdd {
    fn partitions(&self, _info: &SpoutInfo) -> Result<Vec<String>, Error> {
        Ok(vec!["even".into(), "odd".into()])
    }

    fn emit_partition(
        &self,
        info: &SpoutInfo,
        partition: &str,
        previous: Option<&[u8]>,
        out: &mut SpoutEmitter<'_>,
    ) -> Result<Option<Vec<u8>>, Error> {
        let start = previous.map(range).transpose()?.map_or(0, |(_, end)| end);
        let per_partition = TOTAL / 2;
        if start >= per_partition {
            return Ok(None);
        }
        self.attempt.store(info.attempt, Ordering::Relaxed);
        let mut size = (u64::from(info.max_tuples) / 2).max(1);
        if self.reshuffle && info.attempt > 0 {
            // A replay of an opaque spout may differ: here, a batch of
            // another size for the same txid.
            size = (size / (u64::from(info.attempt) + 1)).max(1) + 1;
        }
        if self.jitter {
            let nanos =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
            size += u64::from(nanos % 4);
        }
        let end = (start + size).min(per_partition);
        println!("txid {} attempt {}: {partition} {start}..{end}", info.txid, info.attempt);
        emit_range(partition, start, end, out)?;
        Ok(Some([start.to_le_bytes(), end.to_le_bytes()].concat()))
    }

    fn reemit_partition(
        &self,
        info: &SpoutInfo,
        partition: &str,
        meta: &[u8],
        out: &mut SpoutEmitter<'_>,
    ) -> Result<(), Error> {
        let (start, end) = range(meta)?;
        println!("txid {} attempt {}: {partition} {start}..{end}", info.txid, info.attempt);
        emit_range(partition, start, end, out)
    }
}

/// The integer's last digit; fails the first attempt of txid 2.
struct LastDigit;

impl Function for LastDigit {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        let batch = tuple.batch();
        if batch.txid == 2 && batch.attempt == 0 {
            return Err(Error::retry("txid 2 fails on its first attempt"));
        }
        out.emit([tuple.i64("n")? % 10])
    }
}

fn sums(name: &str, spout: GuestSpout, state: State) -> Topology {
    Topology::new(name)
        .new_stream(spout)
        .each(["n"], LastDigit, ["digit"])
        .name("last-digit")
        .group_by(["digit"])
        .persistent_aggregate_over(state, ["n"], Sum, ["sum"])
        .name("sum")
        .build()
}

fn topologies() -> Vec<Topology> {
    let even_odd = |reshuffle| EvenOdd { reshuffle, jitter: false, attempt: AtomicU32::new(0) };
    vec![
        sums("batch-numbers", GuestSpout::batch(Numbers, ["n"]), State::transactional("sums")),
        sums(
            "partitioned-numbers",
            GuestSpout::partitioned_transactional(even_odd(false), ["n"]),
            State::transactional("sums"),
        ),
        sums("opaque-numbers", GuestSpout::partitioned_opaque(even_odd(true), ["n"]), State::opaque("sums")),
        sums(
            "opaque-jitter",
            GuestSpout::partitioned_opaque(
                EvenOdd { reshuffle: true, jitter: true, attempt: AtomicU32::new(0) },
                ["n"],
            ),
            State::opaque("sums"),
        ),
        sums(
            "opaque-into-transactional",
            GuestSpout::partitioned_opaque(even_odd(true), ["n"]),
            State::transactional("sums"),
        ),
    ]
}

weir_sdk::export!(topologies);
