//! What the integration tests share: the real `weir` binary, the canonical
//! corpus and its ground truth, and reading state back through the CLI.

#![allow(dead_code)]

pub mod browser;
pub mod etcd;
pub mod hand_made;
pub mod kill;
pub mod nats;
pub mod server;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

// Every guest's constant, by name: naming each here would count as a use.
pub use weir_test_guests::*;

/// The `weir` binary, with a compiled-component cache shared by every test
/// of the run, so that each component is compiled once, and the guest
/// crates it builds built in one target dir.
pub fn weir() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
    command.env("WEIR_CACHE_DIR", Path::new(GUEST_TARGET_DIR).join("compiled-cache"));
    command.env("CARGO_TARGET_DIR", GUEST_TARGET_DIR);
    // WEIR_TEST_LOG (say `weir=debug`) sets the processes' log filter.
    command.env("WEIR_LOG", std::env::var("WEIR_TEST_LOG").unwrap_or_else(|_| "weir=info".into()));
    command
}

/// Runs `weir` with `args`, returning its output whatever its status.
pub fn weir_output(args: &[&str]) -> Output {
    weir().args(args).output().expect("run weir")
}

/// A shell that kills process `pid` with SIGKILL once this test process's
/// end of its stdin closes, however this process ends: a service a test
/// started never outlives the test binary.
pub fn watchdog(pid: u32) -> std::process::Child {
    Command::new("sh")
        .args(["-c", &format!("read _ignored; kill -9 {pid} 2>/dev/null")])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a watchdog")
}

/// A process run to its end within a time bound.
pub struct Bounded {
    /// What it printed, and how it exited.
    pub output: Output,
    /// The highest resident memory seen (VmHWM), in KiB.
    pub peak_rss_kib: u64,
}

/// Kills a service started beside its [`watchdog`]: the watchdog, then the
/// service with SIGKILL, as a crash would.
pub fn kill_service(server: &mut Option<std::process::Child>, watchdog: &mut Option<std::process::Child>) {
    for child in [watchdog, server] {
        if let Some(mut child) = child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The peak resident memory (VmHWM) of process `pid` so far, in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    line.trim().strip_suffix("kB")?.trim().parse().ok()
}

/// Runs `command` to its end, watching its peak memory; kills it and fails
/// the test if it is still running after `limit`.
pub fn run_bounded(command: &mut Command, limit: Duration) -> Bounded {
    let started = Instant::now();
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the command");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let mut peak = 0;
    let status = loop {
        peak = peak.max(peak_rss_kib(child.id()).unwrap_or(0));
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = String::from_utf8_lossy(&stderr.join().unwrap()).into_owned();
            panic!("{command:?} was still running after {limit:?}:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = Output { status, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() };
    Bounded { output, peak_rss_kib: peak }
}

/// Runs `weir` with `args` within `limit` (see [`run_bounded`]).
pub fn weir_bounded(args: &[&str], limit: Duration) -> Bounded {
    run_bounded(weir().args(args), limit)
}

/// Text of stdout and stderr together.
pub fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// Runs `weir` and asserts it succeeded.
pub fn weir_ok(args: &[&str]) -> Output {
    let output = weir_output(args);
    assert!(output.status.success(), "weir {args:?} failed:\n{}", text(&output));
    output
}

/// A corpus of `sentences` sentences from the canonical generator.
pub struct Corpus {
    _dir: tempfile::TempDir,
    /// The sentences, one per line.
    pub path: PathBuf,
    /// The exact count of each word.
    pub truth: BTreeMap<String, i64>,
}

fn generate(sentences: usize) -> Corpus {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corpus.txt");
    write_corpus(&Path::new(REPO_ROOT).join("scripts/gen_corpus.py"), sentences, &path);
    let truth_text = std::fs::read_to_string(dir.path().join("corpus.counts.json")).unwrap();
    let truth = serde_json::from_str(&truth_text).unwrap();
    Corpus { _dir: dir, path, truth }
}

/// Writes the canonical corpus of `sentences` sentences with `script` into
/// `out` (and its ground truth beside it).
pub fn write_corpus(script: &Path, sentences: usize, out: &Path) {
    let status = Command::new("python3")
        .arg(script)
        .args(["-n", &sentences.to_string(), "-o"])
        .arg(out)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run python3");
    assert!(status.success(), "{} failed", script.display());
}

/// The 20,000-sentence corpus, generated once per test binary.
pub fn corpus_20k() -> &'static Corpus {
    static CORPUS: OnceLock<Corpus> = OnceLock::new();
    CORPUS.get_or_init(|| generate(20_000))
}

/// A state's entries as `weir state scan` prints them.
pub fn scan(data: &Path, topology: &str, state: &str) -> Vec<serde_json::Value> {
    let output =
        weir_ok(&["state", "scan", "--data", data.to_str().unwrap(), "--topology", topology, "--state", state]);
    String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The last txid `topology` committed in `data` (0 before its first commit).
pub fn last_committed(data: &Path, topology: &str) -> u64 {
    if !data.exists() {
        return 0;
    }
    weir_state::Db::open(data).unwrap().progress(topology).unwrap().last_committed
}

/// A word-count state read back as word => count.
pub fn counts(data: &Path, topology: &str) -> BTreeMap<String, i64> {
    scan(data, topology, "counts")
        .into_iter()
        .map(|entry| (entry["key"][0].as_str().unwrap().to_owned(), entry["value"].as_i64().unwrap()))
        .collect()
}

/// Asserts two count maps are equal, naming the first difference.
pub fn assert_counts_eq(got: &BTreeMap<String, i64>, want: &BTreeMap<String, i64>) {
    if got != want {
        let diff = want
            .iter()
            .find(|(k, v)| got.get(*k) != Some(v))
            .map(|(k, v)| format!("{k}: got {:?}, want {v}", got.get(k)))
            .or_else(|| got.keys().find(|k| !want.contains_key(*k)).map(|k| format!("unexpected word {k}")))
            .unwrap();
        panic!("counts differ ({} words, want {}): {diff}", got.len(), want.len());
    }
}

/// `weir run` arguments for `component` over `input` into `data`.
pub fn run_args<'a>(component: &'a str, data: &'a Path, input: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", component, "--data", data.to_str().unwrap(), "--input", input.to_str().unwrap()];
    args.extend_from_slice(extra);
    args
}

/// Runs the query `query` of `topology` against the committed state in
/// `data`: the result tuples `weir query` prints on its last line.
pub fn query(data: &Path, topology: &str, query: &str, args: &str) -> serde_json::Value {
    let output =
        weir_ok(&["query", "--data", data.to_str().unwrap(), "--topology", topology, "--query", query, "--args", args]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    let last = stdout.lines().last().unwrap_or_else(|| panic!("weir query {query} {args:?} printed nothing"));
    serde_json::from_str(last).unwrap_or_else(|e| panic!("weir query's last line {last:?} is not JSON: {e}"))
}

/// Word counts of `lines`, split on whitespace.
pub fn count_words(lines: &[&str]) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for word in lines.iter().flat_map(|l| l.split_whitespace()) {
        *counts.entry(word.to_owned()).or_insert(0) += 1;
    }
    counts
}
