//! Runs a component's operators over packed batches: the logic behind each
//! export of the WIT world, in plain Rust so that it is tested natively.

use crate::builder::Topology;
use crate::codec::{Batch, BatchWriter, Value};
use crate::operator::{BatchInfo, Error, MapState, PartitionedSpout, SpoutInfo};
use crate::tuple::{Emitter, SpoutEmitter, Tuple};

fn topology<'t>(topologies: &'t [Topology], name: &str) -> Result<&'t Topology, Error> {
    topologies
        .iter()
        .find(|t| t.definition().name == name)
        .ok_or_else(|| Error::fatal(format!("this component defines no topology {name:?}")))
}

/// Decodes a batch that a call to `info.operator` was given: `what` names it.
fn decode_as<'a>(bytes: &'a [u8], info: &BatchInfo, what: &str) -> Result<Batch<'a>, Error> {
    Batch::decode(bytes).map_err(|e| Error::fatal(format!("operator {}: {what} {e}", info.operator)))
}

/// Decodes an operator's input rows, which must hold its input fields.
fn decode<'a>(input: &'a [u8], info: &BatchInfo) -> Result<Batch<'a>, Error> {
    let batch = decode_as(input, info, "input")?;
    if batch.arity() != info.fields.len() {
        return Err(Error::fatal(format!(
            "operator {}: input rows hold {} values for {} fields",
            info.operator,
            batch.arity(),
            info.fields.len()
        )));
    }
    Ok(batch)
}

fn missing(kind: &str, info: &BatchInfo) -> Error {
    Error::fatal(format!("topology {} has no {kind} {:?}", info.topology, info.operator))
}

/// The code of the `kind` operator `info.operator`, as `find` looks it up in
/// its topology.
fn code<'t, T: ?Sized>(
    topologies: &'t [Topology],
    info: &BatchInfo,
    kind: &str,
    find: impl FnOnce(&'t Topology, &str) -> Option<&'t T>,
) -> Result<&'t T, Error> {
    find(topology(topologies, &info.topology)?, &info.operator).ok_or_else(|| missing(kind, info))
}

/// [`code`], and the number of fields the operator outputs, as `arity`
/// reads it from the topology.
fn code_and_arity<'t, T: ?Sized>(
    topologies: &'t [Topology],
    info: &BatchInfo,
    kind: &str,
    find: impl FnOnce(&'t Topology, &str) -> Option<&'t T>,
    arity: impl FnOnce(&'t Topology, &str) -> Option<usize>,
) -> Result<(&'t T, usize), Error> {
    let topology = topology(topologies, &info.topology)?;
    let operator = find(topology, &info.operator).ok_or_else(|| missing(kind, info))?;
    Ok((operator, arity(topology, &info.operator).ok_or_else(|| missing(kind, info))?))
}

/// Folds each row of `batch` into the value of the group it is tagged with.
fn fold_groups(
    info: &BatchInfo,
    batch: &Batch<'_>,
    values: &mut [Value],
    mut fold: impl FnMut(Value, &Tuple<'_>) -> Result<Value, Error>,
) -> Result<(), Error> {
    for row in batch.rows() {
        let value = info.group_slot(values, row.tag())?;
        *value = fold(std::mem::replace(value, Value::Null), &Tuple::new(row, info))?;
    }
    Ok(())
}

/// A batch of one value per row, the row of `values[i]` tagged with `i`.
fn one_value_per_row(values: &[Value]) -> Vec<u8> {
    let mut out = BatchWriter::new(1);
    for (index, value) in values.iter().enumerate() {
        out.push_row(index as u32, [value.as_ref()]).expect("one value per row");
    }
    out.finish()
}

/// Runs the function `info.operator` over every input row. Output rows are
/// tagged with the index of the row they extend.
pub fn run_function(topologies: &[Topology], info: &BatchInfo, input: &[u8]) -> Result<Vec<u8>, Error> {
    let (function, arity) = code_and_arity(topologies, info, "function", Topology::function, Topology::output_arity)?;
    let batch = decode(input, info)?;
    let mut out = BatchWriter::for_bytes(arity, input.len());
    for (index, row) in batch.rows().enumerate() {
        function.execute(&Tuple::new(row, info), &mut Emitter::new(&mut out, index as u32))?;
    }
    Ok(out.finish())
}

fn spout_writer(topology: &Topology) -> BatchWriter {
    BatchWriter::for_bytes(topology.definition().spout().map_or(0, |s| s.fields().len()), 0)
}

/// Emits batch `info.txid` of the topology's batch spout.
pub fn emit_batch(topologies: &[Topology], info: &SpoutInfo) -> Result<Option<Vec<u8>>, Error> {
    let topology = topology(topologies, &info.topology)?;
    let spout = topology.batch_spout().ok_or_else(|| Error::fatal("the topology has no batch spout"))?;
    let mut out = spout_writer(topology);
    let more = spout.emit_batch(info, &mut SpoutEmitter::new(&mut out))?;
    Ok(more.then(|| out.finish()))
}

/// The topology's partitioned spout.
fn partitioned_spout(topology: &Topology) -> Result<&dyn PartitionedSpout, Error> {
    topology.partitioned_spout().ok_or_else(|| Error::fatal("the topology has no partitioned spout"))
}

/// The partitions of the topology's partitioned spout.
pub fn spout_partitions(topologies: &[Topology], info: &SpoutInfo) -> Result<Vec<String>, Error> {
    partitioned_spout(topology(topologies, &info.topology)?)?.partitions(info)
}

/// A partition's emitted batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionEmission {
    /// The tuples, packed.
    pub tuples: Vec<u8>,
    /// The spout's metadata for the batch.
    pub meta: Vec<u8>,
}

/// Emits the next batch of a partition: its tuples and metadata.
pub fn emit_partition(
    topologies: &[Topology],
    info: &SpoutInfo,
    partition: &str,
    previous: Option<&[u8]>,
) -> Result<Option<PartitionEmission>, Error> {
    let topology = topology(topologies, &info.topology)?;
    let (spout, mut out) = (partitioned_spout(topology)?, spout_writer(topology));
    let meta = spout.emit_partition(info, partition, previous, &mut SpoutEmitter::new(&mut out))?;
    Ok(meta.map(|meta| PartitionEmission { tuples: out.finish(), meta }))
}

/// Emits again the batch of a partition that `meta` describes.
pub fn reemit_partition(
    topologies: &[Topology],
    info: &SpoutInfo,
    partition: &str,
    meta: &[u8],
) -> Result<Vec<u8>, Error> {
    let topology = topology(topologies, &info.topology)?;
    let (spout, mut out) = (partitioned_spout(topology)?, spout_writer(topology));
    spout.reemit_partition(info, partition, meta, &mut SpoutEmitter::new(&mut out))?;
    Ok(out.finish())
}

/// Runs the filter `info.operator`: one byte per input row, 1 to keep it.
pub fn run_filter(topologies: &[Topology], info: &BatchInfo, input: &[u8]) -> Result<Vec<u8>, Error> {
    let filter = code(topologies, info, "filter", Topology::filter)?;
    let batch = decode(input, info)?;
    batch.rows().map(|row| filter.is_keep(&Tuple::new(row, info)).map(u8::from)).collect()
}

/// Folds each group's rows into one value: `combine(zero, init(row))` for
/// each row of the group, in order. Returns one row per group, tagged with it.
pub fn combine_groups(topologies: &[Topology], info: &BatchInfo, groups: u32, input: &[u8]) -> Result<Vec<u8>, Error> {
    let aggregator = code(topologies, info, "combiner aggregator", Topology::combiner)?;
    let batch = decode(input, info)?;
    let mut partials = vec![aggregator.zero(); groups as usize];
    fold_groups(info, &batch, &mut partials, |acc, tuple| aggregator.combine(acc, aggregator.init(tuple)?))?;
    Ok(one_value_per_row(&partials))
}

/// Folds each group's rows with the reducer `info.operator`, from the
/// group's row in `start` or from `init()`. Returns one row per group.
pub fn reduce_groups(
    topologies: &[Topology],
    info: &BatchInfo,
    groups: u32,
    start: &[u8],
    input: &[u8],
) -> Result<Vec<u8>, Error> {
    let reducer = code(topologies, info, "reducer aggregator", Topology::reducer)?;
    let mut values = vec![reducer.init(); groups as usize];
    for row in decode_as(start, info, "start")?.rows() {
        *info.group_slot(&mut values, row.tag())? = row.get(0).map_or(Value::Null, |v| v.to_owned());
    }
    fold_groups(info, &decode(input, info)?, &mut values, |acc, tuple| reducer.reduce(acc, tuple))?;
    Ok(one_value_per_row(&values))
}

/// Runs the general aggregator `info.operator` over each group. Emitted rows
/// are tagged with their group.
pub fn aggregate_groups(
    topologies: &[Topology],
    info: &BatchInfo,
    groups: u32,
    input: &[u8],
) -> Result<Vec<u8>, Error> {
    let (aggregator, arity) =
        code_and_arity(topologies, info, "aggregator", Topology::general, Topology::aggregator_arity)?;
    let batch = decode(input, info)?;
    let mut out = BatchWriter::new(arity);
    aggregator.run(info, groups, &mut batch.rows().map(|row| (row.tag(), Tuple::new(row, info))), &mut out)?;
    Ok(out.finish())
}

/// Runs the state updater `info.operator` over the batch partition.
pub fn update_state(
    topologies: &[Topology],
    info: &BatchInfo,
    state: &dyn MapState,
    input: &[u8],
) -> Result<Vec<u8>, Error> {
    let (updater, arity) =
        code_and_arity(topologies, info, "state updater", Topology::updater, Topology::output_arity)?;
    let batch = decode(input, info)?;
    let tuples: Vec<Tuple<'_>> = batch.rows().map(|row| Tuple::new(row, info)).collect();
    let mut out = BatchWriter::new(arity);
    updater.update_state(state, &tuples, &mut Emitter::new(&mut out, 0))?;
    Ok(out.finish())
}

/// The first half of the query function `info.operator`: one result row per
/// input row.
pub fn batch_retrieve(
    topologies: &[Topology],
    info: &BatchInfo,
    state: &dyn MapState,
    input: &[u8],
) -> Result<Vec<u8>, Error> {
    let query = code(topologies, info, "query function", Topology::query)?;
    let batch = decode(input, info)?;
    let tuples: Vec<Tuple<'_>> = batch.rows().map(|row| Tuple::new(row, info)).collect();
    let results = query.batch_retrieve(state, &tuples)?;
    if results.len() != tuples.len() {
        return Err(Error::fatal(format!(
            "operator {}: batch_retrieve returned {} results for {} tuples",
            info.operator,
            results.len(),
            tuples.len()
        )));
    }
    Ok(one_value_per_row(&results))
}

/// The second half of the query function `info.operator`: emits per input
/// row given its result; output rows are tagged with the row they extend.
pub fn execute_query(
    topologies: &[Topology],
    info: &BatchInfo,
    input: &[u8],
    results: &[u8],
) -> Result<Vec<u8>, Error> {
    let (query, arity) = code_and_arity(topologies, info, "query function", Topology::query, Topology::output_arity)?;
    let batch = decode(input, info)?;
    let results = decode_as(results, info, "results")?;
    if results.len() != batch.len() || results.arity() != 1 {
        return Err(Error::fatal(format!(
            "operator {}: {} results for {} tuples",
            info.operator,
            results.len(),
            batch.len()
        )));
    }
    let mut out = BatchWriter::new(arity);
    for (index, (row, result)) in batch.rows().zip(results.rows()).enumerate() {
        let result = result.get(0).expect("arity 1").to_owned();
        query.execute(&Tuple::new(row, info), &result, &mut Emitter::new(&mut out, index as u32))?;
    }
    Ok(out.finish())
}

/// Encodes keys for [`MapState::multi_get`] across the boundary: one row
/// per key.
pub fn encode_keys(keys: &[Vec<Value>]) -> Result<Vec<u8>, Error> {
    let arity = keys.first().map_or(0, Vec::len);
    let mut out = BatchWriter::new(arity);
    for key in keys {
        out.push_row(0, key.iter().map(Value::as_ref)).map_err(|e| Error::fatal(format!("state key: {e}")))?;
    }
    Ok(out.finish())
}

/// Decodes [`MapState::multi_get`]'s answer: one value per key, null absent.
pub fn decode_values(bytes: &[u8], keys: usize) -> Result<Vec<Option<Value>>, Error> {
    let batch = Batch::decode(bytes).map_err(|e| Error::fatal(format!("state values: {e}")))?;
    if batch.len() != keys || batch.arity() != 1 {
        return Err(Error::fatal(format!("state returned {} values for {keys} keys", batch.len())));
    }
    Ok(batch
        .rows()
        .map(|row| match row.get(0).expect("arity 1").to_owned() {
            Value::Null => None,
            value => Some(value),
        })
        .collect())
}

/// Encodes entries for [`MapState::multi_put`]: each row a key then its value.
pub fn encode_entries(entries: &[(Vec<Value>, Value)]) -> Result<Vec<u8>, Error> {
    let arity = entries.first().map_or(1, |(k, _)| k.len() + 1);
    let mut out = BatchWriter::new(arity);
    for (key, value) in entries {
        let values = key.iter().map(Value::as_ref).chain(std::iter::once(value.as_ref()));
        out.push_row(0, values).map_err(|e| Error::fatal(format!("state entry: {e}")))?;
    }
    Ok(out.finish())
}

/// Combines each input row's stored value with its partial.
pub fn combine_pairs(topologies: &[Topology], info: &BatchInfo, input: &[u8]) -> Result<Vec<u8>, Error> {
    let aggregator = code(topologies, info, "combiner aggregator", Topology::combiner)?;
    let batch = decode_as(input, info, "input")?;
    if batch.arity() != 2 {
        return Err(Error::fatal(format!("operator {}: pairs must hold 2 values", info.operator)));
    }
    let mut out = BatchWriter::new(1);
    for row in batch.rows() {
        let mut values = row.values();
        let stored = values.next().expect("arity 2").to_owned();
        let partial = values.next().expect("arity 2").to_owned();
        let combined = aggregator.combine(stored, partial)?;
        out.push_row(row.tag(), [combined.as_ref()]).expect("one value per row");
    }
    Ok(out.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{FileLines, State};
    use crate::codec::ValueRef;
    use crate::operator::{CombinerAggregator, Count, Function, SplitWords};

    struct Split;
    impl Function for Split {
        fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
            if tuple.batch().txid == 3 && tuple.batch().attempt == 0 {
                return Err(Error::retry("txid 3 fails once"));
            }
            for word in tuple.str("sentence")?.split_whitespace() {
                out.emit([word])?;
            }
            Ok(())
        }
    }

    /// The letters of all the words: their lengths added up.
    struct Letters;
    impl CombinerAggregator for Letters {
        fn init(&self, tuple: &Tuple<'_>) -> Result<Value, Error> {
            Ok(Value::I64(tuple.str(0)?.len() as i64))
        }
        fn combine(&self, a: Value, b: Value) -> Result<Value, Error> {
            let (Value::I64(a), Value::I64(b)) = (a, b) else { return Err(Error::fatal("not integers")) };
            Ok(Value::I64(a + b))
        }
        fn zero(&self) -> Value {
            Value::I64(0)
        }
    }

    fn topologies() -> Vec<Topology> {
        vec![
            Topology::new("wc")
                .new_stream(FileLines::new("sentence"))
                .each(["sentence"], Split, ["word"])
                .name("split")
                .group_by(["word"])
                .persistent_aggregate(State::transactional("counts"), Count, ["count"])
                .build(),
            Topology::new("letters")
                .new_stream(FileLines::new("word"))
                .persistent_aggregate_over(State::opaque("letters"), ["word"], Letters, ["len"])
                .name("letters")
                .build(),
        ]
    }

    fn info(topology: &str, operator: &str, fields: &[&str], txid: u64, attempt: u32) -> BatchInfo {
        BatchInfo {
            topology: topology.into(),
            operator: operator.into(),
            txid,
            attempt,
            partition: 0,
            fields: fields.iter().map(|f| f.to_string()).collect(),
        }
    }

    fn batch(rows: &[(u32, &str)]) -> Vec<u8> {
        let mut w = BatchWriter::new(1);
        for (tag, s) in rows {
            w.push_row(*tag, [ValueRef::Str(s)]).unwrap();
        }
        w.finish()
    }

    fn rows(bytes: &[u8]) -> Vec<(u32, Vec<Value>)> {
        Batch::decode(bytes).unwrap().rows().map(|r| (r.tag(), r.values().map(ValueRef::to_owned).collect())).collect()
    }

    #[test]
    fn function_output_rows_are_tagged_with_their_input_row() {
        let out = run_function(
            &topologies(),
            &info("wc", "split", &["sentence"], 1, 0),
            &batch(&[(0, "a b"), (0, ""), (0, "c")]),
        )
        .unwrap();
        assert_eq!(rows(&out), [(0, vec![Value::from("a")]), (0, vec![Value::from("b")]), (2, vec![Value::from("c")])]);
    }

    #[test]
    fn split_words_emits_a_tuple_per_word_as_each_and_as_flat_map() {
        let t = [Topology::new("words")
            .new_stream(FileLines::new("sentence"))
            .each(["sentence"], SplitWords, ["word"])
            .name("each")
            .flat_map(["word"], SplitWords, ["part"])
            .name("flat-map")
            .build()];
        let input = batch(&[(0, " a  b\t"), (0, ""), (0, "c")]);
        let words = [(0, vec![Value::from("a")]), (0, vec![Value::from("b")]), (2, vec![Value::from("c")])];
        for operator in ["each", "flat-map"] {
            let out = run_function(&t, &info("words", operator, &["sentence"], 1, 0), &input).unwrap();
            assert_eq!(rows(&out), words, "{operator}");
        }
    }

    #[test]
    fn guest_errors_and_unknown_operators_come_back_as_errors() {
        let t = topologies();
        let err = run_function(&t, &info("wc", "split", &["sentence"], 3, 0), &batch(&[(0, "a")])).unwrap_err();
        assert_eq!(err, Error::retry("txid 3 fails once"));
        assert!(run_function(&t, &info("wc", "split", &["sentence"], 3, 1), &batch(&[(0, "a")])).is_ok());
        let err = run_function(&t, &info("wc", "nope", &["sentence"], 1, 0), &batch(&[])).unwrap_err();
        assert!(err.to_string().contains("no function \"nope\""), "{err}");
        let err = run_function(&t, &info("wc", "split", &["sentence"], 1, 0), &[1, 2, 3]).unwrap_err();
        assert!(err.to_string().contains("malformed batch"), "{err}");
    }

    #[test]
    fn combiner_folds_groups_from_zero_and_combines_pairs() {
        let t = topologies();
        let ctx = info("letters", "letters", &["word"], 1, 0);
        let out = combine_groups(&t, &ctx, 3, &batch(&[(0, "abc"), (1, "a"), (0, "ab")])).unwrap();
        assert_eq!(rows(&out), [(0, vec![Value::I64(5)]), (1, vec![Value::I64(1)]), (2, vec![Value::I64(0)])]);
        let mut pairs = BatchWriter::new(2);
        pairs.push_row(0, [ValueRef::I64(5), ValueRef::I64(2)]).unwrap();
        pairs.push_row(1, [ValueRef::I64(1), ValueRef::I64(4)]).unwrap();
        let out = combine_pairs(&t, &ctx, &pairs.finish()).unwrap();
        assert_eq!(rows(&out), [(0, vec![Value::I64(7)]), (1, vec![Value::I64(5)])]);
        let err = combine_groups(&t, &ctx, 1, &batch(&[(4, "x")])).unwrap_err();
        assert!(err.to_string().contains("group 4 of 1"), "{err}");
    }
}
