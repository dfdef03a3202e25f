//! `weir serve` through its HTTP API: a real server on a loopback port, real
//! bundles, a real redb file; the walk deploy -> status -> upgrade ->
//! restart -> stop -> delete, and the API's refusals.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "s3cret-token";

struct Server {
    child: Child,
    address: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path) -> Server {
    std::fs::write(dir.join("token"), TOKEN).unwrap();
    let mut child = weir()
        .current_dir(dir)
        .args(["serve", "--data", "data", "--listen", "127.0.0.1:0", "--token-file", "token", "--input-dir", "in"])
        .args(["--max-upload-mib", "1", "--poll-ms", "50", "--batch-size", "1000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let address =
        line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected: {line:?}")).to_owned();
    Server { child, address }
}

/// One HTTP/1.1 request; returns the status and the body.
fn http(server: &Server, method: &str, path: &str, token: Option<&str>, body: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(&server.address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
        server.address,
        body.len()
    );
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    // The server may answer (413) before reading the whole body.
    let _ = stream.write_all(body);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    let status =
        response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status in {response:?}"));
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

fn api(server: &Server, method: &str, path: &str, body: &[u8]) -> (u16, serde_json::Value) {
    let (status, body) = http(server, method, path, Some(TOKEN), body);
    (status, serde_json::from_str(&body).unwrap_or(serde_json::Value::Null))
}

/// Waits until word-count has committed `txid`.
fn wait_for(server: &Server, txid: u64) -> serde_json::Value {
    wait_for_topology(server, "word-count", txid)
}

/// Waits until `topology` has committed `txid`.
fn wait_for_topology(server: &Server, topology: &str, txid: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, body) = api(server, "GET", &format!("/v1/topologies/{topology}"), b"");
        assert_eq!(status, 200, "{body}");
        if body["last_committed"].as_u64() == Some(txid) {
            return body;
        }
        assert!(body["state"] != "failed", "{body}");
        assert!(Instant::now() < deadline, "txid {txid} was not committed: {body}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn served_counts(server: &Server) -> BTreeMap<String, i64> {
    let (status, body) = api(server, "GET", "/v1/topologies/word-count/states/counts", b"");
    assert_eq!(status, 200, "{body}");
    body.as_array()
        .unwrap()
        .iter()
        .map(|e| (e["key"][0].as_str().unwrap().to_owned(), e["value"].as_i64().unwrap()))
        .collect()
}

fn bundle(dir: &Path, component: &str, name: &str) -> Vec<u8> {
    let path = dir.join(name);
    weir_ok(&["bundle", component, "-o", path.to_str().unwrap()]);
    std::fs::read(path).unwrap()
}

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

    let server = start(dir.path());
    let (status, body) = api(&server, "POST", "/v1/topologies?input=in/corpus.txt", &word_count);
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["name"], "word-count");
    let status = wait_for(&server, 10);
    let counted = count_words(&lines[..10_000]);
    assert_counts_eq(&served_counts(&server), &counted);
    // The query stream `words` sums the counts of its arguments' words.
    let (status_code, answer) = api(&server, "POST", "/v1/topologies/word-count/queries/words", b"w1 w2 w1");
    assert_eq!(status_code, 200, "{answer}");
    assert_eq!(answer, serde_json::json!([[2 * counted["w1"] + counted["w2"]]]));
    let (status_code, _) = api(&server, "POST", "/v1/topologies/word-count/queries/nope", b"w1");
    assert_eq!(status_code, 400);
    assert!(status["operator_ms"]["split"].as_f64().is_some_and(|ms| ms > 0.0), "no time for split: {status}");
    assert_eq!(status["tuples"], 10_000);
    assert_eq!(status["spout_lag"], 0, "{status}");
    let (status, listed) = api(&server, "GET", "/v1/topologies", b"");
    assert_eq!((status, listed[0]["name"].as_str()), (200, Some("word-count")));

    // Upgrade at a batch boundary, state kept; then the rest of the input.
    let (status, body) = api(&server, "PUT", "/v1/topologies/word-count/bundle", &word_count);
    assert_eq!(status, 200, "{body}");
    write_lines(&input, &lines);
    wait_for(&server, 20);
    assert_counts_eq(&served_counts(&server), &corpus_20k().truth);

    // An upgrade that changes a state's kind is refused; nothing changes.
    let opaque = bundle(dir.path(), TEST_TOPOLOGIES, "variants.weir");
    let (status, body) = api(&server, "PUT", "/v1/topologies/word-count/bundle", &opaque);
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("changes topology word-count's states"), "{body}");

    // A crash of the server: the next one resumes, nothing lost or doubled.
    drop(server);
    let server = start(dir.path());
    let resumed = wait_for(&server, 20);
    assert_eq!(resumed["state"], "running");
    let mut more = lines.clone();
    more.extend_from_slice(&lines[..1000]);
    write_lines(&input, &more);
    wait_for(&server, 21);
    let mut want = corpus_20k().truth.clone();
    for (word, n) in count_words(&lines[..1000]) {
        *want.get_mut(&word).unwrap() += n;
    }
    assert_counts_eq(&served_counts(&server), &want);

    let (status, body) = api(&server, "POST", "/v1/topologies/word-count/stop", b"");
    assert_eq!((status, body["state"].as_str()), (200, Some("stopped")), "{body}");
    let (status, body) = api(&server, "POST", "/v1/topologies/word-count/resume", b"");
    assert_eq!((status, body["state"].as_str()), (200, Some("running")), "{body}");
    let (status, body) = api(&server, "DELETE", "/v1/topologies/word-count", b"");
    assert_eq!(status, 400, "{body}");
    let (status, _) = api(&server, "DELETE", "/v1/topologies/word-count?state=drop", b"");
    assert_eq!(status, 204);
    let (_, listed) = api(&server, "GET", "/v1/topologies", b"");
    assert_eq!(listed, serde_json::json!([]));
    let (status, _) = api(&server, "GET", "/v1/topologies/word-count/states/counts", b"");
    assert_eq!(status, 404);
}

#[test]
fn the_api_refuses_what_it_should_and_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    std::fs::copy(&corpus_20k().path, dir.path().join("in/corpus.txt")).unwrap();
    let word_count = bundle(dir.path(), WORD_COUNT, "wc.weir");
    let server = start(dir.path());

    // No token, or a wrong one: 401, and nothing changes or is revealed.
    for token in [None, Some("wrong-token")] {
        let (status, body) = http(&server, "POST", "/v1/topologies?input=in/corpus.txt", token, &word_count);
        assert_eq!(status, 401, "{body}");
        assert!(!body.contains("word-count"));
        let (status, _) = http(&server, "GET", "/v1/topologies", token, b"");
        assert_eq!(status, 401);
    }
    let (_, listed) = api(&server, "GET", "/v1/topologies", b"");
    assert_eq!(listed, serde_json::json!([]));
    assert_eq!(http(&server, "GET", "/health", None, b"").0, 200);

    // Too big, garbage, damaged, from the future: each refused with its reason.
    let (status, _) = http(&server, "POST", "/v1/topologies", Some(TOKEN), &vec![0u8; 2 << 20]);
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
        let (status, body) = api(&server, "POST", "/v1/topologies?topology=word-count", &bytes);
        assert_eq!(status, 400, "{body}");
        assert!(body["error"].as_str().unwrap().contains(reason), "{reason:?} missing from {body}");
    }
    let (status, body) = api(&server, "POST", "/v1/topologies?input=/etc/passwd", &word_count);
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("not under a directory this server allows"), "{body}");

    // Still serving: a good deploy goes through, and /metrics moves.
    let (status, body) = api(&server, "POST", "/v1/topologies?input=in/corpus.txt", &word_count);
    assert_eq!(status, 201, "{body}");
    wait_for(&server, 20);
    let (status, metrics) = http(&server, "GET", "/metrics", None, b"");
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
    let server = start(dir.path());
    let url = format!("http://{}", server.address);
    let client = |args: &[&str]| {
        let output = weir().env("WEIR_TOKEN", TOKEN).env("WEIR_SERVER", &url).args(args).output().unwrap();
        assert!(output.status.success(), "weir {args:?}: {}", text(&output));
        String::from_utf8(output.stdout).unwrap()
    };
    let deployed =
        client(&["deploy", bundle_path.to_str().unwrap(), "--name", "word-count", "--input", "in/corpus.txt"]);
    assert!(deployed.contains("TOPOLOGY") && deployed.contains("word-count"), "{deployed}");
    wait_for(&server, 20);
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
    let server = start(dir.path());
    let bundle = std::fs::read(&bundle_path).unwrap();
    let (status, body) = api(&server, "POST", "/v1/topologies?topology=chatty-word-count&input=in/corpus.txt", &bundle);
    assert_eq!(status, 201, "{body}");
    wait_for_topology(&server, "chatty-word-count", 20);
    let url = format!("http://{}", server.address);
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
