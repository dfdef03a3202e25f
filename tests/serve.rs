//! `weir serve` through its HTTP API: a real server on a loopback port, real
//! bundles, a real redb file; the walk deploy -> status -> upgrade ->
//! restart -> stop -> delete, and the API's refusals.

mod common;

use common::server::{Server, TOKEN, bundle};
use common::*;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn write_lines(path: &PathBuf, lines: &[&str]) {
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn deploy_status_upgrade_restart_stop_delete() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    let input = dir.path().join("in/corpus.txt");
    let sentences = std::fs::read_to_string(&corpus_20k().path).unwrap();
    let lines: Vec<&str> = sentences.lines().collect();
    write_lines(&input, &lines[..10_000]);
    let word_count = bundle(dir.path(), WORD_COUNT, "wc.weir");

    let server = Server::start(dir.path());
    let (status, body) = server.api("POST", "/v1/topologies?input=in/corpus.txt", &word_count);
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["name"], "word-count");
    let status = server.wait_for_topology("word-count", 10);
    let counted = count_words(&lines[..10_000]);
    assert_counts_eq(&server.counts("word-count"), &counted);
    // The query stream `words` sums the counts of its arguments' words.
    let (status_code, answer) = server.api("POST", "/v1/topologies/word-count/queries/words", b"w1 w2 w1");
    assert_eq!(status_code, 200, "{answer}");
    assert_eq!(answer, serde_json::json!([[2 * counted["w1"] + counted["w2"]]]));
    let (status_code, _) = server.api("POST", "/v1/topologies/word-count/queries/nope", b"w1");
    assert_eq!(status_code, 400);
    assert!(status["operator_ms"]["split"].as_f64().is_some_and(|ms| ms > 0.0), "no time for split: {status}");
    assert_eq!(status["tuples"], 10_000);
    assert_eq!(status["spout_lag"], 0, "{status}");
    let (status, listed) = server.api("GET", "/v1/topologies", b"");
    assert_eq!((status, listed[0]["name"].as_str()), (200, Some("word-count")));

    // Upgrade at a batch boundary, state kept; then the rest of the input.
    let (status, body) = server.api("PUT", "/v1/topologies/word-count/bundle", &word_count);
    assert_eq!(status, 200, "{body}");
    write_lines(&input, &lines);
    server.wait_for_topology("word-count", 20);
    assert_counts_eq(&server.counts("word-count"), &corpus_20k().truth);

    // An upgrade that changes a state's kind is refused; nothing changes.
    let opaque = bundle(dir.path(), TEST_TOPOLOGIES, "variants.weir");
    let (status, body) = server.api("PUT", "/v1/topologies/word-count/bundle", &opaque);
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("changes topology word-count's states"), "{body}");

    // A crash of the server: the next one resumes, nothing lost or doubled.
    drop(server);
    let server = Server::start(dir.path());
    let resumed = server.wait_for_topology("word-count", 20);
    assert_eq!(resumed["state"], "running");
    let mut more = lines.clone();
    more.extend_from_slice(&lines[..1000]);
    write_lines(&input, &more);
    server.wait_for_topology("word-count", 21);
    let mut want = corpus_20k().truth.clone();
    for (word, n) in count_words(&lines[..1000]) {
        *want.get_mut(&word).unwrap() += n;
    }
    assert_counts_eq(&server.counts("word-count"), &want);

    let (status, body) = server.api("POST", "/v1/topologies/word-count/stop", b"");
    assert_eq!((status, body["state"].as_str()), (200, Some("stopped")), "{body}");
    let (status, body) = server.api("POST", "/v1/topologies/word-count/resume", b"");
    assert_eq!((status, body["state"].as_str()), (200, Some("running")), "{body}");
    let (status, body) = server.api("DELETE", "/v1/topologies/word-count", b"");
    assert_eq!(status, 400, "{body}");
    let (status, _) = server.api("DELETE", "/v1/topologies/word-count?state=drop", b"");
    assert_eq!(status, 204);
    let (_, listed) = server.api("GET", "/v1/topologies", b"");
    assert_eq!(listed, serde_json::json!([]));
    let (status, _) = server.api("GET", "/v1/topologies/word-count/states/counts", b"");
    assert_eq!(status, 404);
}

#[test]
fn the_api_refuses_what_it_should_and_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    std::fs::copy(&corpus_20k().path, dir.path().join("in/corpus.txt")).unwrap();
    let word_count = bundle(dir.path(), WORD_COUNT, "wc.weir");
    let server = Server::start(dir.path());

    // No token, or a wrong one: 401, and nothing changes or is revealed.
    for token in [None, Some("wrong-token")] {
        let (status, body) = server.http("POST", "/v1/topologies?input=in/corpus.txt", token, &word_count);
        assert_eq!(status, 401, "{body}");
        assert!(!body.contains("word-count"));
        let (status, _) = server.http("GET", "/v1/topologies", token, b"");
        assert_eq!(status, 401);
    }
    let (_, listed) = server.api("GET", "/v1/topologies", b"");
    assert_eq!(listed, serde_json::json!([]));
    assert_eq!(server.http("GET", "/health", None, b"").0, 200);

    // Too big, garbage, damaged, from the future: each refused with its reason.
    let (status, _) = server.http("POST", "/v1/topologies", Some(TOKEN), &vec![0u8; 2 << 20]);
    assert_eq!(status, 413);
    let mut flipped = word_count.clone();
    *flipped.last_mut().unwrap() ^= 0xff;
    let mut future = word_count.clone();
    let at = future.windows(19).position(|w| w == b"weir:topology@0.1.0").unwrap();
    future[at..at + 19].copy_from_slice(b"weir:topology@9.0.0");
    for (bytes, reason) in [
        (b"not a bundle".to_vec(), "is not a Weir bundle"),
        (flipped, "does not match its checksum"),
        (future, "it supports weir:topology@0.1.x"),
    ] {
        let (status, body) = server.api("POST", "/v1/topologies?topology=word-count", &bytes);
        assert_eq!(status, 400, "{body}");
        assert!(body["error"].as_str().unwrap().contains(reason), "{reason:?} missing from {body}");
    }
    let (status, body) = server.api("POST", "/v1/topologies?input=/etc/passwd", &word_count);
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("not under a directory this server allows"), "{body}");

    // Still serving: a good deploy goes through, and /metrics moves.
    let (status, body) = server.api("POST", "/v1/topologies?input=in/corpus.txt", &word_count);
    assert_eq!(status, 201, "{body}");
    server.wait_for_topology("word-count", 20);
    let (status, metrics) = server.http("GET", "/metrics", None, b"");
    assert_eq!(status, 200);
    let mut samples = BTreeMap::new();
    for line in metrics.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (name, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line:?}"));
        samples.insert(name.to_owned(), value.parse::<f64>().unwrap_or_else(|_| panic!("not a number: {line:?}")));
    }
    assert_eq!(samples["weir_last_committed_txid{topology=\"word-count\"}"], 20.0);
    assert_eq!(samples["weir_tuples_committed_total{topology=\"word-count\"}"], 20_000.0);
    assert_eq!(samples["weir_topology_up{topology=\"word-count\"}"], 1.0);
    assert!(samples["weir_operator_seconds_total{topology=\"word-count\",operator=\"split\"}"] > 0.0);
}

#[test]
fn serving_beyond_loopback_needs_a_token() {
    let output = weir_output(&["serve", "--data", "unused", "--listen", "0.0.0.0:0"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("refusing to listen on 0.0.0.0:0 without a token"));
}

#[test]
fn the_client_verbs_drive_a_server() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    std::fs::copy(&corpus_20k().path, dir.path().join("in/corpus.txt")).unwrap();
    let bundle_path = dir.path().join("wc.weir");
    weir_ok(&["bundle", WORD_COUNT, "-o", bundle_path.to_str().unwrap()]);
    let server = Server::start(dir.path());
    let url = server.url();
    let client = |args: &[&str]| {
        let output = weir().env("WEIR_TOKEN", TOKEN).env("WEIR_SERVER", &url).args(args).output().unwrap();
        assert!(output.status.success(), "weir {args:?}: {}", text(&output));
        String::from_utf8(output.stdout).unwrap()
    };
    let deployed =
        client(&["deploy", bundle_path.to_str().unwrap(), "--name", "word-count", "--input", "in/corpus.txt"]);
    assert!(deployed.contains("TOPOLOGY") && deployed.contains("word-count"), "{deployed}");
    server.wait_for_topology("word-count", 20);
    let table = client(&["ps"]);
    let row = table.lines().find(|l| l.starts_with("word-count")).unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("running") && row.contains(" 20 "), "{row}");
    let status: serde_json::Value = serde_json::from_str(&client(&["status", "word-count", "--json"])).unwrap();
    assert_eq!((status["last_committed"].as_u64(), status["tuples"].as_u64()), (Some(20), Some(20_000)));
    let got = client(&[
        "state",
        "get",
        "--server",
        &url,
        "--topology",
        "word-count",
        "--state",
        "counts",
        "--key",
        r#"["w1"]"#,
    ]);
    assert_eq!(got.trim(), format!(r#"{{"key":["w1"],"value":{}}}"#, corpus_20k().truth["w1"]));
    let answer =
        client(&["query", "--server", &url, "--topology", "word-count", "--query", "words", "--args", "w1 w2"]);
    let truth = &corpus_20k().truth;
    assert_eq!(answer.lines().last(), Some(format!("[[{}]]", truth["w1"] + truth["w2"]).as_str()), "{answer}");
    let scanned = client(&["state", "scan", "--server", &url, "--topology", "word-count", "--state", "counts"]);
    assert_eq!(scanned.lines().count(), corpus_20k().truth.len());
    assert!(client(&["stop", "word-count"]).contains("stopped"));
    assert!(client(&["resume", "word-count"]).contains("running"));
    assert!(client(&["upgrade", "word-count", bundle_path.to_str().unwrap()]).contains("running"));
    assert!(client(&["delete", "word-count", "--keep-state"]).contains("kept its state"));
    assert!(!client(&["ps"]).contains("word-count"));

    let denied = weir().env("WEIR_SERVER", &url).env("WEIR_TOKEN", "wrong").args(["ps"]).output().unwrap();
    assert!(!denied.status.success());
    assert!(String::from_utf8_lossy(&denied.stderr).contains("the server answered 401"), "{}", text(&denied));
}

#[test]
fn logs_show_what_guests_wrote_most_recent_first() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    std::fs::copy(&corpus_20k().path, dir.path().join("in/corpus.txt")).unwrap();
    let bundle_path = dir.path().join("variants.weir");
    weir_ok(&["bundle", TEST_TOPOLOGIES, "-o", bundle_path.to_str().unwrap()]);
    let server = Server::start(dir.path());
    let bundle = std::fs::read(&bundle_path).unwrap();
    let (status, body) = server.api("POST", "/v1/topologies?topology=chatty-word-count&input=in/corpus.txt", &bundle);
    assert_eq!(status, 201, "{body}");
    server.wait_for_topology("chatty-word-count", 20);
    let url = server.url();
    let output = weir()
        .env("WEIR_TOKEN", TOKEN)
        .env("WEIR_SERVER", &url)
        .args(["logs", "chatty-word-count", "--lines", "2"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let lines: Vec<String> = String::from_utf8(output.stdout).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(lines, ["[split] stderr: split warns about txid 20", "[split] stdout: split starts txid 20"]);
}

#[test]
fn sigterm_with_a_blocked_guest_exits_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    let input = dir.path().join("in/input.txt");
    let sentences = std::fs::read_to_string(&corpus_20k().path).unwrap();
    let lines: Vec<&str> = sentences.lines().take(300).collect();
    write_lines(&input, &lines);
    let hostile = bundle(dir.path(), HOSTILE, "hostile.weir");
    // A call's deadline of 4 s: a guest that sleeps for an hour is abandoned
    // well before, and so is the server's shutdown.
    let mut server = Server::start_with(dir.path(), &["--max-call-ms", "2000"]);
    let (status, body) = server.api("POST", "/v1/topologies?topology=sleep-in-wasi&input=in/input.txt", &hostile);
    assert_eq!(status, 201, "{body}");
    server.wait_for_topology("sleep-in-wasi", 1);
    let before = server.counts("sleep-in-wasi");
    write_lines(&input, &[&lines[..], &["the attack begins"]].concat());
    // Time for the spout to see the line and the guest to block on it.
    std::thread::sleep(std::time::Duration::from_millis(1000));

    let peak = peak_rss_kib(server.child.id()).unwrap();
    assert!(peak <= 512 * 1024, "the server reached {} MiB of resident memory", peak / 1024);
    let signalled = std::time::Instant::now();
    let kill = std::process::Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let exited = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(signalled.elapsed() < std::time::Duration::from_secs(60), "weir serve did not exit after SIGTERM");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(exited.success(), "weir serve exited with {exited}");
    drop(server);

    // The blocked batch was never committed; a restarted server resumes the
    // topology from what was.
    let server = Server::start_with(dir.path(), &["--max-call-ms", "2000"]);
    let status = server.wait_for_status("sleep-in-wasi", |s| s["state"] == "running");
    assert_eq!(status["last_committed"], 1, "{status}");
    assert_eq!(server.counts("sleep-in-wasi"), before, "committed state changed");
}
