//! Honest references, measured beside Weir in the same interleaved rounds
//! (`scripts/bench --references`):
//!
//! - the limit program committing each batch alone, and with group commit
//!   (what is counted and ready, up to Weir's group size, in one durable
//!   write), at batch sizes of 1,000, 10,000 and 100,000;
//! - a plain in-memory count with no durability at all, on one thread and
//!   on two (each counting half of the file, the maps merged at the end);
//! - for JetStream, a raw async-nats drain of the same stream: one pull
//!   consumer per partition, fetches of the spout's size, no processing,
//!   no storage.
//!
//! Then the targets of the round, each a ratio from this one run.

use super::jetstream::{self, NatsServer};
use super::{Bench, Config, Engine, Measured, SMALL, check_counts, median, steady, weir_counts};
use anyhow::{Context, Result, bail};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The batch sizes of the durable rows.
const SIZES: [u64; 3] = [1000, 10_000, 100_000];

type Counts = std::collections::HashMap<String, i64, foldhash::fast::RandomState>;

/// Counts the words of `bytes` (whole lines).
fn count_lines(bytes: &[u8], counts: &mut Counts) -> Result<()> {
    for line in bytes.split(|b| *b == b'\n') {
        for word in std::str::from_utf8(line)?.split_whitespace() {
            match counts.get_mut(word) {
                Some(n) => *n += 1,
                None => {
                    counts.insert(word.to_owned(), 1);
                }
            }
        }
    }
    Ok(())
}

/// `weir-bench memory --input F --threads N --report-json R [--counts C]`:
/// the in-memory count, the file read in 1 MiB blocks cut at line ends,
/// each thread counting its share of the file; nothing stored.
pub fn memory(args: &[String]) -> Result<()> {
    let flag = |name: &str| super::flag(args, name);
    let input = Path::new(flag("--input")?);
    let threads: u64 = flag("--threads")?.parse()?;
    let started = Instant::now();
    let len = std::fs::metadata(input)?.len();
    // Each thread's share starts after the line end at or past its cut.
    let mut cuts = vec![0];
    for t in 1..threads {
        let mut file = std::fs::File::open(input)?;
        file.seek(SeekFrom::Start(len * t / threads))?;
        let mut skipped = Vec::new();
        BufReader::new(file).read_until(b'\n', &mut skipped)?;
        cuts.push((len * t / threads + skipped.len() as u64).min(len));
    }
    cuts.push(len);
    let counts = std::thread::scope(|scope| -> Result<Counts> {
        let workers: Vec<_> = cuts
            .windows(2)
            .map(|span| {
                let (from, to) = (span[0], span[1]);
                scope.spawn(move || -> Result<Counts> {
                    let mut file = std::fs::File::open(input)?;
                    file.seek(SeekFrom::Start(from))?;
                    let mut reader = BufReader::with_capacity(1 << 20, file.take(to - from));
                    let (mut counts, mut block) = (Counts::default(), Vec::with_capacity(1 << 20));
                    loop {
                        block.clear();
                        (&mut reader).take(1 << 20).read_to_end(&mut block)?;
                        if block.is_empty() {
                            return Ok(counts);
                        }
                        reader.read_until(b'\n', &mut block)?;
                        count_lines(&block, &mut counts)?;
                    }
                })
            })
            .collect();
        let mut all = Counts::default();
        for worker in workers {
            for (word, n) in worker.join().expect("a counting thread panicked")? {
                *all.entry(word).or_insert(0) += n;
            }
        }
        Ok(all)
    })?;
    let elapsed = started.elapsed();
    if let Ok(path) = flag("--counts") {
        let sorted: BTreeMap<String, i64> = counts.into_iter().collect();
        std::fs::write(path, serde_json::to_string(&sorted)?)?;
    }
    let figures = json!([{ "elapsed_s": elapsed.as_secs_f64() }]);
    std::fs::write(flag("--report-json")?, serde_json::to_string(&figures)?)?;
    Ok(())
}

/// `weir-bench drain --nats URL --stream S --fetch N --report-json R`: every
/// message of stream S read through one pull consumer per partition subject
/// (`S.0`, `S.1`, ...), all at once, in fetches of N; nothing else.
pub fn drain(args: &[String]) -> Result<()> {
    use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
    use futures_util::StreamExt;
    let flag = |name: &str| super::flag(args, name);
    let (stream_name, fetch): (&str, usize) = (flag("--stream")?, flag("--fetch")?.parse()?);
    let config =
        weir_io::nats::NatsConfig { url: flag("--nats")?.to_owned(), token: None, retry_for: Duration::from_secs(10) };
    let started = Instant::now();
    let nats = weir_io::nats::Nats::connect(&config, "weir-bench drain")?;
    let js = nats.jetstream.clone();
    let total = nats.runtime.block_on(async move {
        let mut stream = js.get_stream(stream_name).await?;
        let subjects = stream.info().await?.config.subjects.clone();
        let partitions = subjects.len().max(1);
        let reads = (0..partitions).map(|p| {
            let stream = stream.clone();
            async move {
                let consumer = stream
                    .create_consumer(pull::Config {
                        filter_subject: format!("{stream_name}.{p}"),
                        deliver_policy: DeliverPolicy::All,
                        ack_policy: AckPolicy::None,
                        memory_storage: true,
                        inactive_threshold: Duration::from_secs(60),
                        ..Default::default()
                    })
                    .await?;
                let expected = consumer.cached_info().num_pending;
                let mut got = 0u64;
                while got < expected {
                    let mut messages = consumer.fetch().max_messages(fetch).messages().await?;
                    while let Some(message) = messages.next().await {
                        message.map_err(|e| anyhow::anyhow!("{e}"))?;
                        got += 1;
                    }
                }
                anyhow::Ok(got)
            }
        });
        let counts = futures_util::future::join_all(reads).await;
        let _ = stream.info().await;
        counts.into_iter().sum::<Result<u64>>()
    })?;
    let figures = json!([{ "elapsed_s": started.elapsed().as_secs_f64(), "messages": total }]);
    std::fs::write(flag("--report-json")?, serde_json::to_string(&figures)?)?;
    Ok(())
}

/// One run of `weir-bench <verb> args...`, measured.
fn run_self(bench: &Bench, verb: &str, args: &[&str]) -> Result<Measured> {
    let report = bench.work.join(format!("report-{verb}.json"));
    let mut command = Command::new(std::env::current_exe()?);
    command.arg(verb).args(args).arg("--report-json").arg(&report).stdout(Stdio::null());
    super::measure(command, &report)
}

fn memory_run(bench: &Bench, corpus: &Path, threads: u64) -> Result<Measured> {
    run_self(bench, "memory", &["--input", corpus.to_str().unwrap(), "--threads", &threads.to_string()])
}

fn drain_run(bench: &Bench, server: &NatsServer, messages: u64) -> Result<Measured> {
    let measured = run_self(
        bench,
        "drain",
        &["--nats", &server.url, "--stream", "corpus", "--fetch", &jetstream::PER_PARTITION.to_string()],
    )?;
    if measured.report["messages"].as_u64() != Some(messages) {
        bail!("the drain read {} messages of {messages}", measured.report["messages"]);
    }
    Ok(measured)
}

/// A row's medians: steady words/s and the full run's peak RSS.
struct Row {
    name: String,
    rate: f64,
    rss_mib: f64,
}

fn row(name: String, sentences: u64, big: Vec<Measured>, small: Vec<Measured>) -> Row {
    let (big, small) = (median(big), median(small));
    Row { name, rate: steady(sentences, &big, &small), rss_mib: big.peak_rss_kib as f64 / 1024.0 }
}

/// Measures every row in interleaved rounds, prints the table and the
/// targets, and returns the figures.
pub fn measure(bench: &Bench, jetstream_wasm: &Path, sentences: u64, runs: usize) -> Result<Json> {
    let (big_corpus, small_corpus) = (bench.corpus(sentences)?, bench.corpus(SMALL)?);
    let pending = |size: u64| weir_config::default_max_pending(size as usize) as u64;
    let durable = [Engine::Wasm, Engine::Limit, Engine::LimitGrouped];
    let cells: Vec<(u64, Engine)> = SIZES.iter().flat_map(|&s| durable.map(|e| (s, e))).collect();
    eprintln!("publishing {sentences} and {SMALL} sentences into local JetStream streams");
    let big_server = NatsServer::start(&bench.work.join("nats-big"))?;
    big_server.publish_over(&bench.weir, &big_corpus, "corpus.{0..3}")?;
    let small_server = NatsServer::start(&bench.work.join("nats-small"))?;
    small_server.publish_over(&bench.weir, &small_corpus, "corpus.{0..3}")?;
    let mut durable_runs: Vec<(Vec<Measured>, Vec<Measured>)> = cells.iter().map(|_| Default::default()).collect();
    let mut memory_runs: [(Vec<Measured>, Vec<Measured>); 2] = Default::default();
    let mut stream_runs: [(Vec<Measured>, Vec<Measured>); 2] = Default::default();
    for round in 0..runs {
        eprintln!("references round {} of {runs}", round + 1);
        for (&(batch_size, engine), (big, small)) in cells.iter().zip(&mut durable_runs) {
            let config =
                |sentences| Config { engine, sentences, batch_size, max_pending: pending(batch_size), parallelism: 1 };
            big.push(bench.run_once(&config(sentences), round)?.0);
            small.push(bench.run_once(&config(SMALL), round)?.0);
        }
        for (threads, (big, small)) in [1, 2].into_iter().zip(&mut memory_runs) {
            big.push(memory_run(bench, &big_corpus, threads)?);
            small.push(memory_run(bench, &small_corpus, threads)?);
        }
        let (weir, raw) = stream_runs.split_at_mut(1);
        weir[0].0.push(jetstream::run_once(bench, jetstream_wasm, &big_server, round)?.0);
        weir[0].1.push(jetstream::run_once(bench, jetstream_wasm, &small_server, round)?.0);
        raw[0].0.push(drain_run(bench, &big_server, sentences)?);
        raw[0].1.push(drain_run(bench, &small_server, SMALL)?);
    }
    // Every durable row and the in-memory count stored exact counts.
    let counts = bench.work.join("memory-counts.json");
    run_self(
        bench,
        "memory",
        &["--input", big_corpus.to_str().unwrap(), "--threads", "2", "--counts", counts.to_str().unwrap()],
    )?;
    check_counts(serde_json::from_str(&std::fs::read_to_string(&counts)?)?, &big_corpus)
        .context("the in-memory count")?;
    let (_, data) = jetstream::run_once(bench, jetstream_wasm, &big_server, 99)?;
    check_counts(weir_counts(&data)?, &big_corpus).context("the JetStream run's counts")?;

    let mut rows = Vec::new();
    for ((size, engine), (big, small)) in cells.iter().zip(durable_runs) {
        rows.push(row(format!("{} at batch {size}", engine.name()), sentences, big, small));
    }
    for (threads, (big, small)) in [1, 2].into_iter().zip(memory_runs) {
        let name = format!("in-memory count, no durability, {threads} thread{}", if threads > 1 { "s" } else { "" });
        rows.push(row(name, sentences, big, small));
    }
    let [(weir_big, weir_small), (raw_big, raw_small)] = stream_runs;
    rows.push(row("wasm from JetStream (4 partitions)".into(), sentences, weir_big, weir_small));
    rows.push(row("raw async-nats drain of the same stream".into(), sentences, raw_big, raw_small));

    println!("References, {sentences} sentences, steady words/s, median of {runs} interleaved runs");
    println!("| row | steady words/s | peak RSS MiB |");
    println!("|---|---|---|");
    for r in &rows {
        println!("| {} | {:.2} M | {:.0} |", r.name, r.rate / 1e6, r.rss_mib);
    }
    let rate = |name: &str| rows.iter().find(|r| r.name == name).map_or(f64::NAN, |r| r.rate);
    let mut targets = Vec::new();
    let mut target = |what: String, value: f64, at_least: f64| {
        targets.push(json!({ "target": what, "value": value, "at_least": at_least, "met": value >= at_least }));
    };
    for size in SIZES {
        let wasm = rate(&format!("wasm at batch {size}"));
        target(
            format!("wasm / grouped limit at batch {size}"),
            wasm / rate(&format!("limit, group commit at batch {size}")),
            0.9,
        );
    }
    target(
        "wasm at batch 1,000 / wasm at batch 10,000".into(),
        rate("wasm at batch 1000") / rate("wasm at batch 10000"),
        0.8,
    );
    let best = SIZES.iter().map(|s| rate(&format!("wasm at batch {s}"))).fold(0.0, f64::max);
    target(
        "best wasm / in-memory count on one thread".into(),
        best / rate("in-memory count, no durability, 1 thread"),
        1.0,
    );
    target(
        "JetStream wasm / raw drain".into(),
        rate("wasm from JetStream (4 partitions)") / rate("raw async-nats drain of the same stream"),
        0.9,
    );
    let fattest = rows.iter().filter(|r| r.name.starts_with("wasm")).map(|r| r.rss_mib).fold(0.0, f64::max);
    target("96 MiB / the largest peak RSS of a wasm row".into(), 96.0 / fattest, 1.0);
    println!();
    println!("| target | value | at least | met |");
    println!("|---|---|---|---|");
    for t in &targets {
        println!(
            "| {} | {:.2} | {} | {} |",
            t["target"].as_str().unwrap_or_default(),
            t["value"].as_f64().unwrap_or(f64::NAN),
            t["at_least"],
            if t["met"] == true { "yes" } else { "no" }
        );
    }
    let rows: Vec<Json> = rows
        .iter()
        .map(|r| json!({ "row": r.name, "steady_words_per_s": r.rate, "peak_rss_mib": r.rss_mib }))
        .collect();
    Ok(json!({ "sentences": sentences, "runs": runs, "rows": rows, "targets": targets }))
}
