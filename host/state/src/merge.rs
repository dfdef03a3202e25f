//! A commit group's partials for one state, key by key: each key with its
//! partials from every batch of the group that has one, in txid order (or,
//! for counts, summed), so that the commit looks each key up and writes it
//! once for the whole group rather than once for each of its batches.

use super::StoreError;
use super::keyed::KeyedValues;
use super::writes::Combines;
use foldhash::fast::RandomState;
use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use weir_sdk::codec::Value;
use weir_sdk::operator::Builtin;

/// One batch's partials for a state, with the batch's txid.
pub type BatchPartials<'a> = (u64, &'a Combines);

/// A key's partials in a commit group, in txid order: every batch's, or,
/// for counts, at most two that stand for them all.
pub struct Partials<'p, 'a> {
    key: &'a [u8],
    list: &'p [(u64, &'p Value)],
    /// Where `list` sums the counts of several batches: the first txid.
    summed_from: Option<u64>,
    batches: &'p [BatchPartials<'a>],
}

impl<'p> Partials<'p, '_> {
    /// The partials to combine, by Trident's rules and in txid order, with
    /// a stored value that txid `written` wrote (`None`: no value, or one
    /// without a txid), to store what the batches would one by one.
    ///
    /// Counts summed stand for their batches when the stored value is older
    /// than all of them: the first txid with the sum of every batch's count
    /// but the last, then the last txid with the last batch's count, gives
    /// the same total as the batches one by one, and the same value before
    /// the last batch, which an opaque state keeps. A value written by one
    /// of the group's txids (a batch replayed after a crash) needs each
    /// batch's own partial, which the rules skip or apply in turn.
    pub fn for_stored(&self, written: Option<u64>) -> Cow<'p, [(u64, &'p Value)]> {
        match (self.summed_from, written) {
            (Some(first), Some(at)) if at >= first => Cow::Owned(
                self.batches
                    .iter()
                    .filter_map(|(txid, c)| c.partials.find(self.key).map(|at| (*txid, c.partials.get(at).1)))
                    .collect(),
            ),
            _ => Cow::Borrowed(self.list),
        }
    }
}

/// Calls `each` with every key of `batches` (given in txid order), in key
/// order, and its partials. Each batch's partials are in key order (as
/// [`Views::combine_at_commit`](super::view::Views::combine_at_commit)
/// takes them, each key once); a batch's out of order are refused.
pub fn for_each_key<'a>(
    batches: &[BatchPartials<'a>],
    mut each: impl FnMut(&'a [u8], &Partials<'_, 'a>) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut call = |key, list: &[(u64, &Value)], summed_from| each(key, &Partials { key, list, summed_from, batches });
    if let [(txid, combines)] = batches {
        for (key, partial) in combines.partials.iter() {
            call(key, &[(*txid, partial)], None)?;
        }
        return Ok(());
    }
    if batches.len() >= SUMMED_FROM
        && let Some(counts) = summed_counts(batches)?
    {
        for count in counts {
            let (before, last) = (Value::I64(count.before_last), Value::I64(count.last_count));
            let both = [(count.first, &before), (count.last, &last)];
            let several = count.first < count.last;
            call(count.at.key, if several { &both } else { &both[1..] }, several.then_some(count.first))?;
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
    while let Some(least) = heads.iter().min_by(|a, b| a.next.cmp(&b.next)) {
        let least = least.next;
        partials.clear();
        for head in &mut heads {
            if head.next.cmp(&least) == Ordering::Equal {
                partials.push((head.txid, head.value()));
                head.advance()?;
            }
        }
        heads.retain(|head| !head.done());
        call(least.key, &partials, None)?;
    }
    Ok(())
}

/// Batches from which a group's counts are summed by hashing: below, the
/// scan over the batches' runs costs less (at batch 10,000, groups of about
/// eight, summing took a few percent more of the run).
const SUMMED_FROM: usize = 16;

/// A key's counts in a group: the sum of all but the last batch's, and the
/// last batch's, with the first and last txids that have one.
#[derive(Clone, Copy)]
struct Summed<'a> {
    at: Next<'a>,
    first: u64,
    last: u64,
    before_last: i64,
    last_count: i64,
}

/// The group's counts summed key by key, in key order. `None` unless every
/// partial is a positive count (another built-in's partials are combined
/// batch by batch). A group of small batches holds a few thousand keys in
/// each of a hundred batches, the hot keys in most: each key is summed into
/// its entry, found by hashing, where merging the batches' runs compared
/// or moved each key once for every batch or every level of the merge.
fn summed_counts<'a>(batches: &[BatchPartials<'a>]) -> Result<Option<Vec<Summed<'a>>>, StoreError> {
    if batches.iter().any(|(_, combines)| combines.builtin != Builtin::Count) {
        return Ok(None);
    }
    let most = batches.iter().map(|(_, combines)| combines.partials.len()).max().unwrap_or(0);
    let mut entries: HashMap<GroupKey<'a>, u32, RandomState> =
        HashMap::with_capacity_and_hasher(2 * most, RandomState::default());
    let mut summed: Vec<Summed<'a>> = Vec::with_capacity(2 * most);
    for &(txid, combines) in batches {
        let mut before: Option<Next<'a>> = None;
        for (at, (key, partial)) in combines.partials.iter().enumerate() {
            let &Value::I64(count @ 1..) = partial else { return Ok(None) };
            let next = in_order(txid, at, before, Next::of(key))?;
            before = Some(next);
            match entries.entry(GroupKey(next)) {
                Entry::Occupied(entry) => {
                    let sum = &mut summed[*entry.get() as usize];
                    sum.before_last = sum.before_last.saturating_add(sum.last_count);
                    (sum.last, sum.last_count) = (txid, count);
                }
                Entry::Vacant(entry) => {
                    entry.insert(u32::try_from(summed.len()).expect("a group's keys number under 4 billion"));
                    summed.push(Summed { at: next, first: txid, last: txid, before_last: 0, last_count: count });
                }
            }
        }
    }
    summed.sort_unstable_by(|a, b| a.at.cmp(&b.at));
    Ok(Some(summed))
}

/// A key of a group, hashed: a short key by its padded bytes (keys of up
/// to 16 bytes that share them differ only in trailing zeros, a few at
/// most), a longer one by all of its bytes.
#[derive(Clone, Copy)]
struct GroupKey<'a>(Next<'a>);

impl std::hash::Hash for GroupKey<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        if self.0.key.len() <= 16 { state.write_u128(self.0.prefix) } else { state.write(self.0.key) }
    }
}

impl PartialEq for GroupKey<'_> {
    /// Two keys of up to 16 bytes with the same padded bytes and length
    /// are the same key: their bytes need no second look.
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (self.0.key, other.0.key);
        self.0.prefix == other.0.prefix && a.len() == b.len() && (a.len() <= 16 || a == b)
    }
}

impl Eq for GroupKey<'_> {}

/// Where the merge stands in one batch's partials: its next key, kept
/// with its prefix as the merge compares it many times.
struct Head<'a> {
    txid: u64,
    partials: &'a KeyedValues,
    at: usize,
    next: Next<'a>,
}

/// A key with its first 16 bytes as one number (most keys differ there).
#[derive(Clone, Copy)]
struct Next<'a> {
    prefix: u128,
    key: &'a [u8],
}

impl<'a> Next<'a> {
    fn of(key: &'a [u8]) -> Next<'a> {
        Next { prefix: super::keys::prefix(key), key }
    }

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
        Some(Head { txid, partials, at: 0, next: Next::of(key) })
    }

    fn done(&self) -> bool {
        self.at == self.partials.len()
    }

    fn value(&self) -> &'a Value {
        self.partials.get(self.at).1
    }

    /// Moves to the next key, which must come after this one.
    fn advance(&mut self) -> Result<(), StoreError> {
        self.at += 1;
        if !self.done() {
            self.next = in_order(self.txid, self.at, Some(self.next), Next::of(self.partials.key(self.at)))?;
        }
        Ok(())
    }
}

/// `next`, the key at `at` of batch `txid`'s partials, if it comes after
/// the key `before` it.
fn in_order<'a>(txid: u64, at: usize, before: Option<Next<'_>>, next: Next<'a>) -> Result<Next<'a>, StoreError> {
    if before.is_some_and(|before| next.cmp(&before) != Ordering::Greater) {
        return Err(StoreError::Refused(format!("batch {txid}'s partials are not in key order at key {at}")));
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyed::KeyedValues;
    use weir_sdk::topology::StateKind;

    fn partials(pairs: &[(&str, i64)]) -> Combines {
        let partials: KeyedValues = pairs.iter().map(|(k, v)| (k.as_bytes(), Value::I64(*v))).collect();
        Combines { kind: StateKind::Transactional, builtin: Builtin::Count, partials }
    }

    /// Each key with its partials, for a stored value that txid `written` wrote.
    fn merged(batches: &[BatchPartials<'_>], written: Option<u64>) -> Vec<(String, Vec<(u64, i64)>)> {
        let mut out = Vec::new();
        for_each_key(batches, |key, partials| {
            let partials = partials.for_stored(written);
            let partials = partials.iter().map(|(t, v)| (*t, if let Value::I64(n) = v { *n } else { -1 })).collect();
            out.push((String::from_utf8(key.to_vec()).expect("keys are words"), partials));
            Ok(())
        })
        .unwrap();
        out
    }

    fn owned(want: &[(&str, Vec<(u64, i64)>)]) -> Vec<(String, Vec<(u64, i64)>)> {
        want.iter().map(|(k, p)| (k.to_string(), p.clone())).collect()
    }

    /// `batches` from txid `first` on, with empty batches after them as a
    /// group of [`SUMMED_FROM`] needs when `large`.
    fn group(first: u64, batches: &[Combines], large: bool) -> Vec<BatchPartials<'_>> {
        static EMPTY: std::sync::LazyLock<Combines> = std::sync::LazyLock::new(|| partials(&[]));
        let padding = if large { SUMMED_FROM.saturating_sub(batches.len()) } else { 0 };
        (first..).zip(batches.iter().chain(std::iter::repeat_n(&*EMPTY, padding))).collect()
    }

    #[test]
    fn each_key_comes_once_in_order_with_its_partials_in_txid_order() {
        let batches = [
            partials(&[("b", 1), ("d", 2)]),
            partials(&[]),
            partials(&[("a", 3), ("b", 4), ("e", 5)]),
            partials(&[("b", 6), ("d", 7)]),
        ];
        let each_batch = owned(&[
            ("a", vec![(9, 3)]),
            ("b", vec![(7, 1), (9, 4), (10, 6)]),
            ("d", vec![(7, 2), (10, 7)]),
            ("e", vec![(9, 5)]),
        ]);
        // A small group: each batch's partial, whatever the stored value.
        for written in [None, Some(6), Some(9)] {
            assert_eq!(merged(&group(7, &batches, false), written), each_batch);
        }
        // A large one: the counts but the last summed, for a value older
        // than the group or none; for one its txid 9 wrote, each batch's.
        let large = group(7, &batches, true);
        let summed = owned(&[
            ("a", vec![(9, 3)]),
            ("b", vec![(7, 5), (10, 6)]),
            ("d", vec![(7, 2), (10, 7)]),
            ("e", vec![(9, 5)]),
        ]);
        assert_eq!(merged(&large, None), summed);
        assert_eq!(merged(&large, Some(6)), summed);
        assert_eq!(merged(&large, Some(9)), each_batch);
        assert_eq!(merged(&large, Some(7)), each_batch);
    }

    #[test]
    fn partials_other_than_counts_come_batch_by_batch() {
        let mut sums = [partials(&[("b", 1), ("d", 2)]), partials(&[("b", 4)])];
        for batch in &mut sums {
            batch.builtin = Builtin::Sum;
        }
        let want = owned(&[("b", vec![(1, 1), (2, 4)]), ("d", vec![(1, 2)])]);
        assert_eq!(merged(&group(1, &sums, true), None), want);
        // A count that is not a positive integer is not summed either.
        let counts = [partials(&[("b", 1)]), partials(&[("b", 0)])];
        assert_eq!(merged(&group(1, &counts, true), None), owned(&[("b", vec![(1, 1), (2, 0)])]));
    }

    #[test]
    fn counts_past_the_largest_integer_stay_there() {
        let batches = [partials(&[("x", i64::MAX)]), partials(&[("x", 1)]), partials(&[("x", 2)])];
        assert_eq!(merged(&group(1, &batches, true), None), owned(&[("x", vec![(1, i64::MAX), (3, 2)])]));
    }

    #[test]
    fn keys_sharing_their_first_16_bytes_or_padded_with_zeros_keep_their_order() {
        let long = "abcdefghijklmnop";
        let (x, y) = (format!("{long}b"), format!("{long}a"));
        let batches = [partials(&[("ab", 1), (&y, 2)]), partials(&[("ab\0", 3), (&x, 4), (&format!("{x}c"), 5)])];
        for large in [false, true] {
            let keys: Vec<String> = merged(&group(1, &batches, large), None).into_iter().map(|(k, _)| k).collect();
            assert_eq!(keys, ["ab", "ab\0", y.as_str(), x.as_str(), &format!("{x}c")], "large: {large}");
        }
    }

    #[test]
    fn a_batch_whose_partials_are_out_of_key_order_is_refused() {
        for second in [[("c", 1), ("b", 2)], [("b", 1), ("b", 2)]] {
            let mut batches = [partials(&[("a", 1)]), partials(&second)];
            for builtin in [Builtin::Count, Builtin::Sum] {
                batches[1].builtin = builtin;
                for large in [false, true] {
                    let err = for_each_key(&group(1, &batches, large), |_, _| Ok(())).unwrap_err();
                    let (err, case) = (err.to_string(), format!("{second:?}, {builtin:?}, large: {large}"));
                    assert!(err.contains("batch 2's partials are not in key order at key 1"), "{case}: {err}");
                }
            }
        }
    }

    #[test]
    fn one_batch_gives_its_partials_as_they_are() {
        let a = partials(&[("x", 1), ("y", 2)]);
        assert_eq!(merged(&[(3, &a)], Some(3)), owned(&[("x", vec![(3, 1)]), ("y", vec![(3, 2)])]));
        assert!(merged(&[], None).is_empty());
    }
}
