//! Aggregations: within a partition or a batch, grouped or not, with the
//! host's built-ins or a guest's combiner, reducer or general aggregator;
//! and a persistent aggregate's partials, made in the process phase when
//! its aggregator allows.

use super::{BatchError, Exec, Parts, fit, gather, malformed, push_kept};
use crate::instances::{Instances, Request};
use crate::plan::{Aggregator, Node, Op};
use crate::state::keyed::KeyedValues;
use crate::state::keys;
use std::collections::HashMap;
use weir_sdk::codec::{Batch, BatchWriter, Value, ValueRef, read_value};
use weir_sdk::operator::Builtin;
use weir_sdk::topology::{AggregateScope, AggregatorKind};

/// Hash maps keyed by encoded group keys: short byte strings, so a fast
/// non-cryptographic hash is the right one; seeded per map, because the
/// values come from inputs and guests, which must not be able to choose keys
/// that all collide. Nothing is read from them in hash order.
type KeyMap<V> = HashMap<Vec<u8>, V, foldhash::fast::RandomState>;

/// A batch's contribution to a persistent aggregate, by key (sorted).
pub enum Partials {
    /// One partial value per key, to combine with the stored value.
    Values(KeyedValues),
    /// The aggregator's input rows, tagged with their key's index, to fold
    /// from the stored value (a reducer).
    Rows {
        /// Keys, in group order.
        keys: Vec<Vec<u8>>,
        /// The rows, packed, tagged with their group.
        rows: Vec<u8>,
    },
}

/// The rows of `batch` in groups by the fields at `group`: each group's
/// encoded key and first row, and each row's group. Ungrouped, one group
/// even for no rows.
struct Groups {
    keys: Vec<Vec<u8>>,
    first: Vec<usize>,
    of_row: Vec<u32>,
}

fn groups(batch: &Batch<'_>, group: &[usize]) -> Groups {
    if group.is_empty() {
        return Groups { keys: vec![Vec::new()], first: vec![0], of_row: vec![0; batch.len()] };
    }
    let mut index: KeyMap<u32> = KeyMap::default();
    let mut out = Groups { keys: Vec::new(), first: Vec::new(), of_row: Vec::with_capacity(batch.len()) };
    let mut key = Vec::new();
    for (r, row) in batch.rows().enumerate() {
        key.clear();
        for &p in group {
            keys::encode_value(&mut key, row.get(p).expect("position within arity"));
        }
        let g = match index.get(key.as_slice()) {
            Some(&g) => g,
            None => {
                let g = out.keys.len() as u32;
                index.insert(key.clone(), g);
                out.keys.push(key.clone());
                out.first.push(r);
                g
            }
        };
        out.of_row.push(g);
    }
    out
}

/// The aggregator's input rows, tagged with their group.
fn tagged_input(batch: &Batch<'_>, groups: &Groups, aggregator: &Aggregator) -> Vec<u8> {
    let mut writer = BatchWriter::new(aggregator.input.positions.len());
    for (row, &g) in batch.rows().zip(&groups.of_row) {
        writer.begin_row(g);
        push_kept(&mut writer, row, &aggregator.input.positions);
    }
    writer.finish()
}

/// A built-in's value per group.
fn builtin_values(
    batch: &Batch<'_>,
    groups: &Groups,
    builtin: Builtin,
    aggregator: &Aggregator,
) -> Result<Vec<Value>, BatchError> {
    let mut values = vec![builtin.zero(); groups.keys.len()];
    if builtin == Builtin::Count {
        let mut counts = vec![0i64; groups.keys.len()];
        for &g in &groups.of_row {
            counts[g as usize] += 1;
        }
        return Ok(counts.into_iter().map(Value::I64).collect());
    }
    let field = aggregator.input.positions[0];
    for (row, &g) in batch.rows().zip(&groups.of_row) {
        let value = row.get(field).expect("position within arity").to_owned();
        let slot = &mut values[g as usize];
        let acc = std::mem::replace(slot, Value::Null);
        *slot = builtin.combine(acc, value).map_err(|e| BatchError::fatal(&aggregator.id, e.to_string()))?;
    }
    Ok(values)
}

/// Reads a guest's answer of one value per group, tagged 0, 1, ...
pub(super) fn single_values(operator: &str, out: &[u8], expected: usize) -> Result<Vec<Value>, BatchError> {
    let batch = Batch::decode(out).map_err(|e| malformed(operator, e))?;
    if batch.arity() != 1 || batch.len() != expected {
        return Err(malformed(
            operator,
            format!("{} rows of {} values, expected {expected} rows of 1", batch.len(), batch.arity()),
        ));
    }
    let mut values = Vec::with_capacity(expected);
    for (index, row) in batch.rows().enumerate() {
        if row.tag() as usize != index {
            return Err(malformed(operator, format!("row {index} is tagged {}", row.tag())));
        }
        values.push(row.get(0).expect("arity 1").to_owned());
    }
    Ok(values)
}

/// Each group's output tuples of one aggregator.
fn run_aggregator(
    instances: &mut Instances,
    batch_id: (u64, u32, u32),
    batch: &Batch<'_>,
    groups: &Groups,
    aggregator: &Aggregator,
) -> Result<Vec<Vec<Vec<Value>>>, BatchError> {
    let count = groups.keys.len();
    let id = &aggregator.id;
    let names = &aggregator.input.names;
    let singles = |values: Vec<Value>| values.into_iter().map(|v| vec![vec![v]]).collect();
    Ok(match aggregator.kind {
        AggregatorKind::Builtin(builtin) => singles(builtin_values(batch, groups, builtin, aggregator)?),
        AggregatorKind::Combiner => {
            let input = tagged_input(batch, groups, aggregator);
            let out = instances.call(id, batch_id, names, Request::CombineGroups(count as u32, &input))?;
            singles(single_values(id, &out, count)?)
        }
        AggregatorKind::Reducer => {
            let input = tagged_input(batch, groups, aggregator);
            let start = BatchWriter::new(1).finish();
            let out = instances.call(id, batch_id, names, Request::ReduceGroups(count as u32, &start, &input))?;
            singles(single_values(id, &out, count)?)
        }
        AggregatorKind::General => {
            let input = tagged_input(batch, groups, aggregator);
            let out = instances.call(id, batch_id, names, Request::AggregateGroups(count as u32, &input))?;
            let emitted = Batch::decode(&out).map_err(|e| malformed(id, e))?;
            if emitted.arity() != aggregator.outputs {
                return Err(malformed(
                    id,
                    format!("rows of {} values for {} output fields", emitted.arity(), aggregator.outputs),
                ));
            }
            let mut per_group = vec![Vec::new(); count];
            for row in emitted.rows() {
                let slot = per_group
                    .get_mut(row.tag() as usize)
                    .ok_or_else(|| malformed(id, format!("a row tagged with group {} of {count}", row.tag())))?;
                slot.push(row.values().map(ValueRef::to_owned).collect());
            }
            per_group
        }
    })
}

/// One partition's (or the batch's) aggregation: per group, the group
/// fields then one tuple of each aggregator, every combination of them.
fn aggregate_part(
    instances: &mut Instances,
    batch_id: (u64, u32, u32),
    node: &Node,
    group: &[usize],
    aggregators: &[Aggregator],
    batch: &Batch<'static>,
) -> Result<Batch<'static>, BatchError> {
    let groups = groups(batch, group);
    let results: Vec<Vec<Vec<Vec<Value>>>> =
        aggregators.iter().map(|a| run_aggregator(instances, batch_id, batch, &groups, a)).collect::<Result<_, _>>()?;
    let mut writer = BatchWriter::new(node.fields.len());
    for g in 0..groups.keys.len() {
        let mut combos: Vec<Vec<&Value>> = vec![Vec::new()];
        for per_aggregator in &results {
            combos = combos
                .iter()
                .flat_map(|prefix| {
                    per_aggregator[g].iter().map(move |tuple| prefix.iter().copied().chain(tuple).collect())
                })
                .collect();
        }
        for combo in combos {
            writer.begin_row(0);
            if !group.is_empty() {
                push_kept(&mut writer, batch.row(groups.first[g]), group);
            }
            for value in combo {
                writer.push(value.as_ref());
            }
        }
    }
    Ok(writer.finish_batch())
}

/// `partition_aggregate` and `aggregate`.
pub(super) fn aggregate(exec: &mut Exec<'_>, node: &Node, input: &Parts) -> Result<Parts, BatchError> {
    let Op::Aggregate { scope, group, aggregators } = &node.op else { unreachable!("an aggregate node") };
    let (txid, attempt) = (exec.txid, exec.attempt);
    match scope {
        AggregateScope::Partition => {
            let parts = fit(input, node.parallelism);
            exec.per_partition(&parts, |instances, p, part| {
                aggregate_part(instances, (txid, attempt, p), node, group, aggregators, part)
            })
        }
        AggregateScope::Batch => {
            let all = gather(input);
            let out = aggregate_part(&mut exec.instances[0], (txid, attempt, 0), node, group, aggregators, &all)?;
            Ok(super::fit_owned(vec![out], node.parallelism))
        }
    }
}

/// A persistent aggregate's partials for a batch: per key, a partial value
/// (built-ins and combiners), or the rows to fold (reducers).
pub(super) fn partials(exec: &mut Exec<'_>, node: &Node, input: &Parts) -> Result<Partials, BatchError> {
    let Op::PersistentAggregate { group, aggregator, .. } = &node.op else { unreachable!("a persistent aggregate") };
    let batch = gather(input);
    let batch_id = (exec.txid, exec.attempt, 0);
    if aggregator.kind == AggregatorKind::Builtin(Builtin::Count) && !group.is_empty() {
        return Ok(Partials::Values(count_by_key(&batch, group)));
    }
    let groups = groups(&batch, group);
    if aggregator.kind == AggregatorKind::Reducer {
        let rows = tagged_input(&batch, &groups, aggregator);
        return Ok(Partials::Rows { keys: groups.keys, rows });
    }
    let values = run_aggregator(&mut exec.instances[0], batch_id, &batch, &groups, aggregator)?;
    let mut partials: Vec<(Vec<u8>, Value)> = groups
        .keys
        .into_iter()
        .zip(values)
        .map(|(key, mut tuples)| (key, tuples.pop().and_then(|mut t| t.pop()).unwrap_or(Value::Null)))
        .collect();
    partials.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(Partials::Values(partials.into_iter().collect()))
}

/// Counts per key, the commonest aggregation, in one pass. Tuples are
/// counted by their group values' packed bytes, read in place; a key of one
/// field of up to 16 packed bytes (a word, a number) is read as two words,
/// so that hashing and comparing it costs a few instructions. Each distinct
/// key becomes the store's key once.
fn count_by_key(batch: &Batch<'_>, group: &[usize]) -> KeyedValues {
    #[inline(always)]
    fn field(row: weir_sdk::codec::Row<'_>, p: usize) -> &[u8] {
        row.encoded_values().nth(p).expect("position within arity").bytes()
    }
    // Per short key, its count and its first row (a batch's rows are
    // counted in u32): 24 bytes an entry, so that more of the map stays in
    // cache. Room for a key per eight rows up front: growing the map moves
    // every key counted so far.
    let mut short: KeyMapOf<ShortKey, (u32, u32)> =
        KeyMapOf::with_capacity_and_hasher(batch.len() / 8, Default::default());
    let mut long: KeyMapOf<Vec<u8>, i64> = KeyMapOf::default();
    let mut packed = Vec::new();
    for (r, row) in batch.rows().enumerate() {
        if let [p] = group
            && let Some(key) = ShortKey::of(field(row, *p))
        {
            short.entry(key).or_insert((0, r as u32)).0 += 1;
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
    let mut counted = KeyedValues::with_capacity(distinct, 16 * distinct);
    let mut key = Vec::with_capacity(32);
    for (count, r) in short.into_values() {
        key.clear();
        keys::encode_value(&mut key, batch.row(r as usize).get(group[0]).expect("position within arity"));
        counted.push(&key, Value::I64(i64::from(count)));
    }
    for (packed, count) in long {
        counted.push(&store_key(&packed, group.len()), Value::I64(count));
    }
    // Sorted by each key's first 16 bytes as an integer, then by the whole
    // key: most comparisons are one integer comparison, and what moves is
    // the integer and an index.
    let mut order: Vec<(u128, u32)> = counted.iter().enumerate().map(|(i, (k, _))| (key_prefix(k), i as u32)).collect();
    sort_by_prefix(&mut order);
    // Keys longer than 16 bytes may share their prefix: order those runs by
    // the whole key.
    for run in order.chunk_by_mut(|a, b| a.0 == b.0).filter(|run| run.len() > 1) {
        run.sort_unstable_by(|a, b| counted.key(a.1 as usize).cmp(counted.key(b.1 as usize)));
    }
    let mut sorted = KeyedValues::with_capacity(order.len(), 16 * order.len());
    for (_, i) in order {
        let (key, count) = counted.get(i as usize);
        sorted.push(key, count.clone());
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
/// prefix shares (a key's kind, the zeros past a short key's end). A few
/// passes over the pairs cost less than the comparisons of a sort.
fn sort_by_prefix(pairs: &mut Vec<(u128, u32)>) {
    let mut sorted = vec![(0u128, 0u32); pairs.len()];
    for shift in (0..128).step_by(8) {
        let digit = |prefix: u128| (prefix >> shift) as u8 as usize;
        let mut starts = [0usize; 256];
        for &(prefix, _) in pairs.iter() {
            starts[digit(prefix)] += 1;
        }
        if starts.contains(&pairs.len()) {
            continue;
        }
        let mut next = 0;
        for start in starts.iter_mut() {
            (*start, next) = (next, next + *start);
        }
        for &pair in pairs.iter() {
            let at = &mut starts[digit(pair.0)];
            sorted[*at] = pair;
            *at += 1;
        }
        std::mem::swap(pairs, &mut sorted);
    }
}

/// The first 16 bytes of a store key as an integer that sorts as they do.
fn key_prefix(key: &[u8]) -> u128 {
    let mut bytes = [0u8; 16];
    let n = key.len().min(16);
    bytes[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(bytes)
}

/// Counts by key, seeded per map as [`KeyMap`] is. foldhash rather than Fx:
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
        let mut pairs: Vec<(u128, u32)> =
            (0..2000u32).map(|i| ((u128::from(i % 700) * 0x0101_0003) << 40, i)).collect();
        pairs.push((u128::MAX, 2000));
        pairs.push((0, 2001));
        let mut expected = pairs.clone();
        expected.sort_unstable();
        sort_by_prefix(&mut pairs);
        assert_eq!(pairs, expected);
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
