//! A commit group's partials for one state, key by key: each key with its
//! partials from every batch of the group that has one, in txid order, so
//! that the commit looks each key up and writes it once for the whole group
//! rather than once for each of its batches.

use super::view::Combines;
use anyhow::Result;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use weir_sdk::codec::Value;

/// One batch's partials for a state, with the batch's txid.
pub type BatchPartials<'a> = (u64, &'a Combines);

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
    // Each distinct key with the first and last of its partials, which are
    // chained in the order they were gathered: batch by batch.
    let entries: usize = batches.iter().map(|(_, c)| c.partials.len()).sum();
    let mut index: HashMap<&[u8], usize, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(entries, Default::default());
    let mut keys: Vec<Key<'a>> = Vec::with_capacity(entries);
    let mut chain: Vec<Link<'a>> = Vec::with_capacity(entries);
    for &(txid, combines) in batches {
        for (key, partial) in combines.partials.iter() {
            let at = chain.len();
            chain.push(Link { txid, partial, next: None });
            match index.entry(key) {
                Entry::Occupied(known) => {
                    let known = &mut keys[*known.get()];
                    chain[known.last].next = Some(at);
                    known.last = at;
                }
                Entry::Vacant(new) => {
                    new.insert(keys.len());
                    keys.push(Key { prefix: super::keys::prefix(key), key, first: at, last: at });
                }
            }
        }
    }
    drop(index);
    keys.sort_unstable_by(|a, b| a.prefix.cmp(&b.prefix).then_with(|| a.key.cmp(b.key)));
    let mut partials = Vec::with_capacity(batches.len());
    for key in &keys {
        partials.clear();
        let mut link = Some(key.first);
        while let Some(at) = link {
            partials.push((chain[at].txid, chain[at].partial));
            link = chain[at].next;
        }
        each(key.key, &partials)?;
    }
    Ok(())
}

/// A distinct key of a group, with its first 16 bytes as one number (most
/// keys differ there) and the ends of its chain of partials.
struct Key<'a> {
    prefix: u128,
    key: &'a [u8],
    first: usize,
    last: usize,
}

/// One batch's partial for a key, and the next batch's, if any.
struct Link<'a> {
    txid: u64,
    partial: &'a Value,
    next: Option<usize>,
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
