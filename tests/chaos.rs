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

/// How a chaos run batches: spout tuples per batch, batches in flight, and
/// how many txids past the last commit a kill may land.
struct Batching {
    size: &'static str,
    pending: &'static str,
    span: u64,
}

/// Small batches, a few in flight.
const SMALL: Batching = Batching { size: "10", pending: "4", span: 50 };

/// Batches of 50, many in flight: large commit groups.
const GROUPED: Batching = Batching { size: "50", pending: "16", span: 15 };

/// Kills a run of `topology` at seeded moments, then runs it to the end
/// and checks its state with `check`; returns what the last run printed.
fn chaos(
    seed: u64,
    batching: Batching,
    component: &str,
    topology: &str,
    input: Option<&Path>,
    check: impl Fn(&Path),
) -> String {
    let (_dir, data) = data_dir();
    let extra = ["--batch-size", batching.size, "--max-pending", batching.pending, "--retry-backoff-ms", "1"];
    let mut args = run_topology_args(component, topology, &data, &extra);
    if let Some(input) = input {
        args.extend_from_slice(&["--input", input.to_str().unwrap()]);
    }
    let mut restarts = Restarts::new(args, &data, topology);
    restarts.kill_seeded(seed, KILLS, batching.span);
    for point in [Point::BeforeCommit, Point::AfterCommit] {
        assert!(restarts.killed_at(point), "seed {seed} makes no kill {point}: {}", restarts.moments());
    }
    let (kills, moments) = (restarts.kills.len(), restarts.moments());
    let _ = writeln!(std::io::stderr().lock(), "chaos {topology}: {kills} kills, at {moments}");
    let output = restarts.finish();
    check(&data);
    text(&output)
}

/// The most batches one commit group held, from a run's summary
/// (`commits: N groups, mean M batches, max K`).
fn largest_group(summary: &str) -> u64 {
    let (_, max) = summary.split_once(" batches, max ").unwrap_or_else(|| panic!("no commit groups in {summary}"));
    max.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
}

/// [`chaos`] over the 20,000-sentence corpus, the counts in the end exact.
fn counts_survive(seed: u64, batching: Batching, component: &str, topology: &str) -> String {
    let corpus = corpus_20k();
    chaos(seed, batching, component, topology, Some(&corpus.path), |data| {
        assert_counts_eq(&counts(data, topology), &corpus.truth);
    })
}

#[test]
fn transactional_spout_and_transactional_state_survive_twenty_kills() {
    counts_survive(1, SMALL, WORD_COUNT, "word-count");
}

#[test]
fn transactional_spout_and_transactional_state_survive_kills_at_timed_moments() {
    // Kills a few milliseconds after a commit land inside the next batches'
    // processing and commits, where no fault point is.
    let corpus = corpus_20k();
    let (_dir, data) = data_dir();
    let extra = ["--input", corpus.path.to_str().unwrap(), "--batch-size", "10", "--max-pending", "4"];
    let args = run_topology_args(WORD_COUNT, "word-count", &data, &extra);
    let mut restarts = Restarts::new(args, &data, "word-count");
    restarts.kill_timed_seeded(4, 10, 50, Duration::from_millis(8));
    restarts.finish();
    assert_counts_eq(&counts(&data, "word-count"), &corpus.truth);
}

#[test]
fn transactional_spout_and_opaque_state_survive_twenty_kills() {
    counts_survive(2, SMALL, TEST_TOPOLOGIES, "word-count-opaque");
}

#[test]
fn an_opaque_spout_emitting_other_splits_and_opaque_state_survive_twenty_kills() {
    chaos(3, SMALL, SPOUTS, "opaque-jitter", None, |data| {
        assert_eq!(scan(data, "opaque-jitter", "sums"), digit_sums());
    });
}

#[test]
fn large_commit_groups_survive_twenty_kills() {
    let summary = counts_survive(5, GROUPED, WORD_COUNT, "word-count");
    assert!(largest_group(&summary) > 1, "no commit held more than one batch: {summary}");
}

#[test]
fn a_kill_inside_a_group_commit_leaves_all_of_the_group_or_none() {
    let corpus = corpus_20k();
    let (_dir, data) = data_dir();
    let args = run_args(WORD_COUNT, &data, &corpus.path, &["--batch-size", "50", "--max-pending", "16"]);
    let mut restarts = Restarts::new(args, &data, "word-count");
    for ahead in [1, 10, 40, 25] {
        let txid = restarts.last_committed() + ahead;
        // Asserts that the run died inside a group with none of it committed.
        restarts.kill_at(Point::InGroupCommit, txid);
        // Every batch counts words: the newest value is the last commit's.
        let last = restarts.last_committed();
        if last > 0 {
            let stored = weir_state::Db::open(&data).unwrap().scan("word-count", "counts").unwrap();
            let newest = stored.iter().filter_map(|(_, value)| value.txid()).max();
            assert_eq!(newest, Some(last), "a value carries a txid of the group killed after txid {last}");
        }
    }
    let output = restarts.finish();
    assert_counts_eq(&counts(&data, "word-count"), &corpus.truth);
    assert!(largest_group(&text(&output)) > 1, "{}", text(&output));
}
