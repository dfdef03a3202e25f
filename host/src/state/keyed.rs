//! Values by encoded state key, the keys packed in one buffer: a batch's
//! partials are made on the process thread and dropped on the coordinator
//! after the commit, and a buffer for each of thousands of keys cost both
//! threads an allocation or a free each.

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
}
