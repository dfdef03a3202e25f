//! Session windows: a tuple at `t` opens the session `[t, t + gap)` of its
//! group, and sessions that meet (touching included) merge; a tuple whose
//! own session would have closed joins an open session it meets, and is
//! late only when it meets none. A group's open sessions are listed
//! under its index key in the window's state, beside each session's
//! partial under (end, start, group) as other windows keep theirs; a batch
//! that merges sessions combines their partials under the merged session's
//! key and removes theirs. Sessions close by the watermark, as event-time
//! windows do ([`super::window`]).

use super::aggregate::groups;
use super::context::Exec;
use super::error::malformed;
use super::persistent_aggregate::{lock, single_values_tagged, storage};
use super::window_state::{Stamp, TimeSpec, Watermark, partition_of, push_assigned, window_key};
use crate::instances::Request;
use weir_plan::{Aggregator, Node, Op};
use weir_runtime::BatchError;
use weir_sdk::codec::{Batch, BatchWriter, Value, ValueRef};
use weir_sdk::topology::AggregatorKind;
use weir_state::keys;

/// First value of a group's index key: its open sessions.
const SESSIONS: ValueRef<'static> = ValueRef::Bool(true);

/// A session as a batch leaves it: its bounds, the stored sessions merged
/// into it and the batch's rows that fall into it.
struct Session {
    start: i64,
    end: i64,
    stored: Vec<(i64, i64)>,
    rows: Vec<usize>,
}

fn index_key(group_key: &[u8]) -> Vec<u8> {
    let mut key = keys::encode([SESSIONS]);
    key.extend_from_slice(group_key);
    key
}

/// A group's open sessions, as its index holds them: `(start, end)` pairs
/// of big-endian integers.
fn decode_index(node: &Node, state: &str, value: &Value) -> Result<Vec<(i64, i64)>, BatchError> {
    let corrupt = || BatchError::fatal(&node.id, format!("state {state} holds a session index that is not one"));
    let Value::Bytes(bytes) = value else { return Err(corrupt()) };
    if bytes.len() % 16 != 0 {
        return Err(corrupt());
    }
    let number = |b: &[u8]| i64::from_be_bytes(b.try_into().expect("8 bytes"));
    Ok(bytes.chunks_exact(16).map(|pair| (number(&pair[..8]), number(&pair[8..]))).collect())
}

fn encode_index(sessions: &[(i64, i64)]) -> Value {
    Value::Bytes(
        sessions.iter().flat_map(|(start, end)| start.to_be_bytes().into_iter().chain(end.to_be_bytes())).collect(),
    )
}

/// Assigns `batch`'s rows to their groups' sessions, merging sessions they
/// join (their partials combined under the merged session's key); returns
/// the rows as assigned, for their partials to be added.
pub(super) fn assign(
    exec: &mut Exec<'_>,
    node: &Node,
    batch: &Batch<'_>,
    stamp: &Stamp<'_>,
    gap: i64,
    spec: &TimeSpec,
) -> Result<(Batch<'static>, Watermark), BatchError> {
    let Op::Window { state, group, aggregator, .. } = &node.op else { unreachable!("a window") };
    let partitions = exec.plan.spout_partitions();
    let mut watermark = Watermark::read(exec, node, spec, partitions)?;
    let groups = groups(batch, group);
    let mut rows_of: Vec<Vec<usize>> = vec![Vec::new(); groups.keys.len()];
    for (r, &g) in groups.of_row.iter().enumerate() {
        rows_of[g as usize].push(r);
    }
    let rows: Vec<_> = batch.rows().collect();
    let mut writer = BatchWriter::new(batch.arity() + 2);
    // Per merged session: its key and the stored partials to combine there.
    let mut merges: Vec<(Vec<u8>, Vec<Vec<u8>>)> = Vec::new();
    for (group_key, group_rows) in groups.keys.iter().zip(&rows_of) {
        let stored = {
            let mut views = lock(exec.views(node)?);
            match views.base(state, &index_key(group_key)).map_err(storage(state))?.value() {
                Some(value) => decode_index(node, state, value)?,
                None => Vec::new(),
            }
        };
        let mut sessions: Vec<Session> = stored
            .iter()
            .map(|&(start, end)| Session { start, end, stored: vec![(start, end)], rows: Vec::new() })
            .collect();
        for &r in group_rows {
            let ts = stamp.of(node, rows[r])?;
            watermark.see(ts, partition_of(rows[r], partitions));
            let end = ts.saturating_add(gap);
            // Late only when the session it would open has closed and it
            // meets no session still open (Flink's rule: a tuple is late
            // when every window it would belong to, merged, has closed).
            let meets_open = || sessions.iter().any(|s| s.start <= end && ts <= s.end);
            if end <= watermark.closed_before && !meets_open() {
                watermark.late_rows.push(r);
                continue;
            }
            let mut joined = Session { start: ts, end, stored: Vec::new(), rows: vec![r] };
            sessions.retain_mut(|s| {
                let meets = s.start <= joined.end && joined.start <= s.end;
                if meets {
                    joined.start = joined.start.min(s.start);
                    joined.end = joined.end.max(s.end);
                    joined.stored.append(&mut s.stored);
                    joined.rows.append(&mut s.rows);
                }
                !meets
            });
            sessions.push(joined);
        }
        sessions.sort_by_key(|s| s.start);
        let bounds: Vec<(i64, i64)> = sessions.iter().map(|s| (s.start, s.end)).collect();
        if bounds != stored {
            let mut views = lock(exec.views(node)?);
            views.put(state, index_key(group_key), encode_index(&bounds)).map_err(storage(state))?;
        }
        for mut session in sessions {
            let key = window_key(session.end, session.start, group_key);
            if session.stored != [(session.start, session.end)] && !session.stored.is_empty() {
                let olds = session.stored.iter().map(|&(start, end)| window_key(end, start, group_key)).collect();
                merges.push((key, olds));
            }
            session.rows.sort_unstable();
            for r in session.rows {
                push_assigned(&mut writer, rows[r], session.end, session.start);
            }
        }
    }
    merge_stored(exec, node, state, aggregator, merges)?;
    Ok((writer.finish_batch(), watermark))
}

/// Combines the stored partials of the sessions each merged session took
/// in, writes the result under its key and removes theirs.
fn merge_stored(
    exec: &mut Exec<'_>,
    node: &Node,
    state: &str,
    aggregator: &Aggregator,
    merges: Vec<(Vec<u8>, Vec<Vec<u8>>)>,
) -> Result<(), BatchError> {
    let mut lists = Vec::with_capacity(merges.len());
    {
        let mut views = lock(exec.views(node)?);
        for (_, olds) in &merges {
            let mut values = Vec::with_capacity(olds.len());
            for old in olds {
                values.extend(views.base(state, old).map_err(storage(state))?.value().cloned());
                views.remove(state, old).map_err(storage(state))?;
            }
            lists.push(values);
        }
    }
    let combined = combine_lists(exec, aggregator, lists)?;
    let mut views = lock(exec.views(node)?);
    for ((key, _), value) in merges.into_iter().zip(combined) {
        if let Some(value) = value {
            views.put(state, key, value).map_err(storage(state))?;
        }
    }
    Ok(())
}

/// Each list of partials combined into one (`None` for an empty list): in
/// the host for a built-in, else with one call into the guest combiner per
/// partial beyond the first of the longest list.
fn combine_lists(
    exec: &mut Exec<'_>,
    aggregator: &Aggregator,
    lists: Vec<Vec<Value>>,
) -> Result<Vec<Option<Value>>, BatchError> {
    let id = &aggregator.id;
    let mut lists: Vec<std::vec::IntoIter<Value>> = lists.into_iter().map(Vec::into_iter).collect();
    let mut out: Vec<Option<Value>> = lists.iter_mut().map(Iterator::next).collect();
    loop {
        let next: Vec<(usize, Value)> =
            lists.iter_mut().enumerate().filter_map(|(at, list)| list.next().map(|v| (at, v))).collect();
        if next.is_empty() {
            return Ok(out);
        }
        match aggregator.kind {
            AggregatorKind::Builtin(builtin) => {
                for (at, value) in next {
                    let acc = out[at].take().expect("a list with a second partial has a first");
                    out[at] = Some(builtin.combine(acc, value).map_err(|e| BatchError::fatal(id, e.to_string()))?);
                }
            }
            _ => {
                let mut pairs = BatchWriter::new(2);
                for (at, value) in &next {
                    let acc = out[*at].as_ref().expect("a list with a second partial has a first");
                    pairs.push_row(*at as u32, [acc.as_ref(), value.as_ref()]).expect("two values");
                }
                let pairs = pairs.finish_batch();
                let fields = ["stored".to_owned(), "partial".to_owned()];
                let answer = exec.call(0, id, &fields, Request::CombinePairs(pairs.bytes()))?;
                let values = single_values_tagged(id, &answer, &pairs)?;
                if values.len() != next.len() {
                    return Err(malformed(id, format!("{} values for {} pairs", values.len(), next.len())));
                }
                for (at, value) in values {
                    out[at] = Some(value);
                }
            }
        }
    }
}

/// After `node`'s windows through `end` closed: each closed session leaves
/// its group's index.
pub(super) fn forget_closed(exec: &Exec<'_>, node: &Node, closed: &[Vec<u8>], end: i64) -> Result<(), BatchError> {
    let Op::Window { state, .. } = &node.op else { unreachable!("a window") };
    let mut groups: Vec<&[u8]> = closed.iter().map(|key| group_part(key)).collect();
    groups.sort_unstable();
    groups.dedup();
    let mut views = lock(exec.views(node)?);
    for group_key in groups {
        let key = index_key(group_key);
        let Some(value) = views.base(state, &key).map_err(storage(state))?.value().cloned() else { continue };
        let open: Vec<(i64, i64)> = decode_index(node, state, &value)?.into_iter().filter(|&(_, e)| e > end).collect();
        if open.is_empty() {
            views.remove(state, &key).map_err(storage(state))?;
        } else {
            views.put(state, key, encode_index(&open)).map_err(storage(state))?;
        }
    }
    Ok(())
}

/// The group's part of a window key: what follows its two integers.
fn group_part(key: &[u8]) -> &[u8] {
    // An encoded integer is its kind byte and eight bytes.
    key.get(18..).unwrap_or_default()
}
