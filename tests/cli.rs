//! The `weir` command's verbs, help and errors, through the real binary.

mod common;

use common::*;
use std::path::Path;

/// A data dir holding a committed word count, and its state as scanned.
fn committed() -> (tempfile::TempDir, Vec<serde_json::Value>) {
    let (data, _) = over_corpus(weir_ok, WORD_COUNT, &["--batch-size", "5000"]);
    let state = scan(data.path(), "word-count", "counts");
    assert_eq!(state.len(), corpus_20k().truth.len());
    (data, state)
}

fn assert_fails_with(args: &[&str], message: &str) {
    let output = weir_output(args);
    assert!(!output.status.success(), "weir {args:?} succeeded:\n{}", text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(message), "weir {args:?}: expected {message:?} in:\n{stderr}");
}

#[test]
fn unreadable_input_and_a_busy_data_dir_are_refused_and_committed_state_is_kept() {
    let (data, before) = committed();
    let data_dir = data.path().to_str().unwrap();
    assert_fails_with(
        &["run", WORD_COUNT, "--data", data_dir, "--input", "/nonexistent/corpus.txt"],
        "cannot read input",
    );
    {
        let _held = weir_state::Db::open(data.path()).unwrap();
        let input = corpus_20k().path.to_str().unwrap();
        assert_fails_with(
            &["run", WORD_COUNT, "--data", data_dir, "--input", input],
            "is in use by another weir process",
        );
        assert_fails_with(
            &["state", "scan", "--data", data_dir, "--topology", "word-count", "--state", "counts"],
            "is in use by another weir process",
        );
    }
    assert_eq!(scan(data.path(), "word-count", "counts"), before);
}

#[test]
fn a_line_longer_than_16_mib_halts_the_run_naming_it_and_keeps_what_committed() {
    let (_dir, input, data) = input_and_data("in.txt", "a b a\n");
    let args = run_args(WORD_COUNT, &data, &input, &["--batch-size", "1", "--max-attempts", "2"]);
    weir_ok(&args);
    append_lines(&input, &[&"x".repeat((16 << 20) + 1), "never read"]);
    assert_fails_with(&args, "emitting txid 2 failed 2 times: input ");
    assert_fails_with(&args, "in.txt: the line at byte 6 is longer than 16 MiB");
    assert_eq!(counts(&data, "word-count"), [("a".to_owned(), 2), ("b".to_owned(), 1)].into());
}

#[test]
fn state_scan_is_sorted_and_get_prints_one_key() {
    let (data, state) = committed();
    let keys: Vec<String> = state.iter().map(|e| e["key"][0].as_str().unwrap().to_owned()).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    let data_dir = data.path().to_str().unwrap();
    let base = ["state", "get", "--data", data_dir, "--topology", "word-count", "--state", "counts"];
    let get = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().copied().chain(extra.iter().copied()).collect();
        let out = weir_ok(&args);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let w1 = get(&["--key", r#"["w1"]"#]);
    assert_eq!(w1, serde_json::json!({"key": ["w1"], "value": corpus_20k().truth["w1"]}));
    let raw = get(&["--key", r#"["w1"]"#, "--raw"]);
    assert_eq!(raw["txid"], 4);
    let raw_scan =
        weir_ok(&["state", "scan", "--data", data_dir, "--topology", "word-count", "--state", "counts", "--raw"]);
    let first: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&raw_scan.stdout).lines().next().unwrap()).unwrap();
    assert!(first["txid"].as_u64().is_some(), "{first}");

    let missing: Vec<&str> = base.iter().copied().chain(["--key", r#"["nope"]"#]).collect();
    assert_fails_with(&missing, "has no key [\"nope\"]");
    let not_array: Vec<&str> = base.iter().copied().chain(["--key", r#""w1""#]).collect();
    assert_fails_with(&not_array, "--key must be a JSON array");
    assert_fails_with(
        &["state", "scan", "--data", data_dir, "--topology", "word-count", "--state", "nope"],
        "topology word-count has no state nope (its states: counts)",
    );
    // A topology the data dir does not hold is named as such, with those it does.
    for verb in [&["scan"][..], &["get", "--key", r#"["w1"]"#]] {
        let args: Vec<&str> = ["state", verb[0], "--data", data_dir, "--topology", "word-cuont", "--state", "counts"]
            .into_iter()
            .chain(verb[1..].iter().copied())
            .collect();
        assert_fails_with(&args, "error: this data dir holds no topology word-cuont (it holds: word-count)");
    }
    let empty = tempfile::tempdir().unwrap();
    assert_fails_with(
        &["state", "scan", "--data", empty.path().to_str().unwrap(), "--topology", "t", "--state", "s"],
        "holds no Weir database",
    );
}

#[test]
fn a_key_whose_bytes_are_not_hex_is_refused_by_name() {
    // A multi-byte character where a pair of hex digits should be.
    let refusal = r#"bytes "aéb" is not hex: 'é' at byte 1 is not a hex digit"#;
    let (data, _) = committed();
    let data_dir = data.path().to_str().unwrap();
    let key = r#"[{"bytes":"aéb"}]"#;
    assert_fails_with(
        &["state", "get", "--data", data_dir, "--topology", "word-count", "--state", "counts", "--key", key],
        refusal,
    );

    // The server reads `?key=` with the same function.
    let dir = tempfile::tempdir().unwrap();
    let server = common::server::Server::start(dir.path());
    server.deploy_word_count(dir.path());
    server.wait_for_topology("word-count", 20);
    let (status, body) =
        server.api("GET", "/v1/topologies/word-count/states/counts?key=%5B%7B%22bytes%22%3A%22a%C3%A9b%22%7D%5D", b"");
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains(refusal)), "{body}");
    server.assert_word_count_exact();
}

#[test]
fn run_builds_a_guest_crate_directory() {
    let corpus = corpus_20k();
    let data = tempfile::tempdir().unwrap();
    let crate_dir = Path::new(REPO_ROOT).join("examples/word-count");
    let output = weir().args(run_args(crate_dir.to_str().unwrap(), data.path(), &corpus.path, &[])).output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    assert_counts_eq(&counts(data.path(), "word-count"), &corpus.truth);
    let not_a_crate = tempfile::tempdir().unwrap();
    assert_fails_with(
        &run_args(not_a_crate.path().to_str().unwrap(), data.path(), &corpus.path, &[]),
        "is neither a .wasm component nor a guest directory",
    );
}

#[test]
fn a_component_with_several_topologies_needs_one_chosen() {
    let corpus = corpus_20k();
    let data = tempfile::tempdir().unwrap();
    assert_fails_with(&run_args(TEST_TOPOLOGIES, data.path(), &corpus.path, &[]), "choose with --topology");
    assert_fails_with(
        &run_args(TEST_TOPOLOGIES, data.path(), &corpus.path, &["--topology", "nope"]),
        "defines no topology \"nope\"",
    );
}

#[test]
fn every_verb_explains_itself() {
    for (args, expected) in [
        (
            vec!["--help"],
            vec![
                "run",
                "state",
                "bundle",
                "inspect",
                "new",
                "serve",
                "deploy",
                "ps",
                "status",
                "stop",
                "resume",
                "upgrade",
                "delete",
                "logs",
                "--log-format",
            ],
        ),
        (vec!["deploy", "--help"], vec!["--name", "--input", "--server", "--json", "WEIR_TOKEN"]),
        (vec!["delete", "--help"], vec!["--keep-state", "--drop-state"]),
        (
            vec!["serve", "--help"],
            vec![
                "--data",
                "--listen",
                "--token-file",
                "--max-upload-mib",
                "--input-dir",
                "--max-nodes",
                "--max-batch-state-write-mib",
            ],
        ),
        (vec!["bundle", "--help"], vec!["--output", "--max-nodes"]),
        (vec!["inspect", "--help"], vec!["--json", "--max-nodes"]),
        (vec!["query", "--help"], vec!["--max-nodes"]),
        (vec!["new", "--help"], vec!["--lang", "--sdk"]),
        (
            vec!["run", "--help"],
            vec![
                "--data",
                "--input",
                "--batch-size",
                "--max-pending",
                "--max-attempts",
                "--retry-backoff-ms",
                "--batch-timeout-ms",
                "--max-memory-mib",
                "--max-call-ms",
                "--allow-dir",
                "--max-call-state-reads",
                "--max-call-state-read-mib",
                "--max-call-state-writes",
                "--max-call-state-write-mib",
                "--max-batch-state-reads",
                "--max-batch-state-read-mib",
                "--max-batch-state-writes",
                "--max-batch-state-write-mib",
                "--max-state-cache-mib",
                "--max-db-cache-mib",
                "--max-state-mib",
                "--max-log-kib",
                "--max-log-lines",
                "--report-json",
                "--cache-dir",
                "--max-nodes",
                "--max-node-fields",
                "--max-fields",
                "--max-name-len",
                "--max-states",
                "--max-queries",
                "--max-parallelism",
                "--max-instances",
                "--max-state-cache",
            ],
        ),
        (vec!["skip-batch", "--help"], vec!["--data", "--topology", "--txid", "--reason"]),
        (vec!["state", "--help"], vec!["scan", "get"]),
        (vec!["state", "scan", "--help"], vec!["--data", "--topology", "--state", "--raw"]),
        (vec!["state", "get", "--help"], vec!["--key"]),
    ] {
        let out = text(&weir_ok(&args));
        for word in expected {
            assert!(out.contains(word), "weir {args:?} --help lacks {word}:\n{out}");
        }
    }
    assert_fails_with(&["run", WORD_COUNT, "--data", "x", "--input", "y", "--batch-size", "0"], "--batch-size");
}

#[test]
fn the_corpus_script_writes_the_canonical_benchmark_corpus() {
    // The benchmark's own generator sits beside the repository where the
    // shared benchmark workload is checked out (as on CI).
    // WEIR_SHARED names that checkout where it lies elsewhere.
    let shared = std::env::var_os("WEIR_SHARED").map_or_else(|| Path::new(REPO_ROOT).join("../shared"), Into::into);
    let canonical = shared.join("bench/gen_corpus.py");
    assert!(
        canonical.exists(),
        "{} is missing: check the shared benchmark workload out beside the repository (or set WEIR_SHARED to it)",
        canonical.display()
    );
    let dir = tempfile::tempdir().unwrap();
    write_corpus(&canonical, 3000, &dir.path().join("canonical.txt"));
    write_corpus(&Path::new(REPO_ROOT).join("scripts/gen_corpus.py"), 3000, &dir.path().join("ours.txt"));
    for suffix in ["txt", "counts.json"] {
        let read = |name: &str| std::fs::read(dir.path().join(format!("{name}.{suffix}"))).unwrap();
        assert!(read("canonical") == read("ours"), "the .{suffix} files differ");
    }
}

#[test]
fn a_bundle_inspects_and_runs_like_its_component() {
    let corpus = corpus_20k();
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("wc.weir");
    let bundle_path = bundle.to_str().unwrap();
    let out = weir_ok(&["bundle", WORD_COUNT, "-o", bundle_path]);
    assert!(text(&out).contains("word-count from word_count.wasm"), "{}", text(&out));

    let inspected = text(&weir_ok(&["inspect", bundle_path]));
    for line in [
        "WIT weir:topology@0.1.0",
        "topology word-count (component word_count.wasm)",
        "spout: file lines (built in), transactional -> [sentence]",
        "state counts (transactional)",
        "query words",
        "each split <- spout: [sentence] -> [word]",
        "persistent-aggregate count <- split: group by [word], built-in count (in the host) count: [] -> [count], into state counts",
        "query-stream query-words: query words -> [args]",
        "partition partition-5 <- split-args: by [word]",
        "state-query get-count <- partition-5: [word] -> [count] with map-get (in the host) on state counts",
        "aggregate sum <- get-count: built-in sum (in the host) sum: [count] -> [sum]",
        "sandbox: the host's limits, no capabilities",
    ] {
        assert!(inspected.contains(line), "{line:?} missing from:\n{inspected}");
    }
    let json: serde_json::Value = serde_json::from_slice(&weir_ok(&["inspect", bundle_path, "--json"]).stdout).unwrap();
    assert_eq!(json["topologies"][0]["definition"]["name"], "word-count");
    assert_eq!(json["components"][0]["size"], std::fs::metadata(WORD_COUNT).unwrap().len());
    let hostile = text(&weir_ok(&["inspect", HOSTILE]));
    assert!(hostile.contains("sandbox of attacker: memory MiB 16"), "{hostile}");

    let data = dir.path().join("data");
    weir_ok(&run_args(bundle_path, &data, &corpus.path, &[]));
    assert_counts_eq(&counts(&data, "word-count"), &corpus.truth);
}

#[test]
fn damaged_bundles_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.weir");
    weir_ok(&["bundle", WORD_COUNT, "-o", good.to_str().unwrap()]);
    let bytes = std::fs::read(&good).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let mut flipped = bytes.clone();
    *flipped.last_mut().unwrap() ^= 0xff;
    let at = bytes.windows(19).position(|w| w == b"weir:topology@0.1.0").unwrap();
    let mut future = bytes.clone();
    future[at..at + 19].copy_from_slice(b"weir:topology@9.0.0");
    let cases = [
        (write("flipped.weir", &flipped), "component word_count.wasm does not match its checksum"),
        (
            write("future.weir", &future),
            "targets weir:topology@9.0.0, which this host does not run; it supports weir:topology@0.1.x",
        ),
        (write("truncated.weir", &bytes[..bytes.len() - 100]), "is truncated in component word_count.wasm"),
        (write("header.weir", &bytes[..10]), "is truncated in its header"),
    ];
    let data = dir.path().join("data");
    let input = corpus_20k().path.to_str().unwrap();
    for (bundle, reason) in &cases {
        assert_fails_with(&["inspect", bundle], reason);
        assert_fails_with(&["run", bundle, "--data", data.to_str().unwrap(), "--input", input], reason);
    }
    assert!(!data.exists(), "a refused bundle left a data dir behind");
}

#[test]
fn weir_new_scaffolds_a_guest_that_runs_at_once() {
    let corpus = corpus_20k();
    let dir = tempfile::tempdir().unwrap();
    let created = weir().current_dir(dir.path()).args(["new", "demo"]).output().unwrap();
    assert!(created.status.success(), "{}", text(&created));
    for file in ["Cargo.toml", "src/lib.rs", "README.md"] {
        assert!(dir.path().join("demo").join(file).exists(), "{file} missing");
    }
    let again = weir().current_dir(dir.path()).args(["new", "demo"]).output().unwrap();
    assert!(String::from_utf8_lossy(&again.stderr).contains("demo already exists"));
    let output = weir()
        .current_dir(dir.path())
        .args(["run", "demo", "--data", "data", "--input", corpus.path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    assert_counts_eq(&counts(&dir.path().join("data"), "demo"), &corpus.truth);
}

#[test]
fn the_run_report_holds_each_topologys_figures_and_the_processs_peak_memory() {
    let corpus = corpus_20k();
    let dir = tempfile::tempdir().unwrap();
    let (data, report) = (dir.path().join("data"), dir.path().join("report.json"));
    let extra = ["--batch-size", "5000", "--report-json", report.to_str().unwrap()];
    weir_ok(&run_args(WORD_COUNT, &data, &corpus.path, &extra));
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let figures = &report[0];
    assert_eq!(figures["topology"], "word-count", "{report}");
    assert_eq!(figures["batches"], 4, "{report}");
    assert_eq!(figures["tuples"], 20_000, "{report}");
    // The process's own peak: a wasmtime host holds megabytes, and far
    // less than a gigabyte for this run.
    let peak = figures["process_peak_rss_kib"].as_u64().unwrap_or_else(|| panic!("no peak memory: {report}"));
    assert!((4 * 1024..1024 * 1024).contains(&peak), "peak resident memory {peak} KiB: {report}");
}

/// `lines` lines of ten words each, every word new: a state that grows with
/// every batch.
fn distinct_words(lines: usize) -> Vec<String> {
    (0..lines).map(|l| (0..10).map(|w| format!("w{:06}", l * 10 + w)).collect::<Vec<_>>().join(" ")).collect()
}

#[test]
fn a_commit_past_max_state_mib_halts_naming_the_state_and_keeps_what_committed() {
    let dir = tempfile::tempdir().unwrap();
    let (input, data) = (dir.path().join("wide.txt"), dir.path().join("data"));
    let lines = distinct_words(8000);
    write_lines(&input, &lines);
    let args = run_args(WORD_COUNT, &data, &input, &["--batch-size", "500", "--max-state-mib", "1"]);
    let stderr = failed_stderr(&weir_output(&args));
    for part in ["topology word-count", "past --max-state-mib 1 (1048576 bytes)", "state counts would hold"] {
        assert!(stderr.contains(part), "{part:?} missing from:\n{stderr}");
    }
    // What committed before the halt is kept, batch for batch.
    let committed = last_committed(&data, "word-count") as usize;
    assert!(committed > 0 && committed < 16, "committed {committed} of 16 batches");
    assert_counts_eq(&counts(&data, "word-count"), &count_words(&lines[..committed * 500]));
    // Raised, the run resumes where it halted; a small page cache changes
    // nothing of what is stored.
    let raised = run_args(
        WORD_COUNT,
        &data,
        &input,
        &["--batch-size", "500", "--max-state-mib", "16", "--max-db-cache-mib", "1"],
    );
    weir_ok(&raised);
    assert_counts_eq(&counts(&data, "word-count"), &count_words(&lines));
    assert_fails_with(&[&raised[..], &["--max-db-cache-mib", "0"]].concat(), "--max-db-cache-mib");
}
