//! Aggregations: within a partition or a batch, grouped or not, with the
//! host's built-ins or a guest's combiner, reducer or general aggregator.
//! Counting by key, the commonest, has a path of its own ([`super::count`]).

use super::context::Exec;
use super::error::malformed;
use super::parts::{Parts, fit, gather, push_kept};
use crate::instances::{Instances, Request};
use std::collections::HashMap;
use weir_plan::{Aggregator, Node, Op};
use weir_runtime::BatchError;
use weir_runtime::PartitionId;
use weir_sdk::codec::{Batch, BatchWriter, Value, ValueRef};
use weir_sdk::operator::Builtin;
use weir_sdk::topology::{AggregateScope, AggregatorKind};
use weir_state::keys;

/// Hash maps keyed by encoded group keys: short byte strings, so a fast
/// non-cryptographic hash is the right one; seeded per map, because the
/// values come from inputs and guests, which must not be able to choose keys
/// that all collide. Nothing is read from them in hash order.
type KeyMap<V> = HashMap<Vec<u8>, V, foldhash::fast::RandomState>;

/// The rows of `batch` in groups by the fields at `group`: each group's
/// encoded key and first row, and each row's group. Ungrouped, one group
/// even for no rows.
pub(super) struct Groups {
    pub(super) keys: Vec<Vec<u8>>,
    first: Vec<usize>,
    pub(super) of_row: Vec<u32>,
}

impl Groups {
    /// `count` groups, known by index only, row `r` in group `of_row[r]`.
    pub(super) fn tagged(count: usize, of_row: Vec<u32>) -> Groups {
        Groups { keys: vec![Vec::new(); count], first: Vec::new(), of_row }
    }
}

pub(super) fn groups(batch: &Batch<'_>, group: &[usize]) -> Groups {
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
pub(super) fn tagged_input(batch: &Batch<'_>, groups: &Groups, aggregator: &Aggregator) -> Vec<u8> {
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
pub(super) fn run_aggregator(
    instances: &mut Instances,
    batch_id: PartitionId,
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
    batch_id: PartitionId,
    node: &Node,
    group: &[usize],
    aggregators: &[Aggregator],
    batch: &Batch<'static>,
) -> Result<Batch<'static>, BatchError> {
    let groups = groups(batch, group);
    let results: Vec<Vec<Vec<Vec<Value>>>> =
        aggregators.iter().map(|a| run_aggregator(instances, batch_id, batch, &groups, a)).collect::<Result<_, _>>()?;
    // Each group's output takes the least tag of its rows: the first spout
    // tuple it holds, where rows carry theirs.
    let mut tags = vec![u32::MAX; groups.keys.len()];
    for (row, &g) in batch.rows().zip(&groups.of_row) {
        tags[g as usize] = tags[g as usize].min(row.tag());
    }
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
            writer.begin_row(if tags[g] == u32::MAX { 0 } else { tags[g] });
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
    let batch = exec.batch;
    match scope {
        AggregateScope::Partition => {
            let parts = fit(input, node.parallelism, exec.plan.tags_origins());
            exec.per_partition(&parts, |instances, p, part| {
                aggregate_part(instances, batch.partition(p), node, group, aggregators, part)
            })
        }
        AggregateScope::Batch => {
            let all = gather(input);
            let out = aggregate_part(&mut exec.instances[0], batch.partition(0), node, group, aggregators, &all)?;
            Ok(super::parts::fit_owned(vec![out], node.parallelism, exec.plan.tags_origins()))
        }
    }
}
