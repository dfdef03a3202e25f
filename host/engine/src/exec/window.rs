//! Windows, exactly once. Each batch's tuples, in the order the spout
//! emitted them, are assigned to their windows, and each window's partial
//! lives in the operation's state under the key (end, start, group):
//! combined with the batch's partials by Trident's rules, as a persistent
//! aggregate's values are. A window closes in the commit of the batch that
//! takes its count to the window's end (count windows) or its watermark
//! (the least over the spout's partitions, see [`Watermark`]) past the end
//! plus the lateness (event time); it is emitted then, once, and removed.
//! The watermark, the late tuples and each group's count are kept in the
//! same state, before the windows in key order, so that a replay of the
//! batch starts from what it started from the first time and emits the
//! same windows.

use super::aggregate::groups;
use super::context::Exec;
use super::count::count_rows_by_key;
use super::parts::{Parts, gather_in_order};
use super::persistent_aggregate::{Partials, lock, partials_of, storage, store_partials};
use super::session;
use super::window_state::{
    Closing, Stamp, TimeSpec, Watermark, closed_range, partition_of, push_assigned, put_i64, stored_i64, window_key,
};
use super::window_tuples;
use std::collections::HashMap;
use std::sync::Arc;
use weir_plan::{Node, Op};
use weir_runtime::BatchError;
use weir_sdk::codec::{Batch, BatchWriter, Value, ValueKind, ValueRef};
use weir_sdk::operator::Builtin;
use weir_sdk::topology::{AggregatorKind, WindowDef};
use weir_state::StoreError;
use weir_state::keyed::KeyedValues;
use weir_state::keys;
use weir_state::view::Base;

/// First value of a group's count key (count windows).
const COUNT: ValueRef<'static> = ValueRef::Bool(true);

/// Runs window operation `node` over one batch: its rows go into their
/// windows, and the windows it closes are emitted: the group fields, the
/// window's start and end, its value.
pub(super) fn window(exec: &mut Exec<'_>, index: usize, input: &Parts) -> Result<Parts, BatchError> {
    let node = &exec.plan.nodes[index];
    let Op::Window { state, window, time, group, aggregator } = &node.op else { unreachable!("a window") };
    let batch = gather_in_order(input);
    let time_spec = |size: &u64, slide: &u64, delay: &u64, lateness: &u64, idle: &Option<u64>| TimeSpec {
        size: *size as i64,
        slide: *slide as i64,
        delay: *delay as i64,
        lateness: *lateness as i64,
        idle: idle.map(|ms| ms as i64),
    };
    let event_time = |field| Stamp::Field { field, position: time.expect("event time has its timestamp's position") };
    let (assigned, watermark) = match window {
        WindowDef::Count { size, slide } => {
            let (assigned, closing) = by_count(exec, node, &batch, group, *size as i64, *slide as i64)?;
            (assigned, Err(closing))
        }
        WindowDef::Duration { size_ms, slide_ms } => {
            let emitted = Stamp::Batch(i64::try_from(exec.time_ms).unwrap_or(i64::MAX));
            let spec = time_spec(size_ms, slide_ms, &0, &0, &None);
            let (assigned, watermark) = by_time(exec, node, &batch, &emitted, &spec)?;
            (assigned, Ok(watermark))
        }
        WindowDef::EventTime { field, size_ms, slide_ms, max_delay_ms, lateness_ms, idle_timeout_ms } => {
            let spec = time_spec(size_ms, slide_ms, max_delay_ms, lateness_ms, idle_timeout_ms);
            let (assigned, watermark) = by_time(exec, node, &batch, &event_time(field), &spec)?;
            (assigned, Ok(watermark))
        }
        WindowDef::Session { field, gap_ms, max_delay_ms, lateness_ms, idle_timeout_ms } => {
            let spec = time_spec(gap_ms, gap_ms, max_delay_ms, lateness_ms, idle_timeout_ms);
            let (assigned, watermark) = session::assign(exec, node, &batch, &event_time(field), *gap_ms as i64, &spec)?;
            (assigned, Ok(watermark))
        }
    };
    if !assigned.is_empty() {
        let keyed = window_keyed(group);
        if aggregator.kind == AggregatorKind::General {
            window_tuples::keep(exec, node, &assigned, &keyed)?;
        } else {
            let partials = partials_of(exec, &assigned, &keyed, aggregator)?;
            store_partials(exec, node, state, aggregator, partials, false)?;
        }
    }
    finish(exec, index, &batch, watermark, None)
}

/// Positions of an assigned row's window key: its end, its start, then the
/// group fields after them.
fn window_keyed(group: &[usize]) -> Vec<usize> {
    [0, 1].into_iter().chain(group.iter().map(|p| p + 2)).collect()
}

/// An event-time window's sizes, for a window that goes by a timestamp
/// field and cuts fixed windows.
fn event_time_spec(window: &WindowDef) -> Option<(&str, TimeSpec)> {
    let WindowDef::EventTime { field, size_ms, slide_ms, max_delay_ms, lateness_ms, idle_timeout_ms } = window else {
        return None;
    };
    let spec = TimeSpec {
        size: *size_ms as i64,
        slide: *slide_ms as i64,
        delay: *max_delay_ms as i64,
        lateness: *lateness_ms as i64,
        idle: idle_timeout_ms.map(|ms| ms as i64),
    };
    Some((field, spec))
}

/// An event-time window's batch, assigned in the process phase before its
/// watermark is known: the partials of every window its tuples fall into,
/// closed or not, and what tells the commit phase which tuples are late.
pub struct Preassigned {
    /// The batch's partial of each window, by window key.
    partials: KeyedValues,
    /// Each row's newest window's end: the row is late if it closed.
    newest_ends: Vec<i64>,
    /// The batch's greatest timestamp from each spout partition.
    greatest: Vec<Option<i64>>,
    /// The batch's parts, for the late stream.
    input: Arc<Parts>,
}

impl Preassigned {
    /// About the bytes it holds.
    pub fn held_bytes(&self) -> usize {
        self.partials.held_bytes() + 8 * self.newest_ends.len() + super::parts::parts_bytes(&self.input)
    }
}

/// Whether `node`'s batches are assigned in the process phase: event-time
/// windows whose aggregator makes one partial per window (a built-in or a
/// combiner), which the commit phase only filters by the watermark.
pub(super) fn preassigns(node: &Node) -> bool {
    let Op::Window { window, aggregator, .. } = &node.op else { return false };
    event_time_spec(window).is_some()
        && matches!(aggregator.kind, AggregatorKind::Builtin(_) | AggregatorKind::Combiner)
}

/// Assigns `node`'s batch (see [`preassigns`]) to every window it falls
/// into, in the process phase.
pub(super) fn preassign(exec: &mut Exec<'_>, node: &Node, input: &Arc<Parts>) -> Result<Preassigned, BatchError> {
    let Op::Window { window, time, group, aggregator, .. } = &node.op else { unreachable!("a window") };
    let (field, spec) = event_time_spec(window).expect("an event-time window");
    let stamp = Stamp::Field { field, position: time.expect("event time has its timestamp's position") };
    let batch = gather_in_order(input);
    let partitions = exec.plan.spout_partitions();
    let mut newest_ends = Vec::with_capacity(batch.len());
    let mut greatest: Vec<Option<i64>> = vec![None; partitions];
    // A count goes by each window's rows, counted by the group's fields
    // read in place; other aggregators by a batch of the rows with their
    // window's bounds in front.
    let counts = aggregator.kind == AggregatorKind::Builtin(Builtin::Count);
    let mut rows_of = RowsOf::default();
    let mut writer = BatchWriter::new(batch.arity() + 2);
    // Rows come mostly in time order: a row's newest window is mostly the
    // row before's, found without a division.
    let mut slot = (1, 0);
    for (r, row) in batch.rows().enumerate() {
        let ts = stamp.of(node, row)?;
        let g = &mut greatest[partition_of(row, partitions)];
        *g = Some(g.map_or(ts, |g| g.max(ts)));
        if !(slot.0..slot.1).contains(&ts) {
            let start = ts.div_euclid(spec.slide).saturating_mul(spec.slide);
            slot = (start, start.saturating_add(spec.slide));
        }
        let newest = slot.0;
        newest_ends.push(newest.saturating_add(spec.size));
        for (end, start) in windows_of(ts, newest, &spec) {
            if counts {
                rows_of.push((end, start), r);
            } else {
                push_assigned(&mut writer, row, end, start);
            }
        }
    }
    let partials = if counts {
        count_windows(&batch, rows_of, group)
    } else {
        let assigned = writer.finish_batch();
        let Partials::Values(partials) = partials_of(exec, &assigned, &window_keyed(group), aggregator)? else {
            unreachable!("a built-in or a combiner makes values")
        };
        partials
    };
    Ok(Preassigned { partials, newest_ends, greatest, input: Arc::clone(input) })
}

/// Each window's rows, by its end and start.
#[derive(Default)]
struct RowsOf {
    windows: Vec<((i64, i64), Vec<usize>)>,
    index: HashMap<(i64, i64), usize, foldhash::fast::RandomState>,
    /// The window the last row went to: the next row's, mostly.
    last: usize,
}

impl RowsOf {
    fn push(&mut self, bounds: (i64, i64), row: usize) {
        if self.windows.get(self.last).is_none_or(|(b, _)| *b != bounds) {
            let next = self.windows.len();
            self.last = *self.index.entry(bounds).or_insert(next);
            if self.last == next {
                self.windows.push((bounds, Vec::new()));
            }
        }
        self.windows[self.last].1.push(row);
    }
}

/// Each window's count by the fields at `group`, keyed by window key, in
/// key order: windows in the order of their keys, each window's groups in
/// theirs.
fn count_windows(batch: &Batch<'_>, rows_of: RowsOf, group: &[usize]) -> KeyedValues {
    let mut windows = rows_of.windows;
    windows.sort_unstable_by_key(|(bounds, _)| *bounds);
    let mut partials = KeyedValues::default();
    for ((end, start), rows) in windows {
        let bounds = window_key(end, start, &[]);
        if group.is_empty() {
            partials.push(&bounds, Value::I64(rows.len() as i64));
            continue;
        }
        let mut key = bounds.clone();
        for (group_key, count) in count_rows_by_key(batch, rows.into_iter(), group).iter() {
            key.truncate(bounds.len());
            key.extend_from_slice(group_key);
            partials.push(&key, count.clone());
        }
    }
    partials
}

/// The windows `[start, start + size)` holding `ts`, as `(end, start)`,
/// newest (starting at `newest`) first.
fn windows_of(ts: i64, newest: i64, spec: &TimeSpec) -> impl Iterator<Item = (i64, i64)> + '_ {
    let starts =
        std::iter::successors(Some(newest), |start| (*start != i64::MIN).then(|| start.saturating_sub(spec.slide)));
    starts.map(|start| (start.saturating_add(spec.size), start)).take_while(move |&(end, _)| end > ts)
}

/// Runs window operation `index` over a batch [`preassign`]ed in the
/// process phase: the partials of windows closed already are dropped, and
/// the tuples whose windows all had are late.
pub(super) fn window_preassigned(exec: &mut Exec<'_>, index: usize, pre: Preassigned) -> Result<Parts, BatchError> {
    let node = &exec.plan.nodes[index];
    let Op::Window { state, window, aggregator, .. } = &node.op else { unreachable!("a window") };
    let (_, spec) = event_time_spec(window).expect("an event-time window");
    let mut watermark = Watermark::read(exec, node, &spec, pre.greatest.len())?;
    let closed_before = watermark.closed_before;
    watermark.late_rows = (0..pre.newest_ends.len()).filter(|&r| pre.newest_ends[r] <= closed_before).collect();
    for (partition, greatest) in pre.greatest.iter().enumerate() {
        if let Some(greatest) = *greatest {
            watermark.see(greatest, partition);
        }
    }
    // The windows the batch closes are read back and emitted in this
    // batch; the others stay open, and a built-in's partials for them are
    // combined in the commit itself, one lookup each.
    let through = watermark.through();
    let (mut closing, mut open) = (KeyedValues::default(), KeyedValues::default());
    for (key, value) in pre.partials.iter() {
        match window_end(key) {
            Some(end) if end <= closed_before => {}
            Some(end) if end <= through => closing.push(key, value.clone()),
            Some(_) => open.push(key, value.clone()),
            None => {}
        }
    }
    let AggregatorKind::Builtin(builtin) = aggregator.kind else {
        for partials in [closing, open].into_iter().filter(|p| !p.is_empty()) {
            store_partials(exec, node, state, aggregator, Partials::Values(partials), false)?;
        }
        return finish(exec, index, &gather_in_order(&pre.input), Ok(watermark), None);
    };
    if !open.is_empty() {
        lock(exec.views(node)?).combine_at_commit(state, builtin, open).map_err(storage(state))?;
    }
    finish(exec, index, &gather_in_order(&pre.input), Ok(watermark), Some((builtin, closing)))
}

/// The end of the window a window key is of.
fn window_end(key: &[u8]) -> Option<i64> {
    match key.split_first() {
        Some((&kind, rest)) if kind == ValueKind::I64.byte() => {
            let bits = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
            Some((bits ^ (1 << 63)) as i64)
        }
        _ => None,
    }
}

/// After a batch's tuples went into their windows: hands the late tuples
/// to the late stream, moves the watermark on, and emits and removes the
/// windows the batch closes, a built-in's partials of the batch for them
/// (`closing`) combined with what they hold.
fn finish(
    exec: &mut Exec<'_>,
    index: usize,
    batch: &Batch<'_>,
    watermark: Result<Watermark, Closing>,
    closing: Option<(Builtin, KeyedValues)>,
) -> Result<Parts, BatchError> {
    let node = &exec.plan.nodes[index];
    let Op::Window { state, window, aggregator, .. } = &node.op else { unreachable!("a window") };
    let general = aggregator.kind == AggregatorKind::General;
    let closes = match watermark {
        Ok(watermark) => {
            let has_late_stream = node.children.iter().any(|&c| matches!(exec.plan.nodes[c].op, Op::LateTuples(_)));
            if has_late_stream || !watermark.late_rows.is_empty() {
                let mut late = BatchWriter::new(batch.arity());
                for &r in &watermark.late_rows {
                    super::parts::copy_row(&mut late, batch.row(r));
                }
                exec.late.insert(index, late.finish_batch());
            }
            if let Some(mark) = watermark.after() {
                exec.watermarks.insert(index, mark);
            }
            // A merged session can end before what closed already.
            let after = if matches!(window, WindowDef::Session { .. }) { i64::MIN } else { watermark.closed_before };
            Closing::Through { after, end: watermark.write(exec, node)? }
        }
        Err(keys) => keys,
    };
    if general {
        return window_tuples::close(exec, node, &closes);
    }
    let sessions = matches!(window, WindowDef::Session { .. });
    let mut emitted = Emitted { writer: BatchWriter::new(node.fields.len()), rows: 0, keys: sessions.then(Vec::new) };
    let mut views = lock(exec.views(node)?);
    match &closes {
        Closing::Keys(keys) => {
            // Count windows: each group's own, a few a batch.
            for key in keys {
                let Some(value) = views.base(state, key).map_err(storage(state))?.value().cloned() else { continue };
                emitted.push(node, state, key, &value)?;
                views.remove(state, key).map_err(storage(state))?;
            }
        }
        Closing::Through { after, end } => {
            // Time windows: read, emitted and removed as one key range, a
            // window at a time, merged with a built-in's partials of the
            // batch for them (both sorted by key): however many close, no
            // more than their rows is held.
            let (from, to) = closed_range(*after, *end);
            let mut partials = closing.map(|(builtin, partials)| (builtin, partials.into_pairs().peekable()));
            let mut failed = None;
            let mut give = |key: &[u8], value: Value| -> Result<(), StoreError> {
                let mut value = value;
                if let Some((builtin, partials)) = &mut partials {
                    while let Some((earlier, partial)) = partials.next_if(|(k, _)| k.as_slice() < key) {
                        emitted.push(node, state, &earlier, &partial).map_err(|e| stop(&mut failed, e))?;
                    }
                    if let Some((_, partial)) = partials.next_if(|(k, _)| k.as_slice() == key) {
                        let combined = builtin.combine(value, partial);
                        value = combined
                            .map_err(|e| stop(&mut failed, BatchError::fatal(&aggregator.id, e.to_string())))?;
                    }
                }
                emitted.push(node, state, key, &value).map_err(|e| stop(&mut failed, e))
            };
            let taken = views.take_range_each(state, &from, &to, |key, base| match base {
                Base::Value(value) | Base::Applied(value) => give(&key, value),
                Base::None => Ok(()),
            });
            if let Err(e) = taken {
                return Err(failed.take().unwrap_or_else(|| storage(state)(e)));
            }
            for (key, partial) in partials.into_iter().flat_map(|(_, rest)| rest) {
                emitted.push(node, state, &key, &partial)?;
            }
        }
    }
    drop(views);
    if let (Some(keys), Closing::Through { end, .. }) = (&emitted.keys, closes) {
        session::forget_closed(exec, node, keys, end)?;
    }
    let rows = emitted.writer.finish_batch();
    Ok(super::parts::fit_owned(vec![rows], node.parallelism, exec.plan.tags_origins()))
}

/// Keeps `error` to return, and stops a range read with it.
fn stop(failed: &mut Option<BatchError>, error: BatchError) -> StoreError {
    let message = error.to_string();
    *failed = Some(error);
    StoreError::Refused(message)
}

/// The closed windows' rows a batch emits, as they close.
struct Emitted {
    writer: BatchWriter,
    rows: u32,
    /// The closed sessions' keys, for their groups' indexes.
    keys: Option<Vec<Vec<u8>>>,
}

impl Emitted {
    /// The row of the window under `key` (its end, its start, its group)
    /// holding `value`: the group fields, its start and end, the value.
    fn push(&mut self, node: &Node, state: &str, key: &[u8], value: &Value) -> Result<(), BatchError> {
        let bounds = keys::decode(key).map_err(storage(state))?;
        let [end, start, group_values @ ..] = &bounds[..] else {
            return Err(BatchError::fatal(&node.id, format!("state {state} holds a window key without bounds")));
        };
        // Each window's row is tagged with its index, as if a spout had
        // emitted the closed windows in key order.
        self.writer.begin_row(self.rows);
        self.rows += 1;
        for v in group_values {
            self.writer.push(v.as_ref());
        }
        self.writer.push(start.as_ref());
        self.writer.push(end.as_ref());
        self.writer.push(value.as_ref());
        if let Some(keys) = &mut self.keys {
            keys.push(key.to_vec());
        }
        Ok(())
    }
}

/// Count windows: each group's tuples numbered on from its stored count,
/// in the order the spout emitted them (`batch` is in that order); tuple
/// `n` falls into the windows ending at the multiples of `slide` in
/// `(n, n + size]`, each starting at its end less `size` (below 0 for the
/// first windows of a sliding one: no two windows share a start), and the
/// windows ending at or before the group's new count close.
fn by_count(
    exec: &mut Exec<'_>,
    node: &Node,
    batch: &Batch<'_>,
    group: &[usize],
    size: i64,
    slide: i64,
) -> Result<(Batch<'static>, Closing), BatchError> {
    let Op::Window { state, .. } = &node.op else { unreachable!("a window") };
    let groups = groups(batch, group);
    let count_key = |group_key: &[u8]| {
        let mut key = keys::encode([COUNT]);
        key.extend_from_slice(group_key);
        key
    };
    let mut counts = Vec::with_capacity(groups.keys.len());
    for group_key in &groups.keys {
        counts.push(stored_i64(exec, node, state, &count_key(group_key))?.unwrap_or(0));
    }
    let before = counts.clone();
    let mut writer = BatchWriter::new(batch.arity() + 2);
    for (row, &g) in batch.rows().zip(&groups.of_row) {
        let n = counts[g as usize];
        counts[g as usize] += 1;
        let mut end = (n / slide + 1) * slide;
        while end <= n + size {
            push_assigned(&mut writer, row, end, end - size);
            end += slide;
        }
    }
    let mut closing = Vec::new();
    for ((group_key, &from), &to) in groups.keys.iter().zip(&before).zip(&counts) {
        let mut end = (from / slide + 1) * slide;
        while end <= to {
            closing.push(window_key(end, end - size, group_key));
            end += slide;
        }
        if to != from {
            put_i64(exec, node, state, count_key(group_key), to)?;
        }
    }
    Ok((writer.finish_batch(), Closing::Keys(closing)))
}

/// Time windows: each tuple falls into the windows `[start, start + size)`
/// holding its time, `start` a multiple of `slide`, but for those closed
/// already (a tuple in none is late).
fn by_time(
    exec: &mut Exec<'_>,
    node: &Node,
    batch: &Batch<'_>,
    stamp: &Stamp<'_>,
    spec: &TimeSpec,
) -> Result<(Batch<'static>, Watermark), BatchError> {
    let partitions = if let Stamp::Batch(_) = stamp { 1 } else { exec.plan.spout_partitions() };
    let mut watermark = Watermark::read(exec, node, spec, partitions)?;
    let mut writer = BatchWriter::new(batch.arity() + 2);
    if let Stamp::Batch(emitted) = stamp {
        // A batch's time moves its windows on even when it holds nothing.
        watermark.see(*emitted, 0);
    }
    for (r, row) in batch.rows().enumerate() {
        let ts = stamp.of(node, row)?;
        watermark.see(ts, partition_of(row, partitions));
        let mut assigned = false;
        let newest = ts.div_euclid(spec.slide).saturating_mul(spec.slide);
        for (end, start) in windows_of(ts, newest, spec).filter(|&(end, _)| end > watermark.closed_before) {
            push_assigned(&mut writer, row, end, start);
            assigned = true;
        }
        if !assigned {
            watermark.late_rows.push(r);
        }
    }
    Ok((writer.finish_batch(), watermark))
}
