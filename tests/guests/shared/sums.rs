//! Integer sums by key, added into a state: what more than one test guest's
//! state updater keeps. Each guest includes this file as a module of its
//! own (`#[path]`), as it does `operators.rs`.

use weir_sdk::prelude::*;

/// A batch's sums by key, in the order the keys first came.
#[derive(Default)]
pub struct Sums(Vec<(Vec<Value>, i64)>);

impl Sums {
    /// Adds `n` to `key`'s sum.
    pub fn add(&mut self, key: Vec<Value>, n: i64) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, sum)) => *sum += n,
            None => self.0.push((key, n)),
        }
    }

    /// Adds each sum to its key's integer in `state` (0 where missing).
    pub fn add_into(self, state: &dyn MapState) -> Result<(), Error> {
        if self.0.is_empty() {
            return Ok(());
        }
        let keys: Vec<Vec<Value>> = self.0.iter().map(|(k, _)| k.clone()).collect();
        let stored = state.multi_get(&keys)?;
        let entries: Vec<(Vec<Value>, Value)> = self
            .0
            .into_iter()
            .zip(stored)
            .map(|((key, sum), stored)| {
                let before = match stored {
                    Some(Value::I64(before)) => before,
                    _ => 0,
                };
                (key, Value::I64(before + sum))
            })
            .collect();
        state.multi_put(&entries)
    }
}
