//! Line-to-commit latency: lines of the corpus appended to the input file at
//! a fixed offered rate while the topology follows the file, through the
//! real coordinator, the Wasm guest and durable redb commits; each line's
//! latency runs from its write to the commit of the batch that holds it.

use crate::{Bench, WORDS_PER_SENTENCE};
use anyhow::{Context, Result, bail};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weir_config::{RunConfig, SandboxConfig};
use weir_engine::coordinator::{self, RunReport};
use weir_engine::instances::OperatorSource;
use weir_engine::metrics::Latencies;
use weir_io::spout::FileLines;
use weir_runtime::{self as runtime, ComponentCache};
use weir_state::Db;

/// How often the following topology asks the file for more lines: the
/// `--poll-ms` of `weir serve`, set low, as a latency-minded user would.
pub const POLL: Duration = Duration::from_millis(2);

/// The batch size of the latency run.
pub const BATCH: u64 = 1000;

/// Seconds of offered load in the latency run.
const SECONDS: f64 = 5.0;

/// How often the writer appends what is due.
const TICK: Duration = Duration::from_millis(1);

/// What one latency run measured.
pub struct Measured {
    pub offered_lines_per_s: f64,
    pub lines: u64,
    pub batches: u64,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// How long the run's commits took, and how many batches each held.
    pub commits: weir_engine::metrics::Latencies,
    pub group_mean: Option<f64>,
}

/// Each write of the input: the lines in the file after it, and when.
type Writes = Mutex<Vec<(u64, Instant)>>;

/// Appends `lines` lines of `corpus` (over again from its start when it
/// runs out) to `input` at `per_s` lines a second.
fn write_at_rate(input: &Path, corpus: &Path, lines: u64, per_s: f64, writes: &Writes) -> Result<()> {
    let mut file = std::fs::OpenOptions::new().append(true).open(input)?;
    let open = || -> Result<_> { Ok(BufReader::new(std::fs::File::open(corpus)?)) };
    let mut source = open()?;
    let started = Instant::now();
    let mut next = 0u64;
    let mut chunk = Vec::new();
    while next < lines {
        std::thread::sleep(TICK);
        let due = ((started.elapsed().as_secs_f64() * per_s) as u64).min(lines);
        chunk.clear();
        for _ in next..due {
            if source.read_until(b'\n', &mut chunk)? == 0 {
                source = open()?;
                if source.read_until(b'\n', &mut chunk)? == 0 {
                    bail!("{} is empty", corpus.display());
                }
            }
            if chunk.last() != Some(&b'\n') {
                chunk.push(b'\n');
            }
        }
        if due > next {
            // One write of whole lines: the spout never sees half a line.
            file.write_all(&chunk)?;
            writes.lock().expect("no writer panics").push((due, Instant::now()));
            next = due;
        }
    }
    Ok(())
}

/// What a latency run runs, and where.
pub struct Setup<'a> {
    pub wasm: &'a Path,
    pub corpus: &'a Path,
    pub data: &'a Path,
    pub cache: &'a Path,
    pub per_s: f64,
    pub seconds: f64,
    pub batch_size: usize,
}

/// Runs the word-count guest over lines appended at `per_s` lines a second
/// for `seconds`, in batches of `batch_size`.
pub fn run(setup: &Setup) -> Result<Measured> {
    let Setup { wasm, corpus, data, cache, per_s, seconds, batch_size } = *setup;
    let lines = ((per_s * seconds) as u64).max(1);
    std::fs::create_dir_all(data)?;
    let input = data.join("input.txt");
    std::fs::File::create(&input)?;

    let sandbox = SandboxConfig::default();
    let engine = runtime::engine(true)?;
    let cache = ComponentCache::new(cache);
    let loaded = weir_engine::load::topologies(&engine, &cache, wasm, &[], &sandbox)?.remove(0);
    let db = Db::open(data)?;
    let mut spout = FileLines::open(&input, batch_size)?.following(true);
    let config = RunConfig { batch_size, follow: Some(POLL), ..RunConfig::default() };

    let writes = Writes::default();
    let committed = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let mut latencies = Latencies::default();
    let mut max = Duration::ZERO;
    let mut seen_writes = 0;
    let report = std::thread::scope(|scope| -> Result<RunReport> {
        let writer = scope.spawn(|| {
            // Let the coordinator start and catch up with the empty file first.
            std::thread::sleep(Duration::from_millis(200));
            let written = write_at_rate(&input, corpus, lines, per_s, &writes);
            // Then wait for the last lines' commit (bounded: a halted run
            // commits nothing more), and stop the topology.
            let waiting = Instant::now();
            while committed.load(Ordering::Acquire) < lines
                && !stop.load(Ordering::Relaxed)
                && waiting.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(TICK);
            }
            stop.store(true, Ordering::Relaxed);
            written
        });
        let report = coordinator::run(
            &db,
            loaded.plan,
            OperatorSource::Wasm(loaded.components),
            &mut spout,
            None,
            &config,
            &stop,
            &mut |r: &RunReport| {
                let now = Instant::now();
                let mut done = committed.load(Ordering::Relaxed);
                let writes = writes.lock().expect("no writer panics");
                // Every line this commit holds, at the time its write ended.
                while done < r.tuples && seen_writes < writes.len() {
                    let (upto, at) = writes[seen_writes];
                    let latency = now.saturating_duration_since(at);
                    max = max.max(latency);
                    let to = upto.min(r.tuples);
                    for _ in done..to {
                        latencies.record(latency);
                    }
                    done = to;
                    if done == upto {
                        seen_writes += 1;
                    }
                }
                committed.store(done, Ordering::Release);
            },
        );
        if report.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        writer.join().expect("the writer does not panic").context("appending to the input")?;
        report
    })?;
    if report.tuples != lines {
        bail!("the latency run committed {} of the {lines} lines it wrote", report.tuples);
    }
    let quantile = |q| latencies.quantile(q).unwrap_or_default();
    Ok(Measured {
        offered_lines_per_s: per_s,
        lines: report.tuples,
        batches: report.batches,
        p50: quantile(0.5),
        p99: quantile(0.99),
        max,
        group_mean: report.commit_groups.mean(),
        commits: report.commit_latency,
    })
}

/// The latency run, `runs` times, each in a process of its own (`weir-bench
/// latency`) so that its peak memory is measured as the other rows' is:
/// lines offered at half of `max_words_per_s`, the guest's steady rate at
/// [`BATCH`]. Like every other row, the figure is the median of the runs
/// (by p99), and each run is printed: one run's tail moves with whatever
/// else the machine does in its five seconds.
pub fn measure(bench: &Bench, sentences: u64, max_words_per_s: f64, runs: usize) -> Result<Vec<crate::Measured>> {
    let per_s = max_words_per_s / 2.0 / WORDS_PER_SENTENCE as f64;
    eprintln!("latency: {per_s:.0} lines/s offered for {SECONDS} s, batch {BATCH}, {runs} runs");
    let corpus = bench.corpus(sentences)?;
    let data = bench.work.join("latency");
    let report = bench.work.join("latency.json");
    let mut measured = Vec::new();
    for _ in 0..runs.max(1) {
        let _ = std::fs::remove_dir_all(&data);
        let mut command = Command::new(std::env::current_exe()?);
        command.arg("latency").arg("--wasm").arg(&bench.wasm).arg("--input").arg(&corpus);
        command.arg("--data").arg(&data).arg("--cache-dir").arg(bench.work.join("cache"));
        command.args(["--rate", &per_s.to_string(), "--seconds", &SECONDS.to_string()]);
        command.args(["--batch-size", &BATCH.to_string()]).arg("--report-json").arg(&report);
        command.stdout(std::process::Stdio::null()).env("WEIR_LOG", "warn");
        measured.push(crate::measure(command, &report)?);
    }
    Ok(measured)
}

/// The run of median p99 among `runs`.
pub fn median(runs: &[crate::Measured]) -> &crate::Measured {
    let p99 = |m: &&crate::Measured| m.report["p99_ms"].as_f64().unwrap_or(f64::INFINITY);
    let mut sorted: Vec<_> = runs.iter().collect();
    sorted.sort_by(|a, b| p99(a).total_cmp(&p99(b)));
    sorted[sorted.len() / 2]
}

/// `weir-bench latency`: [`run`] with its flags; writes its figures.
pub fn command(args: &[String]) -> Result<()> {
    let flag = |name: &str| crate::flag(args, name);
    let setup = Setup {
        wasm: Path::new(flag("--wasm")?),
        corpus: Path::new(flag("--input")?),
        data: Path::new(flag("--data")?),
        cache: Path::new(flag("--cache-dir")?),
        per_s: flag("--rate")?.parse()?,
        seconds: flag("--seconds")?.parse()?,
        batch_size: flag("--batch-size")?.parse()?,
    };
    let m = run(&setup)?;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    let figures = json!([{
        "offered_lines_per_s": m.offered_lines_per_s,
        "lines": m.lines,
        "batches": m.batches,
        "poll_ms": ms(POLL),
        "p50_ms": ms(m.p50),
        "p99_ms": ms(m.p99),
        "max_ms": ms(m.max),
        "commit_p50_ms": m.commits.quantile(0.5).map(ms),
        "commit_p99_ms": m.commits.quantile(0.99).map(ms),
        "commit_group_mean": m.group_mean,
    }]);
    std::fs::write(flag("--report-json")?, serde_json::to_string_pretty(&figures)?)?;
    Ok(())
}

/// The latency runs' table, a row each, the median's marked.
pub fn print(runs: &[crate::Measured]) {
    println!(
        "Line-to-commit latency: lines appended to the input at half the guest's steady rate at batch {BATCH}, \
         for {SECONDS} s, the topology following the file (polled every {} ms); {} runs, the median (by p99) marked",
        POLL.as_millis(),
        runs.len()
    );
    println!(
        "| run | offered lines/s | lines | batches | p50 ms | p99 ms | max ms | commit p50 / p99 ms | batches per commit | peak RSS MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let median = median(runs);
    for (index, m) in runs.iter().enumerate() {
        let r = &m.report;
        println!(
            "| {}{} | {:.0} | {} | {} | {} | {} | {} | {} / {} | {:.1} | {:.0} |",
            index + 1,
            if std::ptr::eq(m, median) { " (median)" } else { "" },
            r["offered_lines_per_s"].as_f64().unwrap_or(f64::NAN),
            r["lines"],
            r["batches"],
            crate::ms(&r["p50_ms"]),
            crate::ms(&r["p99_ms"]),
            crate::ms(&r["max_ms"]),
            crate::ms(&r["commit_p50_ms"]),
            crate::ms(&r["commit_p99_ms"]),
            r["commit_group_mean"].as_f64().unwrap_or(f64::NAN),
            m.peak_rss_kib as f64 / 1024.0
        );
    }
}
