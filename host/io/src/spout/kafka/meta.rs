//! A Kafka batch's metadata: per partition, the offset range it read and
//! the offset to read from next.

use super::super::stored;
use anyhow::{Result, bail};

/// Where one partition stands after a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    /// The partition.
    pub partition: i32,
    /// The offset to read the partition from after this batch.
    pub next: i64,
    /// The offset of the batch's first record of the partition.
    pub first: i64,
    /// How many records of the partition the batch holds; they lie in
    /// `first..next` (a compacted topic may leave gaps).
    pub count: u64,
}

impl Position {
    /// The offset of the batch's last record of the partition.
    pub fn last(&self) -> i64 {
        self.next - 1
    }
}

const VERSION: u8 = 1;

/// The most partitions stored metadata may name.
pub const MAX_PARTITIONS: usize = 100_000;

/// The stored form of a batch's positions.
pub fn encode(positions: &[Position]) -> Vec<u8> {
    stored::encode_list(VERSION, positions, |out, p| {
        out.extend_from_slice(&p.partition.to_le_bytes());
        out.extend_from_slice(&p.next.to_le_bytes());
        out.extend_from_slice(&p.first.to_le_bytes());
        out.extend_from_slice(&p.count.to_le_bytes());
    })
}

/// Reads what [`encode`] wrote.
pub fn decode(bytes: &[u8]) -> Result<Vec<Position>> {
    stored::decode_list(bytes, "stored Kafka offsets", VERSION, MAX_PARTITIONS, |stored| {
        let (partition, next, first, count) = (stored.i32()?, stored.i64()?, stored.i64()?, stored.u64()?);
        let span = next.checked_sub(first).and_then(|s| u64::try_from(s).ok());
        if partition < 0 || next < 0 || first < 0 || (count > 0 && span.is_none_or(|span| count > span)) {
            bail!(
                "stored Kafka offsets of partition {partition} are inconsistent: next {next}, first {first}, count {count}"
            );
        }
        Ok(Position { partition, next, first, count })
    })
}
