//! Chaos: kill `weir run` with SIGKILL at seeded moments, at least 20
//! times, before and after durable commits and between the phases, restart
//! it each time, and compare the stored state with the ground truth exactly;
//! and kill it from outside at timed moments, which land anywhere.
//! Each configuration prints how many kills it made and where.

mod common;

use common::kill::{Point, Restarts};
use common::*;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

const KILLS: usize = 20;

/// Kills a run of `topology` at seeded moments, then runs it to the end
/// and checks its state with `check`.
fn chaos(seed: u64, component: &str, topology: &str, input: Option<&Path>, check: impl Fn(&Path)) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut args = vec!["run", component, "--topology", topology, "--data", data.to_str().unwrap()];
    args.extend_from_slice(&["--batch-size", "10", "--max-pending", "4", "--retry-backoff-ms", "1"]);
    if let Some(input) = input {
        args.extend_from_slice(&["--input", input.to_str().unwrap()]);
    }
    let mut restarts = Restarts::new(args, &data, topology);
    restarts.kill_seeded(seed, KILLS, 50);
    for point in [Point::BeforeCommit, Point::AfterCommit] {
        assert!(restarts.killed_at(point), "seed {seed} makes no kill {point}: {}", restarts.moments());
    }
    let (kills, moments) = (restarts.kills.len(), restarts.moments());
    let _ = writeln!(std::io::stderr().lock(), "chaos {topology}: {kills} kills, at {moments}");
    restarts.finish();
    check(&data);
}

#[test]
fn transactional_spout_and_transactional_state_survive_twenty_kills() {
    let corpus = corpus_20k();
    chaos(1, WORD_COUNT, "word-count", Some(&corpus.path), |data| {
        assert_counts_eq(&counts(data, "word-count"), &corpus.truth);
    });
}

#[test]
fn transactional_spout_and_transactional_state_survive_kills_at_timed_moments() {
    // Kills a few milliseconds after a commit land inside the next batches'
    // processing and commits, where no fault point is.
    let corpus = corpus_20k();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = vec![
        "run",
        WORD_COUNT,
        "--topology",
        "word-count",
        "--data",
        data.to_str().unwrap(),
        "--input",
        corpus.path.to_str().unwrap(),
        "--batch-size",
        "10",
        "--max-pending",
        "4",
    ];
    let mut restarts = Restarts::new(args, &data, "word-count");
    restarts.kill_timed_seeded(4, 10, 50, Duration::from_millis(8));
    restarts.finish();
    assert_counts_eq(&counts(&data, "word-count"), &corpus.truth);
}

#[test]
fn transactional_spout_and_opaque_state_survive_twenty_kills() {
    let corpus = corpus_20k();
    chaos(2, TEST_TOPOLOGIES, "word-count-opaque", Some(&corpus.path), |data| {
        assert_counts_eq(&counts(data, "word-count-opaque"), &corpus.truth);
    });
}

#[test]
fn an_opaque_spout_emitting_other_splits_and_opaque_state_survive_twenty_kills() {
    chaos(3, SPOUTS, "opaque-jitter", None, |data| {
        let want: Vec<serde_json::Value> =
            (0..10).map(|d: i64| serde_json::json!({"key": [d], "value": 19_990_000 + 2000 * d})).collect();
        assert_eq!(scan(data, "opaque-jitter", "sums"), want);
    });
}
