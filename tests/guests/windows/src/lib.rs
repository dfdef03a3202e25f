//! One topology per kind of window, each over the lines of the run's input
//! (`sensor,timestamp,value`, as `tests/windows_reference.py` generates
//! them), each keeping every window it emits in two states: `results`, the
//! window's value by `[sensor, window_start, window_end]`, and `emitted`,
//! how many times it was emitted. The parse function fails the first
//! attempt of txid 3, so every run replays a batch.

use weir_sdk::prelude::*;
use weir_sdk::{Stream, Window};

/// The txid whose first attempt fails, and is replayed.
pub const REPLAYED_TXID: u64 = 3;

/// Parses `sensor,timestamp,value`.
pub struct Parse;

impl Function for Parse {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        let batch = tuple.batch();
        if batch.txid == REPLAYED_TXID && batch.attempt == 0 {
            return Err(Error::retry(format!("txid {} fails on its first attempt", batch.txid)));
        }
        let line = tuple.str(0)?;
        let fields: Vec<&str> = line.split(',').collect();
        let [sensor, ts, value] = fields[..] else { return Err(Error::fatal(format!("not a reading: {line:?}"))) };
        let number = |s: &str| s.parse::<i64>().map_err(|e| Error::fatal(format!("{s:?} in {line:?}: {e}")));
        out.emit([ValueRef::Str(sensor), ValueRef::I64(number(ts)?), ValueRef::I64(number(value)?)])
    }
}

/// A guest combiner: the greatest integer (null for none).
pub struct Greatest;

impl CombinerAggregator for Greatest {
    fn init(&self, tuple: &Tuple<'_>) -> Result<Value, Error> {
        Ok(Value::I64(tuple.i64(0)?))
    }
    fn combine(&self, a: Value, b: Value) -> Result<Value, Error> {
        match (a, b) {
            (Value::I64(a), Value::I64(b)) => Ok(Value::I64(a.max(b))),
            (Value::Null, v) | (v, Value::Null) => Ok(v),
            (a, b) => Err(Error::fatal(format!("greatest of {a:?} and {b:?}"))),
        }
    }
    fn zero(&self) -> Value {
        Value::Null
    }
}

/// A reducer: the integers, space-joined in the order they came.
pub struct JoinValues;

impl ReducerAggregator for JoinValues {
    fn init(&self) -> Value {
        Value::from("")
    }
    fn reduce(&self, acc: Value, tuple: &Tuple<'_>) -> Result<Value, Error> {
        let Value::Str(acc) = acc else { return Err(Error::fatal(format!("joining onto {acc:?}"))) };
        let n = tuple.i64(0)?;
        Ok(Value::Str(if acc.is_empty() { n.to_string() } else { format!("{acc} {n}") }))
    }
}

/// A general aggregator: a window's lowest and highest values, as the
/// tuples `("low", n)` and `("high", n)`.
pub struct Extremes;

impl Aggregator for Extremes {
    type State = Option<(i64, i64)>;

    fn init(&self, _: &BatchInfo, _: &mut Emitter<'_>) -> Result<Self::State, Error> {
        Ok(None)
    }

    fn aggregate(&self, state: &mut Self::State, tuple: &Tuple<'_>, _: &mut Emitter<'_>) -> Result<(), Error> {
        let n = tuple.i64(0)?;
        *state = Some(state.map_or((n, n), |(low, high)| (low.min(n), high.max(n))));
        Ok(())
    }

    fn complete(&self, state: Self::State, out: &mut Emitter<'_>) -> Result<(), Error> {
        if let Some((low, high)) = state {
            out.emit([ValueRef::Str("low"), ValueRef::I64(low)])?;
            out.emit([ValueRef::Str("high"), ValueRef::I64(high)])?;
        }
        Ok(())
    }
}

/// A general aggregator: a window's values, space-joined in the order they
/// came, emitted once the window has them all.
pub struct JoinAll;

impl Aggregator for JoinAll {
    type State = Vec<i64>;

    fn init(&self, _: &BatchInfo, _: &mut Emitter<'_>) -> Result<Self::State, Error> {
        Ok(Vec::new())
    }

    fn aggregate(&self, state: &mut Self::State, tuple: &Tuple<'_>, _: &mut Emitter<'_>) -> Result<(), Error> {
        state.push(tuple.i64(0)?);
        Ok(())
    }

    fn complete(&self, state: Self::State, out: &mut Emitter<'_>) -> Result<(), Error> {
        let joined: Vec<String> = state.iter().map(i64::to_string).collect();
        out.emit([ValueRef::Str(&joined.join(" "))])
    }
}

/// The readings of the run's input: `sensor`, `ts`, `value`.
fn readings(name: &str) -> (weir_sdk::builder::TopologyBuilder, Stream) {
    let topology = Topology::new(name);
    let stream =
        topology.new_stream(FileLines::new("line")).each(["line"], Parse, ["sensor", "ts", "value"]).name("parse");
    (topology, stream)
}

/// Keeps each window `windows` emits: its value (field `value_field`) in
/// `results` and its emissions in `emitted`, by `key`.
fn keep<const K: usize>(windows: &Stream, key: [&str; K], value_field: &str) {
    windows.group_by(key).persistent_aggregate_over(State::transactional("results"), [value_field], First, ["kept"]);
    windows.group_by(key).persistent_aggregate(State::transactional("emitted"), Count, ["times"]);
}

const WINDOW_KEY: [&str; 3] = ["sensor", "window_start", "window_end"];

/// Counts each late reading `windows` found in the state `late`.
fn keep_late(windows: &Stream) {
    let late = windows.late_stream().group_by(["sensor", "ts", "value"]);
    late.persistent_aggregate(State::transactional("late"), Count, ["times"]);
}

/// The topologies, one per kind of window.
pub fn topologies() -> Vec<Topology> {
    let mut out = Vec::new();

    let (topology, stream) = readings("count-tumbling");
    let windows =
        stream.group_by(["sensor"]).window(Window::tumbling_count(3), "open", ["value"], Sum, ["sum"]).name("windows");
    keep(&windows, WINDOW_KEY, "sum");
    out.push(topology.build());

    let (topology, stream) = readings("count-sliding");
    let windows = stream
        .group_by(["sensor"])
        .window(Window::sliding_count(4, 2), "open", ["value"], Reducer(JoinValues), ["values"])
        .name("windows");
    keep(&windows, WINDOW_KEY, "values");
    out.push(topology.build());

    let (topology, stream) = readings("time-tumbling");
    let window = Window::tumbling("ts", 1_000).max_delay_ms(300).lateness_ms(200);
    let windows = stream.group_by(["sensor"]).window(window, "open", ["value"], Greatest, ["max"]).name("windows");
    keep(&windows, WINDOW_KEY, "max");
    keep_late(&windows);
    out.push(topology.build());

    let (topology, stream) = readings("time-sliding");
    let window = Window::sliding("ts", 1_000, 250).max_delay_ms(150);
    let windows =
        stream.group_by(["sensor"]).window(window, "open", ["value"], Reducer(JoinValues), ["values"]).name("windows");
    keep(&windows, WINDOW_KEY, "values");
    out.push(topology.build());

    let (topology, stream) = readings("duration-tumbling");
    let windows = stream
        .group_by(["sensor"])
        .window(Window::tumbling_duration(1_000), "open", ["value"], Sum, ["sum"])
        .name("windows");
    keep(&windows, WINDOW_KEY, "sum");
    out.push(topology.build());

    let (topology, stream) = readings("duration-sliding");
    let window = Window::sliding_duration(1_000, 400);
    let windows =
        stream.group_by(["sensor"]).window(window, "open", ["value"], Reducer(JoinValues), ["values"]).name("windows");
    keep(&windows, WINDOW_KEY, "values");
    out.push(topology.build());

    let (topology, stream) = readings("session-greatest");
    let window = Window::session("ts", 150).max_delay_ms(300).lateness_ms(100);
    let windows = stream.group_by(["sensor"]).window(window, "open", ["value"], Greatest, ["max"]).name("windows");
    keep(&windows, WINDOW_KEY, "max");
    keep_late(&windows);
    out.push(topology.build());

    let (topology, stream) = readings("session-sum");
    let window = Window::session("ts", 120).max_delay_ms(200);
    let windows = stream.group_by(["sensor"]).window(window, "open", ["value"], Sum, ["sum"]).name("windows");
    keep(&windows, WINDOW_KEY, "sum");
    out.push(topology.build());

    let (topology, stream) = readings("count-general");
    let windows = stream
        .group_by(["sensor"])
        .window(Window::sliding_count(4, 2), "open", ["value"], General(JoinAll), ["values"])
        .name("windows");
    keep(&windows, WINDOW_KEY, "values");
    out.push(topology.build());

    let (topology, stream) = readings("time-general");
    let window = Window::sliding("ts", 1_000, 500).max_delay_ms(300);
    let windows = stream
        .group_by(["sensor"])
        .window(window, "open", ["value"], General(Extremes), ["which", "extreme"])
        .name("windows");
    keep(&windows, ["sensor", "window_start", "window_end", "which"], "extreme");
    out.push(topology.build());

    let (topology, stream) = readings("time-all");
    let windows =
        stream.window(Window::tumbling("ts", 500).max_delay_ms(100), "open", [], Count, ["n"]).name("windows");
    keep(&windows, ["window_start", "window_end"], "n");
    out.push(topology.build());

    // A million groups, one tuple each: a million windows open at the end.
    let topology = Topology::new("many-open");
    topology
        .new_stream(Generator::new("n", 1_000_000))
        .group_by(["n"])
        .window(Window::tumbling_count(2), "open", [], Count, ["count"])
        .name("windows");
    out.push(topology.build());

    out
}

weir_sdk::export!(topologies);
