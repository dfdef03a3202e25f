//! Operations on tuples that need no state: functions, filters,
//! repartitioning, joins, and the least or greatest tuple.

use super::error::malformed;
use super::parts::{CALL_INPUT_BYTES, Parts, guest_rows, push_kept};
use super::parts::{deal, deal_round_robin};
use crate::instances::{Instances, Request};
use std::collections::HashMap;
use weir_plan::{FunctionKind, Input, Node};
use weir_runtime::{BatchError, PartitionId};
use weir_runtime::{CallError, Limit};
use weir_sdk::codec::{Batch, BatchWriter, Concat, Row, Run};
use weir_sdk::operator::compare_refs;
use weir_sdk::topology::{JoinKind, Partitioning};
use weir_state::keys;

/// A guest function (`each`, `map`, `flat_map`, `peek`) over one partition,
/// called on runs of its rows ([`CALL_INPUT_BYTES`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn function(
    instances: &mut Instances,
    node: &Node,
    batch_id: PartitionId,
    kind: FunctionKind,
    input: &Input,
    kept: &[usize],
    outputs: usize,
    batch: &Batch<'static>,
    by_origin: bool,
) -> Result<Batch<'static>, BatchError> {
    let id = &node.id;
    let guest_in = guest_rows(batch, input);
    let runs = guest_in.runs(CALL_INPUT_BYTES);
    // One run's output is the node's as it is; several are joined.
    let (mut one, mut joined) = (None, (runs.len() > 1).then(|| Concat::reusing(outputs, instances.take_buffers())));
    let limits = instances.sandbox(id);
    let (max_bytes, max_tuples) = (limits.output_bytes, limits.output_tuples);
    let (mut bytes_out, mut tuples_out) = (0u64, 0u64);
    let mut scratch = Vec::new();
    for (i, run @ Run { first, rows, .. }) in runs.iter().enumerate() {
        let bytes = guest_in.run_bytes(run, &mut scratch);
        let out = instances.call(id, batch_id, &input.names, Request::Function(bytes))?;
        if kind == FunctionKind::Peek {
            continue;
        }
        let emitted = Batch::decode_extending(out, *rows as u64).map_err(|e| malformed(id, e))?;
        if emitted.arity() != outputs {
            return Err(BatchError::retry(
                id,
                format!("emitted rows of {} values, but it declares {outputs} output fields", emitted.arity()),
            ));
        }
        // Each call's output is bounded; so is the sum of a batch's calls,
        // by the same limits, as when a batch was one call.
        bytes_out += emitted.bytes().len() as u64;
        tuples_out += emitted.len() as u64;
        if bytes_out > max_bytes || tuples_out > max_tuples {
            let message = format!(
                "output limit of {} MiB or {max_tuples} tuples per batch exceeded: the calls for the batch's rows \
                 returned {bytes_out} bytes, {tuples_out} tuples",
                max_bytes >> 20
            );
            return Err(BatchError::of_call(id, &CallError::Trap { limit: Some(Limit::Output), message }));
        }
        match joined.as_mut() {
            Some(joined) => joined.push(&emitted, *first as u32, runs.len() - i - 1),
            None => one = Some(emitted),
        }
    }
    if kind == FunctionKind::Peek {
        return Ok(if kept.len() == batch.arity() { batch.clone() } else { super::parts::project(batch, kept) });
    }
    let mut emitted = match joined {
        Some(joined) => joined.finish(),
        None => one.expect("one run, called"),
    };
    if kept.is_empty() {
        // Each emitted row is tagged with the row it extends: it takes that
        // row's tag, the spout tuple it came from, where rows carry theirs.
        if by_origin {
            emitted.retag(|_, parent| batch.row(parent as usize).tag());
        }
        return Ok(emitted);
    }
    let mut writer = BatchWriter::with_capacity(kept.len() + outputs, emitted.bytes().len() * 2);
    for row in emitted.rows() {
        let parent = batch.row(row.tag() as usize);
        writer.begin_row(parent.tag());
        push_kept(&mut writer, parent, kept);
        for value in row.encoded_values() {
            writer.push_encoded(value);
        }
    }
    Ok(writer.finish_batch())
}

/// A guest filter over one partition, called on runs of its rows.
pub(super) fn filter(
    instances: &mut Instances,
    node: &Node,
    batch_id: PartitionId,
    input: &Input,
    kept: &[usize],
    batch: &Batch<'static>,
) -> Result<Batch<'static>, BatchError> {
    let guest_in = guest_rows(batch, input);
    let mut keep = Vec::with_capacity(batch.len());
    let mut scratch = Vec::new();
    for run @ Run { first, rows, .. } in guest_in.runs(CALL_INPUT_BYTES) {
        let bytes = guest_in.run_bytes(&run, &mut scratch);
        let verdicts = instances.call(&node.id, batch_id, &input.names, Request::Filter(bytes))?;
        if verdicts.len() != rows {
            return Err(malformed(
                &node.id,
                format!("{} verdicts for {rows} rows (rows {first} to {} of the batch)", verdicts.len(), first + rows),
            ));
        }
        keep.extend(verdicts);
    }
    let mut writer = BatchWriter::new(kept.len());
    for (row, verdict) in batch.rows().zip(keep) {
        if verdict != 0 {
            writer.begin_row(row.tag());
            push_kept(&mut writer, row, kept);
        }
    }
    Ok(writer.finish_batch())
}

/// The hash that assigns a key to a partition: one fixed seed, so that a
/// key goes to the same partition in every run and every replay. A chosen
/// set of keys can at worst load one partition more than the others.
const PARTITION_HASH: foldhash::fast::FixedState = foldhash::fast::FixedState::with_seed(0x5745_4952_5041_5254);

/// Repartitions `batch` into `n` partitions, keeping the `kept` fields; a
/// shuffle deals rows round-robin, by their spout tuple where they carry
/// it (see [`super::parts::fit`]).
pub(super) fn partition(
    batch: &Batch<'static>,
    by: &Partitioning,
    hashed: &[usize],
    kept: &[usize],
    n: usize,
    by_origin: bool,
) -> Parts {
    let parts = match by {
        Partitioning::Shuffle => deal_round_robin(batch, n, by_origin),
        Partitioning::Global | Partitioning::BatchGlobal => deal(batch, n, |_, _| 0),
        Partitioning::Broadcast => vec![batch.clone(); n],
        Partitioning::Fields { .. } => {
            let mut key = Vec::new();
            deal(batch, n, |_, row| {
                key.clear();
                for &p in hashed {
                    keys::encode_value(&mut key, row.get(p).expect("position within arity"));
                }
                (PARTITION_HASH.hash_one(&key) % n as u64) as usize
            })
        }
    };
    if kept.len() == batch.arity() {
        return parts;
    }
    parts.iter().map(|part| super::parts::project(part, kept)).collect()
}

use std::hash::BuildHasher;

/// Joins two batches on their key fields: the key, then each side's other
/// fields; an outer side keeps its unmatched rows, the other side null.
/// A joined row keeps the tag of the first side's row, an unmatched row
/// its own.
pub(super) fn join(
    id: &str,
    inputs: &[Batch<'static>],
    keys_at: &[Vec<usize>],
    others: &[Vec<usize>],
    kinds: &[JoinKind],
) -> Result<Batch<'static>, BatchError> {
    let [a, b] = inputs else {
        return Err(BatchError::fatal(id, format!("joins {} streams; a join takes two", inputs.len())));
    };
    let key_of =
        |row: Row<'_>, at: &[usize]| keys::encode(at.iter().map(|&p| row.get(p).expect("position within arity")));
    let mut b_rows: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
    for (index, row) in b.rows().enumerate() {
        b_rows.entry(key_of(row, &keys_at[1])).or_default().push(index);
    }
    let arity = keys_at[0].len() + others[0].len() + others[1].len();
    let mut writer = BatchWriter::new(arity);
    let nulls = |writer: &mut BatchWriter, count: usize| {
        for _ in 0..count {
            writer.push(weir_sdk::codec::ValueRef::Null);
        }
    };
    let mut matched_b = vec![false; b.len()];
    for row in a.rows() {
        match b_rows.get(&key_of(row, &keys_at[0])) {
            Some(matches) => {
                for &m in matches {
                    matched_b[m] = true;
                    writer.begin_row(row.tag());
                    push_kept(&mut writer, row, &keys_at[0]);
                    push_kept(&mut writer, row, &others[0]);
                    push_kept(&mut writer, b.row(m), &others[1]);
                }
            }
            None if kinds[0] == JoinKind::Outer => {
                writer.begin_row(row.tag());
                push_kept(&mut writer, row, &keys_at[0]);
                push_kept(&mut writer, row, &others[0]);
                nulls(&mut writer, others[1].len());
            }
            None => {}
        }
    }
    if kinds[1] == JoinKind::Outer {
        for (index, row) in b.rows().enumerate().filter(|(i, _)| !matched_b[*i]) {
            let _ = index;
            writer.begin_row(row.tag());
            push_kept(&mut writer, row, &keys_at[1]);
            nulls(&mut writer, others[0].len());
            push_kept(&mut writer, row, &others[1]);
        }
    }
    Ok(writer.finish_batch())
}

/// The least (or greatest) row of `batch` by the fields `by`, keeping
/// `kept`; nothing for an empty batch. The first of equal rows wins.
pub(super) fn extreme(batch: &Batch<'static>, by: &[usize], max: bool, kept: &[usize]) -> Batch<'static> {
    let order = |a: Row<'_>, b: Row<'_>| {
        by.iter()
            .map(|&p| compare_refs(a.get(p).expect("within arity"), b.get(p).expect("within arity")))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    };
    let mut best: Option<Row<'_>> = None;
    for row in batch.rows() {
        let better = match best {
            None => true,
            Some(b) if max => order(row, b).is_gt(),
            Some(b) => order(row, b).is_lt(),
        };
        if better {
            best = Some(row);
        }
    }
    let mut writer = BatchWriter::new(kept.len());
    if let Some(row) = best {
        writer.begin_row(row.tag());
        push_kept(&mut writer, row, kept);
    }
    writer.finish_batch()
}
