//! A node's output as batches per partition, and what every operation
//! does with them: project fields, gather partitions, deal rows out.

use std::borrow::Cow;
use weir_plan::Input;
use weir_sdk::codec::{Batch, BatchWriter, Row};

/// A node's output: one batch per partition.
pub type Parts = Vec<Batch<'static>>;

/// About the bytes `parts` hold: each batch's encoded rows and their starts.
pub(crate) fn parts_bytes(parts: &Parts) -> usize {
    parts.iter().map(|part| part.bytes().len() + 4 * part.len()).sum()
}

/// Appends the encoded values at `positions` of `row` to the current row.
pub(super) fn push_kept(writer: &mut BatchWriter, row: Row<'_>, positions: &[usize]) {
    for &p in positions {
        writer.push_encoded(row.encoded_values().nth(p).expect("position within arity"));
    }
}

/// Copies `row` whole into a new row of `writer`.
pub(super) fn copy_row(writer: &mut BatchWriter, row: Row<'_>) {
    writer.begin_row(0);
    for value in row.encoded_values() {
        writer.push_encoded(value);
    }
}

/// Copies the fields at `positions` of every row into a new batch.
pub(super) fn project(batch: &Batch<'_>, positions: &[usize]) -> Batch<'static> {
    let mut writer = BatchWriter::new(positions.len());
    for row in batch.rows() {
        writer.begin_row(row.tag());
        push_kept(&mut writer, row, positions);
    }
    writer.finish_batch()
}

/// The rows an operator reads: the whole batch when it reads every field.
pub(super) fn guest_input<'b>(batch: &'b Batch<'static>, input: &Input) -> Cow<'b, [u8]> {
    match guest_rows(batch, input) {
        Cow::Borrowed(batch) => Cow::Borrowed(batch.bytes()),
        Cow::Owned(rows) => Cow::Owned(rows.into_bytes()),
    }
}

/// [`guest_input`], as a batch.
pub(super) fn guest_rows<'b>(batch: &'b Batch<'static>, input: &Input) -> Cow<'b, Batch<'static>> {
    if input.whole_tuple { Cow::Borrowed(batch) } else { Cow::Owned(project(batch, &input.positions)) }
}

/// Most input bytes a call to a function or filter gets: a larger batch
/// goes to it in runs of rows, so that what the guest holds for a call,
/// its memory, stays small however large the batch.
pub(crate) const CALL_INPUT_BYTES: usize = 64 << 10;

/// Every partition's rows in one batch.
pub(super) fn gather<'a>(parts: &'a [Batch<'static>]) -> Cow<'a, Batch<'static>> {
    Cow::Owned(match parts {
        [one] => return Cow::Borrowed(one),
        _ => {
            let arity = parts.first().map_or(0, Batch::arity);
            let mut writer = BatchWriter::new(arity);
            for row in parts.iter().flat_map(Batch::rows) {
                copy_row(&mut writer, row);
            }
            writer.finish_batch()
        }
    })
}

/// `parts` as `n` partitions: as they are when they already are, else
/// gathered and dealt round-robin.
pub(super) fn fit<'a>(parts: &'a [Batch<'static>], n: usize) -> Cow<'a, [Batch<'static>]> {
    if parts.len() == n {
        return Cow::Borrowed(parts);
    }
    let all = gather(parts);
    if n == 1 {
        return Cow::Owned(vec![all.into_owned()]);
    }
    Cow::Owned(deal(&all, n, |index, _| index % n))
}

/// [`fit`] for a node's own output.
pub(super) fn fit_owned(parts: Parts, n: usize) -> Parts {
    if parts.len() == n { parts } else { fit(&parts, n).into_owned() }
}

/// Deals the rows of `batch` into `n` partitions, `to(index, row)` saying
/// where each goes.
pub(super) fn deal(batch: &Batch<'static>, n: usize, mut to: impl FnMut(usize, Row<'_>) -> usize) -> Parts {
    let mut writers: Vec<BatchWriter> = (0..n).map(|_| BatchWriter::new(batch.arity())).collect();
    for (index, row) in batch.rows().enumerate() {
        copy_row(&mut writers[to(index, row)], row);
    }
    writers.into_iter().map(BatchWriter::finish_batch).collect()
}
