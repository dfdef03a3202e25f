//! A JetStream batch's metadata: per partition, the sequence range it read
//! and the sequence to read from next.

use super::super::stored;
use anyhow::{Result, bail};

/// Where one partition (subject) stands after a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    /// The partition's subject.
    pub subject: String,
    /// The stream sequence to read the partition from after this batch.
    pub next: u64,
    /// The sequence of the batch's first message of the partition.
    pub first: u64,
    /// How many messages of the partition the batch holds; they lie in
    /// `first..next`.
    pub count: u64,
}

impl Position {
    /// The sequence of the batch's last message of the partition.
    pub fn last(&self) -> u64 {
        self.next - 1
    }
}

const VERSION: u8 = 1;

/// The stored form of a batch's positions.
pub fn encode(positions: &[Position]) -> Vec<u8> {
    stored::encode_list(VERSION, positions, |out, p| {
        out.extend_from_slice(&(p.subject.len() as u32).to_le_bytes());
        out.extend_from_slice(p.subject.as_bytes());
        for n in [p.next, p.first, p.count] {
            out.extend_from_slice(&n.to_le_bytes());
        }
    })
}

/// Reads what [`encode`] wrote.
pub fn decode(bytes: &[u8]) -> Result<Vec<Position>> {
    let most = weir_config::MAX_JETSTREAM_PARTITIONS;
    stored::decode_list(bytes, "stored JetStream positions", VERSION, most, |stored| {
        let len = stored.u32()? as usize;
        let subject = String::from_utf8(stored.take(len)?.to_vec())?;
        let (next, first, count) = (stored.u64()?, stored.u64()?, stored.u64()?);
        if next == 0 || (count > 0 && (first == 0 || first > next - 1 || count > next - first)) {
            bail!("stored JetStream position of {subject} is inconsistent: next {next}, first {first}, count {count}");
        }
        Ok(Position { subject, next, first, count })
    })
}
