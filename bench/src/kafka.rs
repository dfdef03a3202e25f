//! The Kafka row: Weir's word count reading the corpus from a local Kafka
//! topic (4 partitions) on a tansu broker of the benchmark's own (sqlite
//! storage, a fresh directory, a free loopback port), beside a raw
//! `rskafka` client draining the same topic with the same fetch sizes and
//! nothing else (no processing, no state), in interleaved rounds so that
//! both meet the same spells of the machine. The broker's CPU over each
//! run is read from `/proc`, to say where the time goes.

use super::jetstream::{self, PER_PARTITION, Service, binary, free_port};
use super::{Bench, Measured, WORDS_PER_SENTENCE, check_counts, measure, median, weir_counts};
use anyhow::{Context, Result, bail};
use serde_json::{Value as Json, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use weir_io::spout::kafka::{RECORD_BYTES_GUESS, fetch_bytes, record_bytes};

/// The topic's partitions.
const PARTITIONS: u32 = 4;

/// A tansu broker of the benchmark's own, killed when dropped.
pub struct Tansu {
    service: Service,
    pub bootstrap: String,
}

impl Tansu {
    /// Starts a broker over a fresh sqlite store in `dir`, on a free port.
    pub fn start(dir: &Path) -> Result<Tansu> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)?;
        let port = free_port()?;
        let url = format!("tcp://127.0.0.1:{port}");
        // `scripts/ensure-services`' tools dir first.
        let tools = jetstream::tools_dir();
        let missing = "scripts/ensure-services installs it with cargo install";
        let mut command = Command::new(binary("WEIR_TANSU", "tansu", tools.map(|t| t.join("bin/tansu")), missing)?);
        command
            .current_dir(dir)
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "sqlite://tansu.db"])
            .env_remove("STORAGE_ENGINE")
            .env_remove("LISTENER_URL")
            .env_remove("ADVERTISED_LISTENER_URL")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("tansu.log"))?);
        Ok(Tansu { service: Service::start("tansu", &mut command, port)?, bootstrap: format!("127.0.0.1:{port}") })
    }

    /// The CPU seconds the broker has used so far (user and system), from
    /// `/proc/PID/stat`.
    fn cpu_s(&self) -> Result<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.service.child.id()))?;
        // Fields after the command's closing parenthesis; utime and stime
        // are the 14th and 15th of the whole line.
        let rest = stat.rsplit_once(')').context("a /proc stat line")?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
        // SAFETY: sysconf reads a constant of the system.
        let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        Ok(ticks as f64 / per_s)
    }

    /// Publishes the lines of `corpus` into a new topic `corpus` of 4
    /// partitions, round robin, each acknowledged.
    fn publish(&self, weir: &Path, corpus: &Path) -> Result<()> {
        let partitions = PARTITIONS.to_string();
        let args = ["--kafka", &self.bootstrap, "--topic", "corpus", "--create", "--partitions", &partitions];
        jetstream::weir_publish(weir, corpus, &args)
    }
}

/// The component of `examples/word-count-kafka`.
pub fn wasm(root: &Path) -> PathBuf {
    root.join("target/guests/wasm32-wasip2/release/word_count_kafka.wasm")
}

/// `weir-bench kafka-drain --kafka B --topic T --fetch N --report-json R`:
/// every record of topic T, every partition at once, in fetches of the
/// spout's size for a batch of N records a partition (sized on the records
/// seen), keeping every record a fetch returns; nothing else.
pub fn drain(args: &[String]) -> Result<()> {
    use rskafka::client::ClientBuilder;
    use rskafka::client::partition::{OffsetAt, UnknownTopicHandling};
    let flag = |name: &str| super::flag(args, name);
    let (bootstrap, topic) = (flag("--kafka")?.to_owned(), flag("--topic")?.to_owned());
    let per_batch: usize = flag("--fetch")?.parse()?;
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let total = runtime.block_on(async move {
        let client = ClientBuilder::new(vec![bootstrap]).build().await?;
        let partitions = client
            .list_topics()
            .await?
            .into_iter()
            .find(|t| t.name == topic)
            .with_context(|| format!("topic {topic} is missing"))?
            .partitions;
        let mut reads = Vec::new();
        for partition in partitions {
            let client = client.partition_client(topic.clone(), partition, UnknownTopicHandling::Error).await?;
            reads.push(tokio::spawn(async move {
                let mut offset = client.get_offset(OffsetAt::Earliest).await?;
                let high = client.get_offset(OffsetAt::Latest).await?;
                let (mut got, mut each) = (0u64, RECORD_BYTES_GUESS);
                while offset < high {
                    let (records, _) = client.fetch_records(offset, 1..fetch_bytes(per_batch, each), 0).await?;
                    let (mut kept, mut size) = (0, 0);
                    for record in records {
                        if record.offset < offset || record.offset >= high {
                            continue;
                        }
                        offset = record.offset + 1;
                        size += record_bytes(&record.record);
                        kept += 1;
                    }
                    if kept == 0 {
                        bail!("partition {partition} returned nothing at offset {offset} of {high}");
                    }
                    (got, each) = (got + kept as u64, size / kept);
                }
                anyhow::Ok(got)
            }));
        }
        let mut total = 0;
        for read in reads {
            total += read.await??;
        }
        anyhow::Ok(total)
    })?;
    let figures = json!([{ "elapsed_s": started.elapsed().as_secs_f64(), "records": total }]);
    std::fs::write(flag("--report-json")?, serde_json::to_string(&figures)?)?;
    Ok(())
}

/// One measured run and the broker's CPU seconds over it.
struct Run {
    measured: Measured,
    broker_cpu_s: f64,
}

fn with_broker_cpu(broker: &Tansu, run: impl FnOnce() -> Result<Measured>) -> Result<Run> {
    let before = broker.cpu_s()?;
    let measured = run()?;
    Ok(Run { measured, broker_cpu_s: broker.cpu_s()? - before })
}

/// Weir's word count over the topic into a fresh data dir.
fn weir_run(bench: &Bench, wasm: &Path, broker: &Tansu, round: usize) -> Result<(Measured, PathBuf)> {
    let data = bench.work.join(format!("data-kafka-{round}"));
    let report = bench.work.join("report-kafka.json");
    Ok((jetstream::weir_run(bench, wasm, &data, ["--kafka", &broker.bootstrap], &report)?, data))
}

/// The raw drain of the topic.
fn drain_run(bench: &Bench, broker: &Tansu, records: u64) -> Result<Measured> {
    let report = bench.work.join("report-kafka-drain.json");
    let mut command = Command::new(std::env::current_exe()?);
    command.args(["kafka-drain", "--kafka", &broker.bootstrap, "--topic", "corpus"]);
    command.args(["--fetch", &PER_PARTITION.to_string()]).arg("--report-json").arg(&report);
    command.stdout(Stdio::null());
    let measured = measure(command, &report)?;
    if measured.report["records"].as_u64() != Some(records) {
        bail!("the raw drain read {} records of {records}", measured.report["records"]);
    }
    Ok(measured)
}

/// The Kafka rows over `sentences` sentences, median of `runs` interleaved
/// rounds: lines for the table and the figures.
pub fn rows(bench: &Bench, wasm: &Path, sentences: u64, runs: usize) -> Result<(Vec<String>, Json)> {
    let corpus = bench.corpus(sentences)?;
    let broker = Tansu::start(&bench.work.join("tansu"))?;
    eprintln!("publishing {sentences} sentences into a local 4-partition Kafka topic (tansu, sqlite)");
    let published = Instant::now();
    broker.publish(&bench.weir, &corpus)?;
    let publish_s = published.elapsed().as_secs_f64();
    let (mut weir, mut raw) = (Vec::new(), Vec::new());
    let mut last_data = None;
    for round in 0..runs {
        eprintln!("Kafka round {} of {runs}: raw drain and Weir's word count", round + 1);
        raw.push(with_broker_cpu(&broker, || drain_run(bench, &broker, sentences))?);
        weir.push(with_broker_cpu(&broker, || {
            let (measured, data) = weir_run(bench, wasm, &broker, round)?;
            last_data = Some(data);
            Ok(measured)
        })?);
    }
    let data = last_data.context("no rounds were run")?;
    check_counts(weir_counts(&data)?, &corpus).context("the Kafka run's counts")?;
    let mut rows = Vec::new();
    let mut out = serde_json::Map::new();
    let mut rates = Vec::new();
    for (name, runs) in [("raw rskafka drain", raw), ("Weir word count, Kafka spout", weir)] {
        let run = median_run(runs);
        let wall = run.measured.wall.as_secs_f64();
        let rate = (WORDS_PER_SENTENCE * sentences) as f64 / wall;
        rates.push(rate);
        let cpu_s = run.measured.cpu_s;
        rows.push(format!(
            "| {name} | {wall:.2} | {:.0} k | {:.0} k | {cpu_s:.1} | {:.1} | {:.0} |",
            rate / 1e3,
            sentences as f64 / wall / 1e3,
            run.broker_cpu_s,
            run.measured.peak_rss_kib as f64 / 1024.0,
        ));
        out.insert(
            name.into(),
            json!({
                "wall_s": wall,
                "words_per_s": rate,
                "records_per_s": sentences as f64 / wall,
                "cpu_s": cpu_s,
                "broker_cpu_s": run.broker_cpu_s,
                "peak_rss_mib": run.measured.peak_rss_kib as f64 / 1024.0,
            }),
        );
    }
    out.insert("weir_raw_ratio".into(), json!(rates[1] / rates[0]));
    out.insert("publish_s".into(), json!(publish_s));
    out.insert("counts_exact".into(), json!(true));
    Ok((rows, Json::Object(out)))
}

/// The run of median wall time, with its broker CPU.
fn median_run(mut runs: Vec<Run>) -> Run {
    runs.sort_by_key(|r| r.measured.wall);
    let broker_cpu_s = runs[runs.len() / 2].broker_cpu_s;
    let measured = median(runs.into_iter().map(|r| r.measured).collect());
    Run { measured, broker_cpu_s }
}

/// Prints the rows of [`rows`] with their ratio.
pub fn print(sentences: u64, runs: usize, rows: &[String], figures: &Json) {
    println!(
        "word count from a local Kafka topic (tansu 0.6, sqlite, 4 partitions, {PER_PARTITION} a partition per \
         batch: batch 10,000), {sentences} sentences, max pending 4, beside a raw rskafka drain of the same topic \
         with the same fetch sizes, median of {runs} interleaved runs, start-up included"
    );
    println!("| reader | wall s | words/s | records/s | its CPU s | broker CPU s | peak RSS MiB |");
    println!("|---|---|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    let ratio = figures["weir_raw_ratio"].as_f64().unwrap_or(0.0);
    println!(
        "Weir/raw ratio (words/s): {ratio:.2} (target: at least 0.80: {})",
        if ratio >= 0.8 { "met" } else { "missed" }
    );
}
