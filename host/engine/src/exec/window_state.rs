//! What a window operation keeps in its state and shares with session and
//! tuple windows: window keys, where a tuple's time comes from, the
//! watermark, and the windows a batch closes.

use super::context::Exec;
use super::persistent_aggregate::{lock, storage};
use weir_plan::{Node, Op};
use weir_runtime::BatchError;
use weir_sdk::codec::{BatchWriter, Row, Value, ValueKind, ValueRef};
use weir_state::keys;
use weir_state::view::Base;

/// Key of the greatest timestamp seen (event time).
const GREATEST_SEEN: ValueRef<'static> = ValueRef::Null;
/// Key of the number of late tuples (event time).
const LATE: ValueRef<'static> = ValueRef::Bool(false);
/// The windows a batch closes.
pub(super) enum Closing {
    /// These keys (count windows: each group's own).
    Keys(Vec<Vec<u8>>),
    /// Every window ending after `after` (which closed in earlier
    /// batches) and at or before `end` (time windows).
    Through { after: i64, end: i64 },
}

/// The keys of the windows ending after `after` and at or before `end`:
/// from the first past `after` (or the first window key, the integers'
/// kind) up to the first past `end`.
pub(super) fn closed_range(after: i64, end: i64) -> (Vec<u8>, Vec<u8>) {
    let past = |at: i64| match at.checked_add(1) {
        Some(next) => keys::encode([ValueRef::I64(next)]),
        None => vec![ValueKind::F64.byte()],
    };
    let from = if after == i64::MIN { vec![ValueKind::I64.byte()] } else { past(after) };
    (from, past(end))
}

/// Where a tuple's time comes from.
pub(super) enum Stamp<'a> {
    /// Its timestamp field (event time).
    Field { field: &'a str, position: usize },
    /// The time its batch was emitted (processing time).
    Batch(i64),
}

impl Stamp<'_> {
    /// The time of `row`.
    #[inline]
    pub(super) fn of(&self, node: &Node, row: Row<'_>) -> Result<i64, BatchError> {
        match *self {
            Stamp::Batch(emitted) => Ok(emitted),
            Stamp::Field { field, position } => match row.get(position).expect("position within arity") {
                ValueRef::I64(ts) => Ok(ts),
                other => Err(not_a_timestamp(node, field, other)),
            },
        }
    }
}

#[cold]
fn not_a_timestamp(node: &Node, field: &str, value: ValueRef<'_>) -> BatchError {
    BatchError::fatal(
        &node.id,
        format!(
            "window {}: field {} holds {}, not a timestamp in milliseconds",
            node.id,
            serde_json::to_string(field).unwrap_or_default(),
            weir_state::json::to_json(&value.to_owned())
        ),
    )
}

/// A time window's sizes, in milliseconds.
pub(super) struct TimeSpec {
    pub(super) size: i64,
    pub(super) slide: i64,
    pub(super) delay: i64,
    pub(super) lateness: i64,
    /// After how long without a tuple a spout partition stops holding the
    /// watermark back (none: never).
    pub(super) idle: Option<i64>,
}

/// The key of a window's partial: its end, its start, then the group's.
pub(super) fn window_key(end: i64, start: i64, group_key: &[u8]) -> Vec<u8> {
    let mut key = keys::encode([ValueRef::I64(end), ValueRef::I64(start)]);
    key.extend_from_slice(group_key);
    key
}

/// The integer stored under `key` of the operation's state.
pub(super) fn stored_i64(exec: &Exec<'_>, node: &Node, state: &str, key: &[u8]) -> Result<Option<i64>, BatchError> {
    let mut views = lock(exec.views(node)?);
    match views.base(state, key).map_err(storage(state))? {
        Base::None => Ok(None),
        Base::Value(Value::I64(n)) | Base::Applied(Value::I64(n)) => Ok(Some(n)),
        Base::Value(other) | Base::Applied(other) => Err(BatchError::fatal(
            &node.id,
            format!(
                "state {state} holds {} where a window's count or watermark should be",
                weir_state::json::to_json(&other)
            ),
        )),
    }
}

pub(super) fn put_i64(exec: &Exec<'_>, node: &Node, state: &str, key: Vec<u8>, n: i64) -> Result<(), BatchError> {
    lock(exec.views(node)?).put(state, key, Value::I64(n)).map_err(storage(state))
}

/// Starts a row of the assigned batch: the window's end and start, then
/// the tuple.
pub(super) fn push_assigned(writer: &mut BatchWriter, row: Row<'_>, end: i64, start: i64) {
    writer.begin_row(0);
    writer.push(ValueRef::I64(end));
    writer.push(ValueRef::I64(start));
    for value in row.encoded_values() {
        writer.push_encoded(value);
    }
}

/// Key of the operation's watermark, where the spout deals into several
/// partitions.
fn watermark_key() -> Vec<u8> {
    keys::encode([GREATEST_SEEN, ValueRef::Str("watermark")])
}

/// Key of partition `p`'s `what`: `greatest`, its greatest timestamp, or
/// `active`, the operation's greatest timestamp after the last batch that
/// brought a tuple of it.
fn partition_key(what: &str, p: usize) -> Vec<u8> {
    keys::encode([GREATEST_SEEN, ValueRef::Str(what), ValueRef::I64(p as i64)])
}

/// The spout partition a row came from: its tag is the index of its spout
/// tuple, which the spout dealt round-robin into `partitions`.
#[inline]
pub(super) fn partition_of(row: Row<'_>, partitions: usize) -> usize {
    row.tag() as usize % partitions
}

/// What the state holds of one spout partition.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Mark {
    greatest: Option<i64>,
    active: Option<i64>,
}

/// Where a time window's watermark stands, over one batch: the greatest
/// time seen before it and since, overall and (where the spout deals into
/// several partitions) per partition, and the late tuples it found.
///
/// With one partition the watermark is the greatest timestamp seen less
/// the max delay. With several, each partition's is its own greatest less
/// the max delay, and the operation's is the least of those of the
/// partitions that have brought a tuple and are not idle (no tuple of them
/// while the greatest timestamp seen moved on by more than the idle
/// timeout), never lower than it was. Windows ending at or before the
/// watermark less the lateness close.
pub(super) struct Watermark {
    /// How many partitions the spout deals into (1 for processing time).
    partitions: usize,
    greatest_before: Option<i64>,
    greatest: Option<i64>,
    /// Per partition, where there are several: before the batch and since.
    marks_before: Vec<Mark>,
    marks: Vec<Mark>,
    /// The partitions that brought a tuple in this batch.
    brought: Vec<bool>,
    /// The operation's watermark before the batch, and the one stored.
    before: Option<i64>,
    stored: Option<i64>,
    /// Windows ending at or before this closed in earlier batches.
    pub(super) closed_before: i64,
    /// The rows of the batch whose windows had all closed.
    pub(super) late_rows: Vec<usize>,
    delay: i64,
    lateness: i64,
    idle: Option<i64>,
}

impl Watermark {
    /// The watermark `node`'s state holds, its spout dealing into
    /// `partitions`.
    pub(super) fn read(
        exec: &Exec<'_>,
        node: &Node,
        spec: &TimeSpec,
        partitions: usize,
    ) -> Result<Watermark, BatchError> {
        let Op::Window { state, .. } = &node.op else { unreachable!("a window") };
        let greatest = stored_i64(exec, node, state, &keys::encode([GREATEST_SEEN]))?;
        let partitions = partitions.max(1);
        let mut marks = Vec::new();
        if partitions > 1 {
            for p in 0..partitions {
                let greatest = stored_i64(exec, node, state, &partition_key("greatest", p))?;
                let active = stored_i64(exec, node, state, &partition_key("active", p))?;
                marks.push(Mark { greatest, active });
            }
        }
        // A watermark stored by a run with several partitions: read with
        // one, it is removed (the greatest timestamp less the delay is
        // never below it).
        let stored = stored_i64(exec, node, state, &watermark_key())?;
        let by_greatest = greatest.map(|g| g.saturating_sub(spec.delay));
        let before = if partitions > 1 { stored.or(by_greatest) } else { by_greatest };
        let closed_before = before.map_or(i64::MIN, |w| w.saturating_sub(spec.lateness));
        Ok(Watermark {
            partitions,
            greatest_before: greatest,
            greatest,
            brought: vec![false; marks.len()],
            marks_before: marks.clone(),
            marks,
            before,
            stored,
            closed_before,
            late_rows: Vec::new(),
            delay: spec.delay,
            lateness: spec.lateness,
            idle: spec.idle,
        })
    }

    /// Takes in a tuple's time, from spout partition `partition`.
    #[inline]
    pub(super) fn see(&mut self, ts: i64, partition: usize) {
        self.greatest = Some(self.greatest.map_or(ts, |g| g.max(ts)));
        if let Some(mark) = self.marks.get_mut(partition) {
            mark.greatest = Some(mark.greatest.map_or(ts, |g| g.max(ts)));
            self.brought[partition] = true;
        }
    }

    /// Each partition's mark after the batch.
    fn marks_after(&self) -> impl Iterator<Item = Mark> + '_ {
        self.marks.iter().zip(&self.brought).map(|(mark, &brought)| Mark {
            greatest: mark.greatest,
            active: if brought { self.greatest } else { mark.active },
        })
    }

    /// The operation's watermark after the batch.
    pub(super) fn after(&self) -> Option<i64> {
        let greatest = self.greatest?;
        let by_greatest = greatest.saturating_sub(self.delay);
        if self.partitions == 1 {
            return Some(by_greatest);
        }
        let idle =
            |mark: &Mark| self.idle.is_some_and(|idle| greatest.saturating_sub(mark.active.unwrap_or(greatest)) > idle);
        let least = self
            .marks_after()
            .filter(|mark| !idle(mark))
            .filter_map(|mark| mark.greatest)
            .min()
            .map_or(by_greatest, |g| g.saturating_sub(self.delay));
        Some(self.before.map_or(least, |before| before.max(least)))
    }

    /// The end through which windows close after the batch.
    pub(super) fn through(&self) -> i64 {
        self.after().map_or(i64::MIN, |w| w.saturating_sub(self.lateness))
    }

    /// Stores where the watermark moved and the late tuples; returns the
    /// end through which windows close now.
    pub(super) fn write(self, exec: &Exec<'_>, node: &Node) -> Result<i64, BatchError> {
        let Op::Window { state, .. } = &node.op else { unreachable!("a window") };
        if let Some(g) = self.greatest.filter(|&g| Some(g) != self.greatest_before) {
            put_i64(exec, node, state, keys::encode([GREATEST_SEEN]), g)?;
        }
        if self.partitions > 1 {
            let after: Vec<Mark> = self.marks_after().collect();
            for (p, (mark, before)) in after.iter().zip(&self.marks_before).enumerate() {
                for (what, now, was) in
                    [("greatest", mark.greatest, before.greatest), ("active", mark.active, before.active)]
                {
                    if let Some(now) = now.filter(|&now| Some(now) != was) {
                        put_i64(exec, node, state, partition_key(what, p), now)?;
                    }
                }
            }
            if let Some(watermark) = self.after().filter(|&w| Some(w) != self.stored) {
                put_i64(exec, node, state, watermark_key(), watermark)?;
            }
        } else if self.stored.is_some() {
            lock(exec.views(node)?).remove(state, &watermark_key()).map_err(storage(state))?;
        }
        if !self.late_rows.is_empty() {
            let late_key = keys::encode([LATE]);
            let before = stored_i64(exec, node, state, &late_key)?.unwrap_or(0);
            put_i64(exec, node, state, late_key, before.saturating_add(self.late_rows.len() as i64))?;
        }
        Ok(self.through())
    }
}
