//! A commit group's partials for one state, key by key: each key with its
//! partials from every batch of the group that has one, in txid order, so
//! that the commit looks each key up and writes it once for the whole group
//! rather than once for each of its batches.

use super::view::Combines;
use anyhow::Result;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use weir_sdk::codec::Value;

/// One batch's partials for a state, with the batch's txid.
pub type BatchPartials<'a> = (u64, &'a Combines);

/// A batch's next key, ordered by key and then batch. Most keys differ in
/// their first 16 bytes, compared as one number.
#[derive(PartialEq, Eq)]
struct Head<'a> {
    prefix: u128,
    key: &'a [u8],
    batch: usize,
    at: usize,
}

impl<'a> Head<'a> {
    fn new(key: &'a [u8], batch: usize, at: usize) -> Head<'a> {
        // Zero-padded, so that prefixes order as the keys do wherever they
        // differ.
        let mut first = [0; 16];
        let len = key.len().min(16);
        first[..len].copy_from_slice(&key[..len]);
        Head { prefix: u128::from_be_bytes(first), key, batch, at }
    }
}

impl Ord for Head<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| self.key.cmp(other.key))
            .then_with(|| (self.batch, self.at).cmp(&(other.batch, other.at)))
    }
}

impl PartialOrd for Head<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Calls `each` with every key of `batches` (given in txid order), in key
/// order, and its partials, in txid order.
pub fn for_each_key<'a>(
    batches: &[BatchPartials<'a>],
    mut each: impl FnMut(&'a [u8], &[(u64, &'a Value)]) -> Result<()>,
) -> Result<()> {
    if let [(txid, combines)] = batches {
        for (key, partial) in combines.partials.iter() {
            each(key, &[(*txid, partial)])?;
        }
        return Ok(());
    }
    // The next key of each batch; equal keys come out in batch order.
    let mut heads = BinaryHeap::with_capacity(batches.len());
    let next = |heads: &mut BinaryHeap<Reverse<Head<'a>>>, batch: usize, at: usize| {
        let partials = &batches[batch].1.partials;
        if at < partials.len() {
            heads.push(Reverse(Head::new(partials.key(at), batch, at)));
        }
    };
    for batch in 0..batches.len() {
        next(&mut heads, batch, 0);
    }
    let mut partials = Vec::with_capacity(batches.len());
    while let Some(Reverse(head)) = heads.pop() {
        partials.clear();
        let mut take = |heads: &mut BinaryHeap<_>, head: Head<'a>| {
            let (txid, combines) = batches[head.batch];
            partials.push((txid, combines.partials.get(head.at).1));
            next(heads, head.batch, head.at + 1);
        };
        let key = head.key;
        take(&mut heads, head);
        while let Some(Reverse(same)) = heads.peek() {
            if same.key != key {
                break;
            }
            let Some(Reverse(same)) = heads.pop() else { break };
            take(&mut heads, same);
        }
        each(key, &partials)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::keyed::KeyedValues;
    use weir_sdk::operator::Builtin;
    use weir_sdk::topology::StateKind;

    fn partials(pairs: &[(&str, i64)]) -> Combines {
        let partials: KeyedValues = pairs.iter().map(|(k, v)| (k.as_bytes(), Value::I64(*v))).collect();
        Combines { kind: StateKind::Transactional, builtin: Builtin::Count, partials }
    }

    fn merged(batches: &[BatchPartials<'_>]) -> Vec<(String, Vec<(u64, i64)>)> {
        let mut out = Vec::new();
        for_each_key(batches, |key, partials| {
            let partials = partials.iter().map(|(t, v)| (*t, if let Value::I64(n) = v { *n } else { -1 })).collect();
            out.push((String::from_utf8(key.to_vec())?, partials));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn each_key_comes_once_in_order_with_its_partials_in_txid_order() {
        let (a, b, c) = (partials(&[("b", 1), ("d", 2)]), partials(&[]), partials(&[("a", 3), ("b", 4), ("e", 5)]));
        let d = partials(&[("b", 6), ("d", 7)]);
        let got = merged(&[(7, &a), (8, &b), (9, &c), (10, &d)]);
        let want = [
            ("a", vec![(9, 3)]),
            ("b", vec![(7, 1), (9, 4), (10, 6)]),
            ("d", vec![(7, 2), (10, 7)]),
            ("e", vec![(9, 5)]),
        ];
        assert_eq!(got, want.map(|(k, p)| (k.to_owned(), p)));
    }

    #[test]
    fn keys_sharing_their_first_16_bytes_or_padded_with_zeros_keep_their_order() {
        let long = "abcdefghijklmnop";
        let (x, y) = (format!("{long}b"), format!("{long}a"));
        let a = partials(&[("ab", 1), (&y, 2)]);
        let b = partials(&[("ab\0", 3), (&x, 4)]);
        let keys: Vec<String> = merged(&[(1, &a), (2, &b)]).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["ab", "ab\0", y.as_str(), x.as_str()]);
    }

    #[test]
    fn one_batch_gives_its_partials_as_they_are() {
        let a = partials(&[("x", 1), ("y", 2)]);
        assert_eq!(merged(&[(3, &a)]), [("x".to_owned(), vec![(3, 1)]), ("y".to_owned(), vec![(3, 2)])]);
        assert!(merged(&[]).is_empty());
    }
}
