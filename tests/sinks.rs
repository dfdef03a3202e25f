//! Sinks to NATS JetStream against a real `nats-server` (one per test,
//! started by the test), the real `weir` binary and a real Wasm guest: a
//! committed batch's output is in the output stream once and only once,
//! however often `weir run` or the server is killed.

mod common;

use common::kill::{Point, Restarts};
use common::nats::{LogReader, NatsServer, assert_output_once};
use common::server::{Server, bundle};
use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

/// Pages clicked, drawn from a seeded generator over 25 pages.
fn clicks(n: usize, seed: u64) -> Vec<String> {
    let mut rng = common::kill::Lcg(seed);
    (0..n).map(|_| format!("page-{}", rng.below(25))).collect()
}

fn truth(clicks: &[String]) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for page in clicks {
        *counts.entry(page.clone()).or_insert(0) += 1;
    }
    counts
}

/// A server holding `clicks` in stream `clicks` (subjects clicks.0 to
/// clicks.3) and an empty output stream `out` taking `out_subjects`.
fn server_with(clicks: &[String], out_subjects: &[&str]) -> NatsServer {
    let nats = NatsServer::start();
    nats.publish("clicks", "clicks.{0..3}", clicks);
    if !out_subjects.is_empty() {
        nats.create_stream("out", out_subjects);
    }
    nats
}

fn run_args<'a>(topology: &'a str, data: &'a Path, nats: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    run_topology_args(TEST_TOPOLOGIES, topology, data, &[&["--nats", nats, "--nats-retry-ms", "20000"], extra].concat())
}

/// One message of the output stream: its id's parts and its payload.
#[derive(Debug)]
struct Published {
    topology: String,
    sink: String,
    txid: u64,
    n: u32,
    payload: Vec<u8>,
}

/// Every message stream `out` holds, in stream order.
fn read_back(nats: &NatsServer) -> Vec<Published> {
    let message = |(id, payload): (String, Vec<u8>)| {
        let parts: Vec<&str> = id.split('/').collect();
        assert_eq!(parts.len(), 4, "message id {id:?}");
        Published {
            topology: parts[0].to_owned(),
            sink: parts[1].to_owned(),
            txid: parts[2].parse().unwrap(),
            n: parts[3].parse().unwrap(),
            payload,
        }
    };
    nats.messages("out").into_iter().map(message).collect()
}

/// Checks that `published` holds each committed batch's output once and
/// only once: every txid from 1 to the last committed, each with messages
/// 0..k and no other, each page's counts rising batch by batch to its
/// exact final count, which is also what the state holds.
fn assert_exactly_once(published: &[Published], data: &Path, topology: &str, clicks: &[String]) {
    assert_counts_eq(&counts(data, topology), &truth(clicks));
    assert_published_once(published, last_committed(data, topology), topology, clicks);
}

/// The checks of [`assert_exactly_once`] on the output alone, `last` the
/// last committed txid.
fn assert_published_once(published: &[Published], last: u64, topology: &str, clicks: &[String]) {
    for message in published {
        assert_eq!((message.topology.as_str(), message.sink.as_str()), (topology, "page-counts"));
    }
    assert_output_once(published.iter().map(|m| (m.txid, m.n, m.payload.as_slice())), last, &truth(clicks));
}

fn survives_kills(topology: &str, seed: u64) {
    let clicks = clicks(3000, seed);
    let nats = server_with(&clicks, &["page-counts"]);
    let (_dir, data) = data_dir();
    let url = nats.url();
    let args = run_args(topology, &data, &url, &["--batch-size", "10", "--max-pending", "4"]);
    let mut restarts = Restarts::new(args, &data, topology);
    restarts.kill_seeded(seed, 10, 4);
    // Committed, its output in the outbox and not published.
    let txid = restarts.last_committed() + 2;
    restarts.kill_at(Point::AfterCommit, txid);
    // Published and acknowledged, not yet out of the outbox: the restart
    // publishes the same ids again, and the stream drops them.
    for _ in 0..2 {
        let txid = restarts.last_committed() + 1;
        restarts.kill_at(Point::AfterPublish, txid);
    }
    restarts.finish();
    assert!(last_committed(&data, topology) > restarts.kills.last().unwrap().txid);
    assert_exactly_once(&read_back(&nats), &data, topology, &clicks);
}

#[test]
fn a_transactional_topology_killed_at_thirteen_moments_publishes_each_committed_batch_once() {
    survives_kills("jetstream-sink", 21);
}

/// A data dir written when a sink's outbox kept one record per message
/// (key: txid and place; value: the payload) still publishes what it
/// holds, under the same ids, once: the outbox of a run killed after a
/// commit is rewritten into that layout before the restart.
#[test]
fn an_outbox_of_the_older_layout_one_record_per_message_is_published_once_after_a_restart() {
    let topology = "jetstream-sink";
    let clicks = clicks(600, 23);
    let nats = server_with(&clicks, &["page-counts"]);
    let (_dir, data) = data_dir();
    let url = nats.url();
    let args = run_args(topology, &data, &url, &["--batch-size", "10"]);
    let mut restarts = Restarts::new(args, &data, topology);
    // Committed, its output in the outbox and not published.
    restarts.kill_at(Point::AfterCommit, 6);
    let messages = to_one_record_per_message(&data, topology);
    assert!(messages > 0, "the outbox holds txid 6's output");
    restarts.finish();
    assert_exactly_once(&read_back(&nats), &data, topology, &clicks);
}

/// Rewrites every sink outbox of `topology` in `data` from one record per
/// batch (key: txid; value: layout 1, a count, each message's length and
/// bytes) into one record per message; returns how many messages it wrote.
fn to_one_record_per_message(data: &Path, topology: &str) -> usize {
    use redb::{ReadableDatabase as _, ReadableTable as _, TableDefinition, TableHandle as _};
    let db = redb::Database::open(data.join("weir.redb")).unwrap();
    let prefix = format!("records/{topology}/sink/");
    let names: Vec<String> = db
        .begin_read()
        .unwrap()
        .list_tables()
        .unwrap()
        .map(|t| t.name().to_owned())
        .filter(|name| name.starts_with(&prefix))
        .collect();
    assert!(!names.is_empty(), "no outbox table under {prefix}");
    let txn = db.begin_write().unwrap();
    let mut written = 0;
    for name in &names {
        let mut table = txn.open_table(TableDefinition::<&[u8], &[u8]>::new(name)).unwrap();
        let records: Vec<(Vec<u8>, Vec<u8>)> = table
            .iter()
            .unwrap()
            .map(|entry| {
                let (key, value) = entry.unwrap();
                (key.value().to_vec(), value.value().to_vec())
            })
            .collect();
        for (key, value) in records {
            assert_eq!((key.len(), value[0]), (8, 1), "a record per batch, layout 1");
            table.remove(key.as_slice()).unwrap();
            let count = u32::from_le_bytes(value[1..5].try_into().unwrap());
            let mut at = 5;
            for place in 0..count {
                let len = u32::from_le_bytes(value[at..at + 4].try_into().unwrap()) as usize;
                at += 4;
                let old = [key.as_slice(), &place.to_be_bytes()].concat();
                table.insert(old.as_slice(), &value[at..at + len]).unwrap();
                at += len;
                written += 1;
            }
            assert_eq!(at, value.len());
        }
    }
    txn.commit().unwrap();
    written
}

/// An opaque spout's replay may emit another batch than the failed
/// attempt, but only the attempt that commits reaches the outbox: the
/// promise holds as for a transactional one.
#[test]
fn an_opaque_topology_killed_at_thirteen_moments_publishes_each_committed_batch_once() {
    survives_kills("jetstream-sink-opaque", 22);
}

#[test]
fn the_server_killed_and_restarted_twice_mid_run_leaves_each_committed_batch_published_once() {
    // Enough batches that the run outlasts two crashes, its commits grouped.
    let clicks = clicks(20_000, 23);
    let mut nats = server_with(&clicks, &["page-counts"]);
    let (_dir, data) = data_dir();
    let url = nats.url();
    let args = run_args("jetstream-sink", &data, &url, &["--batch-size", "10"]);
    let (mut child, mut log) = LogReader::start(&args, "weir=debug");
    // Commits group: each crash comes after a commit that follows the
    // restart before it.
    for _ in 0..2 {
        log.until("committed txid ");
        nats.crash_under(&mut log);
        log.until("connected to the NATS server");
    }
    let (status, log) = log.finish(&mut child);
    assert!(status.success(), "{log}");
    assert!(last_committed(&data, "jetstream-sink") > 30, "{log}");
    assert_exactly_once(&read_back(&nats), &data, "jetstream-sink", &clicks);
}

#[test]
fn a_publish_refused_halts_naming_sink_subject_and_txid_and_keeps_the_output_for_the_next_start() {
    let clicks = clicks(200, 24);
    // No stream takes the sink's subject yet.
    let nats = server_with(&clicks, &[]);
    let (_dir, data) = data_dir();
    let url = nats.url();
    let args = run_args("jetstream-sink-raw", &data, &url, &["--batch-size", "10"]);
    let output = weir_output(&args);
    let log = text(&output);
    assert!(!output.status.success(), "{log}");
    assert!(
        log.contains(
            "topology jetstream-sink-raw halted: sink page-counts could not publish message 0 of txid 1 to subject \
             pages-seen: JetStream refused it, no stream takes the subject; the batch is committed and its output \
             stays in the outbox"
        ),
        "{log}"
    );
    // Committed in a group, or ahead of the acknowledgements in flight:
    // however many, their output waits in the outbox.
    assert!(last_committed(&data, "jetstream-sink-raw") >= 1);
    nats.create_stream("out", &["pages-seen"]);
    weir_ok(&args);
    let published = read_back(&nats);
    let last = last_committed(&data, "jetstream-sink-raw");
    assert!(last > 1);
    assert_eq!(published.first().map(|m| m.txid), Some(1), "txid 1's output, kept through the halt, goes first");
    // Raw payloads: each batch's pages, once each per batch.
    let mut per_batch: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for message in &published {
        per_batch.entry(message.txid).or_default().push(String::from_utf8(message.payload.clone()).unwrap());
    }
    assert_eq!(per_batch.keys().copied().collect::<Vec<_>>(), (1..=last).collect::<Vec<_>>());
    let distinct: usize = per_batch.values().map(|pages| pages.iter().collect::<BTreeSet<_>>().len()).sum();
    let all: usize = per_batch.values().map(Vec::len).sum();
    assert_eq!(distinct, all, "a page twice in one batch's output");
    assert_counts_eq(&counts(&data, "jetstream-sink-raw"), &truth(&clicks));
}

/// What JetStream gives past its duplicate window, measured: the outbox's
/// entries at the crash are published again, and nothing else. They are
/// the output acknowledged since the last commit made its removal durable
/// (with the output committed and not yet acknowledged): a run of txids
/// that holds the one killed after its publish, all committed at the crash.
#[test]
fn a_host_down_longer_than_the_duplicate_window_publishes_only_the_batches_in_the_outbox_again() {
    let clicks = clicks(800, 25);
    let nats = server_with(&clicks, &[]);
    let window = Duration::from_secs(1);
    let client = weir_io::nats::Nats::connect(&nats.config(), "test").unwrap();
    let config = async_nats::jetstream::stream::Config {
        name: "out".to_owned(),
        subjects: vec!["page-counts".to_owned()],
        storage: async_nats::jetstream::stream::StorageType::File,
        duplicate_window: window,
        ..Default::default()
    };
    client.runtime.block_on(client.jetstream.create_stream(config)).unwrap();
    let (_dir, data) = data_dir();
    let url = nats.url();
    let args = run_args("jetstream-sink", &data, &url, &["--batch-size", "10"]);
    let mut restarts = Restarts::new(args, &data, "jetstream-sink");
    restarts.kill_at(Point::AfterPublish, 3);
    let committed_at_crash = restarts.last_committed();
    std::thread::sleep(window * 3);
    restarts.finish();
    let published = read_back(&nats);
    let mut times: BTreeMap<(u64, u32), usize> = BTreeMap::new();
    for message in &published {
        *times.entry((message.txid, message.n)).or_default() += 1;
    }
    let twice: BTreeSet<u64> = times.iter().filter(|(_, k)| **k > 1).map(|((txid, _), _)| *txid).collect();
    let (first, last) = (*twice.first().unwrap_or(&0), *twice.last().unwrap_or(&0));
    assert!(twice.contains(&3), "txid 3, killed after its publish, is published again: {twice:?}");
    assert_eq!(twice, (first..=last).collect(), "one run of txids is published again");
    assert!(last <= committed_at_crash, "{twice:?} published again, {committed_at_crash} committed at the crash");
    assert!(times.values().all(|&k| k <= 2));
    let last = last_committed(&data, "jetstream-sink");
    let txids: BTreeSet<u64> = times.keys().map(|(txid, _)| *txid).collect();
    assert_eq!(txids, (1..=last).collect::<BTreeSet<_>>());
    assert_counts_eq(&counts(&data, "jetstream-sink"), &truth(&clicks));
}

#[test]
fn a_served_topology_publishes_through_its_sink_as_the_stream_grows() {
    let clicks = clicks(1000, 26);
    let nats = server_with(&clicks[..600], &["page-counts"]);
    let dir = tempfile::tempdir().unwrap();
    let url = nats.url();
    let server = Server::start_with(dir.path(), &["--nats", &url]);
    let bytes = bundle(dir.path(), TEST_TOPOLOGIES, "t.weir");
    let (status, body) = server.api("POST", "/v1/topologies?topology=jetstream-sink", &bytes);
    assert_eq!(status, 201, "{body}");
    server.wait_for_status("jetstream-sink", |s| s["tuples"] == 600 && s["spout_lag"] == 0);
    nats.publish("clicks", "clicks.{0..3}", &clicks[600..]);
    let status = server.wait_for_status("jetstream-sink", |s| s["tuples"] == 1000 && s["spout_lag"] == 0);
    assert_eq!(status["state"], "running", "{status}");
    let last = status["last_committed"].as_u64().unwrap();
    // The last batch's output is published just after its commit shows.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let published = loop {
        let published = read_back(&nats);
        if published.iter().any(|m| m.txid == last) {
            break published;
        }
        assert!(std::time::Instant::now() < deadline, "txid {last}'s output was not published within a minute");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_counts_eq(&server.counts("jetstream-sink"), &truth(&clicks));
    assert_published_once(&published, last, "jetstream-sink", &clicks);
}

/// A file spout needs no server; its sink does, and says so before
/// anything runs.
#[test]
fn a_sink_without_a_server_is_refused_before_anything_runs_naming_sink_and_subject() {
    let want = "topology file-sink: sink page-counts publishes to NATS JetStream subject page-counts: give the \
                server with --nats URL";
    let (dir, input, data) = input_and_data("pages.txt", "/a\n/b\n");
    let output =
        weir_output(&run_topology_args(TEST_TOPOLOGIES, "file-sink", &data, &["--input", input.to_str().unwrap()]));
    assert!(!output.status.success() && text(&output).contains(want), "{}", text(&output));
    assert!(!data.exists(), "a refused run leaves no data dir");
    let server = Server::start(dir.path());
    std::fs::create_dir_all(dir.path().join("in")).unwrap();
    std::fs::copy(&input, dir.path().join("in/pages.txt")).unwrap();
    let bytes = bundle(dir.path(), TEST_TOPOLOGIES, "t.weir");
    let (status, body) = server.api("POST", "/v1/topologies?topology=file-sink&input=in/pages.txt", &bytes);
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains(want), "{body}");
}

#[test]
fn a_batch_whose_output_would_pass_the_outbox_bound_halts_naming_the_sink_and_commits_nothing() {
    let nats = server_with(&[], &["page-counts"]);
    // Five batches of five pages, then one of ten pages of 300 bytes each.
    let mut pages: Vec<String> = (0..50).map(|i| format!("/p{}", i % 5)).collect();
    pages.extend((0..10).map(|i| format!("/{i}{}", "x".repeat(300))));
    let (_dir, input, data) = input_and_data("pages.txt", &(pages.join("\n") + "\n"));
    let url = nats.url();
    let extra = ["--input", input.to_str().unwrap(), "--nats", &url, "--batch-size", "10"];
    let bounded =
        run_topology_args(TEST_TOPOLOGIES, "file-sink", &data, &[&extra[..], &["--max-outbox-kib", "2"]].concat());
    let output = weir_output(&bounded);
    let log = text(&output);
    assert!(!output.status.success(), "{log}");
    assert!(
        log.contains("sink page-counts's outbox would hold") && log.contains("past --max-outbox-kib 2 (2048 bytes)"),
        "{log}"
    );
    // The batches before it committed and were published, once each.
    assert_eq!(last_committed(&data, "file-sink"), 5);
    let published = read_back(&nats);
    assert_eq!(published.iter().map(|m| m.txid).collect::<BTreeSet<_>>(), (1..=5).collect());
    assert_published_once(&published, 5, "file-sink", &pages[..50]);
    // A larger bound lets it through.
    weir_ok(&run_topology_args(
        TEST_TOPOLOGIES,
        "file-sink",
        &data,
        &[&extra[..], &["--max-outbox-kib", "64"]].concat(),
    ));
    assert_exactly_once(&read_back(&nats), &data, "file-sink", &pages);
}

#[test]
fn a_server_stopped_under_a_sink_halts_it_within_the_retry_budget_naming_it() {
    let mut nats = server_with(&[], &["page-counts"]);
    let pages: Vec<String> = (0..20_000).map(|i| format!("/p{}", i % 25)).collect();
    let (_dir, input, data) = input_and_data("pages.txt", &(pages.join("\n") + "\n"));
    let url = nats.url();
    let extra = ["--input", input.to_str().unwrap(), "--nats", &url, "--nats-retry-ms", "3000", "--batch-size", "5"];
    let args = run_topology_args(TEST_TOPOLOGIES, "file-sink", &data, &extra);
    let (mut child, mut log) = LogReader::start(&args, "weir=debug");
    log.until("committed txid 3 ");
    nats.kill();
    let stopped = std::time::Instant::now();
    let (status, log) = log.finish(&mut child);
    let took = stopped.elapsed();
    assert!(!status.success(), "{log}");
    assert!(log.contains("--nats-retry-ms 3000)") && log.contains("stays in the outbox"), "{log}");
    // Each acknowledgement once waited 10 s of its own past the budget.
    assert!(took < Duration::from_secs(8), "halted {took:?} after the server stopped:\n{log}");
    let committed = last_committed(&data, "file-sink") as usize;
    assert_counts_eq(&counts(&data, "file-sink"), &truth(&pages[..committed * 5]));
}

/// Batches with sink output commit in groups, their output sent after the
/// group's commit and acknowledged in flight while later groups commit; a
/// host killed after a batch's acknowledgements (later batches' output
/// still in flight) or after a commit (its output not yet sent) leaves
/// each committed batch's output in the stream once and only once.
#[test]
fn batches_with_sink_output_commit_in_groups_and_kills_mid_publish_leave_each_output_once() {
    let nats = server_with(&[], &["page-counts"]);
    let pages = clicks(20_000, 27);
    let (dir, input, data) = input_and_data("pages.txt", &(pages.join("\n") + "\n"));
    let report = dir.path().join("report.json");
    let url = nats.url();
    let extra = ["--input", input.to_str().unwrap(), "--nats", &url, "--batch-size", "10"];
    let extra = [&extra[..], &["--report-json", report.to_str().unwrap()]].concat();
    let args = run_topology_args(TEST_TOPOLOGIES, "file-sink", &data, &extra);
    let mut restarts = Restarts::new(args, &data, "file-sink");
    for _ in 0..2 {
        let txid = restarts.last_committed() + 7;
        restarts.kill_at(Point::AfterPublish, txid);
        let txid = restarts.last_committed() + 5;
        restarts.kill_at(Point::AfterCommit, txid);
    }
    let output = restarts.finish();
    assert!(output.status.success(), "{}", text(&output));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let figures = &report[0];
    let (batches, groups) = (figures["batches"].as_u64().unwrap(), figures["commit_groups"].as_u64().unwrap());
    assert!(batches > 100, "{figures}");
    assert!(groups < batches && figures["commit_group_max"].as_u64().unwrap() > 1, "{figures}");
    assert_eq!(last_committed(&data, "file-sink"), 2000);
    assert_exactly_once(&read_back(&nats), &data, "file-sink", &pages);
}
