//! A persistent aggregate: the batch's partials, made in the process phase
//! where its aggregator allows (and, for a count, by [`super::count`]),
//! then combined with the stored values in the commit phase by Trident's
//! rules: in the host for built-ins (in the commit itself when nothing reads
//! the state during the batch), in the guest for combiners and reducers.

use super::aggregate::{groups, run_aggregator, single_values, tagged_input};
use super::context::Exec;
use super::count::count_by_key;
use super::error::{malformed, state_failure};
use super::parts::{Parts, gather};
use crate::instances::Request;
use std::sync::{Arc, Mutex, MutexGuard};
use weir_config::sync::Locked;
use weir_plan::{Aggregator, Node, Op};
use weir_runtime::{BatchError, Origin};
use weir_sdk::codec::{Batch, BatchWriter, Value, ValueRef};
use weir_sdk::operator::Builtin;
use weir_sdk::topology::AggregatorKind;
use weir_state::keyed::KeyedValues;
use weir_state::view::{Base, Views};
use weir_state::{DecodeError, StateError, StoreError, keys};

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

impl Partials {
    /// About the bytes they hold.
    pub fn held_bytes(&self) -> usize {
        match self {
            Partials::Values(values) => values.held_bytes(),
            Partials::Rows { keys, rows } => keys.iter().map(|key| key.len() + 24).sum::<usize>() + rows.len(),
        }
    }
}

/// A persistent aggregate's partials for a batch: per key, a partial value
/// (built-ins and combiners), or the rows to fold (reducers).
pub(super) fn partials(exec: &mut Exec<'_>, node: &Node, input: &Parts) -> Result<Partials, BatchError> {
    let Op::PersistentAggregate { group, aggregator, .. } = &node.op else { unreachable!("a persistent aggregate") };
    partials_of(exec, &gather(input), group, aggregator)
}

/// The partials of `batch` by the fields at `group`, for `aggregator`.
pub(super) fn partials_of(
    exec: &mut Exec<'_>,
    batch: &Batch<'_>,
    group: &[usize],
    aggregator: &Aggregator,
) -> Result<Partials, BatchError> {
    let batch_id = exec.batch.partition(0);
    if aggregator.kind == AggregatorKind::Builtin(Builtin::Count) && !group.is_empty() {
        return Ok(Partials::Values(count_by_key(batch, group)));
    }
    let groups = groups(batch, group);
    if aggregator.kind == AggregatorKind::Reducer {
        let rows = tagged_input(batch, &groups, aggregator);
        return Ok(Partials::Rows { keys: groups.keys, rows });
    }
    let values = run_aggregator(&mut exec.instances[0], batch_id, batch, &groups, aggregator)?;
    let mut partials: Vec<(Vec<u8>, Value)> = groups
        .keys
        .into_iter()
        .zip(values)
        .map(|(key, mut tuples)| (key, tuples.pop().and_then(|mut t| t.pop()).unwrap_or(Value::Null)))
        .collect();
    partials.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(Partials::Values(partials.into_iter().collect()))
}

pub(super) fn lock(views: &Arc<Mutex<Views>>) -> MutexGuard<'_, Views> {
    views.locked()
}

/// A state's failure, as the batch's: `{:#}` prints the store's error with
/// the context it was given.
pub(super) fn storage<E: Into<StoreError>>(state: &str) -> impl Fn(E) -> BatchError + '_ {
    move |e| {
        let e = e.into();
        state_failure(state, format!("commit failed: {e:#}"), &e, Origin::State)
    }
}

/// Combines a batch's partials (or folds its rows) into the stored values,
/// by Trident's rules, and emits the new values: the group fields, then
/// the value.
pub(super) fn persistent_aggregate(exec: &mut Exec<'_>, node: &Node, partials: Partials) -> Result<Parts, BatchError> {
    let Op::PersistentAggregate { state, aggregator, in_place, .. } = &node.op else {
        unreachable!("a persistent aggregate")
    };
    if let (true, Partials::Values(_), AggregatorKind::Builtin(builtin)) = (in_place, &partials, aggregator.kind) {
        let Partials::Values(values) = partials else { unreachable!("matched") };
        let mut views = lock(exec.views(node)?);
        views.combine_at_commit(state, builtin, values).map_err(storage(state))?;
        return Ok(vec![BatchWriter::new(node.fields.len()).finish_batch(); node.parallelism]);
    }
    let emit = !node.children.is_empty();
    let new_values = store_partials(exec, node, state, aggregator, partials, emit)?;
    let mut writer = BatchWriter::new(node.fields.len());
    for (index, (key, value)) in new_values.into_iter().enumerate() {
        push_new_value(&mut writer, index as u32, &key, value.as_ref()).map_err(storage(state))?;
    }
    Ok(super::parts::fit_owned(vec![writer.finish_batch()], node.parallelism, exec.plan.tags_origins()))
}

/// Combines a batch's `partials` (or folds its rows) into `state` by
/// Trident's rules. Returns each key with its new value when `values`
/// asks for them.
pub(super) fn store_partials(
    exec: &mut Exec<'_>,
    node: &Node,
    state: &str,
    aggregator: &Aggregator,
    partials: Partials,
    values: bool,
) -> Result<Vec<(Vec<u8>, Value)>, BatchError> {
    let views = exec.views(node)?;
    let partials = match (partials, aggregator.kind) {
        (Partials::Values(partials), AggregatorKind::Builtin(builtin)) => {
            return combine_in_host(views, state, &aggregator.id, builtin, partials, values);
        }
        (partials, _) => partials,
    };
    let keys: Vec<Vec<u8>> = match &partials {
        Partials::Values(values) => values.iter().map(|(k, _)| k.to_vec()).collect(),
        Partials::Rows { keys, .. } => keys.clone(),
    };
    let bases: Vec<Base> = {
        let mut views = lock(views);
        keys.iter().map(|key| views.base(state, key)).collect::<Result<_, StoreError>>().map_err(storage(state))?
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
            let fields = &aggregator.input.names;
            let out = exec.call(0, id, fields, Request::ReduceGroups(keys.len() as u32, &start.finish(), &rows))?;
            single_values(id, &out, keys.len())?
        }
    };
    let mut new_values = Vec::new();
    let mut views = lock(views);
    for ((key, base), value) in keys.into_iter().zip(bases).zip(fresh) {
        let value = match base {
            Base::Applied(stored) => stored,
            _ => {
                views.put(state, key.clone(), value.clone()).map_err(storage(state))?;
                value
            }
        };
        if values {
            new_values.push((key, value));
        }
    }
    Ok(new_values)
}

/// A new-values row: the group fields (decoded from the key), then the
/// value, tagged `tag` (its index among the batch's new values).
fn push_new_value(writer: &mut BatchWriter, tag: u32, key: &[u8], value: ValueRef<'_>) -> Result<(), DecodeError> {
    writer.begin_row(tag);
    for group_value in keys::decode(key)? {
        writer.push(group_value.as_ref());
    }
    writer.push(value);
    Ok(())
}

/// The commonest persistent aggregate: a built-in's partials combined
/// with the stored values key by key, one lookup each; each key's new
/// value returned when `values` asks for them.
fn combine_in_host(
    views: &Arc<Mutex<Views>>,
    state: &str,
    id: &str,
    builtin: Builtin,
    partials: KeyedValues,
    values: bool,
) -> Result<Vec<(Vec<u8>, Value)>, BatchError> {
    let mut views = lock(views);
    let mut emitted = Vec::new();
    let mut failed = None;
    for (key, partial) in partials.into_pairs() {
        if values {
            emitted.push(key.clone());
        }
        let combined = views.update(state, key, |base| match base {
            // The batch fails with `failed`, not with the update's error.
            Base::Value(stored) => builtin.combine(stored, partial).map_err(|e| {
                failed = Some(BatchError::fatal(id, e.to_string()));
                StateError::Combine(e.to_string()).into()
            }),
            _ => Ok(partial),
        });
        if let Some(error) = failed.take() {
            return Err(error);
        }
        combined.map_err(storage(state))?;
    }
    emitted
        .into_iter()
        .map(|key| {
            let base = views.base(state, &key).map_err(storage(state))?;
            Ok((key, base.value().cloned().unwrap_or(Value::Null)))
        })
        .collect()
}

/// A combiner's answer to `pairs`: one value per pair, tagged as the pair was.
pub(super) fn single_values_tagged(id: &str, out: &[u8], pairs: &Batch<'_>) -> Result<Vec<(usize, Value)>, BatchError> {
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
