//! The topology definitions under `tests/vectors/topologies.json`, which the
//! Python and JavaScript builders must write byte for byte as this builder
//! does. `WEIR_BLESS=1 cargo test -p weir-sdk --test topology_vectors`
//! writes the file again after a deliberate change.

use weir_sdk::prelude::*;
use weir_sdk::{General, Reducer, Sum, describe};

struct Op;

impl Function for Op {
    fn execute(&self, _: &Tuple<'_>, _: &mut Emitter<'_>) -> Result<(), Error> {
        Ok(())
    }
}

impl Filter for Op {
    fn is_keep(&self, _: &Tuple<'_>) -> Result<bool, Error> {
        Ok(true)
    }
}

impl MapFunction for Op {
    fn execute(&self, _: &Tuple<'_>) -> Result<Vec<Value>, Error> {
        Ok(vec![])
    }
}

impl FlatMapFunction for Op {
    fn execute(&self, _: &Tuple<'_>, _: &mut Emitter<'_>) -> Result<(), Error> {
        Ok(())
    }
}

impl Consumer for Op {
    fn accept(&self, _: &Tuple<'_>) -> Result<(), Error> {
        Ok(())
    }
}

struct Longest;

impl CombinerAggregator for Longest {
    fn init(&self, _: &Tuple<'_>) -> Result<Value, Error> {
        Ok(Value::I64(0))
    }
    fn combine(&self, a: Value, _: Value) -> Result<Value, Error> {
        Ok(a)
    }
    fn zero(&self) -> Value {
        Value::I64(0)
    }
}

struct Total;

impl ReducerAggregator for Total {
    fn init(&self) -> Value {
        Value::I64(0)
    }
    fn reduce(&self, acc: Value, _: &Tuple<'_>) -> Result<Value, Error> {
        Ok(acc)
    }
}

struct Distinct;

impl Aggregator for Distinct {
    type State = ();
    fn init(&self, _: &BatchInfo, _: &mut Emitter<'_>) -> Result<(), Error> {
        Ok(())
    }
    fn aggregate(&self, _: &mut (), _: &Tuple<'_>, _: &mut Emitter<'_>) -> Result<(), Error> {
        Ok(())
    }
    fn complete(&self, _: (), _: &mut Emitter<'_>) -> Result<(), Error> {
        Ok(())
    }
}

struct Seen;

impl StateUpdater for Seen {
    fn update_state(&self, _: &dyn MapState, _: &[Tuple<'_>], _: &mut Emitter<'_>) -> Result<(), Error> {
        Ok(())
    }
}

impl QueryFunction for Seen {
    fn batch_retrieve(&self, _: &dyn MapState, tuples: &[Tuple<'_>]) -> Result<Vec<Value>, Error> {
        Ok(vec![Value::Null; tuples.len()])
    }
    fn execute(&self, _: &Tuple<'_>, _: &Value, _: &mut Emitter<'_>) -> Result<(), Error> {
        Ok(())
    }
}

struct Numbers;

impl BatchSpout for Numbers {
    fn emit_batch(&self, _: &SpoutInfo, _: &mut SpoutEmitter<'_>) -> Result<bool, Error> {
        Ok(false)
    }
}

impl PartitionedSpout for Numbers {
    fn partitions(&self, _: &SpoutInfo) -> Result<Vec<String>, Error> {
        Ok(vec![])
    }
    fn emit_partition(
        &self,
        _: &SpoutInfo,
        _: &str,
        _: Option<&[u8]>,
        _: &mut SpoutEmitter<'_>,
    ) -> Result<Option<Vec<u8>>, Error> {
        Ok(None)
    }
}

/// Every operation of the stream API, each way of naming and limiting an
/// operator, every spout, state and aggregator kind. The Python and
/// JavaScript SDKs' tests build the same topologies.
fn topologies() -> Vec<Topology> {
    let t = Topology::new("kitchen-sink");
    let words = t
        .new_stream(FileLines::new("sentence"))
        .each(["sentence"], Op, ["word"])
        .name("split")
        .parallelism_hint(2)
        .filter(["word"], Op)
        .limits(Limits::new().memory_mib(16).call_ms(500))
        .peek(["word"], Op);
    let counts = words
        .group_by(["word"])
        .persistent_aggregate(State::transactional("counts").cache_size(1000), Count, ["count"])
        .name("count");
    let lengths = words.map(["word"], Op, ["len"]).name("len").read_only_dir("/srv/reference", "/reference");
    lengths.group_by(["len"]).partition_aggregate(["len"], Reducer(Total), ["total"]);
    words.flat_map(["word"], Op, ["char"]).shuffle().aggregate(["char"], General(Distinct), ["distinct"]);
    words
        .group_by(["word"])
        .chained_agg()
        .aggregate([], Count, ["n"])
        .aggregate(["word"], Longest, ["longest"])
        .aggregate(["word"], Max, ["last"])
        .chain_end()
        .name("stats");
    let seen = words.partition_persist(State::opaque("seen"), ["word"], Seen, ["word", "first"]).name("remember");
    seen.new_values_stream().project(["word"]).global().batch_global().broadcast().partition_by(["word"]).min();
    words.persistent_aggregate_over(State::non_transactional("longest"), ["word"], Longest, ["longest"]);
    words.persistent_aggregate(State::opaque("total"), Reducer(Total), ["total"]).parallelism_hint(3);
    let left = words.each(["word"], Op, ["a"]);
    let right = words.each(["word"], Op, ["b"]);
    let joined = t.join(&left, ["word"], &right, ["word"], ["word", "a", "b"]);
    let outer =
        t.join_with(&joined, ["word"], &left, ["word"], ["word", "a", "b", "c"], [JoinKind::Inner, JoinKind::Outer]);
    t.merge([&outer.project(["word"]), &words.project(["word"])]).max_by("word").min_by("word").max();
    let query = t.new_query_stream("words").each(["args"], Op, ["word"]).name("split-args");
    query
        .group_by(["word"])
        .state_query(&counts, ["word"], MapGet, ["count"])
        .name("get-count")
        .aggregate(["count"], Sum, ["sum"])
        .name("sum");
    query.state_query(&seen, ["word"], Seen, ["first"]).aggregate(["first"], First, ["first"]);
    query.group_by(["word"]).aggregate(["word"], Min, ["least"]).partition_aggregate([], Count, ["n"]);

    let batch = Topology::new("batch-spout")
        .new_stream(GuestSpout::batch(Numbers, ["n", "label"]))
        .limits(Limits::new().output_tuples(100).output_mib(1))
        .partition_persist(State::transactional("all"), ["n"], Seen, [])
        .build();
    let partitioned = Topology::new("partitioned")
        .new_stream(GuestSpout::partitioned_transactional(Numbers, ["n"]))
        .persistent_aggregate_over(State::transactional("sum"), ["n"], Sum, ["sum"])
        .build();
    let opaque = Topology::new("opaque")
        .new_stream(GuestSpout::partitioned_opaque(Numbers, ["n"]))
        .persistent_aggregate_over(State::opaque("sum"), ["n"], Sum, ["sum"])
        .build();
    let generated = Topology::new("generated")
        .new_stream(Generator::new("n", 1000))
        .persistent_aggregate_over(State::transactional("sum"), ["n"], Sum, ["sum"])
        .build();
    let files = Topology::new("ünïcode-directory")
        .new_stream(DirectoryLines::new("line"))
        .persistent_aggregate(State::transactional("lines"), Count, ["count"])
        .build();
    let clicks = Topology::new("clicks")
        .new_stream(
            JetStream::transactional("clicks", ["clicks.*", "ads.eu"])
                .json(["user", "url"])
                .subject_field("subject")
                .sequence_field("seq")
                .timestamp_field("at")
                .max_per_partition(500),
        )
        .group_by(["user"])
        .persistent_aggregate(State::transactional("clicks"), Count, ["count"])
        .build();
    let lines = Topology::new("log-lines")
        .new_stream(JetStream::opaque("logs", ["logs.>"]).string("line"))
        .persistent_aggregate(State::opaque("lines"), Count, ["count"])
        .build();
    let raw = Topology::new("raw-bytes")
        .new_stream(JetStream::opaque("raw", ["raw.0"]))
        .persistent_aggregate(State::opaque("messages"), Count, ["count"])
        .build();
    let pages = Topology::new("page-counts");
    let counts = pages
        .new_stream(JetStream::transactional("clicks", ["clicks.*"]).string("page"))
        .group_by(["page"])
        .persistent_aggregate(State::transactional("counts"), Count, ["count"]);
    counts.new_values_stream().sink(JetStreamSink::subject("page-counts")).name("to-nats");
    counts.new_values_stream().sink(JetStreamSink::subject("pages.raw").raw("page"));
    let pages = pages.build();
    vec![t.build(), batch, partitioned, opaque, generated, files, clicks, lines, raw, pages, windows()]
}

/// Every kind of window, grouped and not, over built-in and guest
/// aggregators, named and not, and a window's late stream.
fn windows() -> Topology {
    let t = Topology::new("windows");
    let readings = t.new_stream(GuestSpout::batch(Numbers, ["sensor", "value", "at"]));
    let sensors = readings.group_by(["sensor"]);
    readings.window(Window::tumbling_count(3), "threes", ["value"], Sum, ["sum"]);
    sensors.window(Window::sliding_count(10, 5), "tens", ["value"], Longest, ["longest"]).name("longest");
    readings.window(Window::tumbling_duration(60_000), "minutes", [], Count, ["count"]);
    sensors.window(Window::sliding_duration(60_000, 10_000), "moving", ["value"], Reducer(Total), ["total"]);
    readings
        .window(Window::tumbling("at", 1_000).lateness_ms(500).max_delay_ms(200), "seconds", ["value"], Max, ["max"])
        .name("per-second")
        .project(["window_end", "max"]);
    sensors.window(
        Window::sliding("at", 10_000, 2_500).lateness_ms(1_000).idle_timeout_ms(3_000),
        "sliding",
        ["value"],
        Min,
        ["min"],
    );
    let sessions = sensors
        .window(Window::session("at", 30_000).max_delay_ms(5_000), "sessions", ["value"], Reducer(Total), ["total"])
        .name("sessions");
    readings.window(Window::session("at", 1).idle_timeout_ms(0), "bursts", ["value"], Longest, ["longest"]);
    sessions.late_stream().group_by(["sensor"]).persistent_aggregate(State::transactional("late"), Count, ["count"]);
    t.build()
}

#[test]
fn the_builder_writes_the_shared_topology_vectors() {
    let json = describe(&topologies());
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/vectors/topologies.json");
    if std::env::var_os("WEIR_BLESS").is_some() {
        std::fs::write(path, format!("{json}\n")).unwrap();
    }
    let want = std::fs::read_to_string(path).expect("tests/vectors/topologies.json");
    assert_eq!(json, want.trim_end(), "the builder's definitions differ from {path}");
}
