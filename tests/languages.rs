//! Guests in Python and JavaScript: their SDKs' own tests (the shared codec
//! and topology vectors among them), word counts exactly equal to the
//! ground truth and to the Rust example's, a bundle whose topology runs a
//! Rust spout, a Python function and a JavaScript aggregator exactly once
//! through a replayed batch, `weir new --lang python|js`, and a guest's
//! exception naming the file and line it came from.
//!
//! The toolchains are the pinned ones `scripts/guest-toolchains` installs
//! (it runs first, and does nothing when they are there). Built guests and
//! their compiled code are kept in the run's cache, so each is built and
//! compiled once.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

fn toolchains() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let status = Command::new(Path::new(REPO_ROOT).join("scripts/guest-toolchains")).status().expect("run it");
        assert!(status.success(), "scripts/guest-toolchains could not install componentize-py and componentize-js");
    });
}

fn succeeds(command: &mut Command) -> String {
    let output = command.current_dir(REPO_ROOT).output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(output.status.success(), "{command:?} failed:\n{}", text(&output));
    text(&output)
}

#[test]
fn the_python_sdk_passes_its_tests_and_the_shared_vectors() {
    let out =
        succeeds(Command::new("python3").args(["-m", "unittest", "discover", "-v", "-s", "guest-sdk/python/tests"]));
    for test in [
        "test_shared_vectors_decode_and_encode_byte_for_byte",
        "test_the_builder_writes_the_rust_builders_definitions_byte_for_byte",
    ] {
        assert!(out.lines().any(|l| l.starts_with(test) && l.ends_with("... ok")), "{test} did not pass:\n{out}");
    }
    assert!(out.trim_end().ends_with("OK"), "{out}");
}

#[test]
fn the_javascript_sdk_passes_its_tests_and_the_shared_vectors() {
    let out = succeeds(Command::new("node").args(["--test", "guest-sdk/js/test/"]));
    assert!(out.contains("ok 1 - the shared vectors decode and encode byte for byte"), "{out}");
    assert!(out.contains("the builder writes the Rust builder's definitions byte for byte"), "{out}");
    assert!(out.contains("# fail 0"), "{out}");
}

/// The Rust example's counts over the 20,000-sentence corpus.
fn rust_counts() -> &'static BTreeMap<String, i64> {
    static COUNTS: OnceLock<BTreeMap<String, i64>> = OnceLock::new();
    COUNTS.get_or_init(|| {
        let (data, _) = over_corpus(weir_ok, WORD_COUNT, &[]);
        counts(data.path(), "word-count")
    })
}

/// Runs the word-count guest in `examples/<example>` over the corpus, and
/// checks its counts and its `words` query.
fn word_count(example: &str) {
    toolchains();
    let corpus = corpus_20k();
    let dir = Path::new(REPO_ROOT).join("examples").join(example);
    let (data, output) = over_corpus(weir_ok, dir.to_str().unwrap(), &[]);
    let out = text(&output);
    assert!(out.contains("word-count: committed 20 batches (20000 tuples)"), "{out}");
    let got = counts(data.path(), "word-count");
    assert_counts_eq(&got, &corpus.truth);
    assert_counts_eq(&got, rust_counts());
    // The query stream: split by the guest, looked up and summed by the host;
    // the arguments' odd spacing takes the split's slower path.
    let data = data.path().to_str().unwrap();
    let answer =
        weir_ok(&["query", "--data", data, "--topology", "word-count", "--query", "words", "--args", " w1  w2\tnope "]);
    let answer = String::from_utf8_lossy(&answer.stdout);
    let want = corpus.truth["w1"] + corpus.truth["w2"];
    assert_eq!(answer.lines().last(), Some(format!("[[{want}]]").as_str()), "{answer}");
}

#[test]
fn the_python_word_count_is_exact_and_equal_to_the_rust_one() {
    word_count("word-count-py");
}

#[test]
fn the_javascript_word_count_is_exact_and_equal_to_the_rust_one() {
    word_count("word-count-js");
}

/// examples/polyglot/spout's sentences, counted here.
fn polyglot_truth() -> BTreeMap<String, i64> {
    const WORDS: [&str; 12] =
        ["the", "river", "weir", "flows", "over", "stone", "and", "salmon", "leap", "in", "cold", "water"];
    let mut truth = BTreeMap::new();
    for n in 0..2_000u64 {
        for k in 0..n % 5 + 3 {
            *truth.entry(WORDS[((n * 7 + k * 5 + n / 3) % 12) as usize].to_owned()).or_insert(0) += 1;
        }
    }
    truth
}

#[test]
fn a_polyglot_bundle_runs_exactly_once_through_a_replayed_batch() {
    toolchains();
    let dir = tempfile::tempdir().unwrap();
    let example = Path::new(REPO_ROOT).join("examples/polyglot");
    let data = dir.path().join("data");
    let output = weir().args(["run", example.to_str().unwrap(), "--data", data.to_str().unwrap()]).output().unwrap();
    let out = text(&output);
    assert!(output.status.success(), "{out}");
    // The Python split fails batch 2's first attempt: replayed, counted once.
    assert!(out.contains("txid 2 attempt 0 failed: operator split: retry: batch 2 fails its first attempt"), "{out}");
    assert!(out.contains("polyglot: committed 20 batches (2000 tuples)"), "{out}");
    assert!(out.contains("1 failed attempts replayed"), "{out}");
    assert_counts_eq(&counts(&data, "polyglot"), &polyglot_truth());

    // The same directory as one bundle file: its manifest says which
    // component runs which operator, and it runs the same.
    let bundle = dir.path().join("polyglot.weir");
    let bundled = weir().args(["bundle", example.to_str().unwrap(), "-o", bundle.to_str().unwrap()]).output().unwrap();
    assert!(bundled.status.success(), "{}", text(&bundled));
    let inspected = weir_ok(&["inspect", "--json", bundle.to_str().unwrap()]);
    let manifest: serde_json::Value = serde_json::from_slice(&inspected.stdout).unwrap();
    let components: Vec<&str> =
        manifest["components"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(components, ["count.wasm", "split.wasm", "spout.wasm"]);
    let topology = &manifest["topologies"][0];
    assert_eq!(topology["component"], "spout.wasm");
    assert_eq!(topology["operators"], serde_json::json!({"count": "count.wasm", "split": "split.wasm"}));
    let again = dir.path().join("again");
    let output = weir_ok(&["run", bundle.to_str().unwrap(), "--data", again.to_str().unwrap()]);
    assert!(text(&output).contains("1 failed attempts replayed"), "{}", text(&output));
    assert_counts_eq(&counts(&again, "polyglot"), &polyglot_truth());
}

#[test]
fn weir_new_scaffolds_python_and_javascript_guests_that_run_at_once() {
    toolchains();
    let corpus = corpus_20k();
    let dir = tempfile::tempdir().unwrap();
    for (lang, name, files) in [
        ("python", "demo-py", &["app.py", "test_app.py", "README.md", ".gitignore"]),
        ("js", "demo-js", &["app.js", "app.test.js", "package.json", "README.md"]),
    ] {
        let created = weir().current_dir(dir.path()).args(["new", name, "--lang", lang]).output().unwrap();
        assert!(created.status.success(), "{}", text(&created));
        for file in files {
            assert!(dir.path().join(name).join(file).exists(), "{name}: {file} missing");
        }
        let output = weir()
            .current_dir(dir.path())
            .args(["run", name, "--data", &format!("{name}/data"), "--input", corpus.path.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(output.status.success(), "{name}: {}", text(&output));
        assert_counts_eq(&counts(&dir.path().join(name).join("data"), name), &corpus.truth);
    }
    // The Python guest's own test runs in plain Python.
    let tested =
        Command::new("python3").args(["-m", "unittest"]).current_dir(dir.path().join("demo-py")).output().unwrap();
    assert!(tested.status.success(), "{}", text(&tested));
}

/// Runs a guest of the one file `app` holding `source` (failing on every
/// batch) with one replay, returning what `weir run` printed: the replay's
/// log line and the halt message.
fn failing_run(app: &str, source: &str) -> String {
    toolchains();
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    std::fs::write(dir.join(app), source).unwrap();
    std::fs::write(dir.join("input.txt"), "one two\nthree four\n").unwrap();
    let data = dir.join("data");
    let output = weir()
        .args(["run", dir.to_str().unwrap(), "--data", data.to_str().unwrap()])
        .args(["--input", dir.join("input.txt").to_str().unwrap(), "--max-attempts", "2", "--retry-backoff-ms", "1"])
        .output()
        .unwrap();
    let out = text(&output);
    assert!(!output.status.success(), "{out}");
    assert!(out.contains("halted: txid 1 failed 2 times"), "{out}");
    out
}

/// A topology whose split calls `letters`, the function that fails.
const FAILING_PY: &str = "from weir import Count, FileLines, State, Topology


def letters(word):
    return len(word) + 1


def split(t):
    words = t.str(0).split()
    return [[letters(len(words))]]


def topology():
    t = Topology(\"failing\")
    t.new_stream(FileLines(\"sentence\")).each([\"sentence\"], split, [\"n\"]).name(\"split\").group_by(
        [\"n\"]
    ).persistent_aggregate(State.transactional(\"counts\"), Count, [\"count\"])
    return t.build()
";

#[test]
fn a_python_exception_names_its_file_and_line_in_the_log_and_the_halt_message() {
    let out = failing_run("app.py", FAILING_PY);
    let error = "TypeError: object of type 'int' has no len()";
    let innermost = "File \"app.py\", line 5, in letters";
    let caller = "File \"app.py\", line 10, in split";
    // The replay's log line, then the halt message (the guest's own
    // stderr names its files by their paths inside the component).
    assert_eq!(out.matches(&format!("retry: {error}")).count(), 2, "{out}");
    for place in [innermost, caller] {
        assert_eq!(out.matches(place).count(), 2, "{place} is not in both:\n{out}");
    }
    let halt = &out[out.find("halted: txid 1").unwrap()..];
    assert!(halt.find(caller) < halt.find(innermost), "innermost call last, as Python prints it:\n{halt}");
    assert!(!halt.contains("dispatch.py"), "the SDK's frames are left out:\n{halt}");
}

const FAILING_JS: &str = "import { Count, FileLines, State, Topology } from \"weir\";

function letters(word) {
  return word.missing.length;
}

const split = (t) => [[letters(t.str(0))]];

export function topology() {
  const t = new Topology(\"failing\");
  t.newStream(new FileLines(\"sentence\"))
    .each([\"sentence\"], split, [\"n\"])
    .name(\"split\")
    .groupBy([\"n\"])
    .persistentAggregate(State.transactional(\"counts\"), Count, [\"count\"]);
  return t.build();
}
";

#[test]
fn a_javascript_error_names_its_file_and_line_in_the_log_and_the_halt_message() {
    let out = failing_run("app.js", FAILING_JS);
    let error = "retry: TypeError: can't access property \"length\", word.missing is undefined";
    assert_eq!(out.matches(error).count(), 2, "{out}");
    let places = ["    at letters (app.js:4:", "    at split (app.js:7:"];
    for place in places {
        assert_eq!(out.matches(place).count(), 2, "{place} is not in both:\n{out}");
    }
    let halt = &out[out.find("halted: txid 1").unwrap()..];
    assert!(halt.find(places[0]) < halt.find(places[1]), "innermost call first, as the stack has it:\n{halt}");
    assert!(!halt.contains("(weir:"), "the SDK's frames are left out:\n{halt}");
}
