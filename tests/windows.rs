//! Every kind of window through a real guest (`tests/guests/windows`), the
//! real binary and a real redb file: each run's windows are compared with
//! an independent computation in Python (`tests/windows_reference.py`),
//! over generated readings with out-of-order and late ones and a gap of
//! empty windows; each window is emitted once (the guest counts emissions
//! in a state), late readings are counted, a replayed batch (the guest
//! fails txid 3's first attempt) emits what its first attempt would have,
//! and kill -9 at seeded moments leaves the same windows. Count windows
//! give the same windows at every parallelism; event-time windows keep a
//! watermark per spout partition.

mod common;

use common::kill::Restarts;
use common::*;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The guest's topologies, one per kind of window.
const KINDS: [&str; 11] = [
    "count-tumbling",
    "count-sliding",
    "count-sliding-sum",
    "count-general",
    "time-tumbling",
    "time-skew",
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
const LATE_STREAMS: [&str; 4] = ["time-tumbling", "time-skew", "time-held", "session-greatest"];

/// The windows `kind` must emit over `input` in batches of `batch` lines.
fn expected(kind: &str, input: &Path, batch: usize) -> Windows {
    expected_at(kind, input, batch, 1)
}

/// [`expected`] with the spout dealing each batch into `parallelism`
/// partitions.
fn expected_at(kind: &str, input: &Path, batch: usize, parallelism: usize) -> Windows {
    expected_by(kind, input, batch, parallelism, &[])
}

/// [`expected_at`] for processing-time windows, each batch emitted at the
/// time `clocks` give it (see the script's `--clock`).
fn expected_by(kind: &str, input: &Path, batch: usize, parallelism: usize, clocks: &[&str]) -> Windows {
    let output = Command::new("python3")
        .arg(reference_script())
        .args(["expect", "--kind", kind, "--batch", &batch.to_string()])
        .args(["--parallelism", &parallelism.to_string()])
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

/// Runs `kind` over `input` in batches of `batch` lines at `parallelism`
/// (its batch txid 3 replayed), checks what its report counted late, and
/// returns what it stored.
fn run_kind(kind: &str, dir: &Path, input: &Path, batch: usize, parallelism: usize) -> Windows {
    let data = dir.join(format!("data-{kind}-{batch}-{parallelism}"));
    let report = dir.join(format!("report-{kind}-{batch}-{parallelism}.json"));
    let (batch_size, parallelism_arg) = (batch.to_string(), parallelism.to_string());
    let mut args = run_args_for(kind, &data, input, &batch_size);
    args.extend(["--report-json", report.to_str().unwrap(), "--parallelism", &parallelism_arg]);
    std::fs::create_dir_all(dir).unwrap();
    let log = text(&weir_ok(&args));
    let lines = std::fs::read_to_string(input).unwrap().lines().count();
    if lines.div_ceil(batch) >= 3 {
        assert!(log.contains("txid 3 attempt 0 failed"), "{kind}: no batch was replayed: {log}");
    }
    let got = stored(&data, kind);
    // The run's report counts the late tuples of committed batches.
    let report: Json = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let reported = report[0]["late_tuples"]["windows"].as_i64().unwrap_or(0);
    assert_eq!(reported, got.late, "{kind}: late tuples in the run's report: {report}");
    got
}

/// Asserts that no two windows of one group that `kind` emitted share a
/// start: each key is the group, the window's start and end (then, for
/// a general aggregator, what the tuple is of).
#[track_caller]
fn assert_starts_unique(kind: &str, windows: &Windows) {
    let mut ends: BTreeMap<(String, String), Json> = BTreeMap::new();
    for key in windows.values.keys() {
        let key: Vec<Json> = serde_json::from_str(key).unwrap();
        let at = if kind == "time-all" { 0 } else { 1 };
        let (group, start, end) = (Json::from(key[..at].to_vec()).to_string(), key[at].to_string(), &key[at + 1]);
        if let Some(other) = ends.insert((group.clone(), start.clone()), end.clone()) {
            assert_eq!(&other, end, "{kind}: two windows of {group} start at {start}");
        }
    }
}

#[test]
fn each_kind_of_window_emits_what_an_independent_computation_does_once_each() {
    let dir = tempfile::tempdir().unwrap();
    for (seed, readings, batch) in [(1, 2_000, 50), (2, 600, 7)] {
        let input = dir.path().join(format!("readings-{seed}.txt"));
        generate(seed, readings, &input);
        for kind in KINDS {
            let got = run_kind(kind, &dir.path().join(format!("seed-{seed}")), &input, batch, 1);
            let want = expected(kind, &input, batch);
            assert!(want.values.len() > 20, "{kind}: the reference closes only {} windows", want.values.len());
            assert_windows_eq(kind, &got, &want);
            assert_starts_unique(kind, &got);
            if !kind.starts_with("count") {
                assert!(want.late > 0, "{kind}: the readings hold no late one");
            }
        }
    }
}

#[test]
fn count_windows_are_the_same_at_every_parallelism_and_time_windows_go_by_each_partition() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("readings.txt");
    generate(5, 1_000, &input);
    let batch = 13;
    for parallelism in [2, 3] {
        let dir = dir.path().join(format!("parallelism-{parallelism}"));
        for kind in KINDS {
            let want = expected_at(kind, &input, batch, parallelism);
            if kind.starts_with("count") {
                // A group's tuples are numbered in the order of the file.
                assert_eq!(want, expected(kind, &input, batch), "{kind}: the reference depends on the parallelism");
            }
            let got = run_kind(kind, &dir, &input, batch, parallelism);
            assert_windows_eq(&format!("{kind} at parallelism {parallelism}"), &got, &want);
            assert_starts_unique(kind, &got);
        }
    }
}

#[test]
fn a_sliding_count_window_sums_the_same_tuples_at_any_parallelism_and_batch_size() {
    // The issue's repro: 25 readings of one sensor, a window of 50 every 20.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("readings.txt");
    let lines: Vec<String> = (0..25).map(|i| format!("a,{},{i}", 1_000 + i)).collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    for (batch, parallelism) in [(25, 1), (25, 2), (5, 2), (25, 3)] {
        let got = run_kind("count-sliding-sum", dir.path(), &input, batch, parallelism);
        let want: BTreeMap<String, Json> = [(r#"["a",-30,20]"#.to_owned(), Json::from(190))].into();
        assert_eq!(got.values, want, "batch {batch}, parallelism {parallelism}");
        assert_windows_eq("count-sliding-sum", &got, &expected_at("count-sliding-sum", &input, batch, parallelism));
    }
}

#[test]
fn a_reading_that_meets_an_open_session_joins_it_however_late_its_own() {
    // The issue's repro: readings every second from 0 to 20 s, one at 9 s
    // (its own session [9 s, 14 s) behind the watermark), then another
    // sensor's far ahead; gap 5 s, max delay 2 s, lateness 3 s, batch 1.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("readings.txt");
    let mut lines: Vec<String> = (0..=20).map(|i| format!("a,{},1", i * 1_000)).collect();
    lines.extend(["a,9000,100".to_owned(), "z,100000,1".to_owned()]);
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let kind = "session-flink";
    let data = dir.path().join("data");
    weir_ok(&run_args_for(kind, &data, &input, "1"));
    let got = stored(&data, kind);
    let want: BTreeMap<String, Json> = [(r#"["a",0,25000]"#.to_owned(), Json::from(121))].into();
    assert_eq!((&got.values, got.late), (&want, 0), "the session's sum, and the late readings");
    let counts: Vec<Json> = scan(&data, kind, "counts").into_iter().map(|e| e["value"].clone()).collect();
    assert_eq!(counts, [Json::from(22)], "the session's readings");
    assert_windows_eq(kind, &got, &expected(kind, &input, 1));
}

#[test]
fn a_skewed_partition_holds_the_watermark_back_until_it_is_idle() {
    // Batches of two lines, dealt into two partitions: `a` into the first,
    // `b`, 10 s behind, into the second; `skip` leaves the second without
    // a tuple. The window: tumbling seconds, no delay, a partition idle
    // after 5 s of event time without a tuple.
    let mut pairs: Vec<(i64, Option<i64>)> = Vec::new();
    pairs.extend((0..20).map(|i| (10_000 + 1_000 * i, Some(1_000 * i))));
    // Quiet while the greatest timestamp moves on by 5 s: not idle yet, so
    // its reading at 19.5 s is on time.
    pairs.extend((20..25).map(|i| (10_000 + 1_000 * i, None)));
    pairs.push((35_000, Some(19_500)));
    // Quiet for more than 5 s: idle from the batch at 41 s on, the
    // watermark goes by `a` alone, and `b`'s readings when it comes back
    // are late.
    pairs.extend((26..33).map(|i| (10_000 + 1_000 * i, None)));
    pairs.extend((33..36).map(|i| (10_000 + 1_000 * i, Some(20_000 + 1_000 * (i - 33)))));
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("readings.txt");
    let mut lines = Vec::new();
    for (a, b) in &pairs {
        lines.push(format!("a,{a},1"));
        lines.push(b.map_or("skip".to_owned(), |b| format!("b,{b},1")));
    }
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let kind = "time-skew";
    let got = run_kind(kind, dir.path(), &input, 2, 2);
    let late: BTreeMap<String, i64> =
        [20_000, 21_000, 22_000].iter().map(|ts| (format!(r#"["b",{ts},1]"#), 1)).collect();
    assert_eq!((got.late, got.late_readings.as_ref()), (3, Some(&late)), "late at parallelism 2");
    assert_windows_eq(kind, &got, &expected_at(kind, &input, 2, 2));
    // `b`'s window of 19 s closed only when `b` moved past it.
    assert_eq!(got.values.get(r#"["b",19000,20000]"#), Some(&Json::from(2)));
    // One partition, one watermark: `a`'s timestamps make `b`'s late.
    let one = run_kind(kind, &dir.path().join("one"), &input, 2, 1);
    assert!(one.late >= 20, "{} late at parallelism 1", one.late);
    assert_windows_eq(kind, &one, &expected_at(kind, &input, 2, 1));
}

/// Runs `kind` over `lines` in batches of `batch` at `parallelism`, checks
/// it against the reference and returns what it stored.
fn run_lines(kind: &str, lines: &[&str], batch: usize, parallelism: usize) -> Windows {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("readings.txt");
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let got = run_kind(kind, dir.path(), &input, batch, parallelism);
    assert_windows_eq(kind, &got, &expected_at(kind, &input, batch, parallelism));
    got
}

/// The windows `windows` holds, as `(key, value)`, in key order.
fn values(windows: &Windows) -> Vec<(String, i64)> {
    windows.values.iter().map(|(k, v)| (k.clone(), v.as_i64().unwrap())).collect()
}

fn late(windows: &Windows) -> Vec<String> {
    windows.late_readings.as_ref().unwrap().keys().cloned().collect()
}

#[test]
fn the_examples_of_the_windows_page_hold() {
    let own =
        |pairs: &[(&str, i64)]| -> Vec<(String, i64)> { pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect() };
    // The watermark per spout partition: `time-skew` is tumbling seconds,
    // no delay, a partition idle after 5 s.
    let skewed = [
        "a,10000,1",
        "b,1000,1",
        "a,11000,1",
        "b,2000,1",
        "a,12000,1",
        "skip",
        "a,20000,1",
        "skip",
        "a,21000,1",
        "b,3000,1",
    ];
    let one = run_lines("time-skew", &skewed, 2, 1);
    assert_eq!(late(&one), [r#"["b",2000,1]"#, r#"["b",3000,1]"#]);
    // `time-held` is the same with no idle timeout: `a`'s windows wait.
    let held = run_lines("time-held", &skewed, 2, 2);
    assert_eq!(late(&held), Vec::<String>::new());
    assert_eq!(values(&held), own(&[(r#"["b",1000,2000]"#, 1), (r#"["b",2000,3000]"#, 1)]));
    let two = run_lines("time-skew", &skewed, 2, 2);
    assert_eq!(late(&two), [r#"["b",3000,1]"#]);
    let closed = [
        (r#"["a",10000,11000]"#, 1),
        (r#"["a",11000,12000]"#, 1),
        (r#"["a",12000,13000]"#, 1),
        (r#"["b",1000,2000]"#, 1),
        (r#"["b",2000,3000]"#, 1),
    ];
    assert_eq!(values(&two), own(&closed));
    // A reading late for one of its sliding windows joins the others.
    let sliding = run_lines("time-sliding", &["a,2300,1", "a,1900,2", "a,9000,3"], 1, 1);
    assert_eq!(sliding.late, 0);
    let holds_2 = |v: &Json| v.as_str().unwrap().split(' ').any(|n| n == "2");
    let joined: Vec<&String> = sliding.values.iter().filter(|(_, v)| holds_2(v)).map(|(k, _)| k).collect();
    assert_eq!(joined, [r#"["a",1250,2250]"#, r#"["a",1500,2500]"#, r#"["a",1750,2750]"#]);
    // Sessions that touch merge.
    let touching = run_lines("session-flink", &["a,0,1", "a,5000,2", "a,20000,3"], 1, 1);
    assert_eq!(values(&touching), own(&[(r#"["a",0,10000]"#, 3)]));
    // Count windows: sliding 4 every 2 (values space-joined), tumbling 3.
    let seven: Vec<String> = (0..7).map(|i| format!("a,1,{i}")).collect();
    let seven: Vec<&str> = seven.iter().map(String::as_str).collect();
    let sliding = run_lines("count-sliding", &seven, 7, 1);
    let want = [(r#"["a",-2,2]"#, "0 1"), (r#"["a",0,4]"#, "0 1 2 3"), (r#"["a",2,6]"#, "2 3 4 5")];
    let want: BTreeMap<String, Json> = want.iter().map(|(k, v)| ((*k).to_owned(), Json::from(*v))).collect();
    assert_eq!(sliding.values, want);
    let tumbling = run_lines("count-tumbling", &seven, 7, 1);
    assert_eq!(values(&tumbling), own(&[(r#"["a",0,3]"#, 3), (r#"["a",3,6]"#, 12)]));
    // Where batches are cut: one batch of two, or two of one.
    let cut = ["a,5000,1", "a,500,2"];
    assert_eq!(values(&run_lines("time-skew", &cut, 2, 1)), own(&[(r#"["a",0,1000]"#, 2)]));
    let apart = run_lines("time-skew", &cut, 1, 1);
    assert_eq!((values(&apart), late(&apart)), (vec![], vec![r#"["a",500,2]"#.to_owned()]));
}

#[test]
fn a_reading_without_a_timestamp_halts_the_topology_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("readings.txt");
    std::fs::write(&input, "a,1000,1\na,2000,2\na,,3\na,3000,4\n").unwrap();
    let data = dir.path().join("data");
    let output = weir_output(&run_args_for("time-tumbling", &data, &input, "2"));
    assert!(!output.status.success(), "{}", text(&output));
    let log = text(&output);
    assert!(log.contains(r#"window windows: field "ts" holds null, not a timestamp in milliseconds"#), "{log}");
    // The batches before it committed; nothing of its batch did.
    assert_eq!(last_committed(&data, "time-tumbling"), 1);
}

#[test]
fn windows_survive_kills_at_seeded_moments() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("readings.txt");
    generate(3, 3_000, &input);
    let cases =
        [(11, "time-sliding", 1), (12, "count-sliding", 1), (13, "session-greatest", 1), (14, "count-general", 1)];
    // At parallelism 2: each partition's watermark, committed with its batch.
    let cases = cases.into_iter().chain([(15, "time-skew", 2), (16, "count-sliding", 2)]);
    for (seed, kind, parallelism) in cases {
        let data = dir.path().join(format!("data-{kind}-{parallelism}"));
        let parallelism_arg = parallelism.to_string();
        let mut args = run_args_for(kind, &data, &input, "20");
        args.extend(["--parallelism", &parallelism_arg]);
        let mut restarts = Restarts::new(args, &data, kind);
        restarts.kill_seeded(seed, 10, 20);
        restarts.finish();
        assert_windows_eq(kind, &stored(&data, kind), &expected_at(kind, &input, 20, parallelism));
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
        assert_windows_eq(kind, &stored(&data, kind), &expected_by(kind, &input, 20, 1, &[clock]));
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
    let clocks = ["1000000:130:11", "1000570:130"];
    assert_windows_eq(kind, &stored(&data, kind), &expected_by(kind, &input, 20, 1, &clocks));
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
        "tumbling windows of 1000 ms by event time ts (max delay 0 ms, lateness 0 ms, a spout partition idle after \
         5000 ms): built-in sum",
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
