//! The JetStream spouts against a real `nats-server` (JetStream, file
//! storage, started by the tests: one shared by this binary's tests, each
//! test with streams of its own, and servers of their own for the tests that
//! kill or configure one), the real `weir` binary and a real Wasm guest.

mod common;

use common::kill::Restarts;
use common::nats::{LogReader, NatsServer, corpus_stream, lag_adds_up, shared_nats};
use common::server::{Server, bundle};
use common::*;
use std::path::Path;
use std::time::Duration;

/// `weir run` of `topology` of the test guest against `nats`, data in `data`.
fn run_args<'a>(topology: &'a str, data: &'a Path, nats: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    run_topology_args(TEST_TOPOLOGIES, topology, data, &[&["--nats", nats], extra].concat())
}

fn word_count_is_exact(topology: &str, batch_size: &str) {
    let corpus = corpus_stream();
    let data = tempfile::tempdir().unwrap();
    let url = shared_nats().url();
    let output = weir_ok(&run_args(topology, data.path(), &url, &["--batch-size", batch_size]));
    assert!(text(&output).contains("(50000 tuples)"), "{}", text(&output));
    assert_counts_eq(&counts(data.path(), topology), &corpus.truth);
}

#[test]
fn word_count_over_a_four_partition_stream_is_exact_with_the_transactional_spout_at_two_batch_sizes() {
    word_count_is_exact("jetstream-word-count", "1000");
    word_count_is_exact("jetstream-word-count", "97");
}

#[test]
fn word_count_over_a_four_partition_stream_is_exact_with_the_opaque_spout_at_two_batch_sizes() {
    word_count_is_exact("jetstream-word-count-opaque", "1000");
    word_count_is_exact("jetstream-word-count-opaque", "97");
}

/// The benchmark's JetStream word count, `examples/word-count-jetstream`.
#[test]
fn the_benchmarks_jetstream_word_count_is_exact() {
    let corpus = corpus_stream();
    let data = tempfile::tempdir().unwrap();
    let (url, data_dir) = (shared_nats().url(), data.path().to_str().unwrap());
    let output = weir_ok(&["run", WORD_COUNT_JETSTREAM, "--data", data_dir, "--nats", &url, "--batch-size", "2500"]);
    assert!(text(&output).contains("(50000 tuples)"), "{}", text(&output));
    assert_counts_eq(&counts(data.path(), "word-count"), &corpus.truth);
}

/// Kills `weir run` of `topology` at three seeded moments, restarting it
/// each time, then runs it to the end: the counts must be exact.
fn survives_kills(topology: &str, seed: u64) {
    let corpus = corpus_stream();
    let (_dir, data) = data_dir();
    let url = shared_nats().url();
    let args = run_args(topology, &data, &url, &["--batch-size", "100", "--max-pending", "4"]);
    let mut restarts = Restarts::new(args, &data, topology);
    restarts.kill_seeded(seed, 3, 30);
    let output = restarts.finish();
    assert_counts_eq(&counts(&data, topology), &corpus.truth);
    let last_kill = restarts.kills.last().unwrap().txid;
    assert!(last_committed(&data, topology) > last_kill, "{}", text(&output));
}

#[test]
fn the_transactional_spout_killed_mid_run_and_restarted_counts_exactly() {
    survives_kills("jetstream-word-count", 11);
}

#[test]
fn the_opaque_spout_killed_mid_run_and_restarted_counts_exactly() {
    survives_kills("jetstream-word-count-opaque", 12);
}

/// What is wrong with `stream`'s partition 0 in txid 3, `left` of its
/// messages being left, when 2,000 lines were published round-robin over
/// four partitions and each batch takes 100 of each: it held lines 800 to
/// 1196, every fourth.
fn txid_3_of_partition_0(stream: &str, left: u64) -> String {
    format!(
        "stream {stream} no longer holds the messages recorded in partition {stream}.0: sequences 801..=1197 held \
         100 messages, {left} of them are left"
    )
}

/// The shared server, the first 2,000 sentences of the 20,000-sentence
/// corpus published round-robin into its stream `stream` over four
/// partitions, `stream.0` to `stream.3`.
fn two_thousand_lines_in(stream: &str) -> &'static NatsServer {
    let nats = shared_nats();
    nats.publish(stream, &format!("{stream}.{{0..3}}"), &sentences(2000));
    nats
}

#[test]
fn a_batch_recorded_but_not_committed_whose_messages_were_purged_halts_its_replay_and_commits_nothing() {
    let nats = two_thousand_lines_in("purgeable");
    let (_dir, data) = data_dir();
    let url = nats.url();
    let args = run_args("jetstream-fatal-at-3", &data, &url, &["--batch-size", "100"]);
    // The run halts at txid 3, recorded and not committed, as a kill would
    // leave it.
    let halted = weir_output(&args);
    assert!(text(&halted).contains("halted at txid 3"), "{}", text(&halted));
    assert_eq!(last_committed(&data, "jetstream-fatal-at-3"), 2);
    let before = raw_scan(&data, "jetstream-fatal-at-3", "counts");
    nats.purge("purgeable");
    let stderr = failed_stderr(&weir_output(&args));
    assert!(stderr.contains("topology jetstream-fatal-at-3 halts at txid 3, which is not committed"), "{stderr}");
    assert!(stderr.contains(&txid_3_of_partition_0("purgeable", 0)), "{stderr}");
    assert_eq!(last_committed(&data, "jetstream-fatal-at-3"), 2);
    assert!(raw_scan(&data, "jetstream-fatal-at-3", "counts") == before, "committed state changed");
}

#[test]
fn a_message_deleted_while_a_failed_batch_waits_for_its_replay_halts_the_run_naming_the_range() {
    let nats = two_thousand_lines_in("purged-live");
    let (_dir, data) = data_dir();
    let url = nats.url();
    let extra = ["--batch-size", "100", "--retry-backoff-ms", "3000"];
    let (mut child, mut log) = LogReader::start(&run_args("jetstream-retry-at-3", &data, &url, &extra), "weir=info");
    // The replay waits out its back-off: delete a message of it meanwhile.
    log.until("txid 3 attempt 0 failed");
    nats.delete_message("purged-live", 805);
    let (status, log) = log.finish(&mut child);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("replaying txid 3"), "{log}");
    assert!(log.contains(&txid_3_of_partition_0("purged-live", 99)), "{log}");
    assert_eq!(last_committed(&data, "jetstream-retry-at-3"), 2);
}

#[test]
fn a_failed_batch_of_the_opaque_spout_is_emitted_afresh_from_what_was_committed_and_the_counts_are_exact() {
    let corpus = corpus_stream();
    let data = tempfile::tempdir().unwrap();
    let url = shared_nats().url();
    let topology = "jetstream-retry-at-3-opaque";
    let extra = ["--batch-size", "100", "--max-pending", "4", "--retry-backoff-ms", "200"];
    let output = weir_ok(&run_args(topology, data.path(), &url, &extra));
    let log = text(&output);
    assert!(log.contains("txid 3 attempt 0 failed"), "{log}");
    assert!(log.contains("(50000 tuples)"), "{log}");
    assert_counts_eq(&counts(data.path(), topology), &corpus.truth);
}

#[test]
fn json_messages_become_fields_with_their_subject_sequence_and_timestamp_and_one_not_json_halts_naming_it() {
    let nats = shared_nats();
    let events = [
        r#"{"user":"ann","n":3}"#,
        r#"{"user":"bob","n":4,"other":"ignored"}"#,
        r#"{"user":"ann","n":5}"#,
        r#"{"user":"cid"}"#,
        r#"{"user":"ann","n":-1}"#,
    ];
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let before = now();
    nats.publish("events", "events.{0..1}", &events);
    let after = now();
    let (_dir, data) = data_dir();
    let url = nats.url();
    let args = run_args("jetstream-events", &data, &url, &["--retry-backoff-ms", "1"]);
    weir_ok(&args);
    let scan = |state| scan(&data, "jetstream-events", state);
    let entry = |key: &str, value: i64| serde_json::json!({"key": [key], "value": value});
    assert_eq!(scan("totals"), [entry("ann", 7), entry("bob", 4), entry("cid", 0)]);
    assert_eq!(scan("per-subject"), [entry("events.0", 3), entry("events.1", 2)]);
    assert_eq!(scan("last-seq"), [serde_json::json!({"key": [], "value": 5})]);
    let latest = scan("latest")[0]["value"].as_i64().unwrap();
    assert!((before..=after).contains(&latest), "timestamp {latest} not within {before}..={after}");

    let committed = raw_scan(&data, "jetstream-events", "totals");
    nats.publish("events", "events.{0..1}", &["not json", r#"{"user":"ann","n":1}"#]);
    let stderr = failed_stderr(&weir_output(&args));
    assert!(
        stderr.contains("stream events, partition events.0, sequence 6: the payload is not a JSON object"),
        "{stderr}"
    );
    // Nothing a retry does can change the message: the run halts at once.
    assert!(!stderr.contains("retrying in"), "a payload that cannot be read was retried: {stderr}");
    assert!(raw_scan(&data, "jetstream-events", "totals") == committed, "committed state changed");
}

#[test]
fn a_wildcard_over_a_stream_taking_a_wildcard_reads_the_subjects_that_hold_messages() {
    let nats = shared_nats();
    nats.create_stream("dynamic", &["dynamic.>"]);
    let lines = sentences(2000);
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    nats.publish("dynamic", "dynamic.{a,b}", &lines[..1000]);
    // Not a partition: `dynamic.*` takes one token after `dynamic`.
    nats.publish("dynamic", "dynamic.x.y", &["ignored words"]);
    let (_dir, data) = data_dir();
    let url = nats.url();
    let args = run_args("jetstream-dynamic", &data, &url, &["--batch-size", "100"]);
    weir_ok(&args);
    assert_counts_eq(&counts(&data, "jetstream-dynamic"), &count_words(&lines[..1000]));
    nats.publish("dynamic", "dynamic.{c,a}", &lines[1000..]);
    let output = weir_ok(&args);
    assert!(text(&output).contains("(1000 tuples)"), "{}", text(&output));
    assert_counts_eq(&counts(&data, "jetstream-dynamic"), &count_words(&lines));
}

#[test]
fn weir_publish_creates_the_stream_when_asked_spreads_lines_by_key_and_names_a_subject_the_stream_lacks() {
    let nats = shared_nats();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lines.txt");
    std::fs::write(&file, "a 1\nb 2\na 3\nc 4\na 5\nb 6\n").unwrap();
    let url = nats.url();
    let publish = |extra: &[&str]| {
        let args = ["publish", "--nats", &url, "--stream", "keyed", "--subjects", "keyed.{0..2}"];
        weir_output(&[&args[..], extra, &[file.to_str().unwrap()]].concat())
    };
    let missing = publish(&[]);
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .contains(&format!("stream keyed does not exist on the NATS server at {url}: add --create")),
        "{}",
        text(&missing)
    );
    let published = publish(&["--create", "--key", "word:1"]);
    assert!(published.status.success(), "{}", text(&published));
    assert!(text(&published).contains("published 6 lines to stream keyed over 3 subjects"), "{}", text(&published));
    // Lines keyed alike share a subject: a's three, b's two and c's one.
    let mut held: Vec<usize> = nats.subject_counts("keyed").into_values().collect();
    held.sort();
    assert!([&[1, 2, 3][..], &[1, 5], &[2, 4], &[3, 3], &[6]].contains(&held.as_slice()), "{held:?}");
    let again = publish(&["--key", "word:1"]);
    assert!(again.status.success(), "{}", text(&again));
    let mut doubled: Vec<usize> = nats.subject_counts("keyed").into_values().collect();
    doubled.sort();
    assert_eq!(doubled, held.iter().map(|n| n * 2).collect::<Vec<_>>(), "a key keeps its subject");
    let args = ["publish", "--nats", &url, "--stream", "keyed", "--subjects", "other.1", file.to_str().unwrap()];
    let lacking = weir_output(&args);
    assert!(
        String::from_utf8_lossy(&lacking.stderr)
            .contains("stream keyed does not take subject other.1 (its subjects: keyed.0, keyed.1, keyed.2)"),
        "{}",
        text(&lacking)
    );
}

/// The error `weir run` of `topology` halts with, given `extra` arguments.
fn run_error(topology: &str, nats: &str, extra: &[&str]) -> String {
    let data = tempfile::tempdir().unwrap();
    let stderr = failed_stderr(&weir_output(&run_args(topology, data.path(), nats, extra)));
    assert_eq!(last_committed(data.path(), topology), 0);
    stderr
}

#[test]
fn a_stream_or_subject_that_does_not_exist_is_named() {
    let url = shared_nats().url();
    let _ = corpus_stream();
    let err = run_error("jetstream-missing-stream", &url, &[]);
    assert!(
        err.contains(&format!(
            "topology jetstream-missing-stream reads stream no-such-stream: stream no-such-stream does not exist on \
             the NATS server at {url}"
        )),
        "{err}"
    );
    let err = run_error("jetstream-wrong-subject", &url, &[]);
    assert!(
        err.contains(
            "subject elsewhere.1 is not one of stream corpus's subjects (corpus.0, corpus.1, corpus.2, corpus.3)"
        ),
        "{err}"
    );
}

#[test]
fn a_server_out_of_reach_at_start_is_retried_then_the_run_halts_naming_it() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("nats://127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let err = run_error("jetstream-word-count", &url, &["--nats-retry-ms", "1500"]);
    assert!(started.elapsed() >= Duration::from_millis(1500), "it did not retry");
    assert!(err.contains(&format!("cannot reach the NATS server at {url}: tried")), "{err}");
    assert!(err.contains("retrying in"), "no back-off: {err}");
}

#[test]
fn a_start_that_cannot_reach_the_server_leaves_no_data_dir_behind() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("nats://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let output = weir_output(&run_args("jetstream-word-count", &data, &url, &["--nats-retry-ms", "300"]));
    let err = failed_stderr(&output);
    assert!(err.contains(&format!("cannot reach the NATS server at {url}")), "{err}");
    assert!(!data.exists(), "the failed start made {}", data.display());
}

#[test]
fn a_jetstream_topology_needs_a_server_and_takes_no_input() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap();
    let args = ["run", TEST_TOPOLOGIES, "--topology", "jetstream-word-count", "--data", dir];
    let output = weir_output(&args);
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(
            "topology jetstream-word-count reads stream corpus from NATS JetStream: give the server with --nats URL"
        ),
        "{}",
        text(&output)
    );
    let input = corpus_20k().path.to_str().unwrap();
    let output = weir_output(&[&args[..], &["--nats", "nats://127.0.0.1:1", "--input", input]].concat());
    assert!(String::from_utf8_lossy(&output.stderr).contains("from NATS JetStream: --input"), "{}", text(&output));
}

#[test]
fn the_server_killed_and_restarted_mid_run_is_found_again_and_the_counts_are_exact() {
    let mut nats = NatsServer::start();
    let corpus = corpus_20k();
    nats.publish_file("corpus", "corpus.{0..3}", &corpus.path);
    let (_dir, data) = data_dir();
    let url = nats.url();
    let args = run_args("jetstream-word-count", &data, &url, &["--batch-size", "25"]);
    let (mut child, mut log) = LogReader::start(&args, "weir=debug");
    log.until("committed txid 10 ");
    nats.crash_under(&mut log);
    let (status, log) = log.finish(&mut child);
    assert!(status.success(), "{log}");
    assert!(log.contains("retrying in"), "{log}");
    assert!(log.contains("reading stream corpus again"), "{log}");
    assert_counts_eq(&counts(&data, "jetstream-word-count"), &corpus.truth);
}

#[test]
fn a_token_file_logs_in_and_a_wrong_token_is_refused_by_name() {
    let nats = NatsServer::start_with(&["--auth", "nats-s3cret"]);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "nats-s3cret\n").unwrap();
    let token = token.to_str().unwrap();
    let lines = sentences(400);
    let file = dir.path().join("lines.txt");
    write_lines(&file, &lines);
    let url = nats.url();
    let publish = ["publish", "--nats", &url, "--nats-token-file", token, "--stream", "corpus"];
    let publish = [&publish[..], &["--subjects", "corpus.{0..3}", "--create", file.to_str().unwrap()]].concat();
    weir_ok(&publish);
    let data = dir.path().join("data");
    weir_ok(&run_args("jetstream-word-count", &data, &url, &["--nats-token-file", token]));
    assert_counts_eq(&counts(&data, "jetstream-word-count"), &count_words(&lines));
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "guess").unwrap();
    let err = run_error("jetstream-word-count", &url, &["--nats-token-file", wrong.to_str().unwrap()]);
    assert!(err.contains(&format!("the NATS server at {url} refused the credentials")), "{err}");
}

#[test]
fn a_served_topology_follows_the_stream_as_it_grows() {
    let nats = shared_nats();
    let dir = tempfile::tempdir().unwrap();
    let url = nats.url();
    let server = Server::start_with(dir.path(), &["--nats", &url]);
    let lines = sentences(20_000);
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    nats.publish("follow", "follow.{0..3}", &lines[..12_000]);
    let bytes = bundle(dir.path(), TEST_TOPOLOGIES, "t.weir");
    let (status, body) = server.api("POST", "/v1/topologies?topology=jetstream-follow", &bytes);
    assert_eq!(status, 201, "{body}");
    // Every status's lag is its partitions' lags added up.
    let lag_adds_up = |s: &serde_json::Value| lag_adds_up(s, 4);
    server.wait_for_status("jetstream-follow", |s| lag_adds_up(s) && s["tuples"] == 12_000 && s["spout_lag"] == 0);
    nats.publish("follow", "follow.{0..3}", &lines[12_000..]);
    let status =
        server.wait_for_status("jetstream-follow", |s| lag_adds_up(s) && s["tuples"] == 20_000 && s["spout_lag"] == 0);
    let partitions: Vec<String> = (0..4).map(|p| format!("follow.{p}")).collect();
    server.assert_caught_up("jetstream-follow", &status, &partitions);
    assert_counts_eq(&server.counts("jetstream-follow"), &corpus_20k().truth);
}

#[test]
fn a_batch_of_large_messages_ends_at_its_bytes_and_the_counts_are_exact() {
    // A server of its own, so that its `corpus` stream holds these: 80
    // messages of about 900 KB over four partitions, 72 MB in all, more
    // than a batch's 64 MiB.
    let nats = NatsServer::start();
    let lines: Vec<String> = (0..80).map(|i| format!("{}{} ", "w".repeat(999), i % 7).repeat(900)).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    nats.publish("corpus", "corpus.{0..3}", &lines);
    let data = tempfile::tempdir().unwrap();
    // Each batch's words are about as many bytes as its messages.
    let extra = ["--batch-size", "1000", "--max-output-mib", "128"];
    let output = weir_ok(&run_args("jetstream-word-count", data.path(), &nats.url(), &extra));
    let summary = text(&output);
    let batches: u64 = summary
        .split_once("committed ")
        .and_then(|(_, rest)| rest.split_once(" batches (80 tuples)"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary of 80 tuples in:\n{summary}"));
    // 1,000 messages a batch would take all 80 at once; 64 MiB take fewer.
    assert!(batches >= 2, "{summary}");
    assert_counts_eq(&counts(data.path(), "jetstream-word-count"), &count_words(&lines));
}

/// JSON lines, the fourth's `line` a number, which the test-topologies
/// guest's `jetstream-lines` refuses and the stream-ops guest's takes: a
/// server holding them in stream `lines` (one partition), the lines, and
/// `weir run` arguments for the topology over them, one message a batch.
fn poisoned_lines() -> (NatsServer, Vec<&'static str>) {
    let nats = NatsServer::start();
    let lines = vec![
        r#"{"line": "a b"}"#,
        r#"{"line": "b c"}"#,
        r#"{"line": "c"}"#,
        r#"{"line": 5}"#,
        r#"{"line": "a d"}"#,
        r#"{"line": "d"}"#,
    ];
    nats.publish("lines", "lines.0", &lines);
    (nats, lines)
}

fn lines_args<'a>(component: &'a str, data: &'a Path, url: &'a str) -> Vec<&'a str> {
    let extra = ["--nats", url, "--batch-size", "1", "--max-attempts", "2", "--retry-backoff-ms", "10"];
    run_topology_args(component, "jetstream-lines", data, &extra)
}

fn word_counts(pairs: &[(&str, i64)]) -> std::collections::BTreeMap<String, i64> {
    pairs.iter().map(|(w, n)| ((*w).to_owned(), *n)).collect()
}

#[test]
fn a_recorded_batch_the_guest_refuses_resumes_under_an_upgraded_guest() {
    let (nats, _) = poisoned_lines();
    let (_dir, data) = data_dir();
    let url = nats.url();
    let output = weir_output(&lines_args(TEST_TOPOLOGIES, &data, &url));
    assert!(!output.status.success(), "{}", text(&output));
    assert!(text(&output).contains("txid 4"), "{}", text(&output));
    assert_eq!(last_committed(&data, "jetstream-lines"), 3);
    // The same topology from a guest that reads any value replays txid 4
    // as recorded, and goes on.
    weir_ok(&lines_args(STREAM_OPS, &data, &url));
    assert_eq!(last_committed(&data, "jetstream-lines"), 6);
    let want = word_counts(&[("a", 2), ("b", 2), ("c", 2), ("5", 1), ("d", 2)]);
    assert_counts_eq(&counts(&data, "jetstream-lines"), &want);
}

#[test]
fn a_skipped_batch_commits_nothing_is_recorded_and_the_topology_goes_on() {
    let (nats, _) = poisoned_lines();
    let (_dir, data) = data_dir();
    let url = nats.url();
    let args = lines_args(TEST_TOPOLOGIES, &data, &url);
    assert!(!weir_output(&args).status.success());
    assert_eq!(last_committed(&data, "jetstream-lines"), 3);
    let skip = |txid: &str| {
        let data = data.to_str().unwrap();
        let args = ["skip-batch", "--data", data, "--topology", "jetstream-lines", "--txid", txid];
        weir_output(&[&args[..], &["--reason", "line 5 is not text"]].concat())
    };
    // Only the batch after the last committed, and only one that ran.
    let refused = text(&skip("5"));
    assert!(refused.contains("only the next one (4) may be skipped"), "{refused}");
    let skipped = skip("4");
    assert!(skipped.status.success(), "{}", text(&skipped));
    assert!(text(&skipped).contains("txid 4 skipped, committed with nothing written"), "{}", text(&skipped));
    let db = weir_state::Db::open(&data).unwrap();
    let record = db.skipped("jetstream-lines").unwrap();
    drop(db);
    assert_eq!(record.len(), 1);
    assert_eq!(record[0].txid, 4);
    assert!(record[0].note.ends_with(": line 5 is not text"), "{:?}", record[0]);
    weir_ok(&args);
    assert_eq!(last_committed(&data, "jetstream-lines"), 6);
    assert_counts_eq(&counts(&data, "jetstream-lines"), &word_counts(&[("a", 2), ("b", 2), ("c", 2), ("d", 2)]));
    let never_ran = text(&skip("7"));
    assert!(never_ran.contains("txid 7 is not recorded"), "{never_ran}");
}

#[test]
fn a_served_topology_caught_up_follows_the_stream_across_a_server_restart() {
    let mut nats = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--nats", &nats.url()]);
    let lines = sentences(2000);
    nats.publish("follow", "follow.{0..3}", &lines[..1000]);
    let bytes = bundle(dir.path(), TEST_TOPOLOGIES, "t.weir");
    let (status, body) = server.api("POST", "/v1/topologies?topology=jetstream-follow", &bytes);
    assert_eq!(status, 201, "{body}");
    server.wait_for_status("jetstream-follow", |s| s["tuples"] == 1000 && s["spout_lag"] == 0);
    // Caught up, it waits on the server: the server restarts, forgetting
    // the consumer it waits through, and what comes next is still read.
    std::thread::sleep(Duration::from_secs(1));
    nats.restart();
    nats.publish("follow", "follow.{0..3}", &lines[1000..]);
    server.wait_for_status("jetstream-follow", |s| s["tuples"] == 2000);
    assert_counts_eq(&server.counts("jetstream-follow"), &count_words(&lines));
}
