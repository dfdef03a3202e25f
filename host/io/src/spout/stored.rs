//! A log spout's stored batch metadata (JetStream positions, Kafka
//! offsets) read back: a version byte, then little-endian numbers, each
//! read checked against the bytes left, so that damage is an error naming
//! what was stored rather than a panic.

use anyhow::{Result, bail};

/// The stored form of `items`: `version`, their count (4 bytes), then
/// each as `put` writes it.
pub fn encode_list<T>(version: u8, items: &[T], mut put: impl FnMut(&mut Vec<u8>, &T)) -> Vec<u8> {
    let mut out = vec![version];
    out.extend_from_slice(&(items.len() as u32).to_le_bytes());
    for item in items {
        put(&mut out, item);
    }
    out
}

/// Reads what [`encode_list`] wrote, each item with `item`, reserving
/// room for at most `most` up front; no bytes may be left.
pub fn decode_list<'a, T>(
    bytes: &'a [u8],
    what: &'static str,
    version: u8,
    most: usize,
    mut item: impl FnMut(&mut Stored<'a>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut stored = Stored::open(bytes, what, version)?;
    let count = stored.u32()? as usize;
    let mut items = Vec::with_capacity(count.min(most));
    for _ in 0..count {
        items.push(item(&mut stored)?);
    }
    stored.finish()?;
    Ok(items)
}

/// Stored metadata being read.
pub struct Stored<'a> {
    whole: usize,
    rest: &'a [u8],
    /// What the bytes hold, as errors name it ("stored Kafka offsets").
    what: &'static str,
}

impl<'a> Stored<'a> {
    /// Starts reading `bytes`, which hold `what`, checking that their
    /// version byte is `version`.
    pub fn open(bytes: &'a [u8], what: &'static str, version: u8) -> Result<Stored<'a>> {
        let mut stored = Stored { whole: bytes.len(), rest: bytes, what };
        let found = stored.take(1)?[0];
        if found != version {
            bail!("{what} have version {found}; this host reads version {version}");
        }
        Ok(stored)
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.rest.len() < n {
            bail!("{} are truncated ({} bytes)", self.what, self.whole);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    /// The next `N` bytes, as an array.
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("N bytes taken"))
    }

    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// Ends the reading: no bytes may be left.
    pub fn finish(self) -> Result<()> {
        if !self.rest.is_empty() {
            bail!("{} have {} bytes too many", self.what, self.rest.len());
        }
        Ok(())
    }
}

/// Checks that `decode` gives back what `bytes` hold, `positions`, and
/// refuses them damaged: cut short, of another version, or with the eight
/// bytes at offset 25 (in either format, a number of the first partition's
/// range) made 100, which leaves that range inconsistent.
#[cfg(test)]
pub fn assert_round_trip<T: PartialEq + std::fmt::Debug>(
    bytes: &[u8],
    positions: &T,
    decode: impl Fn(&[u8]) -> Result<T>,
) {
    assert_eq!(&decode(bytes).unwrap(), positions);
    assert!(decode(&bytes[..bytes.len() - 1]).unwrap_err().to_string().contains("truncated"));
    assert!(decode(&[2, 0, 0, 0, 0]).unwrap_err().to_string().contains("version 2"));
    let mut inconsistent = bytes.to_vec();
    inconsistent[25..33].copy_from_slice(&100u64.to_le_bytes());
    assert!(decode(&inconsistent).unwrap_err().to_string().contains("inconsistent"), "{inconsistent:?}");
}

#[cfg(test)]
mod tests {
    use super::super::{jetstream::meta as js, kafka::meta as kafka};
    use super::assert_round_trip;

    #[test]
    fn positions_round_trip_and_damage_is_refused() {
        let positions = vec![
            js::Position { subject: "clicks.0".into(), next: 42, first: 7, count: 12 },
            js::Position { subject: "clicks.1".into(), next: 1, first: 1, count: 0 },
        ];
        assert_round_trip(&js::encode(&positions), &positions, js::decode);
        let offsets = vec![
            kafka::Position { partition: 0, next: 42, first: 7, count: 12 },
            kafka::Position { partition: 3, next: 0, first: 0, count: 0 },
        ];
        assert_round_trip(&kafka::encode(&offsets), &offsets, kafka::decode);
    }
}
