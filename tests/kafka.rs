//! The Kafka spouts and sink against a real broker (tansu 0.6.0 with its
//! sqlite storage, started by the tests: one shared by this binary's
//! tests, each test with topics of its own, and brokers of their own for
//! the tests that kill one), the real `weir` binary and real Wasm guests.

mod common;

use common::kafka::{KafkaBroker, corpus_topic, shared_kafka};
use common::kill::{Lcg, Point, Restarts};
use common::nats::{LogReader, assert_output_once, lag_adds_up};
use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

/// `weir run` of `topology` of the test guest against `kafka`, data in
/// `data`.
fn run_args<'a>(topology: &'a str, data: &'a Path, kafka: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    run_topology_args(TEST_TOPOLOGIES, topology, data, &[&["--kafka", kafka], extra].concat())
}

fn word_count_is_exact(component: &str, topology: &str, batch_size: &str) {
    let corpus = corpus_topic();
    let data = tempfile::tempdir().unwrap();
    let bootstrap = shared_kafka().bootstrap();
    let args =
        run_topology_args(component, topology, data.path(), &["--kafka", &bootstrap, "--batch-size", batch_size]);
    let output = weir_ok(&args);
    assert!(text(&output).contains("(50000 tuples)"), "{}", text(&output));
    assert_counts_eq(&counts(data.path(), topology), &corpus.truth);
}

#[test]
fn word_count_over_a_four_partition_topic_is_exact_with_the_transactional_spout_at_two_batch_sizes() {
    word_count_is_exact(TEST_TOPOLOGIES, "kafka-word-count", "2500");
    word_count_is_exact(TEST_TOPOLOGIES, "kafka-word-count", "397");
}

#[test]
fn word_count_over_a_four_partition_topic_is_exact_with_the_opaque_spout_at_two_batch_sizes() {
    word_count_is_exact(TEST_TOPOLOGIES, "kafka-word-count-opaque", "2500");
    word_count_is_exact(TEST_TOPOLOGIES, "kafka-word-count-opaque", "397");
}

#[test]
fn the_python_word_count_over_a_four_partition_topic_is_exact_with_both_spouts_at_two_batch_sizes() {
    let status = std::process::Command::new(Path::new(REPO_ROOT).join("scripts/guest-toolchains")).status().unwrap();
    assert!(status.success(), "scripts/guest-toolchains could not install componentize-py");
    let guest = Path::new(REPO_ROOT).join("tests/guests/kafka-py");
    let guest = guest.to_str().unwrap();
    for topology in ["py-kafka-word-count", "py-kafka-word-count-opaque"] {
        word_count_is_exact(guest, topology, "2500");
        word_count_is_exact(guest, topology, "397");
    }
}

#[test]
fn a_failed_batch_of_the_opaque_spout_is_emitted_afresh_from_what_was_committed_and_the_counts_are_exact() {
    let corpus = corpus_topic();
    let (_dir, data) = data_dir();
    let bootstrap = shared_kafka().bootstrap();
    let output = weir_ok(&run_args("kafka-flaky-opaque", &data, &bootstrap, &["--batch-size", "1000"]));
    let log = text(&output);
    assert!(log.contains("txid 3"), "txid 3 failed and was replayed:\n{log}");
    assert_counts_eq(&counts(&data, "kafka-flaky-opaque"), &corpus.truth);
}

/// Runs `topology` expecting it to fail; its log.
fn run_error(topology: &str, kafka: &str, extra: &[&str]) -> String {
    let (_dir, data) = data_dir();
    fails(&run_args(topology, &data, kafka, extra))
}

/// Runs `weir` with `args` expecting it to fail; its log.
fn fails(args: &[&str]) -> String {
    let output = weir_output(args);
    assert!(!output.status.success(), "{args:?} should fail:\n{}", text(&output));
    text(&output)
}

#[test]
fn a_topic_or_partition_that_does_not_exist_is_named() {
    corpus_topic();
    let bootstrap = shared_kafka().bootstrap();
    let e = run_error("kafka-missing-topic", &bootstrap, &[]);
    assert!(e.contains("Kafka topic no-such-topic does not exist on the brokers at 127.0.0.1:"), "{e}");
    let e = run_error("kafka-missing-partition", &bootstrap, &[]);
    assert!(e.contains("Kafka topic corpus has no partition 9 (it has partitions 0 to 3)"), "{e}");
}

#[test]
fn brokers_out_of_reach_at_start_are_retried_then_the_run_halts_naming_them() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bootstrap = format!("127.0.0.1:{port}");
    let e = run_error("kafka-word-count", &bootstrap, &["--kafka-retry-ms", "1500"]);
    assert!(e.contains(&format!("the Kafka brokers at {bootstrap} have been out of reach for")), "{e}");
    assert!(e.contains("topology kafka-word-count reads Kafka topic corpus"), "{e}");
}

#[test]
fn a_kafka_topology_needs_brokers_and_takes_no_input() {
    let (_dir, data) = data_dir();
    let args = run_topology_args(TEST_TOPOLOGIES, "kafka-word-count", &data, &[]);
    let e = text(&weir_output(&args));
    assert!(e.contains("topology kafka-word-count reads Kafka topic corpus: give the brokers with --kafka"), "{e}");
    let args = run_topology_args(TEST_TOPOLOGIES, "kafka-sink", &data, &["--kafka", "127.0.0.1:1", "--input", "/x"]);
    let e = text(&weir_output(&args));
    assert!(e.contains("topology kafka-sink reads Kafka topic clicks: --input /x is not used"), "{e}");
    let e = text(&weir_output(&run_topology_args(TEST_TOPOLOGIES, "kafka-word-count", &data, &["--kafka", "nohost"])));
    assert!(e.contains("Kafka broker \"nohost\" is not HOST:PORT"), "{e}");
}

#[test]
fn json_records_become_fields_with_their_key_partition_offset_timestamp_and_headers() {
    let broker = shared_kafka();
    broker.create_topic("events", 2);
    let events = |user: &str, n: i64| format!(r#"{{"user":"{user}","n":{n}}}"#).into_bytes();
    broker.produce("events", 0, &[events("ann", 1), events("bob", 2), events("ann", 3), events("cy", 4)], Some(b"k0"));
    broker.produce("events", 1, &[events("bob", 10), events("ann", 20)], Some(b"k1"));
    let (_dir, data) = data_dir();
    let bootstrap = broker.bootstrap();
    let args = run_args("kafka-events", &data, &bootstrap, &[]);
    weir_ok(&args);
    let scan = |state| scan(&data, "kafka-events", state);
    let entry = |key: serde_json::Value, value: i64| serde_json::json!({"key": [key], "value": value});
    assert_eq!(scan("totals"), [entry("ann".into(), 24), entry("bob".into(), 12), entry("cy".into(), 4)]);
    assert_eq!(scan("per-partition"), [entry(0.into(), 4), entry(1.into(), 2)]);
    assert_eq!(scan("last-offset"), [serde_json::json!({"key": [], "value": 3})]);
    assert_eq!(scan("latest"), [serde_json::json!({"key": [], "value": 1_700_000_000_000i64})]);
    let keys = scan("keys");
    assert_eq!(keys.len(), 2, "{keys:?}");
    let shown = serde_json::to_string(&keys).unwrap();
    assert!(shown.contains(r#"{\"source\":\"test\"}"#), "{shown}");
    // A value that is not the declared JSON halts at once, naming it.
    let committed = raw_scan(&data, "kafka-events", "totals");
    broker.produce("events", 0, &[b"not json".to_vec()], None);
    let e = failed_stderr(&weir_output(&args));
    let want = "the record at offset 4 of partition 0 of Kafka topic events cannot become a tuple: the value is not \
                a JSON object";
    assert!(e.contains(want), "{e}");
    assert!(!e.contains("retrying in"), "a record that cannot be read was retried: {e}");
    assert!(raw_scan(&data, "kafka-events", "totals") == committed, "committed state changed");
}

#[test]
fn a_record_that_is_not_utf8_halts_naming_topic_partition_and_offset_and_commits_nothing_of_its_batch() {
    let broker = shared_kafka();
    broker.create_topic("poison", 1);
    let mut values: Vec<Vec<u8>> = (0..30).map(|i| format!("w{i} x").into_bytes()).collect();
    values[17] = b"bad \xff value".to_vec();
    broker.produce("poison", 0, &values, None);
    let (_dir, data) = data_dir();
    let bootstrap = broker.bootstrap();
    let args = run_args("kafka-poison", &data, &bootstrap, &["--batch-size", "10", "--max-pending", "1"]);
    let log = fails(&args);
    assert!(
        log.contains("the record at offset 17 of partition 0 of Kafka topic poison cannot become a tuple"),
        "{log}"
    );
    assert!(log.contains("the value is not UTF-8 text for field sentence"), "{log}");
    // The batches before it are committed; its own was never recorded.
    assert_eq!(last_committed(&data, "kafka-poison"), 1);
    assert_eq!(counts(&data, "kafka-poison")["x"], 10);
    // The same again: the batch is refused before it is recorded.
    let again = text(&weir_output(&args));
    assert!(again.contains("offset 17 of partition 0 of Kafka topic poison"), "{again}");
    assert_eq!(last_committed(&data, "kafka-poison"), 1);
}

#[test]
fn a_batch_recorded_but_not_committed_whose_records_were_deleted_halts_its_replay_and_commits_nothing() {
    // A broker of its own: the topic is deleted under it.
    let broker = KafkaBroker::start();
    broker.create_topic("deletable", 1);
    let lines: Vec<Vec<u8>> = sentences(200).into_iter().map(String::into_bytes).collect();
    broker.produce("deletable", 0, &lines, None);
    let (_dir, data) = data_dir();
    let bootstrap = broker.bootstrap();
    let args = run_args("kafka-fatal-at-3", &data, &bootstrap, &["--batch-size", "10", "--max-pending", "1"]);
    let first = weir_output(&args);
    assert!(!first.status.success(), "{}", text(&first));
    assert_eq!(last_committed(&data, "kafka-fatal-at-3"), 2);
    // The topic deleted and made again (tansu's sqlite storage has no
    // DeleteRecords): the recorded offsets are gone.
    broker.delete_topic("deletable");
    broker.create_topic("deletable", 1);
    broker.produce("deletable", 0, &lines[..15], None);
    let log = fails(&args);
    assert!(
        log.contains(
            "Kafka topic deletable no longer holds the records recorded in partition 0: offsets 20..=29 held 10 \
             records, 0 of them are left"
        ),
        "{log}"
    );
    assert!(log.contains("topology kafka-fatal-at-3 halts at txid 3, which is not committed"), "{log}");
    assert_eq!(last_committed(&data, "kafka-fatal-at-3"), 2);
}

/// `n` clicks over 40 pages, drawn from `seed`.
fn clicks(n: usize, seed: u64) -> Vec<String> {
    let mut rng = Lcg(seed);
    (0..n).map(|_| format!("/page/{}", rng.below(40))).collect()
}

fn truth(clicks: &[String]) -> BTreeMap<String, i64> {
    count_words(clicks)
}

/// A record the sink wrote: its batch's txid, its place, and its value.
struct Written {
    sink: String,
    txid: u64,
    n: u32,
    value: Vec<u8>,
}

fn written(broker: &KafkaBroker, topic: &str) -> Vec<Written> {
    let header = |r: &rskafka::record::Record, name: &str| String::from_utf8(r.headers[name].clone()).unwrap();
    broker
        .all_records(topic)
        .into_values()
        .flatten()
        .map(|r| Written {
            sink: header(&r.record, "weir-sink"),
            txid: header(&r.record, "weir-txid").parse().unwrap(),
            n: header(&r.record, "weir-index").parse().unwrap(),
            value: r.record.value.clone().unwrap(),
        })
        .collect()
}

/// Checks that `written` holds each committed batch's output once and only
/// once: every txid from 1 to the last committed, each with records 0..k
/// and no other, each page's counts rising batch by batch to its exact
/// final count, which is also what the state holds.
fn assert_exactly_once(written: &[Written], data: &Path, topology: &str, clicks: &[String]) {
    assert_written_once(written, &counts(data, topology), last_committed(data, topology), topology, clicks);
}

/// [`assert_exactly_once`] given the state's counts and the last committed
/// txid (of a served topology, through its API).
fn assert_written_once(
    written: &[Written],
    counts: &BTreeMap<String, i64>,
    last: u64,
    topology: &str,
    clicks: &[String],
) {
    assert_counts_eq(counts, &truth(clicks));
    for record in written {
        assert_eq!(record.sink, format!("{topology}/page-counts"));
    }
    assert_output_once(written.iter().map(|w| (w.txid, w.n, w.value.as_slice())), last, &truth(clicks));
}

/// A broker of its own holding `clicks` in 3-partition topic `clicks`, and
/// an empty 4-partition `page-counts`.
fn broker_with(clicks: &[String]) -> KafkaBroker {
    let broker = KafkaBroker::start();
    broker.create_topic("clicks", 3);
    broker.produce_lines("clicks", 3, clicks);
    broker.create_topic("page-counts", 4);
    broker
}

#[test]
fn the_sink_writes_each_committed_batch_once_and_a_restart_skips_what_the_partitions_tails_hold() {
    let clicks = clicks(600, 7);
    let broker = broker_with(&clicks);
    let (_dir, data) = data_dir();
    let bootstrap = broker.bootstrap();
    let args = run_args("kafka-sink", &data, &bootstrap, &["--batch-size", "20", "--max-pending", "2"]);
    let mut restarts = Restarts::new(args, &data, "kafka-sink");
    // Written and acknowledged, not yet out of the outbox: the restart
    // reads back the partitions' tails and writes none of it again.
    restarts.kill_at(Point::AfterPublish, 3);
    restarts.kill_at(Point::AfterPublish, 6);
    // Committed, its output in the outbox and not written.
    restarts.kill_at(Point::AfterCommit, 8);
    let before = written(&broker, "page-counts");
    assert!(before.iter().any(|w| w.txid == 6) && !before.iter().any(|w| w.txid == 8));
    restarts.finish();
    assert_exactly_once(&written(&broker, "page-counts"), &data, "kafka-sink", &clicks);
}

#[test]
fn a_sink_topic_that_does_not_exist_halts_the_run_naming_it_and_keeps_the_output() {
    let clicks = clicks(100, 3);
    let broker = KafkaBroker::start();
    broker.create_topic("clicks", 1);
    broker.produce_lines("clicks", 1, &clicks);
    let (_dir, data) = data_dir();
    let bootstrap = broker.bootstrap();
    let args = run_args("kafka-sink", &data, &bootstrap, &["--batch-size", "50", "--kafka-retry-ms", "1000"]);
    let log = fails(&args);
    assert!(log.contains("Kafka topic page-counts does not exist"), "{log}");
    assert!(log.contains("its output stays in the outbox"), "{log}");
    // Made now, the topic gets the kept output on the next start.
    broker.create_topic("page-counts", 2);
    weir_ok(&args);
    assert_exactly_once(&written(&broker, "page-counts"), &data, "kafka-sink", &clicks);
}

fn survives_kills(topology: &str, seed: u64) {
    let clicks = clicks(1500, seed);
    let broker = broker_with(&clicks);
    let (_dir, data) = data_dir();
    let bootstrap = broker.bootstrap();
    let args = run_args(topology, &data, &bootstrap, &["--batch-size", "10", "--max-pending", "4"]);
    let mut restarts = Restarts::new(args, &data, topology);
    restarts.kill_seeded(seed, 10, 4);
    restarts.finish();
    let moments = restarts.moments();
    let written = written(&broker, "page-counts");
    std::panic::catch_unwind(|| assert_exactly_once(&written, &data, topology, &clicks))
        .unwrap_or_else(|_| panic!("{topology}: killed at {moments}"));
}

#[test]
fn the_transactional_spout_and_the_sink_killed_at_ten_seeded_moments_are_exact_and_written_once() {
    survives_kills("kafka-sink", 11);
}

#[test]
fn the_opaque_spout_and_the_sink_killed_at_ten_seeded_moments_are_exact_and_written_once() {
    survives_kills("kafka-sink-opaque", 12);
}

#[test]
fn the_broker_killed_and_restarted_twice_mid_run_is_found_again_and_the_output_is_exact() {
    let clicks = clicks(3000, 5);
    let mut broker = broker_with(&clicks);
    let (_dir, data) = data_dir();
    let bootstrap = broker.bootstrap();
    let args = run_args("kafka-sink", &data, &bootstrap, &["--batch-size", "5", "--kafka-retry-ms", "60000"]);
    let (mut child, mut log) = LogReader::start(&args, "weir=debug");
    for txid in [20, 60] {
        log.until(&format!("committed txid {txid} "));
        broker.kill();
        // The spout or the sink, whichever asks first, finds it gone.
        log.until("retrying in");
        std::thread::sleep(Duration::from_millis(1000));
        broker.restart();
    }
    let (status, text) = log.finish(&mut child);
    assert!(status.success(), "{text}");
    assert!(text.contains("retrying in"), "{text}");
    assert_exactly_once(&written(&broker, "page-counts"), &data, "kafka-sink", &clicks);
}

#[test]
fn weir_publish_creates_the_topic_when_asked_and_spreads_lines_round_robin_or_by_key() {
    let broker = shared_kafka();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lines.txt");
    let lines: Vec<String> = (0..30).map(|i| format!("user-{} clicked {i}", i % 5)).collect();
    write_lines(&file, &lines);
    let bootstrap = broker.bootstrap();
    let file = file.to_str().unwrap();
    let publish = ["publish", "--kafka", &bootstrap, "--topic", "published", "--create", "--partitions", "3", file];
    let out = text(&weir_ok(&publish));
    assert!(out.contains("published 30 lines to Kafka topic published over 3 partitions"), "{out}");
    let held = broker.all_records("published");
    let values = |p: i32| -> Vec<String> {
        held[&p].iter().map(|r| String::from_utf8(r.record.value.clone().unwrap()).unwrap()).collect()
    };
    for p in 0..3 {
        let want: Vec<String> = lines.iter().skip(p as usize).step_by(3).cloned().collect();
        assert_eq!(values(p), want, "partition {p}");
    }
    // By key: every line of a user lands in one partition.
    let by_key = ["publish", "--kafka", &bootstrap, "--topic", "published", "--key", "word:1", file];
    weir_ok(&by_key);
    let held = broker.all_records("published");
    for user in 0..5 {
        let name = format!("user-{user} ");
        let holding: Vec<i32> = (0..3)
            .filter(|p| {
                held[p].iter().skip(10).any(|r| r.record.value.as_deref().unwrap().starts_with(name.as_bytes()))
            })
            .collect();
        assert_eq!(holding.len(), 1, "{name} is in partitions {holding:?}");
    }
    let missing = ["publish", "--kafka", &bootstrap, "--topic", "nowhere", file];
    let e = text(&weir_output(&missing));
    assert!(e.contains("Kafka topic nowhere does not exist"), "{e}");
}

#[test]
fn a_served_topology_follows_the_topic_as_it_grows_and_its_lag_returns_to_zero() {
    let broker = shared_kafka();
    broker.create_topic("follow", 4);
    let dir = tempfile::tempdir().unwrap();
    let bootstrap = broker.bootstrap();
    let server = common::server::Server::start_with(dir.path(), &["--kafka", &bootstrap]);
    let lines = sentences(20_000);
    broker.produce_lines("follow", 4, &lines[..12_000]);
    let bytes = common::server::bundle(dir.path(), TEST_TOPOLOGIES, "t.weir");
    let (status, body) = server.api("POST", "/v1/topologies?topology=kafka-follow", &bytes);
    assert_eq!(status, 201, "{body}");
    // Every status's lag is its partitions' lags added up.
    let lag_adds_up = |s: &serde_json::Value| lag_adds_up(s, 4);
    server.wait_for_status("kafka-follow", |s| lag_adds_up(s) && s["tuples"] == 12_000 && s["spout_lag"] == 0);
    // The publisher appends more, in steps: the served topology keeps up.
    for chunk in lines[12_000..].chunks(2_000) {
        broker.produce_lines("follow", 4, chunk);
    }
    let status =
        server.wait_for_status("kafka-follow", |s| lag_adds_up(s) && s["tuples"] == 20_000 && s["spout_lag"] == 0);
    let partitions: Vec<String> = (0..4).map(|p| format!("follow-{p}")).collect();
    server.assert_caught_up("kafka-follow", &status, &partitions);
    assert_counts_eq(&server.counts("kafka-follow"), &count_words(&lines));
}

/// A partition added to the topic a served topology reads is found and
/// read from its first record: records produced into it alone (the old
/// partitions stay quiet) are counted and written to the sink once.
fn a_partition_added_while_served_is_read(topology: &str, seed: u64) {
    let clicks = clicks(500, seed);
    let broker = KafkaBroker::start();
    broker.create_topic("clicks", 2);
    broker.produce_lines("clicks", 2, &clicks[..300]);
    broker.create_topic("page-counts", 2);
    let dir = tempfile::tempdir().unwrap();
    let bootstrap = broker.bootstrap();
    let server = common::server::Server::start_with(dir.path(), &["--kafka", &bootstrap, "--batch-size", "40"]);
    let bytes = common::server::bundle(dir.path(), TEST_TOPOLOGIES, "t.weir");
    let (status, body) = server.api("POST", &format!("/v1/topologies?topology={topology}"), &bytes);
    assert_eq!(status, 201, "{body}");
    server.wait_for_status(topology, |s| s["tuples"] == 300 && s["spout_lag"] == 0 && lag_adds_up(s, 2));
    assert_eq!(broker.add_partition("clicks"), 2);
    let values: Vec<Vec<u8>> = clicks[300..].iter().map(|c| c.clone().into_bytes()).collect();
    let offsets = broker.produce("clicks", 2, &values, None);
    assert_eq!(offsets.first(), Some(&0));
    let status = server.wait_for_status(topology, |s| s["tuples"] == 500 && s["spout_lag"] == 0 && lag_adds_up(s, 3));
    assert_eq!(status["state"], "running", "{status}");
    let zero: serde_json::Value = (0..3).map(|p| (format!("clicks-{p}"), serde_json::json!(0))).collect();
    assert_eq!(status["spout_lag_partitions"], zero, "{status}");
    let last = status["last_committed"].as_u64().unwrap();
    // The sink writes a batch's output after its commit.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let written = loop {
        let written = written(&broker, "page-counts");
        if written.iter().any(|w| w.txid == last) || std::time::Instant::now() > deadline {
            break written;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_written_once(&written, &server.counts(topology), last, topology, &clicks);
}

#[test]
fn a_partition_added_to_the_topic_of_a_served_transactional_topology_is_read_once() {
    a_partition_added_while_served_is_read("kafka-sink", 21);
}

#[test]
fn a_partition_added_to_the_topic_of_a_served_opaque_topology_is_read_once() {
    a_partition_added_while_served_is_read("kafka-sink-opaque", 22);
}

#[test]
fn a_scram_login_reads_a_broker_that_asks_for_one_and_a_wrong_password_is_refused() {
    // A broker of its own: made, filled and given a user before it asks
    // every client to log in (the tests' own client does not).
    let mut broker = KafkaBroker::start();
    broker.create_topic("corpus", 2);
    let lines = sentences(2_000);
    broker.produce_lines("corpus", 2, &lines);
    broker.create_scram_user("ann", "s3cret-pass");
    broker.restart_with(&["--authentication"]);
    let dir = tempfile::tempdir().unwrap();
    let bootstrap = broker.bootstrap();
    let login = |password: &str, data: &Path| {
        let file = dir.path().join("password");
        std::fs::write(&file, password).unwrap();
        let args = run_args(
            "kafka-word-count",
            data,
            &bootstrap,
            // A login that takes longer than a connection may (a debug
            // build's SCRAM on a busy machine) is tried again.
            &["--kafka-sasl-mechanism", "SCRAM-SHA-256", "--kafka-username", "ann", "--kafka-retry-ms", "60000"],
        );
        let mut args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        args.extend(["--kafka-password-file".to_owned(), file.to_str().unwrap().to_owned()]);
        weir_output(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (_wrong_dir, wrong) = data_dir();
    let refused = login("not-the-password", &wrong);
    let log = text(&refused);
    assert!(!refused.status.success(), "{log}");
    assert!(log.contains("refused the login"), "{log}");
    assert!(!log.contains("not-the-password"), "the password is never shown: {log}");
    assert_eq!(last_committed(&wrong, "kafka-word-count"), 0);
    let (_data_dir, data) = data_dir();
    let output = login("s3cret-pass", &data);
    assert!(output.status.success(), "{}", text(&output));
    assert_counts_eq(&counts(&data, "kafka-word-count"), &count_words(&lines));
    // No login at all: the broker answers nothing but a login.
    let (_none_dir, none) = data_dir();
    let e = fails(&run_args("kafka-word-count", &none, &bootstrap, &["--kafka-retry-ms", "2000"]));
    assert!(e.contains(&format!("Kafka brokers at {bootstrap}")), "{e}");
}

#[test]
fn the_benchmarks_kafka_word_count_example_is_exact() {
    word_count_is_exact(WORD_COUNT_KAFKA, "word-count", "2500");
}

#[test]
fn the_clickstream_kafka_example_counts_pages_and_users_and_writes_each_batch_once() {
    let mut rng = Lcg(11);
    let clicks: Vec<(String, String)> =
        (0..400).map(|_| (format!("u{}", rng.below(25)), format!("/page/{}", rng.below(30)))).collect();
    let lines: Vec<String> =
        clicks.iter().map(|(user, page)| serde_json::json!({ "user": user, "page": page }).to_string()).collect();
    let broker = KafkaBroker::start();
    broker.create_topic("clicks", 3);
    broker.produce_lines("clicks", 3, &lines);
    broker.create_topic("page-counts", 4);
    let (_dir, data) = data_dir();
    let bootstrap = broker.bootstrap();
    let args =
        run_topology_args(CLICKSTREAM_KAFKA, "clickstream", &data, &["--kafka", &bootstrap, "--batch-size", "40"]);
    weir_ok(&args);
    let pages: Vec<String> = clicks.iter().map(|(_, page)| page.clone()).collect();
    let users: Vec<String> = clicks.iter().map(|(user, _)| user.clone()).collect();
    let state = |name| -> BTreeMap<String, i64> {
        scan(&data, "clickstream", name)
            .into_iter()
            .map(|entry| (entry["key"][0].as_str().unwrap().to_owned(), entry["value"].as_i64().unwrap()))
            .collect()
    };
    assert_counts_eq(&state("per-page"), &truth(&pages));
    assert_counts_eq(&state("per-user"), &truth(&users));
    // Each page's last count written to the sink is its final count, and
    // no batch's record is written twice.
    let written = written(&broker, "page-counts");
    let mut ids = BTreeSet::new();
    let mut last: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    for record in &written {
        assert!(ids.insert((record.txid, record.n)), "txid {} record {} written twice", record.txid, record.n);
        let json: serde_json::Value = serde_json::from_slice(&record.value).unwrap();
        let page = json["page"].as_str().unwrap().to_owned();
        let update = (record.txid, json["count"].as_i64().unwrap());
        let entry = last.entry(page).or_insert(update);
        *entry = (*entry).max(update);
    }
    let seen: BTreeMap<String, i64> = last.into_iter().map(|(page, (_, count))| (page, count)).collect();
    assert_counts_eq(&seen, &truth(&pages));
}
