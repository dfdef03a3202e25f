//! Every stream operation and aggregator kind through a real guest
//! (`tests/guests/stream-ops`), the real binary and a real redb file.
//!
//! Each topology runs over the same scripted batches: txid 1 holds
//! `(1 apple) (2 banana) (3 cherry) (4 apple) (5 banana) (6 apple)`, txid 2
//! nothing, txid 3 `(7 date)` alone, txid 4 `(8 cherry) (9 apple) (10 elder)`
//! and fails its first attempt, so it is replayed. Outputs are recorded in
//! states as `[txid, fields...]` with how many times each tuple was seen,
//! and compared exactly.

mod common;

use common::*;
use serde_json::{Value as Json, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A run of a stream-ops topology: its data dir and its log.
struct Run {
    data: tempfile::TempDir,
    log: String,
}

/// Runs `topology` to the end of the script, checking that it committed
/// every batch, the empty one included, and replayed txid 4 once.
fn run(topology: &str) -> Run {
    let data = tempfile::tempdir().unwrap();
    let output = weir_ok(&run_topology_args(STREAM_OPS, topology, data.path(), &["--batch-size", "6"]));
    let log = text(&output);
    assert!(log.contains("committed 4 batches (10 tuples)"), "{topology}: {log}");
    assert!(log.contains("txid 4 attempt 0 failed: operator fail-once: retry"), "{topology}: {log}");
    Run { data, log }
}

/// The tuples `state` recorded: `[txid, fields...]` => times seen.
fn recorded(data: &Path, topology: &str, state: &str) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for entry in scan(data, topology, state) {
        let times = entry["value"].as_i64().unwrap_or_else(|| panic!("{state}: {entry} is not a count"));
        assert!(out.insert(entry["key"].to_string(), times).is_none(), "{state}: key listed twice: {entry}");
    }
    out
}

/// Asserts `state` recorded exactly `want`: each `[txid, fields...]` with
/// the times it was seen.
#[track_caller]
fn assert_recorded(run: &Run, topology: &str, state: &str, want: &[(Json, i64)]) {
    let want: BTreeMap<String, i64> = want.iter().map(|(key, n)| (key.to_string(), *n)).collect();
    let got = recorded(run.data.path(), topology, state);
    assert_eq!(got, want, "topology {topology}, state {state}");
}

/// Asserts `state` recorded each of `keys` exactly once.
#[track_caller]
fn assert_recorded_once(run: &Run, topology: &str, state: &str, keys: &[Json]) {
    let want: Vec<(Json, i64)> = keys.iter().map(|k| (k.clone(), 1)).collect();
    assert_recorded(run, topology, state, &want);
}

/// A state's entries as `key => value`.
fn state(run: &Run, topology: &str, state: &str) -> BTreeMap<String, Json> {
    scan(run.data.path(), topology, state).into_iter().map(|e| (e["key"].to_string(), e["value"].clone())).collect()
}

/// Asserts a map state holds exactly `want`, keyed by one word each.
#[track_caller]
fn assert_words(run: &Run, topology: &str, name: &str, want: &[(&str, Json)]) {
    let want: BTreeMap<String, Json> = want.iter().map(|(w, v)| (json!([w]).to_string(), v.clone())).collect();
    assert_eq!(state(run, topology, name), want, "topology {topology}, state {name}");
}

/// The value of a single-value (ungrouped) state.
#[track_caller]
fn single_value(run: &Run, topology: &str, name: &str) -> Json {
    let entries = scan(run.data.path(), topology, name);
    assert_eq!(entries.len(), 1, "state {name} of {topology} should hold one value: {entries:?}");
    entries[0]["value"].clone()
}

/// Every tuple of the script, `[txid, n, word]`.
fn script() -> Vec<Json> {
    let batches: [&[(i64, &str)]; 4] = [
        &[(1, "apple"), (2, "banana"), (3, "cherry"), (4, "apple"), (5, "banana"), (6, "apple")],
        &[],
        &[(7, "date")],
        &[(8, "cherry"), (9, "apple"), (10, "elder")],
    ];
    let mut out = Vec::new();
    for (txid, batch) in batches.iter().enumerate() {
        for (n, word) in batch.iter() {
            out.push(json!([txid + 1, n, word]));
        }
    }
    out
}

#[test]
fn each_appends_every_tuple_the_function_emits_and_drops_tuples_it_emits_none_for() {
    let run = run("each");
    assert_recorded_once(
        &run,
        "each",
        "out",
        &[
            json!([1, 1, "apple", 0]),
            json!([1, 2, "banana", 0]),
            json!([1, 2, "banana", 1]),
            json!([1, 4, "apple", 0]),
            json!([1, 5, "banana", 0]),
            json!([1, 5, "banana", 1]),
            json!([3, 7, "date", 0]),
            json!([4, 8, "cherry", 0]),
            json!([4, 8, "cherry", 1]),
            json!([4, 10, "elder", 0]),
        ],
    );
}

#[test]
fn filter_keeps_the_tuples_it_accepts_whole() {
    let run = run("filter");
    assert_recorded_once(
        &run,
        "filter",
        "out",
        &[json!([1, 2, "banana"]), json!([1, 3, "cherry"]), json!([1, 5, "banana"]), json!([4, 8, "cherry"])],
    );
}

#[test]
fn map_replaces_each_tuple_with_one_of_its_output_fields() {
    let run = run("map");
    assert_recorded(
        &run,
        "map",
        "out",
        &[
            (json!([1, "APPLE"]), 3),
            (json!([1, "BANANA"]), 2),
            (json!([1, "CHERRY"]), 1),
            (json!([3, "DATE"]), 1),
            (json!([4, "APPLE"]), 1),
            (json!([4, "CHERRY"]), 1),
            (json!([4, "ELDER"]), 1),
        ],
    );
}

#[test]
fn flat_map_replaces_each_tuple_with_all_it_emits_or_none() {
    let run = run("flat-map");
    assert_recorded(
        &run,
        "flat-map",
        "out",
        &[
            (json!([1, "ap"]), 3),
            (json!([1, "ple"]), 3),
            (json!([1, "ban"]), 2),
            (json!([1, "ana"]), 2),
            (json!([1, "che"]), 1),
            (json!([1, "rry"]), 1),
            (json!([4, "che"]), 1),
            (json!([4, "rry"]), 1),
            (json!([4, "ap"]), 1),
            (json!([4, "ple"]), 1),
            (json!([4, "el"]), 1),
            (json!([4, "der"]), 1),
        ],
    );
}

#[test]
fn peek_sees_every_tuple_and_passes_it_on_unchanged() {
    let run = run("peek");
    assert_recorded_once(&run, "peek", "out", &script());
    for line in [
        "peek saw txid 1 attempt 0: 6 apple",
        "peek saw txid 3 attempt 0: 7 date",
        "peek saw txid 4 attempt 1: 10 elder",
    ] {
        assert!(run.log.contains(line), "{line:?} missing from the log:\n{}", run.log);
    }
    assert!(!run.log.contains("peek saw txid 4 attempt 0"), "the failed attempt failed before peek:\n{}", run.log);
}

#[test]
fn project_keeps_only_the_named_fields_in_their_order() {
    let run = run("project");
    assert_recorded_once(
        &run,
        "project",
        "out",
        &[
            json!([1, 5, 1]),
            json!([1, 6, 2]),
            json!([1, 6, 3]),
            json!([1, 5, 4]),
            json!([1, 6, 5]),
            json!([1, 5, 6]),
            json!([3, 4, 7]),
            json!([4, 6, 8]),
            json!([4, 5, 9]),
            json!([4, 5, 10]),
        ],
    );
    assert_eq!(query(run.data.path(), "project", "project", "hi there"), json!([[2, "hi"], [5, "there"]]));
}

#[test]
fn partition_aggregate_gives_one_result_per_partition_and_group() {
    let run = run("partition-aggregate");
    let t = "partition-aggregate";
    assert_recorded_once(&run, t, "count", &[json!([1, 6]), json!([2, 0]), json!([3, 1]), json!([4, 3])]);
    assert_recorded_once(
        &run,
        t,
        "initials",
        &[json!([1, "abcaba"]), json!([2, ""]), json!([3, "d"]), json!([4, "cae"])],
    );
    assert_recorded_once(
        &run,
        t,
        "per-word",
        &[
            json!([1, "apple", "1,4,6"]),
            json!([1, "banana", "2,5"]),
            json!([1, "cherry", "3"]),
            json!([3, "date", "7"]),
            json!([4, "apple", "9"]),
            json!([4, "cherry", "8"]),
            json!([4, "elder", "10"]),
        ],
    );
}

#[test]
fn aggregate_gives_one_result_per_batch_even_an_empty_one_with_every_aggregator_kind() {
    let run = run("aggregate");
    let t = "aggregate";
    assert_recorded_once(&run, t, "count", &[json!([1, 6]), json!([2, 0]), json!([3, 1]), json!([4, 3])]);
    assert_recorded_once(&run, t, "sum", &[json!([1, 21]), json!([2, 0]), json!([3, 7]), json!([4, 27])]);
    assert_recorded_once(&run, t, "min", &[json!([1, 1]), json!([2, null]), json!([3, 7]), json!([4, 8])]);
    assert_recorded_once(
        &run,
        t,
        "max",
        &[json!([1, "cherry"]), json!([2, null]), json!([3, "date"]), json!([4, "elder"])],
    );
    assert_recorded_once(
        &run,
        t,
        "first",
        &[json!([1, "apple"]), json!([2, null]), json!([3, "date"]), json!([4, "cherry"])],
    );
    assert_recorded_once(&run, t, "combiner", &[json!([1, 6]), json!([2, 0]), json!([3, 4]), json!([4, 6])]);
    assert_recorded_once(
        &run,
        t,
        "reducer",
        &[json!([1, "abcaba"]), json!([2, ""]), json!([3, "d"]), json!([4, "cae"])],
    );
    assert_recorded_once(
        &run,
        t,
        "general",
        &[
            json!([1, "batch", 1]),
            json!([1, "five", 5]),
            json!([1, "words", "apple banana cherry apple banana apple"]),
            json!([2, "batch", 2]),
            json!([2, "words", ""]),
            json!([3, "batch", 3]),
            json!([3, "words", "date"]),
            json!([4, "batch", 4]),
            json!([4, "five", 10]),
            json!([4, "words", "cherry apple elder"]),
        ],
    );
    assert_recorded_once(&run, t, "count-parallel", &[json!([1, 6]), json!([2, 0]), json!([3, 1]), json!([4, 3])]);
}

#[test]
fn chained_aggregates_output_the_cross_product_of_their_results() {
    let run = run("chained");
    let t = "chained";
    assert_recorded_once(
        &run,
        t,
        "count-sum",
        &[json!([1, 6, 21]), json!([2, 0, 0]), json!([3, 1, 7]), json!([4, 3, 27])],
    );
    // Distinct emits nothing for the empty batch: the product is empty.
    assert_recorded_once(
        &run,
        t,
        "product",
        &[
            json!([1, 6, "apple"]),
            json!([1, 6, "banana"]),
            json!([1, 6, "cherry"]),
            json!([3, 1, "date"]),
            json!([4, 3, "apple"]),
            json!([4, 3, "cherry"]),
            json!([4, 3, "elder"]),
        ],
    );
    assert_recorded_once(
        &run,
        t,
        "grouped",
        &[
            json!([1, "apple", 3, 6]),
            json!([1, "banana", 2, 5]),
            json!([1, "cherry", 1, 3]),
            json!([3, "date", 1, 7]),
            json!([4, "apple", 1, 9]),
            json!([4, "cherry", 1, 8]),
            json!([4, "elder", 1, 10]),
        ],
    );
    assert_recorded_once(
        &run,
        t,
        "partitions",
        &[json!([1, 6, 1]), json!([2, 0, null]), json!([3, 1, 7]), json!([4, 3, 8])],
    );
}

#[test]
fn group_by_then_aggregate_gives_one_result_per_group_with_every_aggregator_kind() {
    let run = run("group-by");
    let t = "group-by";
    let per_word = |values: [Json; 7]| -> Vec<Json> {
        let keys = [(1, "apple"), (1, "banana"), (1, "cherry"), (3, "date"), (4, "apple"), (4, "cherry"), (4, "elder")];
        keys.iter().zip(values).map(|((txid, word), v)| json!([txid, word, v])).collect()
    };
    assert_recorded_once(&run, t, "count", &per_word([3, 2, 1, 1, 1, 1, 1].map(|n| json!(n))));
    assert_recorded_once(
        &run,
        t,
        "general",
        &per_word(["apple", "banana", "cherry", "date", "apple", "cherry", "elder"].map(|w| json!(w))),
    );
    assert_recorded_once(&run, t, "reducer", &per_word(["1,4,6", "2,5", "3", "7", "9", "8", "10"].map(|s| json!(s))));
    assert_recorded_once(&run, t, "combiner", &per_word([6, 5, 3, 7, 9, 8, 10].map(|n| json!(n))));
    assert_recorded_once(
        &run,
        t,
        "two-fields",
        &[
            json!([1, "odd", "apple", 1]),
            json!([1, "even", "apple", 10]),
            json!([1, "even", "banana", 2]),
            json!([1, "odd", "banana", 5]),
            json!([1, "odd", "cherry", 3]),
            json!([3, "odd", "date", 7]),
            json!([4, "even", "cherry", 8]),
            json!([4, "odd", "apple", 9]),
            json!([4, "even", "elder", 10]),
        ],
    );
}

#[test]
fn persistent_aggregate_grouped_keeps_a_map_and_ungrouped_a_single_value_exactly_once() {
    let run = run("persistent-aggregate");
    let t = "persistent-aggregate";
    assert_words(
        &run,
        t,
        "counts",
        &[("apple", json!(4)), ("banana", json!(2)), ("cherry", json!(2)), ("date", json!(1)), ("elder", json!(1))],
    );
    assert_words(
        &run,
        t,
        "max-n",
        &[("apple", json!(9)), ("banana", json!(5)), ("cherry", json!(8)), ("date", json!(7)), ("elder", json!(10))],
    );
    // A reducer folds on from the stored value, in an opaque state too.
    assert_words(
        &run,
        t,
        "ns",
        &[
            ("apple", json!("1,4,6,9")),
            ("banana", json!("2,5")),
            ("cherry", json!("3,8")),
            ("date", json!("7")),
            ("elder", json!("10")),
        ],
    );
    assert_eq!(single_value(&run, t, "total"), json!(10));
    assert_eq!(single_value(&run, t, "sum"), json!(55));
    assert_eq!(single_value(&run, t, "min"), json!(1));
    assert_eq!(single_value(&run, t, "max"), json!("elder"));
    assert_eq!(single_value(&run, t, "first"), json!("apple"));
    assert_eq!(single_value(&run, t, "longest"), json!(6));
    assert_eq!(single_value(&run, t, "initials"), json!("abcabadcae"));
}

#[test]
fn persistent_aggregate_new_values_stream_carries_each_batchs_new_values() {
    let run = run("persistent-aggregate");
    let t = "persistent-aggregate";
    assert_recorded_once(
        &run,
        t,
        "count-updates",
        &[
            json!([1, "apple", 3]),
            json!([1, "banana", 2]),
            json!([1, "cherry", 1]),
            json!([3, "date", 1]),
            json!([4, "apple", 4]),
            json!([4, "cherry", 2]),
            json!([4, "elder", 1]),
        ],
    );
    // Ungrouped, an empty batch still updates the value with the zero.
    assert_recorded_once(&run, t, "total-updates", &[json!([1, 6]), json!([2, 6]), json!([3, 7]), json!([4, 10])]);
}

#[test]
fn a_single_value_state_is_queried_with_an_empty_key() {
    let run = run("persistent-aggregate");
    assert_eq!(query(run.data.path(), "persistent-aggregate", "total", ""), json!([[10]]));
}

#[test]
fn partition_persist_writes_in_the_commit_reads_its_own_writes_and_emits_new_values() {
    let run = run("partition-persist");
    let t = "partition-persist";
    let latest =
        [("apple", json!(9)), ("banana", json!(5)), ("cherry", json!(8)), ("date", json!(7)), ("elder", json!(10))];
    assert_words(&run, t, "latest", &latest);
    assert_words(&run, t, "latest-parallel", &latest);
    assert_recorded_once(
        &run,
        t,
        "updates",
        &[
            json!([1, "apple", null, 1]),
            json!([1, "banana", null, 2]),
            json!([1, "cherry", null, 3]),
            json!([1, "apple", 1, 4]),
            json!([1, "banana", 2, 5]),
            json!([1, "apple", 4, 6]),
            json!([3, "date", null, 7]),
            json!([4, "cherry", 3, 8]),
            json!([4, "apple", 6, 9]),
            json!([4, "elder", null, 10]),
        ],
    );
}

#[test]
fn state_query_looks_keys_up_with_map_get_and_with_a_guest_query_function() {
    let run = run("state-query");
    let data = run.data.path();
    assert_eq!(
        query(data, "state-query", "get", "apple banana zzz"),
        json!([["apple", 4], ["banana", 2], ["zzz", null]])
    );
    assert_eq!(query(data, "state-query", "lookup", "apple zzz cherry"), json!([["apple", 4], ["cherry", 2]]));
    assert_eq!(query(data, "state-query", "sum", "apple cherry apple"), json!([[10]]));
    assert_eq!(query(data, "state-query", "sum", ""), json!([[0]]));
}

#[test]
fn a_query_function_returning_too_few_results_fails_naming_its_operator() {
    let run = run("state-query");
    let output = weir_output(&[
        "query",
        "--data",
        run.data.path().to_str().unwrap(),
        "--topology",
        "state-query",
        "--query",
        "short",
        "--args",
        "apple cherry",
    ]);
    assert!(!output.status.success(), "{}", text(&output));
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(message.contains("one-short"), "{message}");
    assert!(message.contains("1 results for 2 tuples"), "{message}");
}

#[test]
fn merge_passes_on_the_tuples_of_every_input() {
    let run = run("merge");
    assert_recorded(
        &run,
        "merge",
        "out",
        &[
            (json!([1, 1, "apple"]), 1),
            (json!([1, 3, "cherry"]), 2),
            (json!([1, 5, "banana"]), 1),
            (json!([1, 6, "apple"]), 1),
            (json!([3, 7, "date"]), 1),
            (json!([4, 9, "apple"]), 2),
        ],
    );
}

#[test]
fn join_matches_within_each_batch_inner_and_outer() {
    let run = run("join");
    let inner = [json!([1, "apple", 1, 4]), json!([1, "apple", 1, 6]), json!([1, "banana", 5, 2])];
    assert_recorded_once(&run, "join", "inner", &inner);
    let unmatched_odd = [json!([1, "cherry", 3, null]), json!([3, "date", 7, null]), json!([4, "apple", 9, null])];
    let left: Vec<Json> = inner.iter().chain(&unmatched_odd).cloned().collect();
    assert_recorded_once(&run, "join", "left", &left);
    let unmatched_even = [json!([4, "cherry", null, 8]), json!([4, "elder", null, 10])];
    let outer: Vec<Json> = left.iter().chain(&unmatched_even).cloned().collect();
    assert_recorded_once(&run, "join", "outer", &outer);
}

#[test]
fn min_by_max_by_min_and_max_pick_one_whole_tuple_per_non_empty_batch() {
    let run = run("extremes");
    let t = "extremes";
    assert_recorded_once(&run, t, "min-by", &[json!([1, 1, "apple"]), json!([3, 7, "date"]), json!([4, 8, "cherry"])]);
    assert_recorded_once(&run, t, "max-by", &[json!([1, 3, "cherry"]), json!([3, 7, "date"]), json!([4, 10, "elder"])]);
    assert_recorded_once(&run, t, "min", &[json!([1, "apple", 1]), json!([3, "date", 7]), json!([4, "apple", 9])]);
    assert_recorded_once(&run, t, "max", &[json!([1, "cherry", 3]), json!([3, "date", 7]), json!([4, "elder", 10])]);
}

/// Where each way of partitioning put each tuple: `[txid, n, word]` =>
/// (partition, times), over two partitions.
fn placements(run: &Run, way: &str) -> BTreeMap<String, Vec<(i64, i64)>> {
    let mut out: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for entry in scan(run.data.path(), "partitioning", way) {
        let key = entry["key"].as_array().unwrap();
        let partition = key[3].as_i64().unwrap();
        assert!((0..2).contains(&partition), "{way}: partition {partition} of 2: {entry}");
        out.entry(json!(key[..3]).to_string()).or_default().push((partition, entry["value"].as_i64().unwrap()));
    }
    out
}

fn every_tuple_once(way: &str, placed: &BTreeMap<String, Vec<(i64, i64)>>) {
    let want: BTreeSet<String> = script().iter().map(Json::to_string).collect();
    assert_eq!(placed.keys().cloned().collect::<BTreeSet<_>>(), want, "{way}");
    for (tuple, at) in placed {
        assert_eq!(at.len(), 1, "{way}: {tuple} went to {at:?}");
        assert_eq!(at[0].1, 1, "{way}: {tuple} seen {} times", at[0].1);
    }
}

fn partition_of(placed: &BTreeMap<String, Vec<(i64, i64)>>, tuple: &Json) -> i64 {
    placed[&tuple.to_string()][0].0
}

#[test]
fn shuffle_spreads_each_batch_evenly_over_the_partitions() {
    let run = run("partitioning");
    let placed = placements(&run, "shuffle");
    every_tuple_once("shuffle", &placed);
    let first: Vec<i64> = script().iter().take(6).map(|t| partition_of(&placed, t)).collect();
    assert_eq!(first.iter().filter(|p| **p == 0).count(), 3, "txid 1 went to {first:?}");
}

#[test]
fn partition_by_sends_equal_fields_to_one_partition() {
    let run = run("partitioning");
    let placed = placements(&run, "partition-by");
    every_tuple_once("partition-by", &placed);
    let mut per_word: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    for tuple in script() {
        per_word.entry(tuple[2].to_string()).or_default().insert(partition_of(&placed, &tuple));
    }
    assert!(per_word.values().all(|ps| ps.len() == 1), "{per_word:?}");
}

#[test]
fn global_sends_every_tuple_to_one_partition_and_batch_global_each_batch() {
    let run = run("partitioning");
    let placed = placements(&run, "global");
    every_tuple_once("global", &placed);
    let all: BTreeSet<i64> = script().iter().map(|t| partition_of(&placed, t)).collect();
    assert_eq!(all.len(), 1, "global used partitions {all:?}");

    let placed = placements(&run, "batch-global");
    every_tuple_once("batch-global", &placed);
    let mut per_batch: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
    for tuple in script() {
        per_batch.entry(tuple[0].as_i64().unwrap()).or_default().insert(partition_of(&placed, &tuple));
    }
    assert!(per_batch.values().all(|ps| ps.len() == 1), "{per_batch:?}");
}

#[test]
fn broadcast_sends_every_tuple_to_every_partition() {
    let run = run("partitioning");
    let placed = placements(&run, "broadcast");
    let want: BTreeMap<String, Vec<(i64, i64)>> =
        script().iter().map(|t| (t.to_string(), vec![(0, 1), (1, 1)])).collect();
    assert_eq!(placed, want);
}

#[test]
fn parallelism_hint_2_counts_the_corpus_exactly_as_1_does() {
    let extra = ["--topology", "parallel-word-count", "--batch-size", "1000", "--max-pending", "2"];
    let (data, _) = over_corpus(weir_ok, STREAM_OPS, &extra);
    assert_counts_eq(&counts(data.path(), "parallel-word-count"), &corpus_20k().truth);
}

/// Loads the bad topology `topology` and returns why it was refused.
fn refusal(topology: &str) -> String {
    let (_dir, input, data) = input_and_data("input.txt", "one line\n");
    let output = weir_output(&run_args(BAD_TOPOLOGIES, &data, &input, &["--topology", topology]));
    assert!(!output.status.success(), "{topology} was accepted:\n{}", text(&output));
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[track_caller]
fn assert_refused(topology: &str, names: &[&str]) {
    let message = refusal(topology);
    for name in names {
        assert!(message.contains(name), "refusing {topology}, the error should name {name:?}:\n{message}");
    }
}

#[test]
fn an_unknown_field_is_refused_naming_the_field_and_the_operator() {
    assert_refused("unknown-field", &["nope", "reads-nope"]);
    assert_refused("field-gone-after-map", &["line", "reads-line"]);
    assert_refused("unknown-projected-field", &["nope", "keep-nope"]);
    assert_refused("unknown-field-in-query", &["nope", "query-reads-nope"]);
}

#[test]
fn a_duplicate_output_field_is_refused_naming_the_field_and_the_operator() {
    assert_refused("duplicate-output", &["line", "appends-line"]);
}

#[test]
fn a_state_used_with_the_wrong_kind_of_aggregator_or_operation_is_refused_naming_it() {
    assert_refused("general-persisted", &["persist-general"]);
    assert_refused("state-of-two-kinds", &["shared"]);
    assert_refused("state-map-and-single-value", &["shared"]);
}

#[test]
fn an_empty_topology_is_refused() {
    assert_refused("empty", &["empty"]);
}

#[test]
fn a_guest_combiner_without_input_fields_is_refused_as_a_built_in_would_be() {
    assert_refused(
        "fieldless-combiner",
        &["persistent_aggregate count-lines uses the guest combiner count-lines without input fields"],
    );
}
