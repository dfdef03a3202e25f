//! The sink row: the test guests' `file-sink` (page clicks counted per
//! page, each batch's new counts published to a local JetStream stream)
//! against its twin `file-count` (the same count, no sink), same input,
//! in interleaved rounds; the target is the ratio of their walls. Each sink
//! run gets a fresh `nats-server` and output stream, so that no run's
//! messages are dropped as duplicates of the last run's. With
//! `WEIR_BENCH_BASE=<a weir binary>` each round also runs `file-sink` on
//! that binary (an earlier build), so that a change is measured against
//! what it changed in the same rounds.

use super::jetstream::NatsServer;
use super::{Bench, Measured, measure, median, ms};
use anyhow::{Result, bail};
use serde_json::{Value as Json, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Lines of the input, clicks over [`PAGES`] pages.
pub const CLICKS: u64 = 200_000;
/// Distinct pages clicked.
const PAGES: u64 = 2_000;
/// The batch sizes of the rows.
pub const BATCH_SIZES: [u64; 2] = [1_000, 10_000];

/// The test guests' component.
pub fn wasm(root: &Path) -> PathBuf {
    root.join("target/guests/wasm32-wasip2/release/test_topologies.wasm")
}

/// The input: `page-N` lines drawn from a seeded generator.
fn input(bench: &Bench) -> Result<PathBuf> {
    let path = bench.work.join(format!("clicks-{CLICKS}.txt"));
    if !path.exists() {
        let mut state = 0x5eed_u64;
        let mut text = String::with_capacity(CLICKS as usize * 10);
        for _ in 0..CLICKS {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            text.push_str(&format!("page-{}\n", (state >> 33) % PAGES));
        }
        std::fs::write(&path, text)?;
    }
    Ok(path)
}

/// One run of `topology` at `batch` into a fresh data dir, publishing to
/// `nats` where it has a sink.
fn run_once(
    bench: &Bench,
    weir: &Path,
    wasm: &Path,
    topology: &str,
    batch: u64,
    nats: Option<&NatsServer>,
) -> Result<Measured> {
    let data = bench.work.join(format!("data-{topology}"));
    let _ = std::fs::remove_dir_all(&data);
    let report = bench.work.join(format!("report-{topology}.json"));
    let mut command = Command::new(weir);
    command.arg("run").arg(wasm).args(["--topology", topology]).arg("--cache-dir").arg(bench.work.join("cache"));
    command.arg("--data").arg(&data).arg("--input").arg(input(bench)?);
    command.args(["--batch-size", &batch.to_string()]);
    if let Some(nats) = nats {
        command.args(["--nats", &nats.url]);
    }
    command.arg("--report-json").arg(&report);
    command.stdout(Stdio::null()).env("WEIR_LOG", "warn");
    measure(command, &report)
}

/// The messages `file-sink` publishes at `batch`: each batch's pages, one
/// message each, as JSON of the same shape.
fn messages(bench: &Bench, batch: u64) -> Result<(PathBuf, u64)> {
    let lines = std::fs::read_to_string(input(bench)?)?;
    let lines: Vec<&str> = lines.lines().collect();
    let mut text = String::new();
    let mut count = 0;
    for chunk in lines.chunks(batch as usize) {
        let pages: std::collections::BTreeSet<&str> = chunk.iter().copied().collect();
        for page in pages {
            text.push_str(&format!("{{\"page\":\"{page}\",\"count\":{count}}}\n"));
            count += 1;
        }
    }
    let path = bench.work.join(format!("sink-messages-{batch}.txt"));
    std::fs::write(&path, text)?;
    Ok((path, count))
}

/// The raw client's floor: `weir publish` of the same messages into a
/// fresh server's output stream, acknowledgements in flight (no outbox, no
/// message ids).
fn raw_publish(bench: &Bench, messages: &Path) -> Result<Measured> {
    let server = NatsServer::start(&bench.work.join("nats-sink"))?;
    let report = bench.work.join("report-raw-publish.json");
    std::fs::write(&report, "{}")?;
    let mut command = Command::new(&bench.weir);
    command.args(["publish", "--nats", &server.url, "--stream", "out", "--subjects", "page-counts", "--create"]);
    command.arg(messages).stdout(Stdio::null()).env("WEIR_LOG", "warn");
    measure(command, &report)
}

/// A fresh server with an empty output stream `out` on the sink's subject.
fn server(bench: &Bench) -> Result<NatsServer> {
    let server = NatsServer::start(&bench.work.join("nats-sink"))?;
    let empty = bench.work.join("empty.txt");
    std::fs::write(&empty, "")?;
    let status = Command::new(&bench.weir)
        .args(["publish", "--nats", &server.url, "--stream", "out", "--subjects", "page-counts", "--create"])
        .arg(&empty)
        .stdout(Stdio::null())
        .env("WEIR_LOG", "warn")
        .status()?;
    if !status.success() {
        bail!("creating the output stream failed");
    }
    Ok(server)
}

/// The rows at each of [`BATCH_SIZES`], median of `runs` interleaved
/// rounds; returns the table's lines and the figures.
pub fn rows(bench: &Bench, wasm: &Path, runs: usize) -> Result<(Vec<String>, Json)> {
    if !wasm.exists() {
        bail!("{} is missing: run scripts/bench, which builds it", wasm.display());
    }
    let mut lines = Vec::new();
    let mut figures = serde_json::Map::new();
    let base_weir = std::env::var_os("WEIR_BENCH_BASE").map(PathBuf::from);
    for batch in BATCH_SIZES {
        let (messages, count) = messages(bench, batch)?;
        let (mut plain, mut sink, mut raw, mut base) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 0..runs {
            eprintln!("sink round {} of {runs} at batch {batch}: file-count, file-sink, raw publish", round + 1);
            plain.push(run_once(bench, &bench.weir, wasm, "file-count", batch, None)?);
            let nats = server(bench)?;
            sink.push(run_once(bench, &bench.weir, wasm, "file-sink", batch, Some(&nats))?);
            drop(nats);
            raw.push(raw_publish(bench, &messages)?);
            if let Some(weir) = &base_weir {
                let nats = server(bench)?;
                base.push(run_once(bench, weir, wasm, "file-sink", batch, Some(&nats))?);
            }
        }
        let (plain, sink, raw) = (median(plain), median(sink), median(raw));
        let base = (!base.is_empty()).then(|| median(base));
        let ratio = sink.wall.as_secs_f64() / plain.wall.as_secs_f64();
        let floor = sink.wall.as_secs_f64() / (plain.wall + raw.wall).as_secs_f64();
        let raw_name = format!("raw publish of its {count} messages");
        let mut rows =
            vec![("file-count (no sink)", &plain), ("file-sink (JetStream sink)", &sink), (raw_name.as_str(), &raw)];
        if let Some(base) = &base {
            rows.push(("file-sink on WEIR_BENCH_BASE", base));
        }
        for (name, m) in rows {
            lines.push(format!(
                "| {name} | {batch} | {:.2} | {:.2} | {} / {} | {} | {:.0} |",
                m.wall.as_secs_f64(),
                m.cpu_s,
                ms(&m.report["commit_p50_ms"]),
                ms(&m.report["commit_p99_ms"]),
                m.report["commit_groups"].as_u64().map_or("-".into(), |g| g.to_string()),
                m.peak_rss_kib as f64 / 1024.0,
            ));
        }
        lines.push(format!("| sink / no sink, wall | {batch} | {ratio:.2} | | | | |"));
        lines.push(format!("| sink / (no sink + raw publish), wall | {batch} | {floor:.2} | | | | |"));
        if let Some(base) = &base {
            let before = base.wall.as_secs_f64() / plain.wall.as_secs_f64();
            lines.push(format!("| WEIR_BENCH_BASE sink / no sink, wall | {batch} | {before:.2} | | | | |"));
        }
        figures.insert(
            format!("batch_{batch}"),
            json!({
                "no_sink_wall_s": plain.wall.as_secs_f64(),
                "sink_wall_s": sink.wall.as_secs_f64(),
                "ratio": ratio,
                "messages": count,
                "raw_publish_wall_s": raw.wall.as_secs_f64(),
                "ratio_to_no_sink_plus_raw_publish": floor,
                "no_sink": plain.report,
                "sink": sink.report,
                "base_sink_wall_s": base.as_ref().map(|b| b.wall.as_secs_f64()),
                "base_sink_cpu_s": base.as_ref().map(|b| b.cpu_s),
            }),
        );
    }
    Ok((lines, Json::Object(figures)))
}

/// Prints the rows of [`rows`].
pub fn print(runs: usize, lines: &[String]) {
    println!(
        "a JetStream sink: test guests' file-sink against file-count (no sink), {CLICKS} clicks over {PAGES} pages, \
         median of {runs} interleaved runs"
    );
    println!("| topology | batch | wall s | CPU s | commit p50 / p99 ms | commit groups | peak RSS MiB |");
    println!("|---|---|---|---|---|---|---|");
    for line in lines {
        println!("{line}");
    }
}
