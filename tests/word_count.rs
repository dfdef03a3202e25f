//! Word count end to end: the real `weir` binary, real guest components, a
//! real redb file, counts compared with the corpus's ground truth.

mod common;

use common::kill::{Point, Restarts};
use common::*;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

fn exact_counts(batch_size: &str, max_pending: &str, extra: &[&str]) {
    let args = [&["--batch-size", batch_size, "--max-pending", max_pending], extra].concat();
    let (data, output) = over_corpus(weir_ok, WORD_COUNT, &args);
    let batches = 20_000usize.div_ceil(batch_size.parse().unwrap());
    assert!(text(&output).contains(&format!("committed {batches} batches (20000 tuples)")), "{}", text(&output));
    assert_counts_eq(&counts(data.path(), "word-count"), &corpus_20k().truth);
}

#[test]
fn counts_are_exact_with_batches_of_1_line_one_pending() {
    exact_counts("1", "1", &[]);
}

#[test]
fn counts_are_exact_with_batches_of_1_line_four_pending() {
    exact_counts("1", "4", &[]);
}

#[test]
fn counts_are_exact_with_batches_of_100_lines() {
    exact_counts("100", "1", &[]);
    exact_counts("100", "4", &[]);
}

#[test]
fn counts_are_exact_with_batches_of_1000_lines() {
    exact_counts("1000", "1", &[]);
    exact_counts("1000", "4", &[]);
}

#[test]
fn two_instances_per_operator_count_exactly() {
    exact_counts("1000", "4", &["--parallelism", "2"]);
}

#[test]
fn a_guest_combiner_aggregator_counts_exactly() {
    let (data, _) = over_corpus(weir_ok, TEST_TOPOLOGIES, &["--topology", "guest-count", "--batch-size", "700"]);
    assert_counts_eq(&counts(data.path(), "guest-count"), &corpus_20k().truth);
}

#[test]
fn a_retry_error_replays_the_batch_and_counts_stay_exact() {
    let extra = ["--topology", "flaky-word-count", "--batch-size", "1000", "--max-pending", "4"];
    let (data, output) = over_corpus(weir_ok, TEST_TOPOLOGIES, &extra);
    let log = text(&output);
    assert!(log.contains("txid 3 attempt 0 failed: operator split: retry: txid 3 fails on its first attempt"), "{log}");
    assert!(log.contains("replaying txids 3..="), "{log}");
    assert!(log.contains("1 failed attempts replayed"), "{log}");
    assert_counts_eq(&counts(data.path(), "flaky-word-count"), &corpus_20k().truth);
    let w0 = &scan(data.path(), "flaky-word-count", "counts")[0];
    assert_eq!(w0["key"][0], "w0");
}

fn killed_runs_recover_exactly(component: &str, topology: &str) {
    let corpus = corpus_20k();
    let data = tempfile::tempdir().unwrap();
    let args = run_args(component, data.path(), &corpus.path, &["--topology", topology, "--batch-size", "10"]);
    let mut restarts = Restarts::new([&args[..], &["--max-pending", "4"]].concat(), data.path(), topology);
    for (point, txid) in [(Point::AfterCommit, 37), (Point::BeforeCommit, 401), (Point::AfterProcess, 1283)] {
        restarts.kill_at(point, txid);
    }
    let output = weir_ok(&args);
    assert!(text(&output).contains("last committed txid 2000"), "{}", text(&output));
    assert_counts_eq(&counts(data.path(), topology), &corpus.truth);
}

#[test]
fn sigkill_mid_run_then_rerun_gives_exact_counts_with_transactional_state() {
    killed_runs_recover_exactly(WORD_COUNT, "word-count");
}

#[test]
fn sigkill_mid_run_then_rerun_gives_exact_counts_with_opaque_state() {
    killed_runs_recover_exactly(TEST_TOPOLOGIES, "word-count-opaque");
}

#[test]
fn a_rerun_resumes_after_the_last_commit_and_takes_appended_lines() {
    let corpus = corpus_20k();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("growing.txt");
    let all = std::fs::read_to_string(&corpus.path).unwrap();
    let half = all.match_indices('\n').nth(9_999).unwrap().0 + 1;
    std::fs::write(&input, &all[..half]).unwrap();
    let data = dir.path().join("data");
    weir_ok(&run_args(WORD_COUNT, &data, &input, &["--batch-size", "1000"]));
    let again = weir_ok(&run_args(WORD_COUNT, &data, &input, &["--batch-size", "1000"]));
    assert!(text(&again).contains("committed 0 batches (0 tuples)"), "{}", text(&again));
    std::fs::write(&input, &all).unwrap();
    let rest = weir_ok(&run_args(WORD_COUNT, &data, &input, &["--batch-size", "1000"]));
    assert!(text(&rest).contains("committed 10 batches (10000 tuples)"), "{}", text(&rest));
    assert!(text(&rest).contains("last committed txid 20"), "{}", text(&rest));
    assert_counts_eq(&counts(&data, "word-count"), &corpus.truth);
}

#[test]
fn a_second_run_loads_the_compiled_component_from_the_cache() {
    let corpus = corpus_20k();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let run = |data: &str| {
        let output = weir()
            .args(run_args(WORD_COUNT, &dir.path().join(data), &corpus.path, &["--cache-dir", cache.to_str().unwrap()]))
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output));
        text(&output)
    };
    let first = run("a");
    assert!(first.contains("(compiled)"), "{first}");
    let entries: Vec<_> = std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let modified = std::fs::metadata(&entries[0]).unwrap().modified().unwrap();
    let second = run("b");
    assert!(second.contains("(compiled component loaded from cache)"), "{second}");
    assert_eq!(std::fs::metadata(&entries[0]).unwrap().modified().unwrap(), modified);
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1);
}

#[test]
fn guest_output_reaches_the_host_log_prefixed_with_the_operator() {
    let (_data, output) =
        over_corpus(weir_ok, TEST_TOPOLOGIES, &["--topology", "chatty-word-count", "--batch-size", "10000"]);
    let log = String::from_utf8_lossy(&output.stderr);
    for line in ["[split] stdout: split starts txid 1", "[split] stderr: split warns about txid 2"] {
        assert!(log.contains(line), "{line:?} missing from:\n{log}");
    }
}

#[test]
fn a_batch_failing_every_attempt_halts_the_run_and_keeps_what_was_committed() {
    let extra =
        ["--topology", "poison-word-count", "--batch-size", "1000", "--max-pending", "1", "--max-attempts", "3"];
    let (data, output) = over_corpus(weir_output, TEST_TOPOLOGIES, &extra);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let error = stderr.lines().find(|l| l.starts_with("error:")).unwrap_or_else(|| panic!("no error in:\n{stderr}"));
    for part in
        ["topology poison-word-count halted: txid 2 failed 3 times", "last error at attempt 2", "operator split: trap"]
    {
        assert!(error.contains(part), "{part:?} missing from {error:?}");
    }
    assert!(stderr.contains("split cannot go on at txid 2"), "the panic message is missing:\n{stderr}");
    // Only txid 1, the first 1000 sentences, is committed.
    assert_counts_eq(&counts(data.path(), "poison-word-count"), &count_words(&sentences(1000)));
}

/// A data dir where the example's word count committed 4 batches, and its
/// state as `weir state scan --raw` prints it.
fn four_batches_committed(dir: &std::path::Path, topology: &str, component: &str) -> (std::path::PathBuf, Vec<u8>) {
    let (input, data) = sentences_input(dir, 4000);
    weir_ok(&run_args(component, &data, &input, &["--topology", topology, "--batch-size", "1000"]));
    let raw = raw_scan(&data, topology, "counts");
    write_lines(&input, &sentences(8000));
    (input, raw)
}

#[test]
fn a_fatal_error_halts_at_once_without_retrying() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus_20k();
    let data = dir.path().join("data");
    let output = weir_output(&run_args(
        TEST_TOPOLOGIES,
        &data,
        &corpus.path,
        &["--topology", "fatal-at-3", "--batch-size", "1000"],
    ));
    let stderr = failed_stderr(&output);
    assert!(
        stderr.contains(
            "error: topology fatal-at-3 halted at txid 3, attempt 0: operator split: fatal: txid 3 cannot be processed"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("replaying"), "a fatal error was retried:\n{stderr}");
    assert!(
        text(&weir_ok(&[
            "state",
            "get",
            "--data",
            data.to_str().unwrap(),
            "--topology",
            "fatal-at-3",
            "--state",
            "counts",
            "--key",
            r#"["w0"]"#,
            "--raw"
        ]))
        .contains(r#""txid":2"#)
    );
}

#[test]
fn a_batch_past_its_deadline_fails_and_is_replayed() {
    let (_dir, input, data) = input_and_data("input.txt", "a calm sentence\nthe attack begins\n");
    let output = weir_output(&run_args(
        HOSTILE,
        &data,
        &input,
        &[
            "--topology",
            "infinite-loop",
            "--batch-size",
            "1",
            "--max-call-ms",
            "1500",
            "--batch-timeout-ms",
            "200",
            "--max-attempts",
            "2",
        ],
    ));
    let stderr = failed_stderr(&output);
    assert!(
        stderr
            .contains("txid 2 attempt 0 failed: operator (batch deadline): the batch was not processed within 200 ms"),
        "{stderr}"
    );
    assert!(stderr.contains("topology infinite-loop halted: txid 2 failed 2 times"), "{stderr}");
    assert_eq!(counts(&data, "infinite-loop").get("calm"), Some(&1));
}

/// What a topology declaring `word-count`'s counts as opaque gets where
/// they are transactional.
const KIND_CHANGED: &str = "topology word-count: state counts holds transactional values, but the topology declares \
                            it opaque: a state keeps the kind it was first committed with";

#[test]
fn a_state_declared_with_another_kind_is_refused_at_load_with_state_intact() {
    let dir = tempfile::tempdir().unwrap();
    let (input, before) = four_batches_committed(dir.path(), "word-count", WORD_COUNT);
    let data = dir.path().join("data");
    // The same topology name with opaque state, over the example's
    // transactional counts: refused before a batch runs, not five failed
    // commits later.
    let output = weir_output(&run_args(
        TEST_TOPOLOGIES,
        &data,
        &input,
        &["--topology", "word-count", "--batch-size", "1000", "--max-attempts", "5"],
    ));
    let stderr = failed_stderr(&output);
    assert!(stderr.contains(&format!("error: {KIND_CHANGED}")), "{stderr}");
    assert!(!stderr.contains("attempt"), "a batch ran: {stderr}");
    assert!(raw_scan(&data, "word-count", "counts") == before, "committed state changed");
    // The example itself goes on where it stopped.
    weir_ok(&run_args(WORD_COUNT, &data, &input, &["--batch-size", "1000"]));
    assert_eq!(weir_state::Db::open(&data).unwrap().progress("word-count").unwrap().last_committed, 8);
}

#[test]
fn a_served_topology_declaring_a_kept_state_with_another_kind_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::server::Server::start(dir.path());
    server.deploy_word_count(dir.path());
    server.assert_word_count_exact();
    let (status, _) = server.api("DELETE", "/v1/topologies/word-count?state=keep", b"");
    assert_eq!(status, 204);
    let opaque = common::server::bundle(dir.path(), TEST_TOPOLOGIES, "variants.weir");
    let (status, body) = server.api("POST", "/v1/topologies?topology=word-count&input=in/corpus.txt", &opaque);
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap_or_default().contains(KIND_CHANGED), "{body}");
    // The kept counts are as they were, and the example deploys on them again.
    server.deploy_word_count(dir.path());
    server.assert_word_count_exact();
}

#[test]
fn a_closed_stderr_does_not_stop_the_run() {
    let corpus = corpus_20k();
    let data = tempfile::tempdir().unwrap();
    let mut child = weir()
        .env("WEIR_LOG", "weir=debug")
        .args(run_args(WORD_COUNT, data.path(), &corpus.path, &["--batch-size", "100"]))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stderr.take().unwrap()).read_line(&mut first).unwrap();
    // The reader is gone: every later log line meets a closed pipe.
    assert!(child.wait().unwrap().success());
    assert_counts_eq(&counts(data.path(), "word-count"), &corpus.truth);
}

#[test]
fn a_state_error_no_replay_can_cure_halts_at_once_with_state_intact() {
    // A count written by a later batch than the one committing (a state
    // restored from a later copy, say): every replay would meet it again.
    let dir = tempfile::tempdir().unwrap();
    let (input, data) = sentences_input(dir.path(), 300);
    let first = sentences(1);
    let word = first[0].split_whitespace().next().unwrap();
    let ahead = weir_state::view::StateWrites {
        state: "counts".into(),
        records: vec![(
            weir_state::keys::encode([weir_sdk::codec::ValueRef::Str(word)]),
            weir_state::rules::Stored::Transactional { txid: 100, value: weir_sdk::codec::Value::I64(7) },
        )],
        removed: Vec::new(),
        removed_ranges: Vec::new(),
        combines: None,
    };
    let nothing_read = weir_io::spout::LineRange { start: 0, end: 0, lines: 0, tail: None }.encode();
    let record = weir_state::BatchRecord { attempt: 0, time_ms: 0, spout: nothing_read };
    weir_state::Db::open(&data).unwrap().commit("word-count", 1, &record, &[ahead]).unwrap();
    let before = raw_scan(&data, "word-count", "counts");

    let output = weir_output(&run_args(WORD_COUNT, &data, &input, &["--batch-size", "100", "--max-attempts", "5"]));
    let stderr = failed_stderr(&output);
    let expected = format!(
        "error: topology word-count halted at txid 2, attempt 0: operator counts: commit failed: state counts: key \
         [\"{word}\"]: stored txid 100 is ahead of batch txid 2"
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(!stderr.contains("replaying"), "a batch no replay can cure was replayed: {stderr}");
    assert!(raw_scan(&data, "word-count", "counts") == before, "committed state changed");
}
