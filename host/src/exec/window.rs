//! Windows, exactly once. Each batch's tuples are assigned to their
//! windows, and each window's partial lives in the operation's state
//! under the key (end, start, group): combined with the batch's partials
//! by Trident's rules, as a persistent aggregate's values are. A window
//! closes in the commit of the batch that takes its count to the window's
//! end (count windows) or its watermark past the end plus the lateness
//! (event time); it is emitted then, once, and removed. The watermark, the
//! late tuples and each group's count are kept in the same state, before
//! the windows in key order, so that a replay of the batch starts from
//! what it started from the first time and emits the same windows.

use super::aggregate::groups;
use super::error::BatchError;
use super::persistent_aggregate::{lock, partials_of, storage, store_partials};
use super::{Exec, Parts, gather};
use crate::plan::{Node, Op};
use crate::state::keys;
use crate::state::view::Base;
use weir_sdk::codec::{Batch, BatchWriter, Row, Value, ValueKind, ValueRef};
use weir_sdk::topology::WindowDef;

/// Key of the greatest timestamp seen (event time).
const GREATEST_SEEN: ValueRef<'static> = ValueRef::Null;
/// Key of the number of late tuples (event time).
const LATE: ValueRef<'static> = ValueRef::Bool(false);
/// First value of a group's count key (count windows).
const COUNT: ValueRef<'static> = ValueRef::Bool(true);

/// The windows a batch closes.
enum Closing {
    /// These keys (count windows: each group's own).
    Keys(Vec<Vec<u8>>),
    /// Every window ending at or before this (event time).
    Through(i64),
}

/// Runs window operation `node` over one batch: its rows go into their
/// windows, and the windows it closes are emitted: the group fields, the
/// window's start and end, its value.
pub(super) fn window(exec: &mut Exec<'_>, node: &Node, input: &Parts) -> Result<Parts, BatchError> {
    let Op::Window { state, window, time, group, aggregator } = &node.op else { unreachable!("a window") };
    let batch = gather(input);
    let (assigned, closing) = match window {
        WindowDef::Count { size, slide } => by_count(exec, node, &batch, group, *size as i64, *slide as i64)?,
        WindowDef::Duration { size_ms, slide_ms } => {
            let spec = TimeSpec { size: *size_ms as i64, slide: *slide_ms as i64, delay: 0, lateness: 0 };
            let emitted = i64::try_from(exec.time_ms).unwrap_or(i64::MAX);
            by_time(exec, node, &batch, Stamp::Batch(emitted), &spec)?
        }
        WindowDef::EventTime { field, size_ms, slide_ms, max_delay_ms, lateness_ms } => {
            let position = time.expect("an event-time window has its timestamp's position");
            let spec = TimeSpec {
                size: *size_ms as i64,
                slide: *slide_ms as i64,
                delay: *max_delay_ms as i64,
                lateness: *lateness_ms as i64,
            };
            by_time(exec, node, &batch, Stamp::Field { field, position }, &spec)?
        }
    };
    if !assigned.is_empty() {
        let keyed: Vec<usize> = [0, 1].into_iter().chain(group.iter().map(|p| p + 2)).collect();
        let partials = partials_of(exec, &assigned, &keyed, aggregator)?;
        store_partials(exec, node, state, aggregator, partials, false)?;
    }
    let mut views = lock(exec.views(node)?);
    let closed: Vec<(Vec<u8>, Value)> = match closing {
        Closing::Keys(keys) => {
            let mut closed = Vec::with_capacity(keys.len());
            for key in keys {
                if let Some(value) = views.base(state, &key).map_err(storage(state))?.value() {
                    closed.push((key, value.clone()));
                }
            }
            closed
        }
        Closing::Through(end) => {
            let from = [ValueKind::I64.byte()];
            let to = match end.checked_add(1) {
                Some(next) => keys::encode([ValueRef::I64(next)]),
                None => vec![ValueKind::F64.byte()],
            };
            let open = views.range(state, &from, &to).map_err(storage(state))?;
            open.into_iter().filter_map(|(key, base)| base.value().cloned().map(|v| (key, v))).collect()
        }
    };
    let mut writer = BatchWriter::new(node.fields.len());
    for (key, value) in closed {
        let bounds = keys::decode(&key).map_err(storage(state))?;
        let [end, start, group_values @ ..] = &bounds[..] else {
            return Err(BatchError::fatal(&node.id, format!("state {state} holds a window key without bounds")));
        };
        writer.begin_row(0);
        for v in group_values {
            writer.push(v.as_ref());
        }
        writer.push(start.as_ref());
        writer.push(end.as_ref());
        writer.push(value.as_ref());
        views.remove(state, &key).map_err(storage(state))?;
    }
    Ok(super::fit_owned(vec![writer.finish_batch()], node.parallelism))
}

/// Where a tuple's time comes from.
enum Stamp<'a> {
    /// Its timestamp field (event time).
    Field { field: &'a str, position: usize },
    /// The time its batch was emitted (processing time).
    Batch(i64),
}

impl Stamp<'_> {
    /// The time of `row`.
    fn of(&self, node: &Node, row: Row<'_>) -> Result<i64, BatchError> {
        match *self {
            Stamp::Batch(emitted) => Ok(emitted),
            Stamp::Field { field, position } => match row.get(position).expect("position within arity") {
                ValueRef::I64(ts) => Ok(ts),
                other => Err(BatchError::fatal(
                    &node.id,
                    format!(
                        "window {}: field {} holds {}, not a timestamp in milliseconds",
                        node.id,
                        serde_json::to_string(field).unwrap_or_default(),
                        crate::json::to_json(&other.to_owned())
                    ),
                )),
            },
        }
    }
}

/// A time window's sizes, in milliseconds.
struct TimeSpec {
    size: i64,
    slide: i64,
    delay: i64,
    lateness: i64,
}

/// The integer stored under `key` of the operation's state.
fn stored_i64(exec: &Exec<'_>, node: &Node, state: &str, key: &[u8]) -> Result<Option<i64>, BatchError> {
    let mut views = lock(exec.views(node)?);
    match views.base(state, key).map_err(storage(state))? {
        Base::None => Ok(None),
        Base::Value(Value::I64(n)) | Base::Applied(Value::I64(n)) => Ok(Some(n)),
        Base::Value(other) | Base::Applied(other) => Err(BatchError::fatal(
            &node.id,
            format!(
                "state {state} holds {} where a window's count or watermark should be",
                crate::json::to_json(&other)
            ),
        )),
    }
}

fn put_i64(exec: &Exec<'_>, node: &Node, state: &str, key: Vec<u8>, n: i64) -> Result<(), BatchError> {
    lock(exec.views(node)?).put(state, key, Value::I64(n)).map_err(storage(state))
}

/// Starts a row of the assigned batch: the window's end and start, then
/// the tuple.
fn push_assigned(writer: &mut BatchWriter, row: Row<'_>, end: i64, start: i64) {
    writer.begin_row(0);
    writer.push(ValueRef::I64(end));
    writer.push(ValueRef::I64(start));
    for value in row.encoded_values() {
        writer.push_encoded(value);
    }
}

/// Count windows: each group's tuples numbered on from its stored count;
/// tuple `n` falls into the windows ending at the multiples of `slide` in
/// `(n, n + size]`, and the windows ending at or before the group's new
/// count close.
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
            push_assigned(&mut writer, row, end, (end - size).max(0));
            end += slide;
        }
    }
    let mut closing = Vec::new();
    for ((group_key, &from), &to) in groups.keys.iter().zip(&before).zip(&counts) {
        let mut end = (from / slide + 1) * slide;
        while end <= to {
            let mut key = keys::encode([ValueRef::I64(end), ValueRef::I64((end - size).max(0))]);
            key.extend_from_slice(group_key);
            closing.push(key);
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
/// already (a tuple in none is late); the watermark moves to the greatest
/// time seen less the delay, and every window whose end plus the lateness
/// it reaches closes.
fn by_time(
    exec: &mut Exec<'_>,
    node: &Node,
    batch: &Batch<'_>,
    stamp: Stamp<'_>,
    spec: &TimeSpec,
) -> Result<(Batch<'static>, Closing), BatchError> {
    let Op::Window { state, .. } = &node.op else { unreachable!("a window") };
    let greatest_key = keys::encode([GREATEST_SEEN]);
    let greatest_before = stored_i64(exec, node, state, &greatest_key)?;
    // Windows ending at or before this closed in earlier batches.
    let closed_through = |greatest: Option<i64>| {
        greatest.map_or(i64::MIN, |g| g.saturating_sub(spec.delay).saturating_sub(spec.lateness))
    };
    let closed_before = closed_through(greatest_before);
    let mut greatest = greatest_before;
    let mut late = 0;
    let mut writer = BatchWriter::new(batch.arity() + 2);
    if let Stamp::Batch(emitted) = stamp {
        // A batch's time moves its windows on even when it holds nothing.
        greatest = Some(greatest.map_or(emitted, |g| g.max(emitted)));
    }
    for row in batch.rows() {
        let ts = stamp.of(node, row)?;
        greatest = Some(greatest.map_or(ts, |g| g.max(ts)));
        let mut assigned = false;
        let mut start = ts.div_euclid(spec.slide).saturating_mul(spec.slide);
        loop {
            let end = start.saturating_add(spec.size);
            if end <= ts || start == i64::MIN {
                break;
            }
            if end > closed_before {
                push_assigned(&mut writer, row, end, start);
                assigned = true;
            }
            start = start.saturating_sub(spec.slide);
        }
        if !assigned {
            late += 1;
        }
    }
    if let Some(g) = greatest.filter(|&g| Some(g) != greatest_before) {
        put_i64(exec, node, state, greatest_key, g)?;
    }
    if late > 0 {
        let late_key = keys::encode([LATE]);
        let before = stored_i64(exec, node, state, &late_key)?.unwrap_or(0);
        put_i64(exec, node, state, late_key, before.saturating_add(late))?;
    }
    Ok((writer.finish_batch(), Closing::Through(closed_through(greatest))))
}
