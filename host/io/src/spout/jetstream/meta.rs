//! A JetStream batch's metadata: per partition, the sequence range it read
//! and the sequence to read from next.

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
    let mut out = vec![VERSION];
    out.extend_from_slice(&(positions.len() as u32).to_le_bytes());
    for p in positions {
        out.extend_from_slice(&(p.subject.len() as u32).to_le_bytes());
        out.extend_from_slice(p.subject.as_bytes());
        for n in [p.next, p.first, p.count] {
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
    out
}

/// Reads what [`encode`] wrote.
pub fn decode(bytes: &[u8]) -> Result<Vec<Position>> {
    let mut rest = bytes;
    let mut take = |n: usize| -> Result<&[u8]> {
        if rest.len() < n {
            bail!("stored JetStream positions are truncated ({} bytes)", bytes.len());
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let version = take(1)?[0];
    if version != VERSION {
        bail!("stored JetStream positions have version {version}; this host reads version {VERSION}");
    }
    let count = u32::from_le_bytes(take(4)?.try_into()?) as usize;
    let mut positions = Vec::with_capacity(count.min(weir_config::MAX_JETSTREAM_PARTITIONS));
    for _ in 0..count {
        let len = u32::from_le_bytes(take(4)?.try_into()?) as usize;
        let subject = String::from_utf8(take(len)?.to_vec())?;
        let mut number = || -> Result<u64> { Ok(u64::from_le_bytes(take(8)?.try_into()?)) };
        let (next, first, count) = (number()?, number()?, number()?);
        if next == 0 || (count > 0 && (first == 0 || first > next - 1 || count > next - first)) {
            bail!("stored JetStream position of {subject} is inconsistent: next {next}, first {first}, count {count}");
        }
        positions.push(Position { subject, next, first, count });
    }
    if !rest.is_empty() {
        bail!("stored JetStream positions have {} bytes too many", rest.len());
    }
    Ok(positions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip_and_damage_is_refused() {
        let positions = vec![
            Position { subject: "clicks.0".into(), next: 42, first: 7, count: 12 },
            Position { subject: "clicks.1".into(), next: 1, first: 1, count: 0 },
        ];
        let bytes = encode(&positions);
        assert_eq!(decode(&bytes).unwrap(), positions);
        assert!(decode(&bytes[..bytes.len() - 1]).unwrap_err().to_string().contains("truncated"));
        assert!(decode(&[2, 0, 0, 0, 0]).unwrap_err().to_string().contains("version 2"));
        let mut inconsistent = bytes.clone();
        inconsistent[5 + 4 + 8 + 8..5 + 4 + 8 + 16].copy_from_slice(&100u64.to_le_bytes());
        assert!(decode(&inconsistent).unwrap_err().to_string().contains("inconsistent"), "{inconsistent:?}");
    }
}
