//! Operations on state, in the commit phase (or a query): persistent
//! aggregates, state updaters and state queries.

use super::aggregate::{Partials, single_values};
use super::{BatchError, Exec, Origin, Parts, fit, guest_input, malformed, push_kept, state_failure};
use crate::instances::Request;
use crate::plan::{Node, Op};
use crate::state::keyed::KeyedValues;
use crate::state::keys;
use crate::state::view::{Base, Views};
use std::sync::{Arc, Mutex, MutexGuard};
use weir_sdk::codec::{Batch, BatchWriter, Value, ValueRef};
use weir_sdk::operator::Builtin;
use weir_sdk::topology::{AggregatorKind, QueryDef};

fn lock(views: &Arc<Mutex<Views>>) -> MutexGuard<'_, Views> {
    views.lock().unwrap_or_else(|e| e.into_inner())
}

fn storage(state: &str) -> impl Fn(anyhow::Error) -> BatchError + '_ {
    move |e| state_failure(state, format!("commit failed: {e:#}"), &e, Origin::State)
}

/// Combines a batch's partials (or folds its rows) into the stored values,
/// by Trident's rules, and emits the new values: the group fields, then
/// the value.
pub(super) fn persistent_aggregate(exec: &mut Exec<'_>, node: &Node, partials: Partials) -> Result<Parts, BatchError> {
    let Op::PersistentAggregate { state, aggregator, in_place, .. } = &node.op else {
        unreachable!("a persistent aggregate")
    };
    let views = exec.views(node)?;
    let partials = match (partials, aggregator.kind) {
        (Partials::Values(values), AggregatorKind::Builtin(builtin)) => {
            return combine_in_host(*in_place, views, node, state, &aggregator.id, builtin, values);
        }
        (partials, _) => partials,
    };
    let keys: Vec<Vec<u8>> = match &partials {
        Partials::Values(values) => values.iter().map(|(k, _)| k.to_vec()).collect(),
        Partials::Rows { keys, .. } => keys.clone(),
    };
    let bases: Vec<Base> = {
        let mut views = lock(views);
        keys.iter().map(|key| views.base(state, key)).collect::<anyhow::Result<_>>().map_err(storage(state))?
    };
    let id = &aggregator.id;
    let fresh: Vec<Value> = match partials {
        Partials::Values(values) => {
            let mut pairs = BatchWriter::new(2);
            let mut combined = Vec::with_capacity(values.len());
            // Built-ins went to `combine_in_host`: this is a guest combiner,
            // called once for every key that has a stored value.
            for (index, (partial, base)) in values.into_values().into_iter().zip(&bases).enumerate() {
                combined.push(match base {
                    Base::Value(stored) => {
                        pairs.push_row(index as u32, [stored.as_ref(), partial.as_ref()]).expect("two values");
                        Value::Null
                    }
                    _ => partial,
                });
            }
            if pairs.rows() > 0 {
                let pairs = pairs.finish_batch();
                let fields = ["stored".to_owned(), "partial".to_owned()];
                let out = exec.call(0, id, &fields, Request::CombinePairs(pairs.bytes()))?;
                let values = single_values_tagged(id, &out, &pairs)?;
                for (index, value) in values {
                    combined[index] = value;
                }
            }
            combined
        }
        Partials::Rows { keys, rows } => {
            let mut start = BatchWriter::new(1);
            for (g, base) in bases.iter().enumerate() {
                if let Base::Value(stored) = base {
                    start.push_row(g as u32, [stored.as_ref()]).expect("one value");
                }
            }
            let fields = node_input_names(node);
            let out = exec.call(0, id, &fields, Request::ReduceGroups(keys.len() as u32, &start.finish(), &rows))?;
            single_values(id, &out, keys.len())?
        }
    };
    let mut writer = BatchWriter::new(node.fields.len());
    let emit = !node.children.is_empty();
    let mut views = lock(views);
    for ((key, base), value) in keys.into_iter().zip(bases).zip(fresh) {
        let value = match base {
            Base::Applied(stored) => stored,
            _ => {
                views.put(state, key.clone(), value.clone()).map_err(storage(state))?;
                value
            }
        };
        if emit {
            push_new_value(&mut writer, &key, value.as_ref()).map_err(storage(state))?;
        }
    }
    Ok(super::fit_owned(vec![writer.finish_batch()], node.parallelism))
}

/// A new-values row: the group fields (decoded from the key), then the value.
fn push_new_value(writer: &mut BatchWriter, key: &[u8], value: ValueRef<'_>) -> anyhow::Result<()> {
    writer.begin_row(0);
    for group_value in keys::decode(key)? {
        writer.push(group_value.as_ref());
    }
    writer.push(value);
    Ok(())
}

/// The commonest persistent aggregate: a built-in's partials combined
/// with the stored values key by key, one lookup each.
fn combine_in_host(
    in_place: bool,
    views: &Arc<Mutex<Views>>,
    node: &Node,
    state: &str,
    id: &str,
    builtin: Builtin,
    values: KeyedValues,
) -> Result<Parts, BatchError> {
    let emit = !node.children.is_empty();
    let mut views = lock(views);
    if in_place {
        views.combine_at_commit(state, builtin, values).map_err(storage(state))?;
        return Ok(vec![BatchWriter::new(node.fields.len()).finish_batch(); node.parallelism]);
    }
    let mut emitted = Vec::new();
    let mut failed = None;
    for (key, partial) in values.into_pairs() {
        if emit {
            emitted.push(key.clone());
        }
        let combined = views.update(state, key, |base| match base {
            Base::Value(stored) => builtin.combine(stored, partial).map_err(|e| {
                let error = anyhow::anyhow!("{e}");
                failed = Some(BatchError::fatal(id, e.to_string()));
                error
            }),
            _ => Ok(partial),
        });
        if let Some(error) = failed.take() {
            return Err(error);
        }
        combined.map_err(storage(state))?;
    }
    let mut writer = BatchWriter::new(node.fields.len());
    for key in emitted {
        let value = views.base(state, &key).map_err(storage(state))?;
        push_new_value(&mut writer, &key, value.value().map_or(ValueRef::Null, Value::as_ref))
            .map_err(storage(state))?;
    }
    Ok(super::fit_owned(vec![writer.finish_batch()], node.parallelism))
}

fn node_input_names(node: &Node) -> Vec<String> {
    match &node.op {
        Op::PersistentAggregate { aggregator, .. } => aggregator.input.names.clone(),
        _ => Vec::new(),
    }
}

/// A combiner's answer to `pairs`: one value per pair, tagged as the pair was.
fn single_values_tagged(id: &str, out: &[u8], pairs: &Batch<'_>) -> Result<Vec<(usize, Value)>, BatchError> {
    let values = Batch::decode(out).map_err(|e| malformed(id, e))?;
    if values.arity() != 1 || values.len() != pairs.len() {
        return Err(malformed(id, format!("{} values for {} pairs", values.len(), pairs.len())));
    }
    values
        .rows()
        .zip(pairs.rows())
        .map(|(value, pair)| {
            if value.tag() != pair.tag() {
                return Err(malformed(id, format!("value tagged {} answers pair {}", value.tag(), pair.tag())));
            }
            Ok((value.tag() as usize, value.get(0).expect("arity 1").to_owned()))
        })
        .collect()
}

/// A guest state updater over each partition, in turn.
pub(super) fn partition_persist(exec: &mut Exec<'_>, node: &Node, input: &Parts) -> Result<Parts, BatchError> {
    let Op::PartitionPersist { state, input: reads, outputs } = &node.op else { unreachable!("a partition persist") };
    let parts = fit(input, node.parallelism);
    let mut out = Vec::with_capacity(parts.len());
    for (p, part) in parts.iter().enumerate() {
        let handle = exec.state(node, state)?;
        let guest_in = guest_input(part, reads);
        let emitted = exec.call(p, &node.id, &reads.names, Request::UpdateState(&handle, &guest_in))?;
        let emitted = Batch::decode_owned(emitted).map_err(|e| malformed(&node.id, e))?;
        if emitted.arity() != *outputs && !emitted.is_empty() {
            return Err(malformed(&node.id, format!("rows of {} values for {outputs} output fields", emitted.arity())));
        }
        out.push(if emitted.arity() == *outputs { emitted } else { BatchWriter::new(*outputs).finish_batch() });
    }
    Ok(out)
}

/// A state query over each partition, in turn: the host's `MapGet`, or a
/// guest query function (one retrieval for the partition, then per tuple).
pub(super) fn state_query(exec: &mut Exec<'_>, node: &Node, input: &Parts) -> Result<Parts, BatchError> {
    let Op::StateQuery { state, input: reads, query, kept, outputs } = &node.op else { unreachable!("a state query") };
    let parts = fit(input, node.parallelism);
    let id = &node.id;
    let mut out = Vec::with_capacity(parts.len());
    for (p, part) in parts.iter().enumerate() {
        let mut writer = BatchWriter::new(kept.len() + outputs);
        match query {
            QueryDef::MapGet => {
                let views = exec.views(node)?;
                let mut views = lock(views);
                let mut key = Vec::new();
                for row in part.rows() {
                    key.clear();
                    for &position in &reads.positions {
                        keys::encode_value(&mut key, row.get(position).expect("position within arity"));
                    }
                    let base = views.base(state, &key).map_err(storage(state))?;
                    writer.begin_row(0);
                    push_kept(&mut writer, row, kept);
                    writer.push(base.value().map_or(ValueRef::Null, Value::as_ref));
                }
            }
            QueryDef::Guest => {
                let handle = exec.state(node, state)?;
                let guest_in = guest_input(part, reads);
                let results = exec.call(p, id, &reads.names, Request::BatchRetrieve(&handle, &guest_in))?;
                let decoded = Batch::decode(&results).map_err(|e| malformed(id, e))?;
                if decoded.len() != part.len() {
                    return Err(BatchError::fatal(
                        id,
                        format!("batch_retrieve returned {} results for {} input tuples", decoded.len(), part.len()),
                    ));
                }
                let emitted = exec.call(p, id, &reads.names, Request::ExecuteQuery(&guest_in, &results))?;
                let emitted = Batch::decode(&emitted).map_err(|e| malformed(id, e))?;
                if emitted.arity() != *outputs {
                    return Err(malformed(
                        id,
                        format!("rows of {} values for {outputs} output fields", emitted.arity()),
                    ));
                }
                for row in emitted.rows() {
                    if row.tag() as usize >= part.len() {
                        return Err(malformed(id, format!("a row extends input row {} of {}", row.tag(), part.len())));
                    }
                    let parent = part.row(row.tag() as usize);
                    writer.begin_row(0);
                    push_kept(&mut writer, parent, kept);
                    for value in row.encoded_values() {
                        writer.push_encoded(value);
                    }
                }
            }
        }
        out.push(writer.finish_batch());
    }
    Ok(out)
}
