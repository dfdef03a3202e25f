//! One topology per kind of window, each over the lines of the run's input
//! (`sensor,timestamp,value`, as `tests/windows_reference.py` generates
//! them), each keeping every window it emits in two states: `results`, the
//! window's value by `[sensor, window_start, window_end]`, and `emitted`,
//! how many times it was emitted. The parse function fails the first
//! attempt of txid 3, so every run replays a batch, and drops a line
//! `skip`, which leaves its spout partition without a tuple.

#[path = "../../shared/operators.rs"]
mod shared;

use shared::{Greatest, JoinNumbers, fail_first_attempt};
use weir_sdk::builder::IntoAggregator;
use weir_sdk::prelude::*;
use weir_sdk::{Stream, Window};

/// The txid whose first attempt fails, and is replayed.
pub const REPLAYED_TXID: u64 = 3;

/// Parses `sensor,timestamp,value`; an empty timestamp is null.
pub struct Parse;

impl Function for Parse {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        fail_first_attempt(tuple.batch(), REPLAYED_TXID)?;
        let line = tuple.str(0)?;
        if line == "skip" {
            return Ok(());
        }
        let fields: Vec<&str> = line.split(',').collect();
        let [sensor, ts, value] = fields[..] else { return Err(Error::fatal(format!("not a reading: {line:?}"))) };
        let number = |s: &str| s.parse::<i64>().map_err(|e| Error::fatal(format!("{s:?} in {line:?}: {e}")));
        let ts = if ts.is_empty() { ValueRef::Null } else { ValueRef::I64(number(ts)?) };
        out.emit([ValueRef::Str(sensor), ts, ValueRef::I64(number(value)?)])
    }
}

/// Parses `sensor,timestamp,value`, failing no attempt (for the
/// benchmark's open windows).
pub struct ParseReading;

impl Function for ParseReading {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        let line = tuple.str(0)?;
        let mut fields = line.split(',');
        let (Some(sensor), Some(ts), Some(value)) = (fields.next(), fields.next(), fields.next()) else {
            return Err(Error::fatal(format!("not a reading: {line:?}")));
        };
        let number = |s: &str| s.parse::<i64>().map_err(|e| Error::fatal(format!("{s:?} in {line:?}: {e}")));
        out.emit([ValueRef::Str(sensor), ValueRef::I64(number(ts)?), ValueRef::I64(number(value)?)])
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
fn readings(name: &str) -> Stream {
    let topology = Topology::new(name);
    topology.new_stream(FileLines::new("line")).each(["line"], Parse, ["sensor", "ts", "value"]).name("parse")
}

/// Keeps each window `windows` emits: its value (field `value_field`) in
/// `results` and its emissions in `emitted`, by `key`.
fn keep<const K: usize>(windows: &Stream, key: [&str; K], value_field: &str) {
    windows.group_by(key).persistent_aggregate_over(State::transactional("results"), [value_field], First, ["kept"]);
    windows.group_by(key).persistent_aggregate(State::transactional("emitted"), Count, ["times"]);
}

const WINDOW_KEY: [&str; 3] = ["sensor", "window_start", "window_end"];

/// Each sensor's readings cut into `window`s, whose values `aggregator`
/// makes the field `output`, every window kept.
fn per_sensor(name: &str, window: Window, aggregator: impl IntoAggregator, output: &str) -> Stream {
    let windows =
        readings(name).group_by(["sensor"]).window(window, "open", ["value"], aggregator, [output]).name("windows");
    keep(&windows, WINDOW_KEY, output);
    windows
}

/// Counts each late reading `windows` found in the state `late`.
fn keep_late(windows: Stream) -> Stream {
    let late = windows.late_stream().group_by(["sensor", "ts", "value"]);
    late.persistent_aggregate(State::transactional("late"), Count, ["times"]);
    windows
}

/// The topologies, one per kind of window.
pub fn topologies() -> Vec<Topology> {
    let space_joined = || Reducer(JoinNumbers(" "));
    let time_tumbling = Window::tumbling("ts", 1_000).max_delay_ms(300).lateness_ms(200);
    let time_sliding = Window::sliding("ts", 1_000, 250).max_delay_ms(150);
    let session = Window::session("ts", 150).max_delay_ms(300).lateness_ms(100);

    let extremes = Window::sliding("ts", 1_000, 500).max_delay_ms(300);
    let time_general = readings("time-general")
        .group_by(["sensor"])
        .window(extremes, "open", ["value"], General(Extremes), ["which", "extreme"])
        .name("windows");
    keep(&time_general, ["sensor", "window_start", "window_end", "which"], "extreme");

    let time_all = readings("time-all")
        .window(Window::tumbling("ts", 500).max_delay_ms(100), "open", [], Count, ["n"])
        .name("windows");
    keep(&time_all, ["window_start", "window_end"], "n");

    // A million groups, one tuple each: a million windows open at the end.
    let many_open = Topology::new("many-open")
        .new_stream(Generator::new("n", 1_000_000))
        .group_by(["n"])
        .window(Window::tumbling_count(2), "open", [], Count, ["count"])
        .name("windows");

    // Flink's sessions: a reading joins an open session it meets, whatever
    // its own session; each session's sum in `results`, its count in
    // `counts`.
    let flink_sessions = Window::session("ts", 5_000).max_delay_ms(2_000).lateness_ms(3_000);
    let session_flink = readings("session-flink").group_by(["sensor"]);
    let sums = session_flink.window(flink_sessions.clone(), "open", ["value"], Sum, ["sum"]).name("windows");
    keep(&sums, WINDOW_KEY, "sum");
    let counts = session_flink.window(flink_sessions, "open-counts", [], Count, ["n"]).name("counts");
    counts.group_by(WINDOW_KEY).persistent_aggregate_over(State::transactional("counts"), ["n"], First, ["kept"]);

    // A watermark per spout partition; one that brings nothing while the
    // greatest timestamp moves on by more than 5 s stops holding it back.
    let skew = Window::tumbling("ts", 1_000).idle_timeout_ms(5_000);

    // The benchmark's open windows (`bench/src/windows.rs`): each sensor's
    // readings in tumbling seconds, held open by a max delay of 10 s, the
    // windows that close counted by start.
    let open_windows = Topology::new("open-windows")
        .new_stream(FileLines::new("line"))
        .each(["line"], ParseReading, ["sensor", "ts", "value"])
        .name("parse")
        .group_by(["sensor"])
        .window(Window::tumbling("ts", 1_000).max_delay_ms(10_000), "open", ["value"], Max, ["max"])
        .name("windows")
        .group_by(["window_start"])
        .persistent_aggregate(State::transactional("closed"), Count, ["windows"]);

    // The same readings' values kept per sensor and timestamp: a state of
    // as many keys as the open windows, to compare their costs.
    let open_keys = Topology::new("open-keys")
        .new_stream(FileLines::new("line"))
        .each(["line"], ParseReading, ["sensor", "ts", "value"])
        .name("parse")
        .group_by(["sensor", "ts"])
        .persistent_aggregate_over(State::opaque("keys"), ["value"], Max, ["max"]);

    vec![
        open_windows.build(),
        open_keys.build(),
        per_sensor("count-tumbling", Window::tumbling_count(3), Sum, "sum").build(),
        per_sensor("count-sliding-sum", Window::sliding_count(50, 20), Sum, "sum").build(),
        keep_late(per_sensor("time-skew", skew, Sum, "sum")).build(),
        keep_late(per_sensor("time-held", Window::tumbling("ts", 1_000), Sum, "sum")).build(),
        counts.build(),
        per_sensor("count-sliding", Window::sliding_count(4, 2), space_joined(), "values").build(),
        keep_late(per_sensor("time-tumbling", time_tumbling, Greatest, "max")).build(),
        per_sensor("time-sliding", time_sliding, space_joined(), "values").build(),
        per_sensor("duration-tumbling", Window::tumbling_duration(1_000), Sum, "sum").build(),
        per_sensor("duration-sliding", Window::sliding_duration(1_000, 400), space_joined(), "values").build(),
        keep_late(per_sensor("session-greatest", session, Greatest, "max")).build(),
        per_sensor("session-sum", Window::session("ts", 120).max_delay_ms(200), Sum, "sum").build(),
        per_sensor("count-general", Window::sliding_count(4, 2), General(JoinAll), "values").build(),
        time_general.build(),
        time_all.build(),
        many_open.build(),
    ]
}

weir_sdk::export!(topologies);
