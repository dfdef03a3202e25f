//! Every spout kind through the real binary: what a replay re-emits, exact
//! state after it, pairings refused, and a poison batch halting the run.

mod common;

use common::*;
use std::collections::BTreeMap;

/// What the guest spout printed for `txid`'s `attempt`, one line per partition.
fn emitted(log: &str, txid: u64, attempt: u32) -> Vec<String> {
    let marker = format!("[spout] stdout: txid {txid} attempt {attempt}: ");
    log.lines().filter_map(|line| line.split_once(&marker).map(|(_, rest)| rest.to_owned())).collect()
}

fn run_spout(topology: &str) -> String {
    let data = tempfile::tempdir().unwrap();
    let output = weir_ok(&run_topology_args(SPOUTS, topology, data.path(), &["--batch-size", "1000"]));
    assert_eq!(scan(data.path(), topology, "sums"), digit_sums(), "{topology}");
    let log = text(&output);
    assert!(log.contains("txid 2 attempt 0 failed: operator last-digit: retry"), "{log}");
    log
}

#[test]
fn a_batch_spout_re_emits_the_same_batch() {
    let log = run_spout("batch-numbers");
    assert_eq!(emitted(&log, 2, 0), ["100..200"]);
    assert_eq!(emitted(&log, 2, 1), emitted(&log, 2, 0));
}

#[test]
fn a_partitioned_transactional_spout_re_emits_exactly_the_recorded_batch() {
    let log = run_spout("partitioned-numbers");
    assert_eq!(emitted(&log, 2, 0), ["even 500..1000", "odd 500..1000"]);
    assert_eq!(emitted(&log, 2, 1), emitted(&log, 2, 0));
}

#[test]
fn a_partitioned_opaque_spout_may_re_emit_differently_and_stays_exact() {
    let log = run_spout("opaque-numbers");
    assert_eq!(emitted(&log, 2, 0), ["even 500..1000", "odd 500..1000"]);
    let replay = emitted(&log, 2, 1);
    assert_eq!(replay.len(), 2);
    assert_ne!(replay, emitted(&log, 2, 0), "the replay emitted the same split");
    assert!(
        replay.iter().all(|line| line.contains(" 500..")),
        "a replay starts from the committed metadata: {replay:?}"
    );
}

#[test]
fn an_opaque_spout_feeding_a_transactional_state_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let output = weir_output(&run_topology_args(SPOUTS, "opaque-into-transactional", data.path(), &[]));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "transactional state sums cannot be fed by an opaque spout: a replay of an opaque spout may hold \
             different tuples, and a transactional state skips a txid it has applied"
        ),
        "{stderr}"
    );
}

#[test]
fn the_generator_spout_emits_its_range_once() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap();
    weir_ok(&["run", TEST_TOPOLOGIES, "--topology", "generated-total", "--data", dir, "--batch-size", "300"]);
    assert_eq!(scan(data.path(), "generated-total", "total"), [serde_json::json!({"key": [], "value": 12_497_500})]);
    let input = corpus_20k().path.to_str().unwrap();
    let output =
        weir_output(&["run", TEST_TOPOLOGIES, "--topology", "generated-total", "--data", dir, "--input", input]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("makes its own input: --input"), "{}", text(&output));
}

#[test]
fn the_directory_spout_reads_files_in_name_order_and_picks_up_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir(&input).unwrap();
    std::fs::write(input.join("b.txt"), "the man\n").unwrap();
    std::fs::write(input.join("a.txt"), "the cat\nthe dog\n").unwrap();
    let data = dir.path().join("data");
    let args = run_args(TEST_TOPOLOGIES, &data, &input, &["--topology", "directory-word-count", "--batch-size", "1"]);
    let first = weir_ok(&args);
    assert!(text(&first).contains("committed 3 batches (3 tuples)"), "{}", text(&first));
    std::fs::write(input.join("c.txt"), "the end\n").unwrap();
    let second = weir_ok(&args);
    assert!(text(&second).contains("committed 1 batches (1 tuples)"), "{}", text(&second));
    let want: BTreeMap<String, i64> =
        [("the", 4), ("cat", 1), ("dog", 1), ("man", 1), ("end", 1)].map(|(w, c)| (w.to_owned(), c)).into();
    assert_counts_eq(&counts(&data, "directory-word-count"), &want);
}

#[test]
fn a_batch_failing_forever_halts_after_the_retries_and_leaves_committed_state_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (input, data) = sentences_input(dir.path(), 4000);
    let extra = ["--topology", "fails-at-5", "--batch-size", "1000", "--max-attempts", "3", "--retry-backoff-ms", "1"];
    weir_ok(&run_args(TEST_TOPOLOGIES, &data, &input, &extra));
    let raw = || raw_scan(&data, "fails-at-5", "counts");
    let before = raw();
    write_lines(&input, &sentences(6000));
    let stderr = failed_stderr(&weir_output(&run_args(TEST_TOPOLOGIES, &data, &input, &extra)));
    assert!(
        stderr.contains(
            "error: topology fails-at-5 halted: txid 5 failed 3 times; last error at attempt 2: operator split: trap"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("split cannot go on at txid 5"), "{stderr}");
    assert!(raw() == before, "committed state changed");
}

#[test]
fn a_guest_spout_reads_only_the_directory_it_is_granted() {
    let corpus = corpus_20k();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("input")).unwrap();
    std::fs::copy(&corpus.path, dir.path().join("input/corpus.txt")).unwrap();
    let args = ["run", TEST_TOPOLOGIES, "--topology", "granted-spout", "--data", "data"];
    let refused = weir().current_dir(dir.path()).args(args).output().unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("operator spout asks for read-only access to input"), "{stderr}");
    let output = weir().current_dir(dir.path()).args(args).args(["--allow-dir", "."]).output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    assert!(text(&output).contains("committed 200 batches (20000 tuples)"), "{}", text(&output));
    assert_counts_eq(&counts(&dir.path().join("data"), "granted-spout"), &corpus.truth);
}

#[test]
fn a_failed_spout_emission_is_retried_with_the_next_attempt() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap();
    let output =
        weir_ok(&["run", TEST_TOPOLOGIES, "--topology", "flaky-spout-total", "--data", dir, "--retry-backoff-ms", "1"]);
    let log = text(&output);
    assert!(
        log.contains(
            "emitting txid 2 attempt 0 failed: the spout's emit failed: retry: the source is not ready for txid 2 yet"
        ),
        "{log}"
    );
    assert_eq!(scan(data.path(), "flaky-spout-total", "total"), [serde_json::json!({"key": [], "value": 499_500})]);
}

/// An input of the first `n` sentences of the corpus, at `dir/input.txt`,
/// counted by a run of the word count into `dir/data`: the input, the data
/// dir and the committed state.
fn counted(dir: &std::path::Path, n: usize) -> (std::path::PathBuf, std::path::PathBuf, Vec<serde_json::Value>) {
    let (input, data) = sentences_input(dir, n);
    weir_ok(&run_args(WORD_COUNT, &data, &input, &["--batch-size", "100"]));
    let state = scan(&data, "word-count", "counts");
    (input, data, state)
}

/// Runs the word count again over `input` and returns its error, checking
/// that it halted at once, before any batch, leaving `state` as it was.
fn halted(input: &std::path::Path, data: &std::path::Path, state: &[serde_json::Value]) -> String {
    let stderr = failed_stderr(&weir_output(&run_args(WORD_COUNT, data, input, &["--batch-size", "100"])));
    assert!(!stderr.contains("retrying"), "a changed input is not retried: {stderr}");
    assert_eq!(scan(data, "word-count", "counts"), state, "committed state changed");
    stderr
}

#[test]
fn an_input_truncated_since_its_batches_were_committed_halts_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (input, data, state) = counted(dir.path(), 300);
    let size = std::fs::metadata(&input).unwrap().len();
    std::fs::write(&input, "a few words\n").unwrap();
    let stderr = halted(&input, &data, &state);
    let expected = format!(
        "error: topology word-count halted at txid 4: input {} holds 12 bytes, fewer than the {size} that the \
         batches before txid 4 read: it was truncated or replaced since they were committed",
        input.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
}

#[test]
fn an_input_replaced_since_its_batches_were_committed_halts_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (input, data, state) = counted(dir.path(), 300);
    // Other sentences, as many bytes and more: only the content tells.
    write_lines(&input, &sentences(1400)[1000..]);
    let stderr = halted(&input, &data, &state);
    assert!(stderr.contains(&format!("halted at txid 4: input {} changed: bytes", input.display())), "{stderr}");
    assert!(stderr.contains("the last that the batches before txid 4 read, are not what they were"), "{stderr}");
}

#[test]
fn a_data_dir_of_the_previous_release_resumes_after_its_last_line_range() {
    // The previous release recorded a batch's line range in 24 bytes:
    // start, end, lines. Its data dir: the first 100 lines committed.
    let dir = tempfile::tempdir().unwrap();
    let (input, data) = sentences_input(dir.path(), 300);
    let lines = sentences(300);
    let end = lines[..100].iter().map(|l| l.len() as u64 + 1).sum::<u64>();
    let meta: Vec<u8> = [0, end, 100].iter().flat_map(|n: &u64| n.to_le_bytes()).collect();
    weir_state::Db::open(&data)
        .unwrap()
        .commit("word-count", 1, &weir_state::BatchRecord { attempt: 0, time_ms: 0, spout: meta }, &[])
        .unwrap();
    let output = weir_ok(&run_args(WORD_COUNT, &data, &input, &["--batch-size", "100"]));
    assert!(text(&output).contains("committed 2 batches (200 tuples)"), "{}", text(&output));
    assert_counts_eq(&counts(&data, "word-count"), &count_words(&lines[100..]));
}
