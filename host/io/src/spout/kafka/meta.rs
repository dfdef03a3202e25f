//! A Kafka batch's metadata: per partition, the offset range it read and
//! the offset to read from next.

use super::super::stored::Stored;
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
    let mut out = vec![VERSION];
    out.extend_from_slice(&(positions.len() as u32).to_le_bytes());
    for p in positions {
        out.extend_from_slice(&p.partition.to_le_bytes());
        out.extend_from_slice(&p.next.to_le_bytes());
        out.extend_from_slice(&p.first.to_le_bytes());
        out.extend_from_slice(&p.count.to_le_bytes());
    }
    out
}

/// Reads what [`encode`] wrote.
pub fn decode(bytes: &[u8]) -> Result<Vec<Position>> {
    let mut stored = Stored::open(bytes, "stored Kafka offsets", VERSION)?;
    let count = stored.u32()? as usize;
    let mut positions = Vec::with_capacity(count.min(MAX_PARTITIONS));
    for _ in 0..count {
        let (partition, next, first, count) = (stored.i32()?, stored.i64()?, stored.i64()?, stored.u64()?);
        let span = next.checked_sub(first).and_then(|s| u64::try_from(s).ok());
        if partition < 0 || next < 0 || first < 0 || (count > 0 && span.is_none_or(|span| count > span)) {
            bail!(
                "stored Kafka offsets of partition {partition} are inconsistent: next {next}, first {first}, count {count}"
            );
        }
        positions.push(Position { partition, next, first, count });
    }
    stored.finish()?;
    Ok(positions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip_and_damage_is_refused() {
        let positions = vec![
            Position { partition: 0, next: 42, first: 7, count: 12 },
            Position { partition: 3, next: 0, first: 0, count: 0 },
        ];
        super::super::super::stored::assert_round_trip(&encode(&positions), &positions, decode);
    }
}
