//! Sensor windows: readings of eight sensors, generated with some out of
//! order and some late, aggregated by event time, exactly once:
//!
//! - per sensor, 1-minute tumbling averages (state `minute-averages`);
//! - per sensor, 5-minute sliding maxima, one window starting every minute
//!   (state `five-minute-maxima`);
//! - per sensor, sessions of activity, ended by 30 s without a reading
//!   (state `sessions`: how many readings each held).
//!
//! Each is keyed by sensor and window start; the windows' own states keep
//! what is still open, the watermark and the late readings. Every window
//! is counted as it is emitted (states `*-emitted`): each must be 1,
//! however often the run is killed. Queries `average` and `maximum` take
//! `SENSOR START_MS` and answer from the committed windows.

use weir_sdk::prelude::*;
use weir_sdk::{Stream, Window};

/// Sensors, each reading every 2 s (one reading of one of them every 250 ms).
pub const SENSORS: i64 = 8;
/// The first reading's time: 2026-01-01T00:00:00Z.
pub const START_MS: i64 = 1_767_225_600_000;

fn mix(n: i64) -> u64 {
    let mut x = (n as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Reading `n` of the generator: its sensor, time and temperature (in
/// tenths of a degree). A sensor is silent for 4 minutes in every 24; one
/// reading in ten comes up to 20 s late, one in a hundred ten minutes late.
pub struct Reading;

impl Function for Reading {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        let n = tuple.i64(0)?;
        let sensor = n % SENSORS;
        if ((n / SENSORS) / 120 + sensor) % 6 == 0 {
            return Ok(());
        }
        let h = mix(n);
        let mut ts = START_MS + n * 250;
        if h.is_multiple_of(10) {
            ts -= ((h / 10) % 20_000) as i64;
        }
        if h % 100 == 1 {
            ts -= 600_000;
        }
        let temperature = 200 + 10 * sensor + (h % 50) as i64;
        out.emit([ValueRef::Str(&format!("sensor-{sensor}")), ValueRef::I64(ts), ValueRef::I64(temperature)])
    }
}

/// A combiner of a mean's sum and count, as 16 bytes.
pub struct MeanParts;

fn parts(value: &Value) -> Result<(i64, i64), Error> {
    match value {
        Value::Bytes(b) if b.len() == 16 => Ok((
            i64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            i64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
        )),
        Value::Null => Ok((0, 0)),
        other => Err(Error::fatal(format!("not a mean's parts: {other:?}"))),
    }
}

fn to_parts(sum: i64, count: i64) -> Value {
    Value::Bytes(sum.to_le_bytes().into_iter().chain(count.to_le_bytes()).collect())
}

impl CombinerAggregator for MeanParts {
    fn init(&self, tuple: &Tuple<'_>) -> Result<Value, Error> {
        Ok(to_parts(tuple.i64(0)?, 1))
    }
    fn combine(&self, a: Value, b: Value) -> Result<Value, Error> {
        let ((sa, ca), (sb, cb)) = (parts(&a)?, parts(&b)?);
        Ok(to_parts(sa + sb, ca + cb))
    }
    fn zero(&self) -> Value {
        Value::Null
    }
}

/// The mean of a window's parts, in degrees.
pub struct Mean;

impl Function for Mean {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        let (sum, count) = parts(&tuple.value(0)?.to_owned())?;
        out.emit([ValueRef::F64(sum as f64 / count.max(1) as f64 / 10.0)])
    }
}

/// Splits a query's `SENSOR START_MS`.
pub struct SensorAndStart;

impl Function for SensorAndStart {
    fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
        let args = tuple.str(0)?;
        let mut words = args.split_whitespace();
        let (Some(sensor), Some(start)) = (words.next(), words.next()) else {
            return Err(Error::fatal(format!("expected SENSOR START_MS, got {args:?}")));
        };
        let start: i64 = start.parse().map_err(|e| Error::fatal(format!("start {start:?}: {e}")))?;
        out.emit([ValueRef::Str(sensor), ValueRef::I64(start)])
    }
}

/// Keeps each window of `windows` in state `name` by sensor and start (its
/// `value`), and counts its emissions in `name-emitted`.
fn keep(windows: &Stream, name: &str, value: &str) -> TridentState {
    let by_window = windows.group_by(["sensor", "window_start"]);
    by_window.persistent_aggregate(State::transactional(&format!("{name}-emitted")), Count, ["times"]);
    by_window.persistent_aggregate_over(State::transactional(name), [value], First, [value])
}

/// The `sensor-windows` topology over `readings` generated readings.
pub fn sensor_windows(readings: u64) -> Topology {
    let topology = Topology::new("sensor-windows");
    let stream =
        topology.new_stream(Generator::new("n", readings)).each(["n"], Reading, ["sensor", "ts", "temperature"]);
    let by_sensor = stream.group_by(["sensor"]);

    let minutes = Window::tumbling("ts", 60_000).max_delay_ms(30_000);
    let averages = by_sensor
        .window(minutes, "open-minutes", ["temperature"], MeanParts, ["parts"])
        .name("minute-windows")
        .each(["parts"], Mean, ["average"]);
    let averages = keep(&averages, "minute-averages", "average");

    let five_minutes = Window::sliding("ts", 300_000, 60_000).max_delay_ms(30_000);
    let maxima =
        by_sensor.window(five_minutes, "open-five-minutes", ["temperature"], Max, ["maximum"]).name("maxima-windows");
    let maxima = keep(&maxima, "five-minute-maxima", "maximum");

    let sessions = Window::session("ts", 30_000).max_delay_ms(30_000);
    let sessions = by_sensor.window(sessions, "open-sessions", [], Count, ["readings"]).name("session-windows");
    keep(&sessions, "sessions", "readings");

    for (query, state, value) in [("average", &averages, "average"), ("maximum", &maxima, "maximum")] {
        topology
            .new_query_stream(query)
            .each(["args"], SensorAndStart, ["sensor", "window_start"])
            .state_query(state, ["sensor", "window_start"], MapGet, [value])
            .project([value]);
    }
    topology.build()
}

/// The topology, over 20,000 readings.
pub fn topology() -> Topology {
    sensor_windows(20_000)
}

weir_sdk::export!(topology);
