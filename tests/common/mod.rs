//! What the integration tests share: the real `weir` binary, the canonical
//! corpus and its ground truth, and reading state back through the CLI.

#![allow(dead_code)]

pub mod browser;
pub mod etcd;
pub mod hand_made;
pub mod kafka;
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
    // WEIR_TEST_BIN: a `weir` of its own (one built into a shared target
    // directory is replaced by any other checkout's build).
    let binary = std::env::var_os("WEIR_TEST_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_weir").into());
    let mut command = Command::new(binary);
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

/// `scripts/ensure-services`' tools dir, where it installs the services that
/// do not come from Debian: `WEIR_TOOLS_DIR`, by default
/// `~/.local/share/weir-tools`.
pub fn tools_dir() -> PathBuf {
    std::env::var_os("WEIR_TOOLS_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".local/share/weir-tools")
    })
}

/// The binary of service `name`: where the environment variable `var`
/// says, else on the PATH, else at `fallback` if it is there.
pub fn service_binary(var: &str, name: &str, fallback: Option<&str>, package: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(var) {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join(name)).find(|p| p.is_file()));
    on_path.or_else(|| fallback.map(PathBuf::from).filter(|p| p.is_file())).unwrap_or_else(|| {
        panic!(
            "{name} is not installed: run scripts/ensure-services (Debian: apt-get install {package}), \
             or set {var} to its path"
        )
    })
}

/// A service process a test started (etcd, nats-server), beside its
/// [`watchdog`]; dropped, it is killed.
#[derive(Default)]
pub struct Service {
    server: Option<std::process::Child>,
    watchdog: Option<std::process::Child>,
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Service {
    /// Starts `command` (stdin and stdout closed) as the service `name`,
    /// beside a watchdog that kills it once this process's end of the pipe
    /// closes, and waits up to 30 s until its log at `log`, past what it
    /// held before, shows `ready`; returns that part of the log.
    pub fn launch(&mut self, name: &str, command: &mut Command, log: &Path, ready: &str) -> String {
        let log_before = std::fs::metadata(log).map_or(0, |m| m.len() as usize);
        let server =
            command.stdin(Stdio::null()).stdout(Stdio::null()).spawn().unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.watchdog = Some(watchdog(server.id()));
        self.server = Some(server);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let text = text.get(log_before..).unwrap_or_default();
            if text.contains(ready) {
                return text.to_owned();
            }
            if let Some(status) = self.server.as_mut().unwrap().try_wait().unwrap() {
                panic!("{name} exited ({status}) before it was ready:\n{text}");
            }
            assert!(Instant::now() < deadline, "{name} was not ready within 30 s:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts `command` as [`Service::launch`] does, its output into `log`,
    /// and waits up to 30 s until `ready` says it is.
    pub fn launch_polling(&mut self, name: &str, command: &mut Command, log: &Path, ready: &dyn Fn() -> bool) {
        let out = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
        let server = command
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.watchdog = Some(watchdog(server.id()));
        self.server = Some(server);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready() {
            let text = || std::fs::read_to_string(log).unwrap_or_default();
            if let Some(status) = self.server.as_mut().unwrap().try_wait().unwrap() {
                panic!("{name} exited ({status}) before it was ready:\n{}", text());
            }
            assert!(Instant::now() < deadline, "{name} was not ready within 30 s:\n{}", text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the watchdog, then the service with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        for child in [&mut self.watchdog, &mut self.server] {
            if let Some(mut child) = child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
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

/// A log service (a nats-server, a Kafka broker) this test binary's tests
/// share, each with streams or topics of its own, started on first use,
/// and the canonical corpus of 50,000 sentences loaded into it once.
pub struct SharedLog<L: 'static> {
    start: fn() -> L,
    log: OnceLock<L>,
    corpus: OnceLock<Corpus>,
}

impl<L> SharedLog<L> {
    pub const fn new(start: fn() -> L) -> SharedLog<L> {
        SharedLog { start, log: OnceLock::new(), corpus: OnceLock::new() }
    }

    /// The service, started on first use.
    pub fn log(&'static self) -> &'static L {
        self.log.get_or_init(self.start)
    }

    /// The canonical corpus, which `load` puts into the service on first use.
    pub fn corpus(&'static self, load: impl FnOnce(&L, &Corpus)) -> &'static Corpus {
        self.corpus.get_or_init(|| {
            let corpus = generate(50_000);
            load(self.log(), &corpus);
            corpus
        })
    }
}

/// The first `n` sentences of the 20,000-sentence corpus.
pub fn sentences(n: usize) -> Vec<String> {
    std::fs::read_to_string(&corpus_20k().path).unwrap().lines().take(n).map(str::to_owned).collect()
}

/// Writes `lines` to `path`, each ended by a newline.
pub fn write_lines<S: std::borrow::Borrow<str>>(path: &Path, lines: &[S]) {
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// Grows the input at `path` by `lines`, each ended by a newline. Never a
/// rewrite: between its truncation and its write a spout following it may
/// find the file shorter than what it has committed, and halt, as it should.
pub fn append_lines(path: &Path, lines: &[&str]) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all((lines.join("\n") + "\n").as_bytes()).unwrap();
}

/// The first `n` sentences of the 20,000-sentence corpus written to
/// `dir/input.txt`: its path, and that of a data dir beside it (not made).
pub fn sentences_input(dir: &Path, n: usize) -> (PathBuf, PathBuf) {
    let input = dir.join("input.txt");
    write_lines(&input, &sentences(n));
    (input, dir.join("data"))
}

/// A fresh temporary directory, and the path of a data dir in it (not made).
pub fn data_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    (dir, data)
}

/// A temporary directory holding `contents` as the input file `name`: the
/// directory, the input's path, and that of a data dir beside it (not made).
pub fn input_and_data(name: &str, contents: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join(name);
    std::fs::write(&input, contents).unwrap();
    let data = dir.path().join("data");
    (dir, input, data)
}

/// A state's entries as stored, txids and all, byte for byte (`weir state
/// scan --raw`).
pub fn raw_scan(data: &Path, topology: &str, state: &str) -> Vec<u8> {
    let data = data.to_str().unwrap();
    weir_ok(&["state", "scan", "--data", data, "--topology", topology, "--state", state, "--raw"]).stdout
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

/// `weir run` arguments for topology `topology` of `component` into
/// `data`, with no input file (its spout makes or reads its own input).
pub fn run_topology_args<'a>(component: &'a str, topology: &'a str, data: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", component, "--topology", topology, "--data", data.to_str().unwrap()];
    args.extend_from_slice(extra);
    args
}

/// The sums per last digit of the integers 0 to 19,999, as the spouts
/// guest's `sums` state keeps them.
pub fn digit_sums() -> Vec<serde_json::Value> {
    (0..10).map(|d: i64| serde_json::json!({"key": [d], "value": 19_990_000 + 2000 * d})).collect()
}

/// Runs `weir` with `run` (say [`weir_ok`] or [`weir_output`]) over the
/// 20,000-sentence corpus into a fresh data dir, `component` with `extra`
/// arguments: the data dir and what the run printed.
pub fn over_corpus(run: fn(&[&str]) -> Output, component: &str, extra: &[&str]) -> (tempfile::TempDir, Output) {
    let data = tempfile::tempdir().unwrap();
    let output = run(&run_args(component, data.path(), &corpus_20k().path, extra));
    (data, output)
}

/// The stderr of a `weir` that exited with status 1, as a halted or
/// refused run does.
pub fn failed_stderr(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(1), "{}", text(output));
    String::from_utf8_lossy(&output.stderr).into_owned()
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
pub fn count_words<S: AsRef<str>>(lines: &[S]) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for word in lines.iter().flat_map(|l| l.as_ref().split_whitespace()) {
        *counts.entry(word.to_owned()).or_insert(0) += 1;
    }
    counts
}
