//! Counting by key, the commonest aggregation (a word count's), on a path
//! of its own: one pass over the batch reading each key's packed bytes in
//! place, and the counts sorted into the store's key order by a radix sort.

use std::collections::HashMap;
use weir_sdk::codec::{Batch, Value, ValueEncoding, ValueKind, read_value};
use weir_state::keyed::KeyedValues;
use weir_state::keys;

/// Keys the map of a batch's counts has room for before it grows: 12,288
/// keys take 16,384 buckets of 24 bytes, most of a core's 512 KiB of L2
/// cache. At batch 100,000 a room of a key per eight rows spread a word
/// count's 10,000 keys over 3 MiB, and each probe missed the cache.
const MAX_INITIAL_KEYS: usize = 12 * 1024;

thread_local! {
    /// Short keys the thread's last batch counted: most batches of a
    /// stream have about as many, and a map made with room for them
    /// never grows (at batch 1,000 a word count's map grew twice a batch).
    static LAST_DISTINCT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts per key, the commonest aggregation, in one pass. Tuples are
/// counted by their group values' packed bytes, read in place; a key of one
/// field of up to 16 packed bytes (a word, a number) is read as two words,
/// so that hashing and comparing it costs a few instructions. Each distinct
/// key becomes the store's key once.
pub(super) fn count_by_key(batch: &Batch<'_>, group: &[usize]) -> KeyedValues {
    count_rows_by_key(batch, 0..batch.len(), group)
}

/// [`count_by_key`] over the rows of `batch` at `rows`.
pub(super) fn count_rows_by_key(
    batch: &Batch<'_>,
    rows: impl ExactSizeIterator<Item = usize>,
    group: &[usize],
) -> KeyedValues {
    #[inline(always)]
    fn field(row: weir_sdk::codec::Row<'_>, p: usize) -> &[u8] {
        row.encoded_values().nth(p).expect("position within arity").bytes()
    }
    // Per short key, its count (a batch's rows are counted in u32): 24
    // bytes an entry, so that more of the map stays in cache. Room up
    // front for as many keys as the thread's last batch had, or a key per
    // eight rows, as growing the map moves every key counted so far; no
    // more than a core's cache holds.
    let room = (rows.len() / 8).max(LAST_DISTINCT.get()).min(MAX_INITIAL_KEYS);
    let mut short: KeyMapOf<ShortKey, u32> = KeyMapOf::with_capacity_and_hasher(room, Default::default());
    let mut long: KeyMapOf<Vec<u8>, i64> = KeyMapOf::default();
    let mut packed = Vec::new();
    for r in rows {
        let row = batch.row(r);
        if let [p] = group
            && let Some(key) = ShortKey::of(field(row, *p))
        {
            *short.entry(key).or_insert(0) += 1;
            continue;
        }
        packed.clear();
        for &p in group {
            packed.extend_from_slice(field(row, p));
        }
        match long.get_mut(packed.as_slice()) {
            Some(count) => *count += 1,
            None => {
                long.insert(packed.clone(), 1);
            }
        }
    }
    let distinct = short.len() + long.len();
    LAST_DISTINCT.set(short.len());
    // Each key encoded once, packed, with its count; then pushed in key
    // order. The value is read back from the key itself: a row found
    // again by its index was a cache miss per key at large batches.
    let mut encoded = Vec::with_capacity(16 * distinct);
    let mut ends: Vec<u32> = Vec::with_capacity(distinct);
    let mut counts: Vec<i64> = Vec::with_capacity(distinct);
    let mut end = |encoded: &Vec<u8>, count: i64| {
        ends.push(u32::try_from(encoded.len()).expect("a batch's keys take at most 4 GiB"));
        counts.push(count);
    };
    for (short_key, count) in short {
        short_key.encode(&mut encoded);
        end(&encoded, i64::from(count));
    }
    for (packed, count) in long {
        encoded.extend_from_slice(&store_key(&packed, group.len()));
        end(&encoded, count);
    }
    let key = |i: u32| {
        let start = i.checked_sub(1).map_or(0, |before| ends[before as usize] as usize);
        &encoded[start..ends[i as usize] as usize]
    };
    // Sorted by each key's first 8 bytes as an integer, then by the whole
    // key: what moves is the integer and an index, 16 bytes.
    let mut order: Vec<(u64, u32)> = (0..distinct as u32).map(|i| ((keys::prefix(key(i)) >> 64) as u64, i)).collect();
    sort_by_prefix(&mut order);
    // Keys longer than 8 bytes may share their prefix: order those runs by
    // the whole key.
    for run in order.chunk_by_mut(|a, b| a.0 == b.0).filter(|run| run.len() > 1) {
        run.sort_unstable_by(|a, b| key(a.1).cmp(key(b.1)));
    }
    let mut sorted = KeyedValues::with_capacity(distinct, encoded.len());
    for (_, i) in order {
        sorted.push(key(i), Value::I64(counts[i as usize]));
    }
    sorted
}

/// An encoded value of 1 to 16 bytes, zero-padded into two words. An
/// encoded value says where it ends, so no two share their padded words.
#[derive(Clone, Copy, PartialEq, Eq)]
struct ShortKey(u64, u64);

impl std::hash::Hash for ShortKey {
    /// Both words in one step: foldhash folds 128 bits with one multiply,
    /// as it does 64, and mixing the words first with a fixed function
    /// would let anyone pick keys that collide whatever the seed.
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u128(u128::from(self.0) | u128::from(self.1) << 64);
    }
}

impl ShortKey {
    /// Appends the store's key for the value: a string's bytes as they
    /// are (the batch they came from was checked), other values decoded.
    #[inline]
    fn encode(self, key: &mut Vec<u8>) {
        let padded = (u128::from(self.0) | u128::from(self.1) << 64).to_le_bytes();
        match ValueKind::from_byte(padded[0]) {
            Some(kind @ (ValueKind::Str | ValueKind::Bytes)) => {
                let len = u32::from_le_bytes(padded[1..5].try_into().expect("4 bytes")) as usize;
                keys::Ordered::bytes(key, kind, &padded[5..5 + len]);
            }
            _ => keys::encode_value(key, read_value(&padded).expect("a short key holds a whole value").0),
        }
    }

    /// Reads the bytes as overlapping fixed-size chunks, shifting off the
    /// bytes one chunk shares with the other.
    #[inline]
    fn of(bytes: &[u8]) -> Option<ShortKey> {
        let n = bytes.len();
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let half = |at: usize| u64::from(u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")));
        let byte = |at: usize| u64::from(bytes[at]) << (8 * at);
        Some(match n {
            9..=16 => ShortKey(word(0), word(n - 8) >> (8 * (16 - n))),
            8 => ShortKey(word(0), 0),
            4..=7 => ShortKey(half(0) | (half(n - 4) >> (8 * (8 - n))) << 32, 0),
            1..=3 => ShortKey(byte(0) | byte(n / 2) | byte(n - 1), 0),
            _ => return None,
        })
    }
}

/// Sorts `(prefix, index)` pairs by prefix, equal prefixes in index order:
/// a radix sort, a byte at a time from the last, that skips the bytes every
/// prefix shares (a key's kind, the zeros past a short key's end). Every
/// byte's counts come from one pass, then a pass a byte moves the pairs;
/// for fewer than [`RADIX_FROM`] pairs a comparison sort costs less.
fn sort_by_prefix(pairs: &mut Vec<(u64, u32)>) {
    if pairs.len() < RADIX_FROM {
        pairs.sort_unstable();
        return;
    }
    let mut counts = [[0usize; 256]; 8];
    for &(prefix, _) in pairs.iter() {
        for (byte, counts) in prefix.to_le_bytes().into_iter().zip(counts.iter_mut()) {
            counts[usize::from(byte)] += 1;
        }
    }
    let mut sorted = vec![(0u64, 0u32); pairs.len()];
    for (at_byte, mut starts) in counts.into_iter().enumerate() {
        if starts.contains(&pairs.len()) {
            continue;
        }
        let mut next = 0;
        for start in starts.iter_mut() {
            (*start, next) = (next, next + *start);
        }
        let digit = |prefix: u64| usize::from(prefix.to_le_bytes()[at_byte]);
        for &pair in pairs.iter() {
            let at = &mut starts[digit(pair.0)];
            sorted[*at] = pair;
            *at += 1;
        }
        std::mem::swap(pairs, &mut sorted);
    }
}

/// Pairs from which the radix sort is the faster: a batch of 1,000
/// sentences has about 2,400 words, which the radix sort orders in half
/// of a comparison sort's time, and a third at 8,000.
const RADIX_FROM: usize = 512;

/// Counts by key, seeded per map as [`super::aggregate::KeyMap`] is. foldhash rather than Fx:
/// with Fx, probing past keys that share a bucket took most of the counting
/// time of a word count.
type KeyMapOf<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The store's key for the first `values` values packed in `packed`, as
/// in a batch.
fn store_key(mut packed: &[u8], values: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(packed.len() + 2);
    for _ in 0..values {
        let (value, rest) = read_value(packed).expect("values of a valid batch");
        keys::encode_value(&mut key, value);
        packed = rest;
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use weir_sdk::codec::{BatchWriter, ValueRef};

    /// Counts as a plain map would make them, sorted by store key.
    fn expected(batch: &Batch<'_>, group: &[usize]) -> Vec<(Vec<u8>, Value)> {
        let mut counts = BTreeMap::new();
        for row in batch.rows() {
            *counts.entry(keys::encode(group.iter().map(|&p| row.get(p).unwrap()))).or_insert(0) += 1;
        }
        counts.into_iter().map(|(key, n)| (key, Value::I64(n))).collect()
    }

    #[test]
    fn a_short_key_is_its_bytes_zero_padded() {
        let bytes: Vec<u8> = (1..=16u8).map(|b| b.wrapping_mul(151) | 1).collect();
        for n in 1..=16 {
            let mut padded = [0u8; 16];
            padded[..n].copy_from_slice(&bytes[..n]);
            let words = (
                u64::from_le_bytes(padded[..8].try_into().unwrap()),
                u64::from_le_bytes(padded[8..].try_into().unwrap()),
            );
            let key = ShortKey::of(&bytes[..n]).unwrap();
            assert_eq!((key.0, key.1), words, "{n} bytes");
        }
        assert!(ShortKey::of(&[]).is_none() && ShortKey::of(&[1; 17]).is_none());
    }

    #[test]
    fn pairs_sort_by_prefix_then_index() {
        // Below and above the size the radix sort takes over from.
        for n in [RADIX_FROM as u32 / 2, 4 * RADIX_FROM as u32] {
            let mut pairs: Vec<(u64, u32)> = (0..n).map(|i| ((u64::from(i % 700) * 0x0101_0003) << 24, i)).collect();
            pairs.push((u64::MAX, n));
            pairs.push((0, n + 1));
            let mut expected = pairs.clone();
            expected.sort_unstable();
            sort_by_prefix(&mut pairs);
            assert_eq!(pairs, expected, "{n} pairs");
        }
    }

    #[test]
    fn counts_by_key_match_a_plain_count_for_short_long_and_compound_keys() {
        let values = [
            ValueRef::Null,
            ValueRef::Bool(true),
            ValueRef::I64(-3),
            ValueRef::I64(7),
            ValueRef::F64(1.5),
            ValueRef::Str(""),
            ValueRef::Str("a"),
            ValueRef::Str("ab"),
            ValueRef::Str("abc\0"),
            ValueRef::Str("w1234567"),
            ValueRef::Str("w12345678901"),
            ValueRef::Str("a word longer than sixteen bytes"),
            ValueRef::Bytes(&[0, 0, 1]),
        ];
        let mut writer = BatchWriter::new(2);
        for (i, a) in values.iter().enumerate() {
            for (j, b) in values.iter().enumerate() {
                for _ in 0..=(i + j) % 3 {
                    writer.push_row(0, [*a, *b]).unwrap();
                }
            }
        }
        let batch = writer.finish_batch();
        for group in [&[0][..], &[1], &[0, 1], &[1, 0]] {
            let counted: Vec<_> = count_by_key(&batch, group).into_pairs().collect();
            assert_eq!(counted, expected(&batch, group), "grouped by {group:?}");
        }
    }
}
