//! One topology per stream operation (or family of them), each over the
//! same scripted batches, each ending in states the tests read back exactly.
//!
//! The guest spout emits [`SCRIPT`]: txid 1 holds six tuples, txid 2 none,
//! txid 3 one, txid 4 three; the filter `fail-once` right after it fails
//! the first attempt of txid 4, so every run replays a batch. Outputs are
//! written by [`Record`], which keeps each tuple it sees under the key
//! `[txid, fields...]` with how many times it saw it: a tuple lost, added
//! or applied twice shows up in the state.

#[path = "../../shared/operators.rs"]
mod shared;
#[path = "../../shared/topologies.rs"]
mod shared_topologies;
#[path = "../../shared/sums.rs"]
mod sums;

use shared::{Greatest, JoinNumbers, fail_first_attempt};
use shared_topologies::jetstream_lines;
use sums::Sums;
use weir_sdk::builder::TopologyBuilder;
use weir_sdk::prelude::*;
use weir_sdk::{Stream, ValueRef};

/// The tuples `(n, word)` of each batch, txid 1 first.
pub const SCRIPT: &[&[(i64, &str)]] = &[
    &[(1, "apple"), (2, "banana"), (3, "cherry"), (4, "apple"), (5, "banana"), (6, "apple")],
    &[],
    &[(7, "date")],
    &[(8, "cherry"), (9, "apple"), (10, "elder")],
];

/// The txid whose first attempt fails, and is replayed.
pub const REPLAYED_TXID: u64 = 4;

/// A batch spout emitting [`SCRIPT`], whatever the batch size.
pub struct Script;

impl BatchSpout for Script {
    fn emit_batch(&self, info: &SpoutInfo, out: &mut SpoutEmitter<'_>) -> Result<bool, Error> {
        let Some(batch) = SCRIPT.get(info.txid as usize - 1) else { return Ok(false) };
        for (n, word) in *batch {
            out.emit([ValueRef::I64(*n), ValueRef::Str(word)])?;
        }
        Ok(true)
    }
}

/// Keeps every tuple, but fails the first attempt of [`REPLAYED_TXID`].
pub struct FailOnce;

impl Filter for FailOnce {
    fn is_keep(&self, tuple: &Tuple<'_>) -> Result<bool, Error> {
        fail_first_attempt(tuple.batch(), REPLAYED_TXID)?;
        Ok(true)
    }
}

/// A state updater keeping each tuple under `[txid, its fields...]`, valued
/// with how many times it was seen (across partitions of a batch too).
pub struct Record;

impl StateUpdater for Record {
    fn update_state(&self, state: &dyn MapState, tuples: &[Tuple<'_>], _out: &mut Emitter<'_>) -> Result<(), Error> {
        let mut seen = Sums::default();
        for tuple in tuples {
            let mut key = vec![Value::I64(tuple.batch().txid as i64)];
            for field in 0..tuple.fields().len() {
                key.push(tuple.value(field)?.to_owned());
            }
            seen.add(key, 1);
        }
        seen.add_into(state)
    }
}

/// Emits `i` for each `i` in `0..n % 3`: none, one or two tuples per input.
pub struct Repeat;

impl Function for Repeat {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        for i in 0..tuple.i64("n")? % 3 {
            out.emit([i])?;
        }
        Ok(())
    }
}

/// Keeps the words longer than its length.
pub struct LongerThan(pub usize);

impl Filter for LongerThan {
    fn is_keep(&self, tuple: &Tuple<'_>) -> Result<bool, Error> {
        Ok(tuple.str("word")?.len() > self.0)
    }
}

/// Keeps the tuples whose `n` has a remainder of `.1` divided by `.0`.
pub struct Remainder(pub i64, pub i64);

impl Filter for Remainder {
    fn is_keep(&self, tuple: &Tuple<'_>) -> Result<bool, Error> {
        Ok(tuple.i64("n")? % self.0 == self.1)
    }
}

/// Upper-cases the word: the map's tuple replaces the input.
pub struct Upper;

impl MapFunction for Upper {
    fn execute(&self, tuple: &Tuple<'_>) -> Result<Vec<Value>, Error> {
        Ok(vec![Value::from(tuple.str("word")?.to_uppercase())])
    }
}

/// Splits a word of five letters or more into its halves; a shorter word
/// gives nothing.
pub struct Halves;

impl FlatMapFunction for Halves {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        let word = tuple.str("word")?;
        if word.len() >= 5 {
            let (a, b) = word.split_at(word.len() / 2);
            out.emit([a])?;
            out.emit([b])?;
        }
        Ok(())
    }
}

/// Prints each tuple it sees, with its batch.
pub struct Print;

impl Consumer for Print {
    fn accept(&self, tuple: &Tuple<'_>) -> Result<(), Error> {
        let batch = tuple.batch();
        println!("peek saw txid {} attempt {}: {} {}", batch.txid, batch.attempt, tuple.i64("n")?, tuple.str("word")?);
        Ok(())
    }
}

/// Appends the word's length.
pub struct Length;

impl Function for Length {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        out.emit([tuple.str("word")?.len() as i64])
    }
}

/// Appends `odd` or `even`, after `n`.
pub struct Parity;

impl Function for Parity {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        out.emit([if tuple.i64("n")? % 2 == 0 { "even" } else { "odd" }])
    }
}

/// Appends the partition the call processes.
pub struct PartitionOf;

impl Function for PartitionOf {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        out.emit([i64::from(tuple.batch().partition)])
    }
}

/// A guest combiner: the length of the longest word (0 for none).
pub struct Longest;

impl CombinerAggregator for Longest {
    fn init(&self, tuple: &Tuple<'_>) -> Result<Value, Error> {
        Ok(Value::I64(tuple.str(0)?.len() as i64))
    }
    fn combine(&self, a: Value, b: Value) -> Result<Value, Error> {
        match (a, b) {
            (Value::I64(a), Value::I64(b)) => Ok(Value::I64(a.max(b))),
            (a, b) => Err(Error::fatal(format!("longest of {a:?} and {b:?}"))),
        }
    }
    fn zero(&self) -> Value {
        Value::I64(0)
    }
}

/// A reducer: the first letters of the words, in order.
pub struct Initials;

impl ReducerAggregator for Initials {
    fn init(&self) -> Value {
        Value::from("")
    }
    fn reduce(&self, acc: Value, tuple: &Tuple<'_>) -> Result<Value, Error> {
        let Value::Str(mut acc) = acc else { return Err(Error::fatal(format!("initials of {acc:?}"))) };
        acc.extend(tuple.str(0)?.chars().next());
        Ok(Value::Str(acc))
    }
}

/// A general aggregator emitting from all three calls: `("batch", txid)`
/// from `init`, `("five", n)` from `aggregate` for each multiple of five,
/// and `("words", the words space-joined)` from `complete`.
pub struct Summary;

impl Aggregator for Summary {
    type State = Vec<String>;

    fn init(&self, info: &BatchInfo, out: &mut Emitter<'_>) -> Result<Vec<String>, Error> {
        out.emit([ValueRef::Str("batch"), ValueRef::I64(info.txid as i64)])?;
        Ok(Vec::new())
    }

    fn aggregate(&self, words: &mut Vec<String>, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        let n = tuple.i64("n")?;
        if n % 5 == 0 {
            out.emit([ValueRef::Str("five"), ValueRef::I64(n)])?;
        }
        words.push(tuple.str("word")?.to_owned());
        Ok(())
    }

    fn complete(&self, words: Vec<String>, out: &mut Emitter<'_>) -> Result<(), Error> {
        out.emit([ValueRef::Str("words"), ValueRef::Str(&words.join(" "))])
    }
}

/// A general aggregator emitting each distinct value of its field, sorted,
/// when the group completes: nothing for no tuples.
pub struct Distinct;

impl Aggregator for Distinct {
    type State = Vec<String>;

    fn init(&self, _info: &BatchInfo, _out: &mut Emitter<'_>) -> Result<Vec<String>, Error> {
        Ok(Vec::new())
    }

    fn aggregate(&self, seen: &mut Vec<String>, tuple: &Tuple<'_>, _out: &mut Emitter<'_>) -> Result<(), Error> {
        let word = tuple.str(0)?;
        if !seen.iter().any(|w| w == word) {
            seen.push(word.to_owned());
        }
        Ok(())
    }

    fn complete(&self, mut seen: Vec<String>, out: &mut Emitter<'_>) -> Result<(), Error> {
        seen.sort();
        for word in &seen {
            out.emit([word.as_str()])?;
        }
        Ok(())
    }
}

/// A state updater keeping each word's latest `n`. It emits
/// `(word, previous n or null, n)` per tuple, and checks that it reads its
/// own writes back within the batch.
pub struct Latest;

impl StateUpdater for Latest {
    fn update_state(&self, state: &dyn MapState, tuples: &[Tuple<'_>], out: &mut Emitter<'_>) -> Result<(), Error> {
        let mut keys: Vec<Vec<Value>> = Vec::new();
        for tuple in tuples {
            let key = vec![Value::from(tuple.str("word")?)];
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        if keys.is_empty() {
            return Ok(());
        }
        let mut values: Vec<Value> = state.multi_get(&keys)?.into_iter().map(|v| v.unwrap_or(Value::Null)).collect();
        for tuple in tuples {
            let word = Value::from(tuple.str("word")?);
            let at = keys.iter().position(|k| k[0] == word).expect("every word was collected");
            let n = Value::I64(tuple.i64("n")?);
            let previous = std::mem::replace(&mut values[at], n.clone());
            out.emit([tuple.value("word")?, previous.as_ref(), n.as_ref()])?;
        }
        let entries: Vec<(Vec<Value>, Value)> = keys.clone().into_iter().zip(values.clone()).collect();
        state.multi_put(&entries)?;
        let read_back: Vec<Value> = state.multi_get(&keys)?.into_iter().map(|v| v.unwrap_or(Value::Null)).collect();
        if read_back != values {
            return Err(Error::fatal(format!("wrote {values:?} but read back {read_back:?} in the same batch")));
        }
        Ok(())
    }
}

/// A query function: one `multi_get` for the batch, then each word's count,
/// or nothing for a word the state does not hold.
pub struct CountOrNothing;

impl QueryFunction for CountOrNothing {
    fn batch_retrieve(&self, state: &dyn MapState, tuples: &[Tuple<'_>]) -> Result<Vec<Value>, Error> {
        let keys: Vec<Vec<Value>> =
            tuples.iter().map(|t| Ok(vec![Value::from(t.str("word")?)])).collect::<Result<_, Error>>()?;
        Ok(state.multi_get(&keys)?.into_iter().map(|v| v.unwrap_or(Value::Null)).collect())
    }

    fn execute(&self, _tuple: &Tuple<'_>, result: &Value, out: &mut Emitter<'_>) -> Result<(), Error> {
        match result {
            Value::Null => Ok(()),
            count => out.emit([count]),
        }
    }
}

/// A broken query function: `batch_retrieve` returns one result too few.
pub struct OneShort;

impl QueryFunction for OneShort {
    fn batch_retrieve(&self, _state: &dyn MapState, tuples: &[Tuple<'_>]) -> Result<Vec<Value>, Error> {
        Ok(vec![Value::Null; tuples.len().saturating_sub(1)])
    }

    fn execute(&self, _tuple: &Tuple<'_>, result: &Value, out: &mut Emitter<'_>) -> Result<(), Error> {
        out.emit([result])
    }
}

/// The scripted stream, through `fail-once`.
fn source(topology: &TopologyBuilder) -> Stream {
    topology.new_stream(GuestSpout::batch(Script, ["n", "word"])).filter(["n"], FailOnce).name("fail-once")
}

/// Records `stream`'s `fields` in the transactional state `state`.
fn record<const N: usize>(stream: &Stream, state: &str, fields: [&str; N]) -> TridentState {
    stream.partition_persist(State::transactional(state), fields, Record, []).name(&format!("record-{state}"))
}

fn each() -> Topology {
    let t = Topology::new("each");
    record(&source(&t).each(["n"], Repeat, ["i"]).name("repeat"), "out", ["n", "word", "i"]);
    t.build()
}

fn filter() -> Topology {
    let t = Topology::new("filter");
    record(&source(&t).filter(["word"], LongerThan(5)).name("long-words"), "out", ["n", "word"]);
    t.build()
}

fn map() -> Topology {
    let t = Topology::new("map");
    record(&source(&t).map(["word"], Upper, ["upper"]).name("upper"), "out", ["upper"]);
    t.build()
}

fn flat_map() -> Topology {
    let t = Topology::new("flat-map");
    record(&source(&t).flat_map(["word"], Halves, ["half"]).name("halves"), "out", ["half"]);
    t.build()
}

fn peek() -> Topology {
    let t = Topology::new("peek");
    record(&source(&t).peek(["n", "word"], Print).name("print"), "out", ["n", "word"]);
    t.build()
}

fn project() -> Topology {
    let t = Topology::new("project");
    let lengths = source(&t).each(["word"], Length, ["len"]).name("length").project(["len", "n"]);
    record(&lengths, "out", ["len", "n"]);
    t.new_query_stream("project")
        .flat_map(["args"], SplitWords, ["word"])
        .name("split-args")
        .each(["word"], Length, ["len"])
        .name("query-length")
        .project(["len", "word"]);
    t.build()
}

fn partition_aggregate() -> Topology {
    let t = Topology::new("partition-aggregate");
    let s = source(&t);
    record(&s.partition_aggregate([], Count, ["count"]).name("count"), "count", ["count"]);
    record(
        &s.partition_aggregate(["word"], Reducer(Initials), ["initials"]).name("initials"),
        "initials",
        ["initials"],
    );
    let per_word = s
        .group_by(["word"])
        .partition_aggregate(["n"], Reducer(JoinNumbers(",")), ["ns"])
        .name("join-numbers")
        .parallelism_hint(2);
    record(&per_word, "per-word", ["word", "ns"]);
    t.build()
}

fn aggregate() -> Topology {
    let t = Topology::new("aggregate");
    let s = source(&t);
    record(&s.aggregate([], Count, ["count"]).name("count"), "count", ["count"]);
    record(&s.aggregate(["n"], Sum, ["sum"]).name("sum"), "sum", ["sum"]);
    record(&s.aggregate(["n"], Min, ["min"]).name("min"), "min", ["min"]);
    record(&s.aggregate(["word"], Max, ["max"]).name("max"), "max", ["max"]);
    record(&s.aggregate(["word"], First, ["first"]).name("first"), "first", ["first"]);
    record(&s.aggregate(["word"], Longest, ["longest"]).name("longest"), "combiner", ["longest"]);
    record(&s.aggregate(["word"], Reducer(Initials), ["initials"]).name("initials"), "reducer", ["initials"]);
    record(
        &s.aggregate(["n", "word"], General(Summary), ["what", "value"]).name("summary"),
        "general",
        ["what", "value"],
    );
    let parallel = s.shuffle().each(["n"], PartitionOf, ["p"]).name("partition-of").parallelism_hint(2);
    record(&parallel.aggregate([], Count, ["count"]).name("count-parallel"), "count-parallel", ["count"]);
    t.build()
}

fn chained() -> Topology {
    let t = Topology::new("chained");
    let s = source(&t);
    let count_sum =
        s.chained_agg().aggregate([], Count, ["count"]).aggregate(["n"], Sum, ["sum"]).chain_end().name("count-sum");
    record(&count_sum, "count-sum", ["count", "sum"]);
    let product = s
        .chained_agg()
        .aggregate([], Count, ["count"])
        .aggregate(["word"], General(Distinct), ["distinct"])
        .chain_end()
        .name("count-distinct");
    record(&product, "product", ["count", "distinct"]);
    let grouped = s
        .group_by(["word"])
        .chained_agg()
        .aggregate([], Count, ["count"])
        .aggregate(["n"], Max, ["max"])
        .chain_end()
        .name("count-max");
    record(&grouped, "grouped", ["word", "count", "max"]);
    let partitions = s
        .chained_agg()
        .partition_aggregate([], Count, ["count"])
        .partition_aggregate(["n"], Min, ["min"])
        .chain_end()
        .name("count-min");
    record(&partitions, "partitions", ["count", "min"]);
    t.build()
}

fn group_by() -> Topology {
    let t = Topology::new("group-by");
    let s = source(&t);
    record(&s.group_by(["word"]).aggregate([], Count, ["count"]).name("count"), "count", ["word", "count"]);
    let two = s
        .each(["n"], Parity, ["parity"])
        .name("parity")
        .group_by(["parity", "word"])
        .aggregate(["n"], Sum, ["sum"])
        .name("sum");
    record(&two, "two-fields", ["parity", "word", "sum"]);
    record(
        &s.group_by(["word"]).aggregate(["word"], General(Distinct), ["seen"]).name("distinct"),
        "general",
        ["word", "seen"],
    );
    record(
        &s.group_by(["word"]).aggregate(["n"], Reducer(JoinNumbers(",")), ["ns"]).name("join-numbers"),
        "reducer",
        ["word", "ns"],
    );
    record(&s.group_by(["word"]).aggregate(["n"], Greatest, ["max"]).name("greatest"), "combiner", ["word", "max"]);
    t.build()
}

fn persistent_aggregate() -> Topology {
    let t = Topology::new("persistent-aggregate");
    let s = source(&t);
    let by_word = s.group_by(["word"]);
    let counts = by_word.persistent_aggregate(State::transactional("counts"), Count, ["count"]).name("count");
    record(&counts.new_values_stream(), "count-updates", ["word", "count"]);
    by_word.persistent_aggregate_over(State::transactional("max-n"), ["n"], Greatest, ["max"]).name("greatest");
    by_word
        .persistent_aggregate_over(State::opaque("ns"), ["n"], Reducer(JoinNumbers(",")), ["ns"])
        .name("join-numbers");
    let total = s.persistent_aggregate(State::transactional("total"), Count, ["count"]).name("total");
    record(&total.new_values_stream(), "total-updates", ["count"]);
    s.persistent_aggregate_over(State::opaque("sum"), ["n"], Sum, ["sum"]).name("sum");
    s.persistent_aggregate_over(State::transactional("min"), ["n"], Min, ["min"]).name("min");
    s.persistent_aggregate_over(State::transactional("max"), ["word"], Max, ["max"]).name("max");
    s.persistent_aggregate_over(State::transactional("first"), ["word"], First, ["first"]).name("first");
    s.persistent_aggregate_over(State::transactional("longest"), ["word"], Longest, ["longest"]).name("longest");
    let initials = State::transactional("initials");
    s.persistent_aggregate_over(initials, ["word"], Reducer(Initials), ["initials"]).name("initials");
    t.new_query_stream("total").state_query(&total, [], MapGet, ["total"]).name("get-total").project(["total"]);
    t.build()
}

fn partition_persist() -> Topology {
    let t = Topology::new("partition-persist");
    let s = source(&t);
    let latest = s
        .partition_persist(State::transactional("latest"), ["word", "n"], Latest, ["word", "previous", "n"])
        .name("latest");
    record(&latest.new_values_stream(), "updates", ["word", "previous", "n"]);
    s.partition_by(["word"])
        .partition_persist(State::transactional("latest-parallel"), ["word", "n"], Latest, ["word", "previous", "n"])
        .name("latest-parallel")
        .parallelism_hint(2);
    t.build()
}

fn state_query() -> Topology {
    let t = Topology::new("state-query");
    let counts = source(&t)
        .group_by(["word"])
        .persistent_aggregate(State::transactional("counts"), Count, ["count"])
        .name("count");
    let words =
        |name: &str| t.new_query_stream(name).flat_map(["args"], SplitWords, ["word"]).name(&format!("{name}-split"));
    words("get").state_query(&counts, ["word"], MapGet, ["count"]).name("map-get").project(["word", "count"]);
    words("lookup")
        .state_query(&counts, ["word"], CountOrNothing, ["count"])
        .name("count-or-nothing")
        .project(["word", "count"]);
    words("short").state_query(&counts, ["word"], OneShort, ["count"]).name("one-short");
    words("sum")
        .group_by(["word"])
        .state_query(&counts, ["word"], MapGet, ["count"])
        .name("sum-get")
        .aggregate(["count"], Sum, ["sum"])
        .name("sum");
    t.build()
}

fn merge() -> Topology {
    let t = Topology::new("merge");
    let s = source(&t);
    let odd = s.filter(["n"], Remainder(2, 1)).name("odd");
    let threes = s.filter(["n"], Remainder(3, 0)).name("threes");
    record(&t.merge([&odd, &threes]), "out", ["n", "word"]);
    t.build()
}

fn join() -> Topology {
    let t = Topology::new("join");
    let s = source(&t);
    let odd = s.filter(["n"], Remainder(2, 1)).name("odd").project(["word", "n"]);
    let even = s.filter(["n"], Remainder(2, 0)).name("even").project(["word", "n"]);
    let fields = ["word", "odd", "even"];
    record(&t.join(&odd, ["word"], &even, ["word"], fields), "inner", fields);
    record(&t.join_with(&odd, ["word"], &even, ["word"], fields, [JoinKind::Outer, JoinKind::Outer]), "outer", fields);
    record(&t.join_with(&odd, ["word"], &even, ["word"], fields, [JoinKind::Outer, JoinKind::Inner]), "left", fields);
    t.build()
}

fn extremes() -> Topology {
    let t = Topology::new("extremes");
    let s = source(&t);
    record(&s.min_by("n").name("min-by-n"), "min-by", ["n", "word"]);
    record(&s.max_by("word").name("max-by-word"), "max-by", ["n", "word"]);
    let word_first = s.project(["word", "n"]);
    record(&word_first.min().name("min"), "min", ["word", "n"]);
    record(&word_first.max().name("max"), "max", ["word", "n"]);
    t.build()
}

fn partitioning() -> Topology {
    let t = Topology::new("partitioning");
    let s = source(&t);
    let ways: [(&str, Stream); 5] = [
        ("shuffle", s.shuffle()),
        ("partition-by", s.partition_by(["word"])),
        ("global", s.global()),
        ("batch-global", s.batch_global()),
        ("broadcast", s.broadcast()),
    ];
    for (name, stream) in ways {
        let tagged = stream.each(["n"], PartitionOf, ["p"]).name(&format!("{name}-partition")).parallelism_hint(2);
        record(&tagged, name, ["n", "word", "p"]);
    }
    t.build()
}

fn parallel_word_count() -> Topology {
    Topology::new("parallel-word-count")
        .new_stream(FileLines::new("sentence"))
        .shuffle()
        .each(["sentence"], SplitWords, ["word"])
        .name("split")
        .parallelism_hint(2)
        .group_by(["word"])
        .persistent_aggregate(State::transactional("counts"), Count, ["count"])
        .name("count")
        .build()
}

/// Every topology of this component.
/// A JSON message's `line` split into words, whatever its type: a number
/// is one word. The upgrade of the test-topologies guest's strict
/// `jetstream-lines`.
struct AnyLineWords;

impl Function for AnyLineWords {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        match tuple.value("line")? {
            ValueRef::Str(line) => line.split_whitespace().try_for_each(|word| out.emit([word])),
            ValueRef::I64(n) => out.emit([n.to_string().as_str()]),
            _ => Ok(()),
        }
    }
}

pub fn topologies() -> Vec<Topology> {
    vec![
        jetstream_lines(AnyLineWords),
        each(),
        filter(),
        map(),
        flat_map(),
        peek(),
        project(),
        partition_aggregate(),
        aggregate(),
        chained(),
        group_by(),
        persistent_aggregate(),
        partition_persist(),
        state_query(),
        merge(),
        join(),
        extremes(),
        partitioning(),
        parallel_word_count(),
    ]
}

weir_sdk::export!(topologies);
