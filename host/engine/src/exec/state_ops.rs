//! Operations a guest runs against a state, in the commit phase (or a
//! query): state updaters (`partition_persist`) and state queries.

use super::context::Exec;
use super::error::malformed;
use super::parts::{Parts, fit, guest_input, push_kept};
use super::persistent_aggregate::{lock, storage};
use crate::instances::Request;
use weir_plan::{Node, Op};
use weir_runtime::BatchError;
use weir_sdk::codec::{Batch, BatchWriter, Value, ValueRef};
use weir_sdk::topology::QueryDef;
use weir_state::keys;

/// A guest state updater over each partition, in turn.
pub(super) fn partition_persist(exec: &mut Exec<'_>, node: &Node, input: &Parts) -> Result<Parts, BatchError> {
    let Op::PartitionPersist { state, input: reads, outputs } = &node.op else { unreachable!("a partition persist") };
    let parts = fit(input, node.parallelism, exec.plan.tags_origins());
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
    let parts = fit(input, node.parallelism, exec.plan.tags_origins());
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
                    writer.begin_row(row.tag());
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
                    writer.begin_row(parent.tag());
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
