//! Queries: a request through a query stream, over what is committed
//! (Trident's DRPC).

use super::context::{Exec, per_partition};
use super::parts::{Parts, gather};
use crate::instances::OperatorSource;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use weir_plan::{Op, Plan};
use weir_runtime::BatchId;
use weir_sdk::codec::{BatchWriter, Value, ValueRef};
use weir_state::Db;
use weir_state::store::Snapshot;
use weir_state::view::Views;

/// Answers query `query` of `plan` with `args`, over what `db` has committed:
/// the result tuples.
pub fn query(
    db: &Db,
    plan: &Arc<Plan>,
    source: &OperatorSource,
    query: &str,
    args: &str,
) -> anyhow::Result<Vec<Vec<Value>>> {
    let read = db.begin_read()?;
    let last = db.progress(&plan.stored_as)?.last_committed;
    query_over(&read, last, plan, source, query, args)
}

/// [`query`] over `read`, whose last committed txid is `last`.
pub fn query_over(
    read: &dyn Snapshot,
    last: u64,
    plan: &Arc<Plan>,
    source: &OperatorSource,
    query: &str,
    args: &str,
) -> anyhow::Result<Vec<Vec<Value>>> {
    let Some((nodes, answer)) = plan.query_nodes(query) else {
        let known: Vec<&String> = plan.queries.keys().collect();
        let (query, known) = (serde_json::Value::from(query), serde_json::json!(known));
        anyhow::bail!("topology {} has no query {query} (queries: {known})", plan.topology);
    };
    let mut caches = HashMap::new();
    let views = Views::new(read, &plan.stored_as, &plan.states, &mut caches, u64::MAX, false, &plan.sandboxes.state)?;
    let views = Arc::new(Mutex::new(views));
    let mut instances = per_partition(plan, source);
    let mut exec = Exec {
        plan,
        instances: &mut instances,
        batch: BatchId { txid: last, attempt: 0 },
        time_ms: 0,
        late: Default::default(),
        watermarks: Default::default(),
        views: Some(&views),
    };
    let mut outputs: Vec<Option<Parts>> = vec![None; plan.nodes.len()];
    for &i in &nodes {
        let node = &plan.nodes[i];
        let out = if let Op::Query(_) = node.op {
            let mut writer = BatchWriter::new(1);
            writer.push_row(0, [ValueRef::Str(args)]).expect("one value");
            vec![writer.finish_batch()]
        } else {
            let inputs: Vec<&Parts> =
                node.inputs.iter().map(|&p| outputs[p].as_ref().expect("inputs run first")).collect();
            exec.run(i, &inputs).map_err(|e| anyhow::anyhow!("query {query}: {e}"))?
        };
        outputs[i] = Some(out);
    }
    let result = gather(outputs[answer].as_ref().expect("the answer ran"));
    Ok(result.rows().map(|row| row.values().map(ValueRef::to_owned).collect()).collect())
}
