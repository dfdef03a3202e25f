//! `weir serve` through its HTTP API: a real server on a loopback port, real
//! bundles, a real redb file; the walk deploy -> status -> upgrade ->
//! restart -> stop -> delete, and the API's refusals.

mod common;

use common::server::{Server, TOKEN, bundle, escape};
use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// A server's directory holding the 20,000-sentence corpus as `in/corpus.txt`.
fn with_corpus() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    std::fs::copy(&corpus_20k().path, dir.path().join("in/corpus.txt")).unwrap();
    dir
}

/// [`with_corpus`], the word count bundled in it as `wc.weir`: the bundle's bytes.
fn with_word_count() -> (tempfile::TempDir, Vec<u8>) {
    let dir = with_corpus();
    let word_count = bundle(dir.path(), WORD_COUNT, "wc.weir");
    (dir, word_count)
}

/// `weir` as a client of `server`, with its token.
fn client_of(server: &Server) -> Command {
    let mut command = weir();
    command.env("WEIR_TOKEN", TOKEN).env("WEIR_SERVER", server.url());
    command
}

/// Sends `server` SIGTERM and waits up to a minute for it to exit.
fn terminate(server: &mut Server) -> std::process::ExitStatus {
    let sent = Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(exit) = server.child.try_wait().unwrap() {
            return exit;
        }
        assert!(Instant::now() < deadline, "the server did not exit within a minute of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
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
    let (status_code, body) = server.api("POST", "/v1/topologies/word-count/queries/nope", b"w1");
    assert_eq!(status_code, 404, "{body}");
    assert!(body["error"].as_str().unwrap().contains("has no query \"nope\""), "{body}");
    assert!(status["operator_ms"]["split"].as_f64().is_some_and(|ms| ms > 0.0), "no time for split: {status}");
    assert_eq!(status["tuples"], 10_000);
    assert_eq!(status["spout_lag"], 0, "{status}");
    let (status, listed) = server.api("GET", "/v1/topologies", b"");
    assert_eq!((status, listed[0]["name"].as_str()), (200, Some("word-count")));

    // Upgrade at a batch boundary, state kept; then the rest of the input.
    let (status, body) = server.api("PUT", "/v1/topologies/word-count/bundle", &word_count);
    assert_eq!(status, 200, "{body}");
    append_lines(&input, &lines[10_000..]);
    server.wait_for_topology("word-count", 20);
    assert_counts_eq(&server.counts("word-count"), &corpus_20k().truth);

    // An upgrade that changes a state's kind is refused, naming the state
    // and both kinds; nothing changes.
    let opaque = bundle(dir.path(), TEST_TOPOLOGIES, "variants.weir");
    let (status, body) = server.api("PUT", "/v1/topologies/word-count/bundle", &opaque);
    assert_eq!(status, 400, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("state counts holds transactional values, but the topology declares it opaque"), "{body}");
    let stored: Vec<_> = std::fs::read_dir(dir.path().join("data/bundles")).unwrap().collect();
    assert_eq!(stored.len(), 1, "the refused upgrade left a file: {stored:?}");

    // A crash of the server: the next one resumes, nothing lost or doubled.
    drop(server);
    let server = Server::start(dir.path());
    let resumed = server.wait_for_topology("word-count", 20);
    assert_eq!(resumed["state"], "running");
    append_lines(&input, &lines[..1000]);
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
    let (dir, word_count) = with_word_count();
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
    // Outside the input dirs, present or missing, one answer; inside, missing says so.
    for input in ["/etc/passwd", "/nonexistent/passwd", "in/../../../../etc/passwd", "in/../../nowhere/passwd"] {
        let (status, body) = server.api("POST", &format!("/v1/topologies?input={input}"), &word_count);
        assert_eq!(status, 400, "{body}");
        let expected = format!("input {input} is not under a directory this server allows (--input-dir)");
        assert!(body["error"].as_str().unwrap().ends_with(&expected), "{body}");
    }
    let (status, body) = server.api("POST", "/v1/topologies?input=in/missing.txt", &word_count);
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("cannot read input in/missing.txt: no such file"), "{body}");
    assert!(files_under(&dir.path().join("data/bundles")).is_empty());

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
    let (dir, _) = with_word_count();
    let bundle_path = dir.path().join("wc.weir");
    let server = Server::start(dir.path());
    let url = server.url();
    let client = |args: &[&str]| {
        let output = client_of(&server).args(args).output().unwrap();
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
    // Idle at txid 20, its rate over the last interval reads 0, though its
    // average since the start does not; `--json` says both.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let idle = loop {
        let listed: serde_json::Value = serde_json::from_str(&client(&["ps", "--json"])).unwrap();
        let status = listed.as_array().unwrap().iter().find(|s| s["name"] == "word-count").unwrap().clone();
        if status["current_tuples_per_s"] == 0.0 {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "never idle: {status}");
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    assert!(idle["tuples_per_s"].as_f64().unwrap() > 0.0 && idle.get("history").is_none(), "{idle}");
    let table = client(&["ps"]);
    let (heading, row) = (table.lines().next().unwrap(), table.lines().find(|l| l.starts_with("word-count")).unwrap());
    let end = heading.find("TUPLES/S").unwrap() + "TUPLES/S".len();
    assert!(row[..end].ends_with(" 0"), "the rate, right under its heading:\n{table}");
    assert_eq!(heading.find("STATE"), row.find("running"), "{table}");
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
    let dir = with_corpus();
    let bundle = bundle(dir.path(), TEST_TOPOLOGIES, "variants.weir");
    let server = Server::start(dir.path());
    let (status, body) = server.api("POST", "/v1/topologies?topology=chatty-word-count&input=in/corpus.txt", &bundle);
    assert_eq!(status, 201, "{body}");
    server.wait_for_topology("chatty-word-count", 20);
    let logs = |lines: &str| {
        let output = client_of(&server).args(["logs", "chatty-word-count", "--lines", lines]).output().unwrap();
        assert!(output.status.success(), "{}", text(&output));
        String::from_utf8(output.stdout).unwrap().lines().map(str::to_owned).collect::<Vec<String>>()
    };
    // Each of the 20 batches wrote a line to stdout, then one to stderr;
    // batches may be processed out of txid order (two threads process
    // them), so the order to check is each batch's, and the last two
    // written come first.
    let all = logs("100");
    assert_eq!(all.len(), 40, "{all:#?}");
    for txid in 1..=20 {
        let at = |line: String| all.iter().position(|l| *l == line).unwrap_or_else(|| panic!("no {line}: {all:#?}"));
        let warned = at(format!("[split] stderr: split warns about txid {txid}"));
        let started = at(format!("[split] stdout: split starts txid {txid}"));
        assert!(warned < started, "txid {txid}'s lines are not most recent first: {all:#?}");
    }
    assert_eq!(logs("2"), all[..2]);
}

/// Every file under `dir`, as paths relative to it.
fn files_under(dir: &Path) -> BTreeSet<PathBuf> {
    let mut files = BTreeSet::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
            } else {
                files.insert(path.strip_prefix(dir).unwrap().to_owned());
            }
        }
    }
    files
}

/// `bundle` with its manifest naming its one topology `name`.
fn renamed_in_manifest(bundle: &[u8], name: &str) -> Vec<u8> {
    let mut bundle = weir_engine::bundle::Bundle::from_bytes(Path::new("wc.weir"), bundle).unwrap();
    bundle.manifest.topologies[0].definition.name = name.to_owned();
    bundle.to_bytes().unwrap()
}

#[test]
fn a_manifest_naming_its_topology_with_a_path_writes_nothing_anywhere() {
    let (dir, word_count) = with_word_count();
    let server = Server::start(dir.path());
    let before = files_under(dir.path());
    let outside = format!("/tmp/weir-traversal-{}", std::process::id());
    for name in ["../../x", outside.as_str(), "../../../../../../../../../../tmp/weir-traversal-up"] {
        let hostile = renamed_in_manifest(&word_count, name);
        let topology = escape(name);
        for query in [String::new(), format!("&topology={topology}"), format!("&name=ok&topology={topology}")] {
            let (status, body) = server.api("POST", &format!("/v1/topologies?input=in/corpus.txt{query}"), &hostile);
            assert_eq!(status, 400, "{name} {query}: {body}");
            let error = body["error"].as_str().unwrap();
            assert!(
                error.contains(&format!("deployment name {name:?}")) || error.contains("describes other topologies"),
                "{body}"
            );
            assert!(!error.contains(dir.path().to_str().unwrap()), "a server path in {body}");
        }
    }
    let (_, listed) = server.api("GET", "/v1/topologies", b"");
    assert_eq!(listed, serde_json::json!([]));
    assert_eq!(files_under(dir.path()), before, "files appeared under the server's directory");
    let leaked: Vec<_> = std::fs::read_dir("/tmp")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|f| f.starts_with("weir-traversal-"))
        .collect();
    assert!(leaked.is_empty(), "written outside: {leaked:?}");
    drop(server);
    let db = std::sync::Arc::new(weir_state::Db::open(&dir.path().join("data")).unwrap());
    assert!(weir_server::registry::Registry::new(std::sync::Arc::clone(&db)).list().unwrap().is_empty());
    for name in ["ok", "../../x", outside.as_str()] {
        assert!(db.states(name).unwrap().is_empty());
        assert_eq!(db.progress(name).unwrap().last_committed, 0);
    }
}

#[test]
fn concurrent_deploys_of_one_name_start_one_coordinator() {
    let (dir, word_count) = with_word_count();
    let server = Server::start(dir.path());
    let barrier = Barrier::new(4);
    let answers: Vec<(u16, serde_json::Value)> = std::thread::scope(|s| {
        let deploys: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    server.api("POST", "/v1/topologies?input=in/corpus.txt", &word_count)
                })
            })
            .collect();
        deploys.into_iter().map(|d| d.join().unwrap()).collect()
    });
    let mut codes: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    codes.sort();
    assert_eq!(codes, [201, 409, 409, 409], "{answers:?}");
    for (_, body) in answers.iter().filter(|(status, _)| *status == 409) {
        assert!(body["error"].as_str().unwrap().contains("topology word-count"), "{body}");
    }
    server.assert_word_count_exact();
    let status = server.wait_for_topology("word-count", 20);
    assert_eq!((status["batches"].as_u64(), status["tuples"].as_u64()), (Some(20), Some(20_000)), "{status}");
    let (_, listed) = server.api("GET", "/v1/topologies", b"");
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    // Stopped, no coordinator thread is left: an orphaned second one would be.
    let (status, body) = server.api("POST", "/v1/topologies/word-count/stop", b"");
    assert_eq!((status, body["state"].as_str()), (200, Some("stopped")), "{body}");
    assert_eq!(server.threads_named("weir-word-count"), 0);

    // A DELETE racing a deploy waits its turn (409, or 404 before the
    // deploy has the name) and leaves no coordinator running.
    std::thread::scope(|s| {
        let deploy = s.spawn(|| server.api("POST", "/v1/topologies?name=wc2&input=in/corpus.txt", &word_count));
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match server.api("DELETE", "/v1/topologies/wc2?state=drop", b"") {
                (204, _) => break,
                (404 | 409, _) => assert!(Instant::now() < deadline, "wc2 was never deleted"),
                other => panic!("unexpected answer to the DELETE: {other:?}"),
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let (status, body) = deploy.join().unwrap();
        assert_eq!(status, 201, "{body}");
    });
    assert_eq!(server.threads_named("weir-wc2"), 0);
    let (_, listed) = server.api("GET", "/v1/topologies", b"");
    assert_eq!(listed.as_array().unwrap().iter().map(|s| s["name"].as_str()).collect::<Vec<_>>(), [Some("word-count")]);
    // The two shared one bundle file, which stays while word-count runs from it.
    assert_eq!(std::fs::read_dir(dir.path().join("data/bundles")).unwrap().count(), 1);
}

#[test]
fn an_input_link_re_pointed_outside_is_refused_after_a_restart() {
    let (dir, word_count) = with_word_count();
    std::os::unix::fs::symlink("corpus.txt", dir.path().join("in/link")).unwrap();
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "secretword another\n".repeat(100)).unwrap();
    let server = Server::start(dir.path());
    let (status, body) = server.api("POST", "/v1/topologies?input=in/link", &word_count);
    assert_eq!(status, 201, "{body}");
    server.assert_word_count_exact();
    drop(server);

    std::fs::remove_file(dir.path().join("in/link")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.path().join("in/link")).unwrap();
    let server = Server::start(dir.path());
    let failed = server.wait_for_status("word-count", |s| s["state"] == "failed");
    let error = failed["error"].as_str().unwrap();
    assert!(error.contains("input in/link is not under a directory this server allows"), "{failed}");
    assert!(!error.contains(dir.path().to_str().unwrap()), "a server path in {failed}");
    // Resumed, it is checked again, and refused again.
    let (status, body) = server.api("POST", "/v1/topologies/word-count/resume", b"");
    assert_eq!(status, 200, "{body}");
    let failed = server.wait_for_status("word-count", |s| s["state"] == "failed");
    assert!(failed["error"].as_str().unwrap().contains("is not under a directory this server allows"), "{failed}");
    assert_eq!(failed["last_committed"], 20, "{failed}");
    assert_counts_eq(&server.counts("word-count"), &corpus_20k().truth);
}

/// One sample of an exposition: its metric, its labels, its value.
type Sample = (String, Vec<(String, String)>, f64);

/// Reads a Prometheus (OpenMetrics) text exposition strictly: comments of
/// the known kinds, samples `name{label="value",...} number` whose label
/// values use only the format's escapes (`\\`, `\"`, `\n`), and `# EOF` at
/// the end. Panics on anything else.
fn parse_exposition(text: &str) -> Vec<Sample> {
    let is_name = |s: &str| {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "{text}");
    let mut samples = Vec::new();
    for line in &lines[..lines.len() - 1] {
        if let Some(comment) = line.strip_prefix("# ") {
            let (kind, rest) = comment.split_once(' ').unwrap_or_else(|| panic!("bad comment {line:?}"));
            assert!(["HELP", "TYPE", "UNIT"].contains(&kind) && is_name(rest.split(' ').next().unwrap()), "{line:?}");
            continue;
        }
        let end = line.find(['{', ' ']).unwrap_or_else(|| panic!("no value in {line:?}"));
        let (name, mut rest) = line.split_at(end);
        assert!(is_name(name), "bad metric name in {line:?}");
        let mut labels = Vec::new();
        if let Some(inner) = rest.strip_prefix('{') {
            rest = inner;
            loop {
                let (key, after) = rest.split_once("=\"").unwrap_or_else(|| panic!("bad label in {line:?}"));
                assert!(is_name(key), "bad label name {key:?} in {line:?}");
                let mut value = String::new();
                let mut chars = after.char_indices();
                let close = loop {
                    match chars.next().unwrap_or_else(|| panic!("unterminated label value in {line:?}")) {
                        (i, '"') => break i,
                        (_, '\\') => match chars.next().map(|(_, c)| c) {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            other => panic!("bad escape {other:?} in {line:?}"),
                        },
                        (_, c) => value.push(c),
                    }
                };
                labels.push((key.to_owned(), value));
                rest = &after[close + 1..];
                if let Some(next) = rest.strip_prefix(',') {
                    rest = next;
                } else {
                    rest = rest.strip_prefix('}').unwrap_or_else(|| panic!("labels not closed in {line:?}"));
                    break;
                }
            }
        }
        let value = rest.strip_prefix(' ').unwrap_or_else(|| panic!("no space before the value in {line:?}"));
        let value = value.parse().unwrap_or_else(|_| panic!("not a number in {line:?}"));
        samples.push((name.to_owned(), labels, value));
    }
    samples
}

#[test]
fn metrics_labels_with_quotes_and_backslashes_stay_valid() {
    let (dir, word_count) = with_word_count();
    let server = Server::start(dir.path());
    let name = r#"wc "quoted" \back\slash} x="y",z"#;
    let (status, body) =
        server.api("POST", &format!("/v1/topologies?name={}&input=in/corpus.txt", escape(name)), &word_count);
    assert_eq!((status, body["name"].as_str()), (201, Some(name)), "{body}");
    server.wait_for_topology(name, 20);
    let (status, text) = server.http("GET", "/metrics", None, b"");
    assert_eq!(status, 200);
    let samples = parse_exposition(&text);
    let sample = |metric: &str, labels: &[(&str, &str)]| {
        let labels: Vec<(String, String)> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let found: Vec<f64> = samples.iter().filter(|s| s.0 == metric && s.1 == labels).map(|s| s.2).collect();
        assert_eq!(found.len(), 1, "{metric} {labels:?} in {text}");
        found[0]
    };
    assert_eq!(sample("weir_last_committed_txid", &[("topology", name)]), 20.0);
    assert_eq!(sample("weir_tuples_committed_total", &[("topology", name)]), 20_000.0);
    assert_eq!(sample("weir_batches_committed_total", &[("topology", name)]), 20.0);
    assert_eq!(sample("weir_replays_total", &[("topology", name)]), 0.0);
    assert_eq!(sample("weir_topology_up", &[("topology", name)]), 1.0);
    assert!(sample("weir_operator_seconds_total", &[("topology", name), ("operator", "split")]) > 0.0);
    assert!(sample("weir_commit_latency_p99_seconds", &[("topology", name)]) > 0.0);
}

#[test]
fn a_cross_origin_post_is_refused_without_a_token() {
    let (dir, word_count) = with_word_count();
    let bundle_path = dir.path().join("wc.weir");
    let server = Server::start_without_token(dir.path());
    let deploy = "/v1/topologies?input=in/corpus.txt";
    for (headers, reason) in [
        (vec![("Origin", "http://evil.example")], "origin"),
        (vec![("Origin", "null")], "origin"),
        (vec![("Host", "evil.example:7878")], "addressed to this machine"),
        (vec![("Host", "evil.example:7878"), ("Origin", "http://evil.example:7878")], "addressed to this machine"),
        (vec![("Content-Type", "application/x-www-form-urlencoded")], "browser form"),
        (vec![("Content-Type", "text/plain")], "browser form"),
        (vec![("Sec-Fetch-Site", "cross-site")], "cross-site"),
    ] {
        let (status, body) = server.request("POST", deploy, &headers, &word_count);
        assert_eq!(status, 403, "{headers:?}: {body}");
        assert!(body.contains(reason), "{headers:?}: {body}");
    }
    let (_, listed) = server.api("GET", "/v1/topologies", b"");
    assert_eq!(listed, serde_json::json!([]));

    // This machine's own client goes through, and a web page still cannot stop what it deployed.
    let output = weir()
        .env_remove("WEIR_TOKEN")
        .env("WEIR_SERVER", server.url())
        .args(["deploy", bundle_path.to_str().unwrap(), "--input", "in/corpus.txt"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    server.assert_word_count_exact();
    let (status, _) =
        server.request("POST", "/v1/topologies/word-count/stop", &[("Origin", "http://evil.example")], b"");
    assert_eq!(status, 403);
    let (status, _) =
        server.request("DELETE", "/v1/topologies/word-count?state=drop", &[("Host", "evil.example")], b"");
    assert_eq!(status, 403);
    assert_eq!(server.wait_for_topology("word-count", 20)["state"], "running");
}

/// Reads what the server sends on `stream` until it closes it; fails if it
/// is still open after `within`.
fn read_until_closed(mut stream: TcpStream, within: Duration) -> String {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut answer = Vec::new();
    if let Err(e) = stream.read_to_end(&mut answer) {
        panic!("the connection was still open after {within:?} ({e}); it sent {:?}", String::from_utf8_lossy(&answer));
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn an_over_limit_or_unauthorized_upload_is_refused_before_the_body_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    for (token, length, status, why) in [
        (TOKEN, 100 << 20, "413", "over the server's limit of 1048576 bytes"),
        ("wrong", 100 << 20, "401", "a valid `Authorization: Bearer <token>` header is required"),
        // Within the limit: not even held in memory for a caller without
        // the token.
        ("wrong", 1 << 20, "401", "a valid `Authorization: Bearer <token>` header is required"),
    ] {
        let mut stream = TcpStream::connect(&server.address).unwrap();
        let head = format!(
            "POST /v1/topologies HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Length: {length}\r\n\r\n",
            server.address,
        );
        stream.write_all(head.as_bytes()).unwrap();
        // The server's body timeout is a minute: an answer within 30 s is
        // one given without waiting for the body.
        let answer = read_until_closed(stream, Duration::from_secs(30));
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}")), "{answer}");
        assert!(answer.contains(why), "{answer}");
    }
    // Outside /v1 no call reads a body: a large one is refused too.
    let mut stream = TcpStream::connect(&server.address).unwrap();
    let head = format!("POST /health HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n", server.address, 1 << 20);
    stream.write_all(head.as_bytes()).unwrap();
    let answer = read_until_closed(stream, Duration::from_secs(30));
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}

#[test]
fn uploads_past_the_room_for_bodies_wait_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--body-timeout-ms", "3000"]);
    let upload = |then: &str| {
        let mut stream = TcpStream::connect(&server.address).unwrap();
        let head = format!(
            "POST /v1/topologies HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{then}",
            server.address,
            1 << 20
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream
    };
    // Four uploads of the largest size the server takes (1 MiB here) fill
    // the room for bodies, and stall.
    let stalled: Vec<TcpStream> = (0..4).map(|_| upload("")).collect();
    std::thread::sleep(Duration::from_millis(500));
    // A fifth, sent whole, is read only once one of them has given its
    // room back, at its body timeout.
    let mut whole = upload("");
    whole.write_all(&vec![b'x'; 1 << 20]).unwrap();
    let answered = |stream| {
        std::thread::spawn(move || {
            let answer = read_until_closed(stream, Duration::from_secs(30));
            (Instant::now(), answer)
        })
    };
    let stalled: Vec<_> = stalled.into_iter().map(answered).collect();
    let (whole_at, whole) = answered(whole).join().unwrap();
    assert!(whole.starts_with("HTTP/1.1 400"), "{whole}");
    let first_timeout = stalled
        .into_iter()
        .map(|thread| {
            let (at, answer) = thread.join().unwrap();
            assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
            at
        })
        .min()
        .unwrap();
    assert!(whole_at >= first_timeout, "the fifth upload was read while four filled the room");
}

#[test]
fn a_stalled_header_or_body_is_closed_after_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--header-timeout-ms", "1000", "--body-timeout-ms", "1000"]);
    let connect = || TcpStream::connect(&server.address).unwrap();
    let mut header = connect();
    header.write_all(b"GET /v1/topologies HTTP/1.1\r\nHost: 127.0.0.1\r\n").unwrap();
    let silent = connect();
    let mut body = connect();
    let head = format!(
        "POST /v1/topologies HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 1000\r\n\r\n",
        server.address
    );
    body.write_all(head.as_bytes()).unwrap();
    body.write_all(b"0123456789").unwrap();
    // Meanwhile the server answers others.
    assert_eq!(server.http("GET", "/health", None, b"").0, 200);
    let answer = read_until_closed(body, Duration::from_secs(30));
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive within 1000 ms"), "{answer}");
    read_until_closed(header, Duration::from_secs(30));
    read_until_closed(silent, Duration::from_secs(30));
    let (_, listed) = server.api("GET", "/v1/topologies", b"");
    assert_eq!(listed, serde_json::json!([]));
}

#[test]
fn clients_past_the_connection_limit_wait_and_leave_the_topologies_their_files() {
    let dir = tempfile::tempdir().unwrap();
    // 128 open files: the server serves 32 connections at once, each idle
    // one closed a second after it is taken.
    let server = Server::start_with_open_files(dir.path(), 128, &["--header-timeout-ms", "1000"]);
    let idle: Vec<TcpStream> = (0..300).map(|_| TcpStream::connect(&server.address).unwrap()).collect();
    // Behind them, a deployment: its upload, its bundle and state written,
    // its input opened, all need files the idle clients would have taken.
    server.deploy_word_count(dir.path());
    server.assert_word_count_exact();
    drop(idle);
    let log = std::fs::read_to_string(dir.path().join("weir.log")).unwrap();
    assert!(log.contains("serving at most 32 connections at once, not 512: the open-file limit is 128"), "{log}");
    assert!(!log.contains("Too many open files"), "{log}");
}

#[test]
fn one_topology_deployed_under_two_names_keeps_two_states() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    let sentences = std::fs::read_to_string(&corpus_20k().path).unwrap();
    let lines: Vec<&str> = sentences.lines().collect();
    let (first, second) = (&lines[..10_000], &lines[10_000..15_000]);
    write_lines(&dir.path().join("in/first.txt"), first);
    write_lines(&dir.path().join("in/second.txt"), second);
    let word_count = bundle(dir.path(), WORD_COUNT, "wc.weir");
    let chatty = bundle(dir.path(), TEST_TOPOLOGIES, "variants.weir");
    let server = Server::start(dir.path());
    for (name, bundle, topology, input) in [
        ("first", &word_count, "", "first"),
        ("second", &word_count, "", "second"),
        ("chatty first", &chatty, "&topology=chatty-word-count", "first"),
        ("chatty second", &chatty, "&topology=chatty-word-count", "second"),
    ] {
        let path = format!("/v1/topologies?name={}{topology}&input=in/{input}.txt", escape(name));
        let (status, body) = server.api("POST", &path, bundle);
        assert_eq!((status, body["name"].as_str()), (201, Some(name)), "{body}");
    }
    for (name, part, txid) in
        [("first", first, 10), ("second", second, 5), ("chatty first", first, 10), ("chatty second", second, 5)]
    {
        let status = server.wait_for_topology(name, txid);
        assert_eq!(status["tuples"], part.len(), "{status}");
        assert_counts_eq(&server.counts(name), &count_words(part));
    }
    let (_, first_status) = server.api("GET", "/v1/topologies/first", b"");
    assert_eq!(first_status["topology"], "word-count", "{first_status}");
    for (name, part) in [("first", first), ("second", second)] {
        let counted = count_words(part);
        let (status, answer) = server.api("POST", &format!("/v1/topologies/{name}/queries/words"), b"w1 w2");
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer, serde_json::json!([[counted["w1"] + counted["w2"]]]), "{name}");
    }
    for (name, txid) in [("chatty first", 10), ("chatty second", 5)] {
        let (status, logs) = server.api("GET", &format!("/v1/topologies/{}/logs", escape(name)), b"");
        assert_eq!(status, 200, "{logs}");
        // Each of its batches logged twice, no other's (two threads may
        // process its batches, so not in txid order).
        let mut lines: Vec<String> =
            logs.as_array().unwrap().iter().map(|l| l["line"].as_str().unwrap().to_owned()).collect();
        let mut want: Vec<String> = (1..=txid)
            .flat_map(|t| [format!("split starts txid {t}"), format!("split warns about txid {t}")])
            .collect();
        lines.sort();
        want.sort();
        assert_eq!(lines, want, "{name}: {logs}");
    }
    // Deleting one leaves the other as it was.
    let (status, _) = server.api("DELETE", "/v1/topologies/first?state=drop", b"");
    assert_eq!(status, 204);
    assert_counts_eq(&server.counts("second"), &count_words(second));
    let (status, _) = server.api("GET", "/v1/topologies/first/states/counts", b"");
    assert_eq!(status, 404);
}

#[test]
fn deploys_past_the_most_a_server_allows_are_refused_until_one_is_deleted() {
    let (dir, word_count) = with_word_count();
    let server = Server::start_with(dir.path(), &["--max-deployments", "2"]);
    let deploy =
        |name: &str| server.api("POST", &format!("/v1/topologies?name={name}&input=in/corpus.txt"), &word_count);
    for name in ["one", "two"] {
        let (status, body) = deploy(name);
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = deploy("three");
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].as_str().unwrap_or_default().contains("(--max-deployments 2)"), "{body}");
    let (_, listed) = server.api("GET", "/v1/topologies", b"");
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "the refused deploy left nothing: {listed}");
    let (status, _) = server.api("DELETE", "/v1/topologies/one?state=drop", b"");
    assert_eq!(status, 204);
    let (status, body) = deploy("three");
    assert_eq!(status, 201, "{body}");
    server.wait_for_topology("three", 20);
    assert_counts_eq(&server.counts("three"), &corpus_20k().truth);
}

#[test]
fn a_state_of_large_values_is_answered_in_pages_that_fit_and_scanned_whole_by_the_client() {
    // 70 lines of 1 MiB, each stored under its first word: 70 MiB of
    // values, past what a whole answer may hold, 15 to a page of at most
    // 16 MiB.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    let lines: Vec<String> = (0..70).map(|i| format!("{i:02} {}", "w".repeat(1 << 20))).collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    write_lines(&dir.path().join("in/large.txt"), &refs);
    let server = Server::start_with(dir.path(), &["--batch-size", "10"]);
    let variants = bundle(dir.path(), TEST_TOPOLOGIES, "variants.weir");
    let (status, body) = server.api("POST", "/v1/topologies?topology=first-lines&input=in/large.txt", &variants);
    assert_eq!(status, 201, "{body}");
    server.wait_for_topology("first-lines", 7);
    let path = "/v1/topologies/first-lines/states/lines";
    let (status, body) = server.api("GET", path, b"");
    assert_eq!(status, 400, "{body:.200}");
    assert!(body["error"].as_str().unwrap_or_default().contains("read it in pages"), "{body:.200}");
    let (status, body) = server.api("GET", &format!("{path}?limit=100"), b"");
    assert_eq!(status, 400, "{body:.200}");
    assert!(body["error"].as_str().unwrap_or_default().contains("ask for fewer keys (?limit=15)"), "{body:.200}");
    let (status, body) = server.api("GET", &format!("{path}?limit=15"), b"");
    assert_eq!((status, body.as_array().map(Vec::len)), (200, Some(15)));
    let output = weir()
        .env("WEIR_TOKEN", TOKEN)
        .args(["state", "scan", "--server", &server.url(), "--topology", "first-lines", "--state", "lines"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let scanned: Vec<serde_json::Value> =
        String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let got: Vec<(&str, &str)> =
        scanned.iter().map(|e| (e["key"][0].as_str().unwrap(), e["value"].as_str().unwrap())).collect();
    let want: Vec<(&str, &str)> = refs.iter().map(|line| (&line[..2], *line)).collect();
    assert!(got == want, "every key once, in order, with its line");
}

#[test]
fn the_client_verbs_escape_names_and_inputs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    let input = "in/a b&c=d#e%f+g?.txt";
    std::fs::copy(&corpus_20k().path, dir.path().join(input)).unwrap();
    let bundle_path = dir.path().join("wc.weir");
    weir_ok(&["bundle", WORD_COUNT, "-o", bundle_path.to_str().unwrap()]);
    let server = Server::start(dir.path());
    let url = server.url();
    let client = |args: &[&str]| {
        let output = client_of(&server).args(args).output().unwrap();
        (output.status.success(), text(&output))
    };
    let ok = |args: &[&str]| {
        let (success, out) = client(args);
        assert!(success, "weir {args:?}: {out}");
        out
    };
    let name = "wc #1 ?x=y&z%2F+ \"é\" \\";
    let bundle = bundle_path.to_str().unwrap();
    ok(&["deploy", bundle, "--name", name, "--topology", "word-count", "--input", input]);
    server.wait_for_topology(name, 20);
    let status: serde_json::Value = serde_json::from_str(&ok(&["status", name, "--json"])).unwrap();
    assert_eq!((status["name"].as_str(), status["last_committed"].as_u64()), (Some(name), Some(20)), "{status}");
    assert!(ok(&["ps"]).lines().any(|row| row.starts_with(name)));
    let key = r#"["w1"]"#;
    let got = ok(&["state", "get", "--server", &url, "--topology", name, "--state", "counts", "--key", key]);
    assert!(got.contains(&format!(r#"{{"key":["w1"],"value":{}}}"#, corpus_20k().truth["w1"])), "{got}");
    let truth = &corpus_20k().truth;
    let answer = ok(&["query", "--server", &url, "--topology", name, "--query", "words", "--args", "w1 w2"]);
    assert!(answer.contains(&format!("[[{}]]", truth["w1"] + truth["w2"])), "{answer}");
    ok(&["logs", name]);
    assert!(ok(&["stop", name]).contains("stopped"));
    assert!(ok(&["resume", name]).contains("running"));
    assert!(ok(&["upgrade", name, bundle]).contains("running"));
    // A name that would be a path of another call reaches the server whole.
    let (success, out) = client(&["status", "x/stop"]);
    assert!(!success && out.contains(r#"answered 404: no topology x/stop is deployed"#), "{out}");
    let (success, out) = client(&["deploy", bundle, "--name", "a/b"]);
    assert!(!success && out.contains(r#"deployment name "a/b" must be"#), "{out}");
    assert!(ok(&["delete", name, "--drop-state"]).contains("dropped its state"));
    assert!(!ok(&["ps"]).contains("wc #1"));
}

#[test]
fn sigterm_stops_every_topology_and_exits_then_a_restart_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    server.deploy_word_count(dir.path());
    server.assert_word_count_exact();
    // A few samples of its history, a second apart.
    let deadline = Instant::now() + Duration::from_secs(30);
    let before = loop {
        let (_, history) = server.api("GET", "/v1/topologies/word-count/history", b"");
        if history["at"].as_array().unwrap().len() >= 3 {
            break history;
        }
        assert!(Instant::now() < deadline, "{history}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let exit = terminate(&mut server);
    assert!(exit.success(), "{exit:?}");
    let server = Server::start(dir.path());
    assert_eq!(server.wait_for_topology("word-count", 20)["state"], "running");
    server.assert_word_count_exact();
    // The charts' history survived the restart: the samples before it are
    // still there, the last committed txid among them.
    let (_, after) = server.api("GET", "/v1/topologies/word-count/history", b"");
    let at = |h: &serde_json::Value| h["at"].as_array().unwrap().clone();
    assert!(at(&after).starts_with(&at(&before)[..3]), "before: {before}\nafter: {after}");
    assert_eq!(after["last_committed"][2], before["last_committed"][2], "{after}");
}

#[test]
fn sigterm_with_a_blocked_guest_exits_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    let (input, _) = sentences_input(&dir.path().join("in"), 300);
    let hostile = bundle(dir.path(), HOSTILE, "hostile.weir");
    // A call's deadline of 4 s: a guest that sleeps for an hour is abandoned
    // well before, and so is the server's shutdown.
    let mut server = Server::start_with(dir.path(), &["--max-call-ms", "2000"]);
    let (status, body) = server.api("POST", "/v1/topologies?topology=sleep-in-wasi&input=in/input.txt", &hostile);
    assert_eq!(status, 201, "{body}");
    server.wait_for_topology("sleep-in-wasi", 1);
    let before = server.counts("sleep-in-wasi");
    append_lines(&input, &["the attack begins"]);
    // Time for the spout to see the line and the guest to block on it.
    std::thread::sleep(std::time::Duration::from_millis(1000));

    let peak = peak_rss_kib(server.child.id()).unwrap();
    assert!(peak <= 512 * 1024, "the server reached {} MiB of resident memory", peak / 1024);
    let exited = terminate(&mut server);
    assert!(exited.success(), "weir serve exited with {exited}");
    drop(server);

    // The blocked batch was never committed; a restarted server resumes the
    // topology from what was.
    let server = Server::start_with(dir.path(), &["--max-call-ms", "2000"]);
    let status = server.wait_for_status("sleep-in-wasi", |s| s["state"] == "running");
    assert_eq!(status["last_committed"], 1, "{status}");
    assert_eq!(server.counts("sleep-in-wasi"), before, "committed state changed");
}

#[test]
fn every_answer_forbids_framing_sniffing_and_inline_script() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let bearer = format!("Bearer {TOKEN}");
    let with_token = [("Authorization", bearer.as_str())];
    for (path, headers, status, kind) in [
        ("/", &[][..], 200, "text/html; charset=utf-8"),
        ("/assets/app.js", &[], 200, "text/javascript; charset=utf-8"),
        ("/assets/uPlot.min.css", &[], 200, "text/css; charset=utf-8"),
        ("/assets/nothing.js", &[], 404, ""),
        ("/v1/topologies", &with_token, 200, "application/json"),
        ("/v1/topologies", &[], 401, "application/json"),
        ("/v1/topologies/nothing", &with_token, 404, "application/json"),
        ("/health", &[], 200, ""),
        ("/metrics", &[], 200, ""),
    ] {
        let (got, headers, _) = server.exchange("GET", path, headers, b"");
        assert_eq!(got, status, "{path}");
        if !kind.is_empty() {
            assert_eq!(headers["content-type"], kind, "{path}");
        }
        let policy = &headers["content-security-policy"];
        for directive in ["default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"] {
            assert!(policy.split("; ").any(|d| d == directive), "{path}: {directive} missing from {policy}");
        }
        assert!(!policy.contains("unsafe"), "{path}: {policy}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["cache-control"], "no-store", "{path}");
    }
}

/// Asks for `topology`'s history every `every` until its samples' times
/// satisfy `done`, for up to a minute; returns it.
fn wait_for_history(
    server: &Server,
    topology: &str,
    every: Duration,
    done: impl Fn(&Vec<serde_json::Value>) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, history) = server.api("GET", &format!("/v1/topologies/{topology}/history"), b"");
        assert_eq!(status, 200, "{history}");
        if done(history["at"].as_array().unwrap()) {
            return history;
        }
        assert!(Instant::now() < deadline, "{history}");
        std::thread::sleep(every);
    }
}

#[test]
fn a_state_pages_in_key_order_and_a_status_keeps_history_graph_and_failures() {
    let dir = with_corpus();
    let server = Server::start(dir.path());
    server.deploy_word_count(dir.path());
    server.assert_word_count_exact();
    let truth = &corpus_20k().truth;

    // Pages of 7 keys, each after the last one shown, with stored txids.
    let counts = "/v1/topologies/word-count/states/counts";
    let mut paged: Vec<serde_json::Value> = Vec::new();
    let mut after = String::new();
    loop {
        let (status, page) = server.api("GET", &format!("{counts}?limit=7&raw=true{after}"), b"");
        assert_eq!(status, 200, "{page}");
        let page = page.as_array().unwrap().clone();
        assert!(page.len() <= 7);
        let Some(last) = page.last() else { break };
        after = format!("&after={}", escape(&last["key"].to_string()));
        paged.extend(page);
    }
    let keys: Vec<&str> = paged.iter().map(|e| e["key"][0].as_str().unwrap()).collect();
    assert_eq!(keys, truth.keys().map(String::as_str).collect::<Vec<_>>(), "every key once, in order");
    for entry in &paged {
        assert_eq!(entry["value"], truth[entry["key"][0].as_str().unwrap()], "{entry}");
        assert!((1..=20).contains(&entry["txid"].as_u64().unwrap()), "{entry}");
    }
    let (_, all) = server.api("GET", &format!("{counts}?raw=true"), b"");
    assert_eq!(all, serde_json::Value::from(paged), "the pages make the whole state");
    let (_, plain) = server.api("GET", &format!("{counts}?limit=1"), b"");
    assert!(plain[0].get("txid").is_none(), "{plain}");
    for (query, reason) in [
        ("limit=0", "limit 0 must be 1 to 1000"),
        ("limit=1001", "limit 1001 must be 1 to 1000"),
        ("after=w1", "after is not JSON"),
        ("after=%7B%7D", "after must be a JSON array"),
        ("key=%5B%22w1%22%5D&limit=3", "give either ?key= or ?after= and ?limit=, not both"),
    ] {
        let (status, body) = server.api("GET", &format!("{counts}?{query}"), b"");
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body["error"].as_str().unwrap().contains(reason), "{query}: {body}");
    }

    // The graph, as weir inspect shows the bundle's definition.
    let (status, definition) = server.api("GET", "/v1/topologies/word-count/definition", b"");
    assert_eq!(status, 200, "{definition}");
    let inspected = weir_ok(&["inspect", "--json", dir.path().join("wc.weir").to_str().unwrap()]);
    let manifest: serde_json::Value = serde_json::from_slice(&inspected.stdout).unwrap();
    assert_eq!(definition, manifest["topologies"][0]["definition"]);

    // A sample a second, in columns of one length.
    let history = wait_for_history(&server, "word-count", Duration::from_millis(200), |at| at.len() >= 3);
    let at: Vec<f64> = history["at"].as_array().unwrap().iter().map(|t| t.as_f64().unwrap()).collect();
    assert!(at.windows(2).all(|w| w[1] > w[0]), "{at:?}");
    for column in ["last_committed", "batches_per_s", "tuples_per_s", "commit_p99_ms", "replays", "spout_lag"] {
        assert_eq!(history[column].as_array().unwrap().len(), at.len(), "{column}");
    }
    assert_eq!(history["last_committed"].as_array().unwrap().last(), Some(&serde_json::json!(20)));
    assert_eq!(history["interval_ms"], 1000);

    // A replayed attempt is listed with its txid, attempt and error.
    let variants = bundle(dir.path(), TEST_TOPOLOGIES, "variants.weir");
    let (status, body) = server.api("POST", "/v1/topologies?topology=flaky-word-count&input=in/corpus.txt", &variants);
    assert_eq!(status, 201, "{body}");
    let status = server.wait_for_topology("flaky-word-count", 20);
    // ... and when it failed, and in which operator.
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let at_ms = status["failures"][0]["at_ms"].as_u64().unwrap();
    assert!(at_ms <= now_ms && now_ms - at_ms < 120_000, "{status}");
    assert_eq!(
        status["failures"],
        serde_json::json!([{"txid": 3, "attempt": 0, "error": "operator split: retry: txid 3 fails on its first attempt",
                            "at_ms": at_ms, "operator": "split"}])
    );
    assert_eq!(status["replays"], 1);
    // Deleted, its history goes with it: deployed again under its name,
    // it has no sample from before.
    let deleted = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let (status, _) = server.api("DELETE", "/v1/topologies/flaky-word-count?state=drop", b"");
    assert_eq!(status, 204);
    for call in ["history", "definition"] {
        let (status, body) = server.api("GET", &format!("/v1/topologies/flaky-word-count/{call}"), b"");
        assert_eq!(status, 404, "{call}: {body}");
    }
    let (status, body) = server.api("POST", "/v1/topologies?topology=flaky-word-count&input=in/corpus.txt", &variants);
    assert_eq!(status, 201, "{body}");
    let history = wait_for_history(&server, "flaky-word-count", Duration::from_millis(100), |at| !at.is_empty());
    for at in history["at"].as_array().unwrap() {
        assert!(at.as_f64().unwrap() >= deleted - 1e-3, "a sample from before the delete: {history}");
    }
}

/// `lines` lines of ten words each, every word new: a state that grows with
/// every batch.
fn distinct_words(lines: usize) -> Vec<String> {
    (0..lines).map(|l| (0..10).map(|w| format!("w{:06}", l * 10 + w)).collect::<Vec<_>>().join(" ")).collect()
}

/// Deploys the word count as `name` over `in/{name}.txt`, and waits for it
/// to halt: its error.
fn halted_word_count(server: &Server, bundle: &[u8], name: &str) -> String {
    let (status, body) = server.api("POST", &format!("/v1/topologies?name={name}&input=in/{name}.txt"), bundle);
    assert_eq!(status, 201, "{body}");
    let failed = server.wait_for_status(name, |s| s["state"] == "failed");
    failed["error"].as_str().unwrap().to_owned()
}

#[test]
fn a_topology_past_its_state_bound_halts_and_the_others_go_on() {
    let lines = distinct_words(8000);
    // One topology's bound: the wide count halts, the corpus's finishes.
    {
        let (dir, word_count) = with_word_count();
        write_lines(&dir.path().join("in/wide.txt"), &lines);
        let server = Server::start_with(dir.path(), &["--max-state-mib", "1", "--batch-size", "500"]);
        let (status, body) = server.api("POST", "/v1/topologies?name=small&input=in/corpus.txt", &word_count);
        assert_eq!(status, 201, "{body}");
        let error = halted_word_count(&server, &word_count, "wide");
        assert!(error.contains("past --max-state-mib 1") && error.contains("state counts would hold"), "{error}");
        server.wait_for_topology("small", 40);
        assert_counts_eq(&server.counts("small"), &corpus_20k().truth);
        let committed = server.wait_for_status("wide", |_| true)["last_committed"].as_u64().unwrap() as usize;
        assert_counts_eq(&server.counts("wide"), &count_words(&lines[..committed * 500]));
    }
    // The server's bound: every topology's states together.
    let (dir, word_count) = with_word_count();
    write_lines(&dir.path().join("in/wide.txt"), &lines);
    let server = Server::start_with(dir.path(), &["--max-total-state-mib", "1", "--batch-size", "500"]);
    let (status, body) = server.api("POST", "/v1/topologies?name=small&input=in/corpus.txt", &word_count);
    assert_eq!(status, 201, "{body}");
    server.wait_for_topology("small", 40);
    let error = halted_word_count(&server, &word_count, "wide");
    assert!(error.contains("every topology's states together") && error.contains("--max-total-state-mib 1"), "{error}");
    assert_counts_eq(&server.counts("small"), &corpus_20k().truth);
    let (status, listed) = server.api("GET", "/v1/topologies", b"");
    assert_eq!((status, listed.as_array().map(Vec::len)), (200, Some(2)), "{listed}");
}
