//! Values by encoded state key, the keys packed in one buffer: a batch's
//! partials are made on the process thread and dropped on the coordinator
//! after the commit, and a buffer for each of thousands of keys cost both
//! threads an allocation or a free each.

use anyhow::{Result, bail};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use weir_sdk::codec::Value;

/// Encoded keys, each with a value, in the order they were pushed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyedValues {
    keys: Vec<u8>,
    ends: Vec<u32>,
    values: Vec<Value>,
}

impl KeyedValues {
    /// Room for `keys` keys of `bytes` bytes in all.
    pub fn with_capacity(keys: usize, bytes: usize) -> KeyedValues {
        KeyedValues {
            keys: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(keys),
            values: Vec::with_capacity(keys),
        }
    }

    /// Appends `key` with its value.
    pub fn push(&mut self, key: &[u8], value: Value) {
        self.keys.extend_from_slice(key);
        self.ends.push(u32::try_from(self.keys.len()).expect("a batch's keys take at most 4 GiB"));
        self.values.push(value);
    }

    /// About the bytes it holds: its buffers, and the heap of its string
    /// and bytes values.
    pub fn held_bytes(&self) -> usize {
        let heap: usize = self
            .values
            .iter()
            .map(|value| match value {
                Value::Str(s) => s.len(),
                Value::Bytes(b) => b.len(),
                _ => 0,
            })
            .sum();
        self.keys.capacity() + 4 * self.ends.capacity() + std::mem::size_of::<Value>() * self.values.capacity() + heap
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when it holds no key.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The key at `index`.
    pub fn key(&self, index: usize) -> &[u8] {
        let start = index.checked_sub(1).map_or(0, |i| self.ends[i] as usize);
        &self.keys[start..self.ends[index] as usize]
    }

    /// The key at `index` with its value.
    pub fn get(&self, index: usize) -> (&[u8], &Value) {
        (self.key(index), &self.values[index])
    }

    /// Each key with its value, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &Value)> {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Where `key` is, in keys pushed in order.
    pub fn find(&self, key: &[u8]) -> Option<usize> {
        let at = self.first_at_or_after(key);
        (at < self.len() && self.key(at) == key).then_some(at)
    }

    /// The index of the first key at or after `key`, in keys pushed in order.
    pub fn first_at_or_after(&self, key: &[u8]) -> usize {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let mid = low + (high - low) / 2;
            if self.key(mid) < key {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        low
    }

    /// The values, in key order.
    pub fn into_values(self) -> Vec<Value> {
        self.values
    }

    /// Each key with its value, owned, in order.
    pub fn into_pairs(self) -> impl Iterator<Item = (Vec<u8>, Value)> {
        let keys: Vec<Vec<u8>> = (0..self.len()).map(|i| self.key(i).to_vec()).collect();
        keys.into_iter().zip(self.values)
    }

    /// `runs`, each in strictly increasing key order, merged into one in
    /// key order; a key in several runs gets their values through
    /// `combine`, in the runs' order. A run out of order is refused.
    pub fn merge(
        mut runs: Vec<KeyedValues>,
        mut combine: impl FnMut(Value, Value) -> Result<Value>,
    ) -> Result<KeyedValues> {
        for (at, run) in runs.iter().enumerate() {
            if let Some(n) = (1..run.len()).find(|&n| run.key(n - 1) >= run.key(n)) {
                bail!("run {at}'s key {n} is not after the key before it");
            }
        }
        runs.retain(|run| !run.is_empty());
        if runs.len() <= 1 {
            return Ok(runs.pop().unwrap_or_default());
        }
        let mut values: Vec<std::vec::IntoIter<Value>> =
            runs.iter_mut().map(|run| std::mem::take(&mut run.values).into_iter()).collect();
        let (keys, bytes) = runs.iter().fold((0, 0), |(n, b), run| (n + run.ends.len(), b + run.keys.len()));
        let mut out = KeyedValues::with_capacity(keys, bytes);
        // Each run's next key, least first; a tie goes to the earlier run.
        let mut heads: BinaryHeap<Reverse<(&[u8], usize, usize)>> =
            runs.iter().enumerate().map(|(at, run)| Reverse((run.key(0), at, 0))).collect();
        while let Some(Reverse((key, at, index))) = heads.pop() {
            let value = values[at].next().expect("a value for each key");
            if index + 1 < runs[at].ends.len() {
                heads.push(Reverse((runs[at].key(index + 1), at, index + 1)));
            }
            match out.len().checked_sub(1) {
                Some(last) if out.key(last) == key => {
                    let before = std::mem::replace(&mut out.values[last], Value::Null);
                    out.values[last] = combine(before, value)?;
                }
                _ => out.push(key, value),
            }
        }
        Ok(out)
    }
}

impl<K: AsRef<[u8]>> FromIterator<(K, Value)> for KeyedValues {
    fn from_iter<I: IntoIterator<Item = (K, Value)>>(pairs: I) -> KeyedValues {
        let mut out = KeyedValues::default();
        for (key, value) in pairs {
            out.push(key.as_ref(), value);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_come_back_in_order() {
        let pairs = [(b"b".to_vec(), Value::I64(1)), (Vec::new(), Value::Null), (b"abc".to_vec(), Value::from("x"))];
        let keyed: KeyedValues = pairs.iter().cloned().collect();
        assert_eq!(keyed.len(), 3);
        assert_eq!(keyed.key(2), b"abc");
        let borrowed: Vec<(Vec<u8>, Value)> = keyed.iter().map(|(k, v)| (k.to_vec(), v.clone())).collect();
        assert_eq!(borrowed, pairs);
        assert_eq!(keyed.clone().into_values(), pairs.clone().map(|(_, v)| v));
        assert_eq!(keyed.into_pairs().collect::<Vec<_>>(), pairs);
        assert!(KeyedValues::default().is_empty());
    }

    fn run(pairs: &[(&str, i64)]) -> KeyedValues {
        pairs.iter().map(|(k, v)| (k.as_bytes(), Value::I64(*v))).collect()
    }

    fn sum(a: Value, b: Value) -> Result<Value> {
        match (a, b) {
            (Value::I64(a), Value::I64(b)) => Ok(Value::I64(a + b)),
            other => bail!("not two numbers: {other:?}"),
        }
    }

    #[test]
    fn runs_merge_in_key_order_and_a_shared_key_is_combined_once_per_run() {
        let merged = KeyedValues::merge(
            vec![run(&[("a", 1), ("c", 2), ("e", 3)]), run(&[]), run(&[("b", 10), ("c", 20)]), run(&[("c", 100)])],
            sum,
        )
        .unwrap();
        assert_eq!(merged, run(&[("a", 1), ("b", 10), ("c", 122), ("e", 3)]));
        assert_eq!(KeyedValues::merge(vec![run(&[("x", 1)])], sum).unwrap(), run(&[("x", 1)]));
        assert_eq!(KeyedValues::merge(Vec::new(), sum).unwrap(), KeyedValues::default());
    }

    #[test]
    fn a_run_out_of_order_or_a_failed_combine_is_refused() {
        let refused = KeyedValues::merge(vec![run(&[("a", 1)]), run(&[("b", 1), ("b", 2)])], sum).unwrap_err();
        assert!(refused.to_string().contains("run 1's key 1"), "{refused}");
        let mixed = vec![run(&[("a", 1)]), [(b"a", Value::Null)].into_iter().collect()];
        assert!(KeyedValues::merge(mixed, sum).unwrap_err().to_string().contains("not two numbers"));
    }
}
