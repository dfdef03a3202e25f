//! Every kind of window through a real guest (`tests/guests/windows`), the
//! real binary and a real redb file: each run's windows are compared with
//! an independent computation in Python (`tests/windows_reference.py`),
//! over generated readings with out-of-order and late ones and a gap of
//! empty windows; each window is emitted once (the guest counts emissions
//! in a state), late readings are counted, a replayed batch (the guest
//! fails txid 3's first attempt) emits what its first attempt would have,
//! and kill -9 at seeded moments leaves the same windows.

mod common;

use common::kill::Restarts;
use common::*;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The guest's topologies, one per kind of window.
const KINDS: [&str; 9] = [
    "count-tumbling",
    "count-sliding",
    "count-general",
    "time-tumbling",
    "time-sliding",
    "time-general",
    "time-all",
    "session-greatest",
    "session-sum",
];

fn reference_script() -> std::path::PathBuf {
    Path::new(REPO_ROOT).join("tests/windows_reference.py")
}

/// Writes `n` readings drawn from `seed` into `out`.
fn generate(seed: u64, n: usize, out: &Path) {
    let status = Command::new("python3")
        .arg(reference_script())
        .args(["generate", "--seed", &seed.to_string(), "-n", &n.to_string(), "-o"])
        .arg(out)
        .status()
        .expect("run python3");
    assert!(status.success(), "generating readings failed");
}

/// What a topology's run left: each window's value by its key, how many
/// times each was emitted, and the late readings counted.
#[derive(Debug, PartialEq)]
struct Windows {
    values: BTreeMap<String, Json>,
    late: i64,
    /// How many times each late reading was seen, for a topology whose
    /// window has a late stream.
    late_readings: Option<BTreeMap<String, i64>>,
}

/// The guest's topologies whose window has a late stream.
const LATE_STREAMS: [&str; 2] = ["time-tumbling", "session-greatest"];

/// The windows `kind` must emit over `input` in batches of `batch` lines.
fn expected(kind: &str, input: &Path, batch: usize) -> Windows {
    expected_by(kind, input, batch, &[])
}

/// [`expected`] for processing-time windows, each batch emitted at the
/// time `clocks` give it (see the script's `--clock`).
fn expected_by(kind: &str, input: &Path, batch: usize, clocks: &[&str]) -> Windows {
    let output = Command::new("python3")
        .arg(reference_script())
        .args(["expect", "--kind", kind, "--batch", &batch.to_string()])
        .args(clocks.iter().flat_map(|clock| ["--clock", clock]))
        .arg(input)
        .output()
        .expect("run python3");
    assert!(output.status.success(), "reference: {}", String::from_utf8_lossy(&output.stderr));
    let json: Json = serde_json::from_slice(&output.stdout).unwrap();
    let values = json["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let w = w.as_array().unwrap();
            let (value, key) = w.split_last().unwrap();
            (Json::from(key.to_vec()).to_string(), value.clone())
        })
        .collect();
    let mut late_readings = BTreeMap::new();
    for reading in json["late_readings"].as_array().unwrap() {
        *late_readings.entry(reading.to_string()).or_insert(0) += 1;
    }
    let late_readings = LATE_STREAMS.contains(&kind).then_some(late_readings);
    Windows { values, late: json["late"].as_i64().unwrap(), late_readings }
}

/// The windows `kind` stored in `data`, asserting each was emitted once.
fn stored(data: &Path, kind: &str) -> Windows {
    let values: BTreeMap<String, Json> =
        scan(data, kind, "results").into_iter().map(|e| (e["key"].to_string(), e["value"].clone())).collect();
    for entry in scan(data, kind, "emitted") {
        assert_eq!(entry["value"], 1, "{kind}: window {} was emitted more than once", entry["key"]);
    }
    let late = scan(data, kind, "open")
        .into_iter()
        .find(|e| e["key"] == serde_json::json!([false]))
        .map_or(0, |e| e["value"].as_i64().unwrap());
    let late_readings = LATE_STREAMS.contains(&kind).then(|| {
        scan(data, kind, "late").into_iter().map(|e| (e["key"].to_string(), e["value"].as_i64().unwrap())).collect()
    });
    Windows { values, late, late_readings }
}

#[track_caller]
fn assert_windows_eq(kind: &str, got: &Windows, want: &Windows) {
    let differ: Vec<String> = want
        .values
        .iter()
        .filter(|(k, v)| got.values.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: got {:?}, want {v}", got.values.get(k)))
        .chain(got.values.keys().filter(|k| !want.values.contains_key(*k)).map(|k| format!("{k} emitted, none due")))
        .take(5)
        .collect();
    assert!(differ.is_empty(), "{kind}: {} windows, want {}: {differ:#?}", got.values.len(), want.values.len());
    assert_eq!(got.late, want.late, "{kind}: late readings");
    assert_eq!(got.late_readings, want.late_readings, "{kind}: the late stream's readings");
}

fn run_args_for<'a>(kind: &'a str, data: &'a Path, input: &'a Path, batch: &'a str) -> Vec<&'a str> {
    run_args(WINDOWS, data, input, &["--topology", kind, "--batch-size", batch])
}

#[test]
fn each_kind_of_window_emits_what_an_independent_computation_does_once_each() {
    let dir = tempfile::tempdir().unwrap();
    for (seed, readings, batch) in [(1, 2_000, 50), (2, 600, 7)] {
        let input = dir.path().join(format!("readings-{seed}.txt"));
        generate(seed, readings, &input);
        for kind in KINDS {
            let data = dir.path().join(format!("data-{seed}-{kind}"));
            let report = dir.path().join(format!("report-{seed}-{kind}.json"));
            let batch_size = batch.to_string();
            let mut args = run_args_for(kind, &data, &input, &batch_size);
            args.extend(["--report-json", report.to_str().unwrap()]);
            let log = text(&weir_ok(&args));
            assert!(log.contains("txid 3 attempt 0 failed"), "{kind}: no batch was replayed: {log}");
            let want = expected(kind, &input, batch);
            // The run's report counts the late tuples of committed batches.
            let report: Json = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
            let reported = report[0]["late_tuples"]["windows"].as_i64().unwrap_or(0);
            assert_eq!(reported, want.late, "{kind}: late tuples in the run's report: {report}");
            assert!(want.values.len() > 20, "{kind}: the reference closes only {} windows", want.values.len());
            assert_windows_eq(kind, &stored(&data, kind), &want);
            if !kind.starts_with("count") {
                assert!(want.late > 0, "{kind}: the readings hold no late one");
            }
        }
    }
}

#[test]
fn windows_survive_kills_at_seeded_moments() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("readings.txt");
    generate(3, 3_000, &input);
    for (seed, kind) in [(11, "time-sliding"), (12, "count-sliding"), (13, "session-greatest"), (14, "count-general")] {
        let data = dir.path().join(format!("data-{kind}"));
        let mut restarts = Restarts::new(run_args_for(kind, &data, &input, "20"), &data, kind);
        restarts.kill_seeded(seed, 10, 20);
        restarts.finish();
        assert_windows_eq(kind, &stored(&data, kind), &expected(kind, &input, 20));
    }
}

#[test]
fn processing_time_windows_go_by_the_time_recorded_with_each_batch() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("readings.txt");
    generate(4, 600, &input);
    // The n-th batch emitted afresh is emitted at 1,000,000 + 130 n ms:
    // txid t at 1,000,000 + 130 t, if the replays of txid 3 and the
    // batches in flight with it keep the times they were first emitted at.
    let clock = "1000000:130";
    for kind in ["duration-tumbling", "duration-sliding"] {
        let data = dir.path().join(format!("data-{kind}"));
        let output = weir().env("WEIR_CLOCK", clock).args(run_args_for(kind, &data, &input, "20")).output().unwrap();
        assert!(output.status.success(), "{kind}: {}", text(&output));
        assert_windows_eq(kind, &stored(&data, kind), &expected_by(kind, &input, 20, &[clock]));
    }
    // Killed before txid 12 commits, one batch in flight (its record not
    // made durable by an earlier commit), and restarted: the batch was
    // never committed, so the restarted run emits it afresh, at its clock's
    // first reading (1,002,000 + 130 (t - 11) ms for txid t from there on).
    let kind = "duration-tumbling";
    let data = dir.path().join("data-restarted");
    let mut args = run_args_for(kind, &data, &input, "20");
    args.extend(["--max-pending", "1"]);
    let killed = weir().env("WEIR_CLOCK", clock).env("WEIR_FAULT", "before-commit:12").args(&args).output().unwrap();
    assert_eq!(killed.status.signal(), Some(9), "{}", text(&killed));
    assert_eq!(last_committed(&data, kind), 11);
    let output = weir().env("WEIR_CLOCK", "1002000:130").args(&args).output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    assert_windows_eq(kind, &stored(&data, kind), &expected_by(kind, &input, 20, &["1000000:130:11", "1000570:130"]));
}

#[test]
fn inspect_shows_each_window_and_the_state_its_open_windows_are_in() {
    let shown = text(&weir_ok(&["inspect", WINDOWS]));
    for line in [
        "window windows <- parse: group by [sensor], tumbling windows of 3 tuples: built-in sum (in the host) windows: \
         [value] -> [sum], open windows in state open",
        "window windows <- parse: group by [sensor], windows of 4 tuples every 2: guest reducer windows",
        "windows of 1000 ms every 250 by event time ts (max delay 150 ms, lateness 0 ms): guest reducer",
        "tumbling windows of 1000 ms by the time each batch was emitted: built-in sum",
        "sessions ended by 150 ms without a tuple, by event time ts (max delay 300 ms, lateness 100 ms): guest combiner",
    ] {
        assert!(shown.contains(line), "no line with {line:?} in:\n{shown}");
    }
}

#[test]
fn a_million_open_windows_run_in_a_small_state_cache_and_stay_in_redb() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = [
        "run",
        WINDOWS,
        "--topology",
        "many-open",
        "--data",
        data.to_str().unwrap(),
        "--batch-size",
        "20000",
        "--max-state-cache-mib",
        "8",
    ];
    let run = weir_bounded(&args, std::time::Duration::from_secs(600));
    assert!(run.output.status.success(), "{}", text(&run.output));
    // Each group's count and its one open window (its end: tuple 2), nothing emitted.
    let db = weir_state::Db::open(&data).unwrap();
    let open = db.scan("many-open", "open").unwrap();
    let windows = open.iter().filter(|(key, _)| matches!(key.first(), Some(weir_sdk::Value::I64(2)))).count();
    assert_eq!((open.len(), windows), (2_000_000, 1_000_000));
    // What the host holds stays far below a million windows' worth.
    assert!(run.peak_rss_kib < 512 * 1024, "peak RSS {} KiB", run.peak_rss_kib);
}
