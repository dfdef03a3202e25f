//! Windows aggregated by a general aggregator, which sees every tuple of a
//! window when it closes: each batch's tuples of a window are kept as one
//! chunk, under the window's key and the batch's txid, and a closing
//! window's chunks, in txid order, go to the aggregator in one call with
//! the other windows the batch closes.

use super::aggregate::{Groups, groups, run_aggregator};
use super::context::Exec;
use super::parts::{Parts, push_kept};
use super::persistent_aggregate::{lock, storage};
use super::window_state::{Closing, closed_range};
use weir_plan::{Input, Node, Op};
use weir_runtime::BatchError;
use weir_sdk::codec::{Batch, BatchWriter, Value, ValueRef};
use weir_state::keys;

/// An encoded txid's length after a window's key: its kind byte and eight.
pub(super) const TXID_LEN: usize = 9;

/// Keeps the batch's tuples of each window (rows of `assigned`, keyed by the
/// fields at `keyed`): the aggregator's input fields, one chunk a window.
pub(super) fn keep(exec: &Exec<'_>, node: &Node, assigned: &Batch<'_>, keyed: &[usize]) -> Result<(), BatchError> {
    let Op::Window { state, aggregator, .. } = &node.op else { unreachable!("a window") };
    let windows = groups(assigned, keyed);
    let mut chunks: Vec<BatchWriter> =
        windows.keys.iter().map(|_| BatchWriter::new(aggregator.input.positions.len())).collect();
    for (row, &w) in assigned.rows().zip(&windows.of_row) {
        let chunk = &mut chunks[w as usize];
        chunk.begin_row(0);
        push_kept(chunk, row, &aggregator.input.positions);
    }
    let txid = i64::try_from(exec.batch.txid).unwrap_or(i64::MAX);
    let mut views = lock(exec.views(node)?);
    for (mut key, chunk) in windows.keys.into_iter().zip(chunks) {
        keys::encode_value(&mut key, ValueRef::I64(txid));
        views.put(state, key, Value::Bytes(chunk.finish())).map_err(storage(state))?;
    }
    Ok(())
}

/// Runs the aggregator over every window `closing` closes and removes
/// their chunks; emits, per window, the group fields, its start and end,
/// then each tuple the aggregator emitted.
pub(super) fn close(exec: &mut Exec<'_>, node: &Node, closing: &Closing) -> Result<Parts, BatchError> {
    let Op::Window { state, aggregator, .. } = &node.op else { unreachable!("a window") };
    let chunks = {
        let mut views = lock(exec.views(node)?);
        let ranges: Vec<(Vec<u8>, Vec<u8>)> = match closing {
            Closing::Keys(windows) => {
                windows.iter().map(|key| (key.clone(), [key.as_slice(), &[u8::MAX]].concat())).collect()
            }
            Closing::Through { after, end } => vec![closed_range(*after, *end)],
        };
        let mut chunks = Vec::new();
        for (from, to) in ranges {
            for (key, base) in views.range(state, &from, &to).map_err(storage(state))? {
                views.remove(state, &key).map_err(storage(state))?;
                if let Some(value) = base.value() {
                    chunks.push((key, value.clone()));
                }
            }
        }
        chunks
    };
    // The closing windows' tuples, in one batch, each tagged with its window.
    let corrupt = |what: &str| BatchError::fatal(&node.id, format!("state {state} holds {what}"));
    let arity = aggregator.input.positions.len();
    let mut tuples = BatchWriter::new(arity);
    let mut windows: Vec<Vec<u8>> = Vec::new();
    let mut of_row = Vec::new();
    for (key, value) in &chunks {
        let window = key.get(..key.len().saturating_sub(TXID_LEN)).ok_or_else(|| corrupt("a short chunk key"))?;
        if windows.last().map(Vec::as_slice) != Some(window) {
            windows.push(window.to_vec());
        }
        let Value::Bytes(bytes) = value else { return Err(corrupt("a window chunk that is not bytes")) };
        let chunk = Batch::decode(bytes).map_err(|e| corrupt(&format!("an unreadable window chunk: {e}")))?;
        if chunk.arity() != arity && !chunk.is_empty() {
            return Err(corrupt("a window chunk of another arity"));
        }
        for row in chunk.rows() {
            tuples.begin_row(0);
            for value in row.encoded_values() {
                tuples.push_encoded(value);
            }
            of_row.push(windows.len() as u32 - 1);
        }
    }
    let tuples = tuples.finish_batch();
    let whole = Input { positions: (0..arity).collect(), names: aggregator.input.names.clone(), whole_tuple: true };
    let reads_chunks = weir_plan::Aggregator { input: whole, ..aggregator.clone() };
    let groups = Groups::tagged(windows.len(), of_row);
    let batch = exec.batch.partition(0);
    let emitted = run_aggregator(&mut exec.instances[0], batch, &tuples, &groups, &reads_chunks)?;
    let mut writer = BatchWriter::new(node.fields.len());
    let mut index = 0;
    for (window, emitted) in windows.iter().zip(emitted) {
        let bounds = keys::decode(window).map_err(storage(state))?;
        let [end, start, group_values @ ..] = &bounds[..] else { return Err(corrupt("a window key without bounds")) };
        for tuple in emitted {
            // Tagged with its index, as a window's output is (see `window`).
            writer.begin_row(index);
            index += 1;
            for v in group_values.iter().chain([start, end]).chain(&tuple) {
                writer.push(v.as_ref());
            }
        }
    }
    Ok(super::parts::fit_owned(vec![writer.finish_batch()], node.parallelism, exec.plan.tags_origins()))
}
