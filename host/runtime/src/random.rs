//! Randomness a guest sees: seeded from the batch it is processing, so that
//! a replay of the same txid draws the same numbers.

use rand_core::TryRng;
use std::convert::Infallible;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use weir_config::sync::Locked;

/// A generator shared between a store's WASI context and the host, which
/// reseeds it before every call.
#[derive(Clone, Default)]
pub struct BatchRandom {
    state: Arc<Mutex<u64>>,
}

impl BatchRandom {
    /// Reseeds from what identifies the batch's work: same inputs, same draws.
    pub fn reseed(&self, topology: &str, operator: &str, txid: u64, partition: u32) {
        let mut hasher = std::hash::DefaultHasher::new();
        (topology, operator, txid, partition).hash(&mut hasher);
        *self.state.locked() = hasher.finish();
    }

    fn next(&self) -> u64 {
        // splitmix64: small, fast, and good enough for what a guest asks of
        // `random`; no secret depends on it.
        let mut state = self.state.locked();
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl TryRng for BatchRandom {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok(self.next() as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.next())
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), Infallible> {
        for chunk in dest.chunks_mut(8) {
            chunk.copy_from_slice(&self.next().to_le_bytes()[..chunk.len()]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_batch_draws_the_same_numbers() {
        let mut a = BatchRandom::default();
        let mut b = BatchRandom::default();
        a.reseed("t", "op", 3, 0);
        b.reseed("t", "op", 3, 0);
        let draws = |r: &mut BatchRandom| (0..4).map(|_| r.try_next_u64().unwrap()).collect::<Vec<_>>();
        assert_eq!(draws(&mut a), draws(&mut b));
        b.reseed("t", "op", 4, 0);
        a.reseed("t", "op", 3, 0);
        assert_ne!(draws(&mut a), draws(&mut b));
    }
}
