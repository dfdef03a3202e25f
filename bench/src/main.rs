//! Weir's benchmark harness (`scripts/bench`).
//!
//! Runs word count over the canonical corpus through the real path (the
//! `weir` binary, the Wasm guest, durable redb commits) and, in the same run,
//! the same topology with its operators compiled natively into the host
//! through the same coordinator and commits: the baseline the Wasm figures
//! are read against; and the machine's limit for the workload (see
//! [`limit`]). Prints a table and writes JSON.

mod batch_sizes;
mod cluster;
mod jetstream;
mod kafka;
mod latency;
mod limit;
mod owned;
mod references;
mod sink;
mod targets;
mod windows;

use anyhow::{Context, Result, bail};
use batch_sizes::AtSize;
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_config::{RunConfig, SandboxConfig};
use weir_engine::coordinator;
use weir_engine::instances::OperatorSource;
use weir_io::spout::FileLines;
use weir_state::Db;

const WORDS_PER_SENTENCE: u64 = 8;
const SMALL: u64 = 1000;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("bench/ sits in the repository").to_owned()
}

/// Wall time and peak resident memory of one process.
struct Measured {
    wall: Duration,
    peak_rss_kib: u64,
    /// CPU seconds the process used, user and system.
    cpu_s: f64,
    report: Json,
}

/// Runs `command` to completion, measuring it; fails if it fails.
fn measure(mut command: Command, report: &Path) -> Result<Measured> {
    let started = Instant::now();
    let child = command.spawn().with_context(|| format!("starting {command:?}"))?;
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child's pid, with valid pointers to locals.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    let wall = started.elapsed();
    if pid < 0 {
        bail!("waiting for {command:?}: {}", std::io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{command:?} failed (wait status {status})");
    }
    let text = std::fs::read_to_string(report).with_context(|| format!("reading {}", report.display()))?;
    let report: Json = serde_json::from_str(&text)?;
    // weir's own figure: `ru_maxrss` also counts this process's memory at
    // the fork, which the counts checks grow.
    let peak_rss_kib = report[0]["process_peak_rss_kib"].as_u64().unwrap_or(usage.ru_maxrss as u64);
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu_s = seconds(usage.ru_utime) + seconds(usage.ru_stime);
    Ok(Measured { wall, peak_rss_kib, cpu_s, report: report[0].clone() })
}

struct Bench {
    work: PathBuf,
    weir: PathBuf,
    wasm: PathBuf,
}

#[derive(Clone, Copy, PartialEq)]
enum Engine {
    Wasm,
    WasmNoCpuLimit,
    Native,
    Limit,
    LimitGrouped,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Wasm => "wasm",
            Engine::WasmNoCpuLimit => "wasm, no CPU limit",
            Engine::Native => "native",
            Engine::Limit => "limit",
            Engine::LimitGrouped => "limit, group commit",
        }
    }
}

struct Config {
    engine: Engine,
    sentences: u64,
    batch_size: u64,
    max_pending: u64,
    parallelism: u64,
}

impl Bench {
    fn corpus(&self, sentences: u64) -> Result<PathBuf> {
        let path = self.work.join(format!("corpus-{sentences}.txt"));
        if !path.exists() {
            let status = Command::new("python3")
                .arg(repo().join("scripts/gen_corpus.py"))
                .args(["-n", &sentences.to_string(), "-o"])
                .arg(&path)
                .status()
                .context("running python3 scripts/gen_corpus.py")?;
            if !status.success() {
                bail!("generating the corpus failed");
            }
        }
        Ok(path)
    }

    /// One run of `config` into a fresh data dir; returns the data dir too.
    fn run_once(&self, config: &Config, index: usize) -> Result<(Measured, PathBuf)> {
        self.run_guest(&self.wasm, &self.corpus(config.sentences)?, config, index)
    }

    /// [`Bench::run_once`] of component `wasm` over `input`.
    fn run_guest(&self, wasm: &Path, input: &Path, config: &Config, index: usize) -> Result<(Measured, PathBuf)> {
        let data = self.work.join(format!("data-{index}"));
        let _ = std::fs::remove_dir_all(&data);
        let report = self.work.join("report.json");
        let batch = config.batch_size.to_string();
        let pending = config.max_pending.to_string();
        let parallelism = config.parallelism.to_string();
        let mut command = match config.engine {
            Engine::Native | Engine::Limit | Engine::LimitGrouped => {
                let mut command = Command::new(std::env::current_exe()?);
                command.arg(if config.engine == Engine::Native { "native" } else { "limit" });
                if config.engine == Engine::LimitGrouped {
                    command.args(["--group", &weir_config::DEFAULT_GROUP_MAX.to_string()]);
                }
                command
            }
            Engine::Wasm | Engine::WasmNoCpuLimit => {
                let mut command = Command::new(&self.weir);
                command.arg("run").arg(wasm).arg("--cache-dir").arg(self.work.join("cache"));
                if config.engine == Engine::WasmNoCpuLimit {
                    command.args(["--max-call-ms", "0"]);
                }
                command
            }
        };
        command.arg("--data").arg(&data).arg("--input").arg(input);
        command.args(["--batch-size", &batch, "--max-pending", &pending, "--parallelism", &parallelism]);
        command.arg("--report-json").arg(&report);
        command.stdout(std::process::Stdio::null()).env("WEIR_LOG", "warn");
        Ok((measure(command, &report)?, data))
    }
}

/// The median of some runs, by wall time.
fn median(mut runs: Vec<Measured>) -> Measured {
    runs.sort_by_key(|m| m.wall);
    runs.swap_remove(runs.len() / 2)
}

/// The counts a Weir run stored.
fn weir_counts(data: &Path) -> Result<BTreeMap<String, i64>> {
    let db = Db::open(data)?;
    let mut stored = BTreeMap::new();
    for (key, value) in db.scan("word-count", "counts")? {
        let (Some(weir_sdk::Value::Str(word)), weir_sdk::Value::I64(count)) = (key.first(), value.value()) else {
            bail!("unexpected entry {key:?} => {value:?}");
        };
        stored.insert(word.clone(), *count);
    }
    Ok(stored)
}

/// Checks the counts a run stored against the corpus's ground truth.
fn check_counts(stored: BTreeMap<String, i64>, corpus: &Path) -> Result<usize> {
    let truth_path = corpus.with_extension("counts.json");
    let truth: BTreeMap<String, i64> = serde_json::from_str(&std::fs::read_to_string(&truth_path)?)?;
    if stored != truth {
        bail!(
            "stored counts differ from {} ({} words stored, {} expected)",
            truth_path.display(),
            stored.len(),
            truth.len()
        );
    }
    Ok(stored.len())
}

fn steady(sentences: u64, big: &Measured, small: &Measured) -> f64 {
    let words = (WORDS_PER_SENTENCE * (sentences - SMALL)) as f64;
    words / (big.wall.as_secs_f64() - small.wall.as_secs_f64()).max(1e-9)
}

fn figures(m: &Measured) -> Json {
    json!({
        "wall_s": m.wall.as_secs_f64(),
        "peak_rss_mib": m.peak_rss_kib as f64 / 1024.0,
        "commit_p50_ms": m.report["commit_p50_ms"],
        "commit_p99_ms": m.report["commit_p99_ms"],
        "start_ms": m.report["start_ms"],
    })
}

/// Words per second of one run over `sentences` sentences, start-up included.
fn wall_rate(sentences: u64, m: &Measured) -> f64 {
    (WORDS_PER_SENTENCE * sentences) as f64 / m.wall.as_secs_f64()
}

fn ms(v: &Json) -> String {
    v.as_f64().map_or("-".into(), |v| format!("{v:.1}"))
}

/// What a run of the harness measures.
#[derive(Clone, Copy, PartialEq)]
enum Only {
    Everything,
    Languages,
    JetStream,
    Windows,
    Cluster,
    References,
    Kafka,
    Sink,
}

/// `quota`: the CPUs each weir process of the cluster rows is held to.
fn harness(sentences: u64, runs: usize, out: &Path, only: Only, quota: f64) -> Result<()> {
    let root = repo();
    let work = root.join("target/bench");
    std::fs::create_dir_all(&work)?;
    let bench = Bench {
        work,
        weir: root.join("target/release/weir"),
        wasm: root.join("target/guests/wasm32-wasip2/release/word_count.wasm"),
    };
    for needed in [&bench.weir, &bench.wasm] {
        if !needed.exists() {
            bail!("{} is missing: run scripts/bench, which builds it", needed.display());
        }
    }
    let main = |engine, sentences| Config { engine, sentences, batch_size: 10_000, max_pending: 4, parallelism: 1 };
    let (windows_wasm, open_wasm) = (windows::wasm(&root), windows::open_wasm(&root));
    let windows_rows = |runs| {
        for needed in [&windows_wasm, &open_wasm] {
            if !needed.exists() {
                bail!("{} is missing: run scripts/bench, which builds it", needed.display());
            }
        }
        windows::measure(&bench, &windows_wasm, &open_wasm, sentences, runs)
    };
    let jetstream_wasm = jetstream::wasm(&root);
    let jetstream_rows = |runs| {
        if !jetstream_wasm.exists() {
            bail!("{} is missing: run scripts/bench, which builds it", jetstream_wasm.display());
        }
        let file_run = |sentences, round| Ok(bench.run_once(&main(Engine::Wasm, sentences), round)?.0);
        jetstream::rows(&bench, &jetstream_wasm, sentences, runs, file_run)
    };
    if only != Only::Everything {
        // Only these figures, into the results of the last full run.
        let mut results: Json = match std::fs::read_to_string(out) {
            Ok(text) => serde_json::from_str(&text)?,
            Err(_) => json!({}),
        };
        if only == Only::Sink {
            let (lines, figures) = sink::rows(&bench, &sink::wasm(&root), runs)?;
            sink::print(runs, &lines);
            results["sink"] = json!({ "clicks": sink::CLICKS, "runs": runs, "figures": figures });
        } else if only == Only::Kafka {
            let kafka_wasm = kafka::wasm(&root);
            if !kafka_wasm.exists() {
                bail!("{} is missing: run scripts/bench, which builds it", kafka_wasm.display());
            }
            let (rows, figures) = kafka::rows(&bench, &kafka_wasm, sentences, runs)?;
            kafka::print(sentences, runs, &rows, &figures);
            results["kafka"] = json!({ "sentences": sentences, "runs": runs, "figures": figures });
        } else if only == Only::References {
            if !jetstream_wasm.exists() {
                bail!("{} is missing: run scripts/bench, which builds it", jetstream_wasm.display());
            }
            results["references"] = references::measure(&bench, &jetstream_wasm, sentences, runs)?;
        } else if only == Only::Cluster {
            if !jetstream_wasm.exists() {
                bail!("{} is missing: run scripts/bench, which builds it", jetstream_wasm.display());
            }
            let (lines, figures) = cluster::rows(&bench, &jetstream_wasm, sentences, runs, quota)?;
            cluster::print(&lines);
            results["cluster"] = json!({ "sentences": sentences, "runs": runs, "figures": figures });
        } else if only == Only::Languages {
            let (rows, figures) = languages(&bench, sentences)?;
            print_languages(sentences, &rows);
            results["languages"] = json!({ "sentences": sentences, "guests": figures });
        } else if only == Only::Windows {
            let windowed = windows_rows(runs)?;
            windows::print(&windowed, runs);
            results["windows"] = windows::json(&windowed);
        } else {
            let (rows, figures) = jetstream_rows(runs)?;
            jetstream::print(sentences, runs, &rows, &figures);
            results["jetstream"] = json!({ "sentences": sentences, "runs": runs, "figures": figures });
        }
        std::fs::write(out, serde_json::to_string_pretty(&results)? + "\n")?;
        eprintln!("wrote {}", out.display());
        return Ok(());
    }
    let mut results = serde_json::Map::new();
    let mut rows = Vec::new();
    let mut steady_rates = BTreeMap::new();
    let engines = [Engine::Wasm, Engine::Native, Engine::WasmNoCpuLimit, Engine::Limit];
    // Each round runs every engine once: a slow spell of this shared
    // machine then falls on all of them, not on one engine's runs.
    let mut measured: Vec<(Vec<Measured>, Vec<Measured>)> = engines.iter().map(|_| Default::default()).collect();
    for round in 0..runs {
        eprintln!("round {} of {runs}: each engine at {sentences} and {SMALL} sentences", round + 1);
        for (engine, (big, small)) in engines.iter().zip(&mut measured) {
            big.push(bench.run_once(&main(*engine, sentences), round)?.0);
            small.push(bench.run_once(&main(*engine, SMALL), round)?.0);
        }
    }
    for (engine, (big, small)) in engines.into_iter().zip(measured) {
        let (big, small) = (median(big), median(small));
        let rate = steady(sentences, &big, &small);
        steady_rates.insert(engine.name(), rate);
        rows.push(format!(
            "| {} | {:.2} | {:.2} M | {} / {} | {:.0} | {} |",
            engine.name(),
            big.wall.as_secs_f64(),
            rate / 1e6,
            ms(&big.report["commit_p50_ms"]),
            ms(&big.report["commit_p99_ms"]),
            big.peak_rss_kib as f64 / 1024.0,
            ms(&small.report["start_ms"]),
        ));
        results.insert(
            engine.name().into(),
            json!({ "full": figures(&big), "small": figures(&small), "steady_words_per_s": rate }),
        );
    }
    let (verify, data) = bench.run_once(&main(Engine::Wasm, sentences), 99)?;
    let words = check_counts(weir_counts(&data)?, &bench.corpus(sentences)?)?;
    let (_, limit_data) = bench.run_once(&main(Engine::Limit, sentences), 99)?;
    check_counts(limit::counts(&limit_data.join(limit::DB_FILE))?, &bench.corpus(sentences)?)
        .context("the limit program's counts")?;
    let _ = verify;
    let ratio = steady_rates["wasm"] / steady_rates["native"];
    let of_limit = steady_rates["wasm"] / steady_rates["limit"];
    let epoch_cost = 1.0 - steady_rates["wasm"] / steady_rates["wasm, no CPU limit"];

    let rss = |engine: Engine| results[engine.name()]["full"]["peak_rss_mib"].as_f64().unwrap_or(f64::NAN);
    let at_10k = AtSize {
        batch_size: 10_000,
        max_pending: main(Engine::Wasm, sentences).max_pending,
        wasm: steady_rates["wasm"],
        limit: steady_rates["limit"],
        wasm_rss_mib: rss(Engine::Wasm),
        limit_rss_mib: rss(Engine::Limit),
    };
    let sizes = batch_sizes::measure(&bench, sentences, runs, at_10k)?;
    let at_1k = sizes.iter().find(|s| s.batch_size == latency::BATCH).expect("measured at the latency's batch size");
    let latency_runs = latency::measure(&bench, sentences, at_1k.wasm, runs)?;
    eprintln!("sweeping parallelism (1 run each)");
    let mut parallel_rows = Vec::new();
    let mut parallel = Vec::new();
    for parallelism in [1, 2] {
        for engine in [Engine::Wasm, Engine::Native] {
            let (m, _) = bench.run_once(&Config { parallelism, ..main(engine, sentences) }, 0)?;
            let rate = wall_rate(sentences, &m);
            parallel_rows.push(format!(
                "| {} | {parallelism} | {:.2} | {:.2} M |",
                engine.name(),
                m.wall.as_secs_f64(),
                rate / 1e6
            ));
            parallel.push(json!({ "engine": engine.name(), "parallelism": parallelism, "words_per_s": rate, "figures": figures(&m) }));
        }
    }

    println!("word count, {sentences} sentences, batch 10,000, max pending 4, median of {runs} runs");
    println!("| engine | wall s | steady words/s | commit p50 / p99 ms | peak RSS MiB | start ms (cached) |");
    println!("|---|---|---|---|---|---|");
    for row in &rows {
        println!("{row}");
    }
    println!("Wasm/native ratio (steady words/s): {ratio:.2}");
    println!(
        "Wasm/limit ratio (steady words/s; limit: the least exactly-once word count, see bench/src/limit.rs): {of_limit:.2}"
    );
    println!("CPU-limit (epoch interruption) cost on Wasm: {:.1}%", epoch_cost * 100.0);
    println!("counts check: {words} words, stored counts equal the ground truth");
    println!();
    batch_sizes::print(&sizes, runs);
    println!();
    latency::print(&latency_runs);
    println!();
    println!("Parallelism (weir run --parallelism: instances per operator), batch 10,000, max pending 4, 1 run each");
    println!("| engine | parallelism | wall s | words/s |");
    println!("|---|---|---|---|");
    for row in &parallel_rows {
        println!("{row}");
    }

    let (language_rows, language_figures) = languages(&bench, sentences)?;
    println!();
    print_languages(sentences, &language_rows);

    let (jetstream_rows, jetstream_figures) = jetstream_rows(runs)?;
    println!();
    jetstream::print(sentences, runs, &jetstream_rows, &jetstream_figures);

    let windowed = windows_rows(runs)?;
    println!();
    windows::print(&windowed, runs);

    let targets =
        targets::Figures { sizes: &sizes, latency: &latency_runs, languages: &language_figures, windowed: &windowed };
    println!();
    targets::print(&targets);

    let date = Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())?;
    let results = json!({
        "date": date,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "sentences": sentences,
        "runs": runs,
        "main": results,
        "wasm_native_ratio": ratio,
        "wasm_limit_ratio": of_limit,
        "cpu_limit_cost": epoch_cost,
        "counts_check": { "words": words, "exact": true },
        "by_batch_size": batch_sizes::json(&sizes),
        "latency": { "median": latency::median(&latency_runs).report, "runs": latency_runs.iter().map(|m| &m.report).collect::<Vec<_>>() },
        "parallelism": parallel,
        "targets": targets::json(&targets),
        "languages": { "sentences": sentences, "guests": language_figures },
        "jetstream": { "sentences": sentences, "runs": runs, "figures": jetstream_figures },
        "windows": windows::json(&windowed),
    });
    std::fs::write(out, serde_json::to_string_pretty(&results)? + "\n")?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

/// Word count in each guest language: the component's size, its cold
/// compile (the start of a run with an empty compiled-component cache), the
/// start of a run with the component in the cache, and steady words/s on
/// the canonical workload (batch 10,000, max pending 4, one run each).
fn languages(bench: &Bench, sentences: u64) -> Result<(Vec<String>, Json)> {
    let root = repo();
    let mut rows = Vec::new();
    let mut out = Vec::new();
    for (language, wasm) in [
        ("Rust", bench.wasm.clone()),
        ("Python", weir_engine::guest_build::build(&root.join("examples/word-count-py"))?),
        ("JavaScript", weir_engine::guest_build::build(&root.join("examples/word-count-js"))?),
    ] {
        eprintln!("measuring the {language} word count");
        let size = std::fs::metadata(&wasm)?.len();
        let guest =
            Bench { wasm: wasm.clone(), work: bench.work.join(format!("lang-{language}")), weir: bench.weir.clone() };
        std::fs::create_dir_all(&guest.work)?;
        let _ = std::fs::remove_dir_all(guest.work.join("cache"));
        let config =
            |sentences| Config { engine: Engine::Wasm, sentences, batch_size: 10_000, max_pending: 4, parallelism: 1 };
        let cold = guest.run_once(&config(SMALL), 0)?.0;
        let cached = guest.run_once(&config(SMALL), 0)?.0;
        let (big, data) = guest.run_once(&config(sentences), 0)?;
        check_counts(weir_counts(&data)?, &guest.corpus(sentences)?)?;
        let rate = steady(sentences, &big, &cached);
        let start = |m: &Measured| m.report["start_ms"].as_f64().unwrap_or(f64::NAN);
        rows.push(format!(
            "| {language} | {:.1} | {:.2} | {:.1} | {:.2} M | {:.0} |",
            size as f64 / (1024.0 * 1024.0),
            start(&cold) / 1000.0,
            start(&cached),
            rate / 1e6,
            big.peak_rss_kib as f64 / 1024.0,
        ));
        out.push(json!({
            "language": language,
            "component_bytes": size,
            "cold_compile_start_ms": start(&cold),
            "cached_start_ms": start(&cached),
            "steady_words_per_s": rate,
            "full": figures(&big),
            "counts_exact": true,
        }));
    }
    Ok((rows, Json::Array(out)))
}

fn print_languages(sentences: u64, rows: &[String]) {
    println!("Word count per guest language, {sentences} sentences, batch 10,000, max pending 4, 1 run each");
    println!("| guest | component MiB | cold start s (compiling) | cached start ms | steady words/s | peak RSS MiB |");
    println!("|---|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}

/// The value of `--name value` in the arguments of a measured subcommand.
fn flag<'a>(args: &'a [String], name: &str) -> Result<&'a str> {
    let at = args.iter().position(|a| a == name).with_context(|| format!("{name} is required"))?;
    args.get(at + 1).map(String::as_str).with_context(|| format!("{name} needs a value"))
}

/// The machine's limit: [`limit::run`] with the arguments of `weir run`.
fn limit(args: &[String]) -> Result<()> {
    let flag = |name: &str| flag(args, name);
    let data = Path::new(flag("--data")?);
    std::fs::create_dir_all(data)?;
    let report = limit::run(
        &data.join(limit::DB_FILE),
        Path::new(flag("--input")?),
        flag("--batch-size")?.parse()?,
        flag("--max-pending")?.parse()?,
        flag("--group").map_or(Ok(1), str::parse)?,
    )?;
    let millis = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0);
    let figures = json!([{
        "batches": report.batches,
        "elapsed_s": report.elapsed.as_secs_f64(),
        "start_ms": millis(report.first_batch_ready),
        "commit_p50_ms": millis(report.commit_latency.quantile(0.5)),
        "commit_p99_ms": millis(report.commit_latency.quantile(0.99)),
    }]);
    std::fs::write(flag("--report-json")?, serde_json::to_string_pretty(&figures)?)?;
    Ok(())
}

/// The baseline: word count with its operators compiled into this program,
/// through the same spout, coordinator and commits as `weir run`.
fn native(args: &[String]) -> Result<()> {
    let flag = |name: &str| flag(args, name);
    let config = RunConfig {
        batch_size: flag("--batch-size")?.parse()?,
        max_pending: flag("--max-pending")?.parse()?,
        ..RunConfig::default()
    };
    let topologies = word_count::weir_topologies();
    let def = topologies[0].definition().clone();
    let parallelism: usize = flag("--parallelism")?.parse()?;
    let plan = Arc::new(weir_plan::plan(&def, &SandboxConfig::default())?.with_parallelism(parallelism));
    let db = Db::open(Path::new(flag("--data")?))?;
    let mut spout = FileLines::open(Path::new(flag("--input")?), config.batch_size)?;
    let report = coordinator::run(
        &db,
        plan,
        OperatorSource::Native(word_count::weir_topologies),
        &mut spout,
        None,
        &config,
        &std::sync::atomic::AtomicBool::new(false),
        &mut |_| {},
    )?;
    // Nothing is loaded natively: the start is the time to the first batch.
    let figures = json!([report.figures(&def.name, Duration::ZERO)]);
    std::fs::write(flag("--report-json")?, serde_json::to_string_pretty(&figures)?)?;
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("native") => return native(&args[1..]),
        Some("limit") => return limit(&args[1..]),
        Some("latency") => return latency::command(&args[1..]),
        Some("memory") => return references::memory(&args[1..]),
        Some("drain") => return references::drain(&args[1..]),
        Some("kafka-drain") => return kafka::drain(&args[1..]),
        _ => {}
    }
    let value = |name: &str, default: &str| -> String {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned().unwrap_or_else(|| default.to_owned())
    };
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "weir-bench [--sentences N (1000000)] [--runs N (5)] [--out FILE (bench/results.json)] [--languages] \
             [--jetstream] [--windows] [--cluster [--quota CPUS (0.25)]] [--references] [--kafka] [--sink]\n\
             --sink: only a topology with a JetStream sink against its twin without (test guests' file-sink and \
             file-count), interleaved, into FILE's results\n\
             --kafka: only word count from a local Kafka topic (a tansu broker started here) beside a raw rskafka \
             drain of it, 3 runs by default, into FILE's results\n\
             --references: only Weir beside its references (the limit program alone and with group commit, an \
             in-memory count on one and two threads, a raw JetStream drain) and the targets, into FILE's results\n\
             --languages: only word count per guest language (Rust, Python, JavaScript), into FILE's results\n\
             --jetstream: only word count from a file and from a local JetStream stream, into FILE's results\n\
             --windows: only the plain word count and the word count per minute of event time, into FILE's results\n\
             --cluster: only the JetStream word count (6 partitions) on weir serve and on clusters of 1, 2 and 3 \
             hosts, each weir process held to --quota CPUs (0.25) by a cgroup or systemd-run, in interleaved rounds, \
             into FILE's results"
        );
        return Ok(());
    }
    let sentences: u64 = value("--sentences", "1000000").parse().context("--sentences")?;
    if sentences <= SMALL {
        bail!("--sentences must be more than {SMALL}: steady words/s subtracts a {SMALL}-sentence run");
    }
    // The cluster rows run four configurations a round: three rounds keep them to a few minutes.
    let default_runs = if args.iter().any(|a| a == "--cluster" || a == "--kafka") { "3" } else { "5" };
    let runs: usize = value("--runs", default_runs).parse().context("--runs")?;
    let out = PathBuf::from(value("--out", &repo().join("bench/results.json").display().to_string()));
    // The first of these flags given picks what the run measures; none, everything.
    let parts = [
        ("--languages", Only::Languages),
        ("--jetstream", Only::JetStream),
        ("--windows", Only::Windows),
        ("--cluster", Only::Cluster),
        ("--references", Only::References),
        ("--kafka", Only::Kafka),
        ("--sink", Only::Sink),
    ];
    let only =
        parts.iter().find(|(flag, _)| args.iter().any(|a| a == flag)).map_or(Only::Everything, |&(_, only)| only);
    let quota: f64 = value("--quota", "0.25").parse().context("--quota")?;
    harness(sentences, runs.max(1), &out, only, quota)
}
