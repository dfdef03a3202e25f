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

/// Copies `row` whole, its tag with it, into a new row of `writer`.
pub(super) fn copy_row(writer: &mut BatchWriter, row: Row<'_>) {
    writer.begin_row(row.tag());
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

/// [`gather_in_order`] where rows carry their spout tuple's index, else
/// [`gather`].
pub(super) fn gather_by<'a>(parts: &'a [Batch<'static>], by_origin: bool) -> Cow<'a, Batch<'static>> {
    if by_origin { gather_in_order(parts) } else { gather(parts) }
}

/// `parts` as `n` partitions: as they are when they already are, else
/// gathered and dealt round-robin: row by row, or, where rows carry their
/// spout tuple's index as their tag (`by_origin`), by it, so that the
/// tuples one spout tuple gave rise to stay in one partition, in order.
pub(super) fn fit<'a>(parts: &'a [Batch<'static>], n: usize, by_origin: bool) -> Cow<'a, [Batch<'static>]> {
    if parts.len() == n {
        return Cow::Borrowed(parts);
    }
    let all = gather(parts);
    if n == 1 {
        return Cow::Owned(vec![all.into_owned()]);
    }
    Cow::Owned(deal_round_robin(&all, n, by_origin))
}

/// [`fit`] for a node's own output.
pub(super) fn fit_owned(parts: Parts, n: usize, by_origin: bool) -> Parts {
    if parts.len() == n { parts } else { fit(&parts, n, by_origin).into_owned() }
}

/// Deals `batch`'s rows round-robin into `n` partitions: row by row, or by
/// their tags (see [`fit`]).
pub(super) fn deal_round_robin(batch: &Batch<'static>, n: usize, by_origin: bool) -> Parts {
    if by_origin { deal(batch, n, |_, row| row.tag() as usize % n) } else { deal(batch, n, |index, _| index % n) }
}

/// Every partition's rows in one batch, in the order of their tags (the
/// index of the spout tuple each came from), rows of equal tags in the
/// order of the partitions and, within one, as they are: the order the
/// spout emitted the tuples in, whatever the parallelism.
pub(super) fn gather_in_order<'a>(parts: &'a [Batch<'static>]) -> Cow<'a, Batch<'static>> {
    let in_order = |batch: &Batch<'_>| {
        let mut tags = batch.rows().map(|row| row.tag());
        let first = tags.next();
        tags.try_fold(first.unwrap_or(0), |last, tag| (tag >= last).then_some(tag)).is_some()
    };
    match parts {
        [one] if in_order(one) => return Cow::Borrowed(one),
        [] => return gather(parts),
        _ => {}
    }
    let mut rows: Vec<(u32, usize, usize)> = Vec::with_capacity(parts.iter().map(Batch::len).sum());
    for (p, part) in parts.iter().enumerate() {
        rows.extend(part.rows().enumerate().map(|(r, row)| (row.tag(), p, r)));
    }
    // A stable sort: equal tags keep the partitions' order.
    rows.sort_by_key(|&(tag, _, _)| tag);
    let arity = parts[0].arity();
    let bytes: usize = parts.iter().map(|p| p.bytes().len()).sum();
    let mut writer = BatchWriter::with_capacity(arity, bytes);
    for (_, p, r) in rows {
        copy_row(&mut writer, parts[p].row(r));
    }
    Cow::Owned(writer.finish_batch())
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

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::codec::ValueRef;

    fn part(rows: &[(u32, i64)]) -> Batch<'static> {
        let mut writer = BatchWriter::new(1);
        for &(tag, value) in rows {
            writer.push_row(tag, [ValueRef::I64(value)]).unwrap();
        }
        writer.finish_batch()
    }

    fn values(batch: &Batch<'_>) -> Vec<(u32, i64)> {
        batch
            .rows()
            .map(|r| {
                (
                    r.tag(),
                    match r.get(0) {
                        Some(ValueRef::I64(n)) => n,
                        other => panic!("{other:?}"),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn gathering_in_order_puts_rows_back_in_their_spout_tuples_order() {
        // Spout tuples 0 to 4 dealt round-robin into two partitions, tuple
        // 2 giving rise to two rows, tuple 3 to none.
        let parts = vec![part(&[(0, 0), (2, 20), (2, 21), (4, 40)]), part(&[(1, 10)])];
        assert_eq!(values(&gather_in_order(&parts)), [(0, 0), (1, 10), (2, 20), (2, 21), (4, 40)]);
        // Equal tags in partitions' order; a part in order is not copied.
        let parts = vec![part(&[(1, 1), (3, 3)]), part(&[(1, 2)])];
        assert_eq!(values(&gather_in_order(&parts)), [(1, 1), (1, 2), (3, 3)]);
        let one = vec![part(&[(0, 0), (0, 1), (5, 2)])];
        assert!(matches!(gather_in_order(&one), Cow::Borrowed(_)));
        assert_eq!(values(&gather_in_order(&[part(&[(3, 0), (1, 1)])])), [(1, 1), (3, 0)]);
    }

    #[test]
    fn dealing_by_origin_keeps_a_spout_tuples_rows_in_one_partition() {
        let batch = part(&[(0, 0), (1, 10), (1, 11), (1, 12), (2, 20)]);
        let by_row = deal_round_robin(&batch, 2, false);
        assert_eq!((values(&by_row[0]), values(&by_row[1])), (vec![(0, 0), (1, 11), (2, 20)], vec![(1, 10), (1, 12)]));
        let by_origin = deal_round_robin(&batch, 2, true);
        assert_eq!(
            (values(&by_origin[0]), values(&by_origin[1])),
            (vec![(0, 0), (2, 20)], vec![(1, 10), (1, 11), (1, 12)])
        );
    }
}
