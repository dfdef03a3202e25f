//! The process phase: a batch through the plan's steps, in guest operators,
//! into one partial per key; and the combining of partials with stored
//! values at commit.

use crate::operators::{OperatorSource, Operators, Request};
use crate::plan::{Aggregation, Input, Plan, Sink, Step};
use crate::state::keys;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use weir_sdk::codec::{Batch, BatchWriter, Row, Value};

/// Hash maps keyed by encoded group keys: short byte strings the host made,
/// so a fast non-cryptographic hash is the right one.
type KeyMap<V> = HashMap<Vec<u8>, V, rustc_hash::FxBuildHasher>;
use weir_sdk::operator::add;

/// Why a batch failed, and whether replaying it may help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchError {
    /// The operator at fault (or the state, for storage errors).
    pub operator: String,
    /// False when the topology must halt at once.
    pub retryable: bool,
    /// What went wrong.
    pub message: String,
}

impl BatchError {
    /// An error that replaying the batch may cure.
    pub fn retry(operator: &str, message: impl Into<String>) -> BatchError {
        BatchError { operator: operator.to_owned(), retryable: true, message: message.into() }
    }

    /// An error that halts the topology.
    pub fn fatal(operator: &str, message: impl Into<String>) -> BatchError {
        BatchError { operator: operator.to_owned(), retryable: false, message: message.into() }
    }
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "operator {}: {}", self.operator, self.message)
    }
}

fn malformed(operator: &str, what: impl fmt::Display) -> BatchError {
    BatchError::retry(operator, format!("returned a malformed batch: {what}"))
}

/// Copies the fields at `positions` of every row into a new batch.
fn project(batch: &Batch<'_>, positions: &[usize]) -> Vec<u8> {
    let mut writer = BatchWriter::new(positions.len());
    for row in batch.rows() {
        writer.begin_row(row.tag());
        push_kept(&mut writer, row, positions);
    }
    writer.finish()
}

fn guest_input<'b>(batch: &'b Batch<'_>, input: &Input) -> Cow<'b, [u8]> {
    if input.whole_tuple { Cow::Borrowed(batch.bytes()) } else { Cow::Owned(project(batch, &input.positions)) }
}

/// Appends the encoded values at `positions` of `row` to the current row.
fn push_kept(writer: &mut BatchWriter, row: Row<'_>, positions: &[usize]) {
    for &p in positions {
        writer.push_encoded(row.encoded_values().nth(p).expect("position within arity"));
    }
}

/// Runs the process phase of a plan.
pub struct Processor {
    plan: Arc<Plan>,
    operators: Operators,
}

impl Processor {
    /// A processor with its own operator instances.
    pub fn new(plan: Arc<Plan>, source: OperatorSource) -> Processor {
        let operators = Operators::new(source, Arc::clone(&plan));
        Processor { plan, operators }
    }

    /// Time spent in each operator since the last call, and resets it.
    pub fn take_times(&mut self) -> std::collections::BTreeMap<String, std::time::Duration> {
        self.operators.take_times()
    }

    /// Runs `batch` (the spout's tuples) through every step and aggregates
    /// it: one partial per key, sorted by key.
    pub fn process(
        &mut self,
        txid: u64,
        attempt: u32,
        batch: Batch<'static>,
    ) -> Result<Vec<(Vec<u8>, Value)>, BatchError> {
        let plan = Arc::clone(&self.plan);
        let mut current = batch;
        for step in &plan.steps {
            current = match step {
                Step::Function { id, input, outputs, kept } => {
                    self.function(id, input, *outputs, kept, txid, attempt, &current)?
                }
                Step::Filter { id, input, kept } => self.filter(id, input, kept, txid, attempt, &current)?,
            };
        }
        self.aggregate(&plan.sink, txid, attempt, &current)
    }

    #[allow(clippy::too_many_arguments)]
    fn function(
        &mut self,
        id: &str,
        input: &Input,
        outputs: usize,
        kept: &[usize],
        txid: u64,
        attempt: u32,
        batch: &Batch<'_>,
    ) -> Result<Batch<'static>, BatchError> {
        let guest_in = guest_input(batch, input);
        let out = self.operators.call(id, txid, attempt, &input.names, Request::Function(&guest_in))?;
        let emitted = Batch::decode_owned(out).map_err(|e| malformed(id, e))?;
        if emitted.arity() != outputs {
            return Err(BatchError::retry(
                id,
                format!("emitted rows of {} values, but it declares {outputs} output fields", emitted.arity()),
            ));
        }
        if let Some(row) = emitted.rows().find(|r| r.tag() as usize >= batch.len()) {
            return Err(malformed(id, format!("a row extends input row {} of {}", row.tag(), batch.len())));
        }
        if kept.is_empty() {
            return Ok(emitted);
        }
        let mut writer = BatchWriter::with_capacity(kept.len() + outputs, emitted.bytes().len() * 2);
        for row in emitted.rows() {
            writer.begin_row(0);
            push_kept(&mut writer, batch.row(row.tag() as usize), kept);
            for value in row.encoded_values() {
                writer.push_encoded(value);
            }
        }
        Ok(writer.finish_batch())
    }

    fn filter(
        &mut self,
        id: &str,
        input: &Input,
        kept: &[usize],
        txid: u64,
        attempt: u32,
        batch: &Batch<'_>,
    ) -> Result<Batch<'static>, BatchError> {
        let guest_in = guest_input(batch, input);
        let keep = self.operators.call(id, txid, attempt, &input.names, Request::Filter(&guest_in))?;
        if keep.len() != batch.len() {
            return Err(malformed(id, format!("{} verdicts for {} rows", keep.len(), batch.len())));
        }
        let mut writer = BatchWriter::new(kept.len());
        for (row, verdict) in batch.rows().zip(keep) {
            if verdict != 0 {
                writer.begin_row(0);
                push_kept(&mut writer, row, kept);
            }
        }
        Ok(writer.finish_batch())
    }

    fn aggregate(
        &mut self,
        sink: &Sink,
        txid: u64,
        attempt: u32,
        batch: &Batch<'_>,
    ) -> Result<Vec<(Vec<u8>, Value)>, BatchError> {
        let mut key = Vec::new();
        let key_of = |key: &mut Vec<u8>, row: Row<'_>| {
            key.clear();
            for &p in &sink.group {
                keys::encode_value(key, row.get(p).expect("position within arity"));
            }
        };
        let mut partials: Vec<(Vec<u8>, Value)> = match &sink.aggregation {
            Aggregation::Count => {
                let mut counts: KeyMap<i64> = KeyMap::default();
                for row in batch.rows() {
                    key_of(&mut key, row);
                    match counts.get_mut(key.as_slice()) {
                        Some(count) => *count += 1,
                        None => {
                            counts.insert(key.clone(), 1);
                        }
                    }
                }
                counts.into_iter().map(|(k, c)| (k, Value::I64(c))).collect()
            }
            Aggregation::Sum(position) => {
                let mut sums: KeyMap<Value> = KeyMap::default();
                for row in batch.rows() {
                    key_of(&mut key, row);
                    let value = row.get(*position).expect("position within arity").to_owned();
                    let sum = sums.remove(key.as_slice()).unwrap_or(Value::I64(0));
                    let sum = add(sum, value).map_err(|e| BatchError::fatal(&sink.id, e.to_string()))?;
                    sums.insert(key.clone(), sum);
                }
                sums.into_iter().collect()
            }
            Aggregation::Combiner(input) => {
                let mut groups: KeyMap<u32> = KeyMap::default();
                let mut order = Vec::new();
                if sink.group.is_empty() {
                    groups.insert(Vec::new(), 0);
                    order.push(Vec::new());
                }
                let mut writer = BatchWriter::new(input.positions.len());
                for row in batch.rows() {
                    key_of(&mut key, row);
                    let next = groups.len() as u32;
                    let group = *groups.entry(key.clone()).or_insert_with(|| {
                        order.push(key.clone());
                        next
                    });
                    writer.begin_row(group);
                    push_kept(&mut writer, row, &input.positions);
                }
                let rows = writer.finish();
                let count = order.len() as u32;
                let out =
                    self.operators.call(&sink.id, txid, attempt, &input.names, Request::CombineGroups(count, &rows))?;
                let results = single_values(&sink.id, &out, order.len())?;
                order.into_iter().zip(results).collect()
            }
        };
        if sink.group.is_empty() && partials.is_empty() {
            // An ungrouped aggregate yields a value even for an empty batch.
            partials.push((Vec::new(), Value::I64(0)));
        }
        partials.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(partials)
    }
}

/// Reads a guest's answer of one value per row, `expected` rows tagged 0, 1, ...
fn single_values(operator: &str, out: &[u8], expected: usize) -> Result<Vec<Value>, BatchError> {
    let batch = Batch::decode(out).map_err(|e| malformed(operator, e))?;
    if batch.arity() != 1 || batch.len() != expected {
        return Err(malformed(
            operator,
            format!("{} rows of {} values, expected {expected} rows of 1", batch.len(), batch.arity()),
        ));
    }
    let mut values = Vec::with_capacity(expected);
    for (index, row) in batch.rows().enumerate() {
        if row.tag() as usize != index {
            return Err(malformed(operator, format!("row {index} is tagged {}", row.tag())));
        }
        values.push(row.get(0).expect("arity 1").to_owned());
    }
    Ok(values)
}

/// Combines stored values with partials at commit in the guest's combiner
/// aggregator, in one call.
pub fn combine_at_commit(
    sink: &Sink,
    operators: &mut Operators,
    txid: u64,
    attempt: u32,
    pairs: &[(Value, Value)],
) -> Result<Vec<Value>, BatchError> {
    let mut writer = BatchWriter::new(2);
    for (index, (stored, partial)) in pairs.iter().enumerate() {
        writer.push_row(index as u32, [stored.as_ref(), partial.as_ref()]).expect("two values");
    }
    let input = writer.finish();
    let fields = ["stored".to_owned(), "partial".to_owned()];
    let out = operators.call(&sink.id, txid, attempt, &fields, Request::CombinePairs(&input))?;
    single_values(&sink.id, &out, pairs.len())
}
