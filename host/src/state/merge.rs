//! A commit group's partials for one state, key by key: each key with its
//! partials from every batch of the group that has one, in txid order, so
//! that the commit looks each key up and writes it once for the whole group
//! rather than once for each of its batches.

use super::keyed::KeyedValues;
use super::view::Combines;
use anyhow::{Result, bail};
use std::cmp::Ordering;
use weir_sdk::codec::Value;

/// One batch's partials for a state, with the batch's txid.
pub type BatchPartials<'a> = (u64, &'a Combines);

/// Calls `each` with every key of `batches` (given in txid order), in key
/// order, and its partials, in txid order. Each batch's partials are in
/// key order (as [`Views::combine_at_commit`](super::view::Views::combine_at_commit)
/// takes them); a batch's out of order are refused.
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
    // The batches' runs merged: the least of their next keys, with every
    // batch's partials for it. A group holds a few dozen batches at most,
    // so the least is found by looking at each, in one pass over memory
    // that stays in cache, where hashing every key of the group and
    // sorting them missed it.
    let mut heads: Vec<Head<'a>> = batches.iter().filter_map(|&(txid, c)| Head::first(txid, &c.partials)).collect();
    let mut partials = Vec::with_capacity(batches.len());
    while let Some(least) = heads.iter().min_by(|a, b| a.cmp(b)) {
        let least = least.next();
        partials.clear();
        for head in &mut heads {
            while !head.done() && head.next().cmp(&least) == Ordering::Equal {
                partials.push((head.txid, head.value()));
                head.advance()?;
            }
        }
        heads.retain(|head| !head.done());
        each(least.key, &partials)?;
    }
    Ok(())
}

/// Where the merge stands in one batch's partials: its next key, with the
/// key's first 16 bytes as one number (most keys differ there), both kept
/// as the merge compares them many times.
struct Head<'a> {
    txid: u64,
    partials: &'a KeyedValues,
    at: usize,
    prefix: u128,
    key: &'a [u8],
}

/// A key with its first 16 bytes as one number.
struct Next<'a> {
    prefix: u128,
    key: &'a [u8],
}

impl Next<'_> {
    /// Key order: by prefix, then, where two keys of up to 16 bytes share
    /// it (one is the other with zeros after), by length, and else by the
    /// whole key. A hot key comes in most of a group's batches, and
    /// comparing its bytes again each time took more than the prefixes.
    fn cmp(&self, other: &Next<'_>) -> Ordering {
        self.prefix.cmp(&other.prefix).then_with(|| {
            if self.key.len() <= 16 && other.key.len() <= 16 {
                self.key.len().cmp(&other.key.len())
            } else {
                self.key.cmp(other.key)
            }
        })
    }
}

impl<'a> Head<'a> {
    fn first(txid: u64, partials: &'a KeyedValues) -> Option<Head<'a>> {
        let key = (!partials.is_empty()).then(|| partials.key(0))?;
        Some(Head { txid, partials, at: 0, prefix: super::keys::prefix(key), key })
    }

    fn done(&self) -> bool {
        self.at == self.partials.len()
    }

    fn value(&self) -> &'a Value {
        self.partials.get(self.at).1
    }

    fn next(&self) -> Next<'a> {
        Next { prefix: self.prefix, key: self.key }
    }

    fn cmp(&self, other: &Head<'_>) -> Ordering {
        self.next().cmp(&other.next())
    }

    /// Moves to the next key, which may not come before this one.
    fn advance(&mut self) -> Result<()> {
        let before = self.next();
        self.at += 1;
        if !self.done() {
            self.key = self.partials.key(self.at);
            self.prefix = super::keys::prefix(self.key);
            if self.next().cmp(&before) == Ordering::Less {
                bail!("batch {}'s partials are not in key order at key {}", self.txid, self.at);
            }
        }
        Ok(())
    }
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
    fn a_batch_whose_partials_are_out_of_key_order_is_refused() {
        let (a, b) = (partials(&[("a", 1)]), partials(&[("c", 1), ("b", 2)]));
        let err = for_each_key(&[(1, &a), (2, &b)], |_, _| Ok(())).unwrap_err();
        assert!(err.to_string().contains("batch 2's partials are not in key order"), "{err}");
    }

    #[test]
    fn one_batch_gives_its_partials_as_they_are() {
        let a = partials(&[("x", 1), ("y", 2)]);
        assert_eq!(merged(&[(3, &a)]), [("x".to_owned(), vec![(3, 1)]), ("y".to_owned(), vec![(3, 2)])]);
        assert!(merged(&[]).is_empty());
    }
}
