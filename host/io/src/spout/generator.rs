//! The built-in spout emitting the integers 0 to count - 1: for tests and
//! benchmarks, transactional (a batch is a range).

use super::contract::{Emitted, Spout};
use anyhow::{Result, bail};
use weir_plan::SpoutKind;
use weir_sdk::codec::{Batch, BatchWriter, ValueRef};

/// Emits `count` integers in batches.
pub struct Generator {
    count: u64,
    batch_size: u64,
}

fn decode(meta: &[u8]) -> Result<(u64, u64)> {
    let Ok(bytes) = <[u8; 16]>::try_from(meta) else {
        bail!("generator metadata has {} bytes, expected 16", meta.len())
    };
    let (start, end) = bytes.split_at(8);
    Ok((u64::from_le_bytes(start.try_into()?), u64::from_le_bytes(end.try_into()?)))
}

fn batch(start: u64, end: u64) -> Batch<'static> {
    let mut writer = BatchWriter::with_capacity(1, (end - start) as usize * 13);
    for n in start..end {
        writer.push_row(0, [ValueRef::I64(n as i64)]).expect("one value per row");
    }
    writer.finish_batch()
}

impl Generator {
    /// A generator of `count` integers, `batch_size` per batch.
    pub fn new(count: u64, batch_size: usize) -> Generator {
        Generator { count, batch_size: batch_size as u64 }
    }
}

impl Spout for Generator {
    fn kind(&self) -> SpoutKind {
        SpoutKind::Transactional
    }

    fn emit(&mut self, _txid: u64, _attempt: u32, previous: Option<&[u8]>) -> Result<Option<Emitted>> {
        let start = previous.map(decode).transpose()?.map_or(0, |(_, end)| end);
        if start >= self.count {
            return Ok(None);
        }
        let end = (start + self.batch_size).min(self.count);
        let meta = [start.to_le_bytes(), end.to_le_bytes()].concat();
        Ok(Some(Emitted { meta, batch: batch(start, end) }))
    }

    fn replay(&mut self, _txid: u64, _attempt: u32, meta: &[u8]) -> Result<Batch<'static>> {
        let (start, end) = decode(meta)?;
        Ok(batch(start, end))
    }

    fn lag(&mut self, committed: Option<&[u8]>) -> Option<u64> {
        let done = committed.map(decode).transpose().ok()?.map_or(0, |(_, end)| end);
        Some(self.count.saturating_sub(done))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cover_the_range_and_replay_exactly() {
        let mut generator = Generator::new(5, 2);
        let first = generator.emit(1, 0, None).unwrap().unwrap();
        let second = generator.emit(2, 0, Some(&first.meta)).unwrap().unwrap();
        let third = generator.emit(3, 0, Some(&second.meta)).unwrap().unwrap();
        assert_eq!(third.batch.len(), 1);
        assert_eq!(third.batch.row(0).get(0), Some(ValueRef::I64(4)));
        assert!(generator.emit(4, 0, Some(&third.meta)).unwrap().is_none());
        assert_eq!(generator.replay(2, 1, &second.meta).unwrap().bytes(), second.batch.bytes());
    }
}
