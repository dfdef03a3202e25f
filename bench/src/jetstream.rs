//! The JetStream row: the same word count reading the corpus from a local
//! NATS JetStream stream (4 partitions, file storage) instead of the file,
//! measured in the same rounds as the file spout's row. A `nats-server` per
//! corpus size holds its stream `corpus`, published once by `weir
//! publish`; each run commits into a fresh data dir.

use super::owned::Owned;
use super::{Bench, Measured, SMALL, check_counts, figures, measure, median, ms, steady, weir_counts};
use anyhow::{Context, Result, bail};
use serde_json::{Value as Json, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Sentences per partition per batch: 4 partitions make the file spout's
/// batch of 10,000 sentences.
pub const PER_PARTITION: u64 = 2500;

/// A server process of the benchmark's own (a log's broker), killed when
/// dropped.
pub struct Service {
    pub child: Owned,
}

impl Service {
    /// Starts `command` as `name`, and waits until it takes connections
    /// on `port`.
    pub fn start(name: &str, command: &mut Command, port: u16) -> Result<Service> {
        let service = Service { child: Owned::new(command.spawn().with_context(|| format!("starting {name}"))?) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("{name} did not listen on port {port} within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(service)
    }
}

/// `scripts/ensure-services`' tools dir: `$WEIR_TOOLS_DIR`, by default
/// `~/.local/share/weir-tools`.
pub fn tools_dir() -> Option<PathBuf> {
    std::env::var_os("WEIR_TOOLS_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share/weir-tools")))
}

/// A free loopback port.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The binary `name`: the file `env` names, else the first of `first` and
/// the PATH's that exists; `missing` says how to install it.
pub fn binary(env: &str, name: &str, first: Option<PathBuf>, missing: &str) -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(env) {
        return Ok(PathBuf::from(path));
    }
    let paths = std::env::var_os("PATH").unwrap_or_default();
    first
        .into_iter()
        .chain(std::env::split_paths(&paths).map(|p| p.join(name)))
        .chain([PathBuf::from("/usr/sbin").join(name)])
        .find(|p| p.is_file())
        .with_context(|| format!("{name} is not installed ({missing}), or set {env}"))
}

/// `weir run` of `wasm` into the fresh data dir `data`, reading its log
/// with `log` (`--nats URL`, `--kafka BROKERS`), a partition's
/// `PER_PARTITION` records a batch, reporting into `report`.
pub fn weir_run(bench: &Bench, wasm: &Path, data: &Path, log: [&str; 2], report: &Path) -> Result<Measured> {
    let _ = std::fs::remove_dir_all(data);
    let mut command = Command::new(&bench.weir);
    command.arg("run").arg(wasm).arg("--cache-dir").arg(bench.work.join("cache"));
    command.arg("--data").arg(data).args(log);
    command.args(["--batch-size", &PER_PARTITION.to_string(), "--max-pending", "4"]);
    command.arg("--report-json").arg(report);
    command.stdout(Stdio::null()).env("WEIR_LOG", "warn");
    measure(command, report)
}

/// A `nats-server` of the benchmark's own, killed when dropped.
pub struct NatsServer {
    service: Service,
    pub url: String,
    /// The server's monitoring endpoint (`/varz`, `/jsz`).
    pub monitor: String,
}

impl NatsServer {
    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.service.child.id()
    }

    /// Starts a server storing its streams under `dir`, on a free port.
    pub fn start(dir: &Path) -> Result<NatsServer> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)?;
        let (port, monitor) = (free_port()?, free_port()?);
        // The release `scripts/ensure-services` installs (the one the tests
        // run) first, then the PATH's or Debian's.
        let release = tools_dir().map(|t| t.join("nats-server-2.15.1/bin/nats-server"));
        let missing = "scripts/ensure-services installs it";
        let mut command = Command::new(binary("WEIR_NATS_SERVER", "nats-server", release, missing)?);
        command
            .args(["-js", "-sd"])
            .arg(dir.join("store"))
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-m", &monitor.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Ok(NatsServer {
            service: Service::start("nats-server", &mut command, port)?,
            url: format!("nats://127.0.0.1:{port}"),
            monitor: format!("http://127.0.0.1:{monitor}"),
        })
    }

    /// Publishes the lines of `corpus` into stream `corpus`, round-robin
    /// over corpus.0 to corpus.3.
    fn publish(&self, weir: &Path, corpus: &Path) -> Result<()> {
        self.publish_over(weir, corpus, "corpus.{0..3}")
    }

    /// Publishes the lines of `corpus` into stream `corpus`, round-robin
    /// over `subjects` (braces expand).
    pub fn publish_over(&self, weir: &Path, corpus: &Path, subjects: &str) -> Result<()> {
        weir_publish(weir, corpus, &["--nats", &self.url, "--stream", "corpus", "--subjects", subjects, "--create"])
    }
}

/// `weir publish` of the lines of `corpus` with `args` (where to).
pub fn weir_publish(weir: &Path, corpus: &Path, args: &[&str]) -> Result<()> {
    let status = Command::new(weir)
        .arg("publish")
        .args(args)
        .arg(corpus)
        .stdout(Stdio::null())
        .env("WEIR_LOG", "warn")
        .status()?;
    if !status.success() {
        bail!("weir publish {} of {} failed", args.join(" "), corpus.display());
    }
    Ok(())
}

/// The component of `examples/word-count-jetstream`.
pub fn wasm(root: &Path) -> PathBuf {
    root.join("target/guests/wasm32-wasip2/release/word_count_jetstream.wasm")
}

/// One run over `server`'s stream into a fresh data dir.
pub fn run_once(bench: &Bench, wasm: &Path, server: &NatsServer, round: usize) -> Result<(Measured, PathBuf)> {
    let data = bench.work.join(format!("data-jetstream-{round}"));
    let report = bench.work.join("report-jetstream.json");
    Ok((weir_run(bench, wasm, &data, ["--nats", &server.url], &report)?, data))
}

/// The JetStream row over `sentences` (and [`SMALL`]) sentences, median of
/// `runs`, each round also running the file spout's word count
/// (`file_run`) so that both rows meet the same spells of the machine.
/// Returns the table's rows and the figures.
pub fn rows(
    bench: &Bench,
    wasm: &Path,
    sentences: u64,
    runs: usize,
    mut file_run: impl FnMut(u64, usize) -> Result<Measured>,
) -> Result<(Vec<String>, Json)> {
    let (big_corpus, small_corpus) = (bench.corpus(sentences)?, bench.corpus(SMALL)?);
    eprintln!("publishing {sentences} and {SMALL} sentences into local JetStream streams");
    let big_server = NatsServer::start(&bench.work.join("nats-big"))?;
    big_server.publish(&bench.weir, &big_corpus)?;
    let small_server = NatsServer::start(&bench.work.join("nats-small"))?;
    small_server.publish(&bench.weir, &small_corpus)?;
    let (mut file, mut stream) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    for round in 0..runs {
        eprintln!("JetStream round {} of {runs}: file and JetStream spouts at {sentences} and {SMALL}", round + 1);
        file.0.push(file_run(sentences, round)?);
        file.1.push(file_run(SMALL, round)?);
        stream.0.push(run_once(bench, wasm, &big_server, round)?.0);
        stream.1.push(run_once(bench, wasm, &small_server, round)?.0);
    }
    let (_, data) = run_once(bench, wasm, &big_server, 99)?;
    check_counts(weir_counts(&data)?, &big_corpus).context("the JetStream run's counts")?;
    let mut rows = Vec::new();
    let mut out = serde_json::Map::new();
    let mut rates = Vec::new();
    for (name, (big, small)) in [("file spout", file), ("JetStream spout", stream)] {
        let (big, small) = (median(big), median(small));
        let rate = steady(sentences, &big, &small);
        rates.push(rate);
        rows.push(format!(
            "| {name} | {:.2} | {:.2} M | {} / {} | {:.0} |",
            big.wall.as_secs_f64(),
            rate / 1e6,
            ms(&big.report["commit_p50_ms"]),
            ms(&big.report["commit_p99_ms"]),
            big.peak_rss_kib as f64 / 1024.0,
        ));
        out.insert(name.into(), json!({ "full": figures(&big), "small": figures(&small), "steady_words_per_s": rate }));
    }
    out.insert("jetstream_file_ratio".into(), json!(rates[1] / rates[0]));
    out.insert("counts_exact".into(), json!(true));
    Ok((rows, Json::Object(out)))
}

/// Prints the rows of [`rows`] with their ratio.
pub fn print(sentences: u64, runs: usize, rows: &[String], figures: &Json) {
    println!(
        "word count from a file and from a local JetStream stream (4 partitions, {PER_PARTITION} a partition per \
         batch), {sentences} sentences, batch 10,000, max pending 4, median of {runs} runs"
    );
    println!("| spout | wall s | steady words/s | commit p50 / p99 ms | peak RSS MiB |");
    println!("|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    println!("JetStream/file ratio (steady words/s): {:.2}", figures["jetstream_file_ratio"].as_f64().unwrap_or(0.0));
}
