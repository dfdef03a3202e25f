//! The cluster rows: the JetStream word count served by one `weir serve`
//! outside a cluster, and by a cluster of one host and of two, each weir
//! process pinned to a core of its own (`taskset`), etcd and nats-server on
//! whatever is left. Each run starts its hosts (and etcd) afresh over a
//! stream published once (8 partitions), deploys, and is timed from the
//! deploy to the last batch's commit, and steady, from the first commit to
//! the last (the ratios are of the steady figures: the hosts' start is not
//! throughput); CPU seconds are the weir processes' own.

use super::jetstream::NatsServer;
use super::{Bench, check_counts};
use anyhow::{Context, Result, bail};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Messages of the stream in one batch, in every row.
const SPAN: u64 = 20_000;

/// The longest a run may take.
const RUN_LIMIT: Duration = Duration::from_secs(120);

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A process of the benchmark's own, reached at `url`: an etcd, or a
/// `weir serve` pinned to one core. Killed when dropped.
struct Process {
    child: Child,
    url: String,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    /// An etcd with its data and log in `dir`, once it serves.
    fn etcd(dir: &Path) -> Result<Process> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)?;
        let (port, peer) = (free_port()?, free_port()?);
        let (url, peer) = (format!("http://127.0.0.1:{port}"), format!("http://127.0.0.1:{peer}"));
        let log = dir.join("etcd.log");
        let child = Command::new("etcd")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--name", "bench", "--listen-client-urls", &url, "--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("bench={peer}")])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting etcd (scripts/ensure-services installs it)")?;
        let etcd = Process { child, url };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(&log).unwrap_or_default().contains("ready to serve client requests") {
            if Instant::now() > deadline {
                bail!("etcd was not ready within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(etcd)
    }

    /// A `weir serve` pinned to core `core`, its data in `data`.
    fn host(bench: &Bench, core: usize, data: &Path, extra: &[String]) -> Result<Process> {
        let _ = std::fs::remove_dir_all(data);
        let mut child = Command::new("taskset")
            .args(["-c", &core.to_string()])
            .arg(&bench.weir)
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .arg("--cache-dir")
            .arg(bench.work.join("cache"))
            .args(extra)
            .env("WEIR_LOG", std::env::var("WEIR_BENCH_HOST_LOG").unwrap_or("warn".into()))
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(data.with_extension("log"))?)
            .spawn()
            .context("starting weir serve under taskset")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
        let address = line.trim().strip_prefix("listening on ").context("weir serve did not say where it listens")?;
        Ok(Process { url: format!("http://{address}"), child })
    }

    fn get(&self, path: &str) -> Result<Json> {
        Ok(ureq::get(format!("{}{path}", self.url)).call()?.body_mut().read_json()?)
    }
}

/// CPU seconds process `pid` has used.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat.rsplit_once(')').context("/proc stat")?.1.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    // SAFETY: sysconf reads a constant of the system.
    Ok(ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64)
}

/// One run's figures: from the deploy to the last commit, and over the
/// steady part, from the first commit to the last.
struct Run {
    wall: Duration,
    cpu: f64,
    steady_wall: Duration,
    steady_cpu: f64,
    /// nats-server's and etcd's, over the steady part.
    steady_service_cpu: f64,
    steady_sentences: u64,
}

/// The commit record of a cluster's topology, read through one client.
struct CommitRecord {
    runtime: tokio::runtime::Runtime,
    client: etcd_client::Client,
    cluster: String,
}

impl CommitRecord {
    fn connect(etcd: &str, cluster: &str) -> Result<CommitRecord> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let client = runtime.block_on(etcd_client::Client::connect([etcd], None))?;
        Ok(CommitRecord { runtime, client, cluster: cluster.to_owned() })
    }

    /// The last committed txid of `topology`.
    fn committed(&mut self, topology: &str) -> Result<u64> {
        self.runtime.block_on(weir_cluster::commit_log::committed(&mut self.client, &self.cluster, topology))
    }
}

/// One run: `hosts` hosts of a cluster, or one `weir serve` outside any
/// (`hosts` 0), over `nats`'s stream of `sentences` sentences.
fn run_once(
    bench: &Bench,
    bundle: &Path,
    nats: &NatsServer,
    corpus: &Path,
    sentences: u64,
    hosts: usize,
) -> Result<Run> {
    // A cluster of its own each run: the changelog and commit log start empty.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cluster = format!("bench{}-{run}", std::process::id());
    let etcd = if hosts > 0 { Some(Process::etcd(&bench.work.join("etcd"))?) } else { None };
    let mut servers = Vec::new();
    for at in 0..hosts.max(1) {
        let data = bench.work.join(format!("data-cluster-{hosts}-{at}"));
        let mut extra: Vec<String> = ["--nats", &nats.url].map(str::to_owned).to_vec();
        match &etcd {
            Some(etcd) => {
                let id = format!("h{at}");
                extra.extend(["--cluster", &cluster, "--etcd", &etcd.url, "--host-id", &id].map(str::to_owned));
                extra.extend(["--batch-size".to_owned(), SPAN.to_string()]);
            }
            // Outside a cluster the batch size is per partition: 8 make the span.
            None => extra.extend(["--batch-size".to_owned(), (SPAN / 8).to_string()]),
        }
        servers.push(Process::host(bench, at, &data, &extra)?);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while etcd.is_some() {
        let view = servers[0].get("/v1/cluster")?;
        if view["hosts"].as_array().is_some_and(|h| h.len() == hosts) && view["leader"].is_string() {
            break;
        }
        if Instant::now() > deadline {
            bail!("the {hosts} hosts did not form a cluster within 60 s: {view}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut record = etcd.as_ref().map(|etcd| CommitRecord::connect(&etcd.url, &cluster)).transpose()?;
    // Sentences committed so far.
    let mut committed = || -> Result<u64> {
        Ok(match &mut record {
            Some(record) => (record.committed("word-count")? * SPAN).min(sentences),
            None => servers[0].get("/v1/topologies/word-count")?["tuples"].as_u64().unwrap_or(0),
        })
    };
    let cpu = |servers: &[Process]| servers.iter().map(|host| cpu_seconds(host.child.id())).sum::<Result<f64>>();
    let services = [Some(nats.pid()), etcd.as_ref().map(|e| e.child.id())];
    let service_cpu = || services.iter().flatten().map(|pid| cpu_seconds(*pid)).sum::<Result<f64>>();
    let cpu_before = cpu(&servers)?;
    let started = Instant::now();
    let mut answer = ureq::post(format!("{}/v1/topologies", servers[0].url))
        .header("content-type", "application/octet-stream")
        .send(std::fs::read(bundle)?)?;
    let deployed: Json = answer.body_mut().read_json()?;
    let mut first: Option<(Instant, f64, f64, u64)> = None;
    loop {
        let done = committed()?;
        if first.is_none() && done > 0 {
            first = Some((Instant::now(), cpu(&servers)?, service_cpu()?, done));
        }
        if done >= sentences {
            break;
        }
        if started.elapsed() > RUN_LIMIT {
            bail!("the word count on {hosts} hosts did not finish within {RUN_LIMIT:?}: {deployed}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (ended, cpu_after, service_cpu_after) = (Instant::now(), cpu(&servers)?, service_cpu()?);
    let (first_at, first_cpu, first_service_cpu, first_done) = first.context("no commit was seen")?;
    let scanned = servers[0].get("/v1/topologies/word-count/states/counts")?;
    let counts: BTreeMap<String, i64> = scanned
        .as_array()
        .context("a state scan")?
        .iter()
        .filter_map(|e| Some((e["key"][0].as_str()?.to_owned(), e["value"].as_i64()?)))
        .collect();
    check_counts(counts, corpus).with_context(|| format!("the word count's counts on {hosts} hosts"))?;
    Ok(Run {
        wall: ended - started,
        cpu: cpu_after - cpu_before,
        steady_wall: ended - first_at,
        steady_cpu: cpu_after - first_cpu,
        steady_service_cpu: service_cpu_after - first_service_cpu,
        steady_sentences: sentences - first_done,
    })
}

/// The bundle of the JetStream word count, made with `weir bundle`.
fn bundle(bench: &Bench, wasm: &Path) -> Result<PathBuf> {
    let path = bench.work.join("word-count-jetstream.weir");
    let status =
        Command::new(&bench.weir).arg("bundle").arg(wasm).arg("-o").arg(&path).stdout(Stdio::null()).status()?;
    if !status.success() {
        bail!("weir bundle {} failed", wasm.display());
    }
    Ok(path)
}

/// The rows over `sentences` sentences, median of `runs` rounds, each round
/// running every configuration once.
pub fn rows(bench: &Bench, wasm: &Path, sentences: u64, runs: usize) -> Result<(Vec<String>, Json)> {
    let corpus = bench.corpus(sentences)?;
    let bundle = bundle(bench, wasm)?;
    eprintln!("publishing {sentences} sentences into a local JetStream stream of 8 partitions");
    let nats = NatsServer::start(&bench.work.join("nats-cluster"))?;
    nats.publish_over(&bench.weir, &corpus, "corpus.{0..7}")?;
    let configurations = [("weir serve, one host", 0), ("cluster of 1 host", 1), ("cluster of 2 hosts", 2)];
    let mut measured: Vec<Vec<Run>> = configurations.iter().map(|_| Vec::new()).collect();
    for round in 0..runs {
        for (at, (name, hosts)) in configurations.iter().enumerate() {
            eprintln!("cluster round {} of {runs}: {name}", round + 1);
            measured[at].push(run_once(bench, &bundle, &nats, &corpus, sentences, *hosts)?);
        }
    }
    // The corpus's sentences hold eight words on average.
    let words = |sentences: u64| sentences as f64 * 8.0;
    let mut rows = Vec::new();
    let mut figures = serde_json::Map::new();
    let mut steady = Vec::new();
    for ((name, hosts), runs) in configurations.iter().zip(&mut measured) {
        runs.sort_by_key(|run| run.steady_wall);
        let run = &runs[runs.len() / 2];
        let rate = words(sentences) / run.wall.as_secs_f64();
        let steady_rate = words(run.steady_sentences) / run.steady_wall.as_secs_f64();
        let cpu_per_million = run.steady_cpu / (words(run.steady_sentences) / 1e6);
        let service_cpu_per_million = run.steady_service_cpu / (words(run.steady_sentences) / 1e6);
        steady.push((steady_rate, cpu_per_million));
        rows.push(format!(
            "| {name} | {:.2} | {:.2} M | {:.2} M | {:.2} | {cpu_per_million:.3} | {service_cpu_per_million:.3} |",
            run.wall.as_secs_f64(),
            rate / 1e6,
            steady_rate / 1e6,
            run.cpu
        ));
        figures.insert(
            (*name).into(),
            json!({
                "hosts": hosts,
                "wall_s": run.wall.as_secs_f64(),
                "words_per_s": rate,
                "cpu_s": run.cpu,
                "steady_words_per_s": steady_rate,
                "steady_cpu_s_per_million_words": cpu_per_million,
                "steady_service_cpu_s_per_million_words": service_cpu_per_million,
            }),
        );
    }
    figures.insert("two_hosts_over_one".into(), json!(steady[2].0 / steady[1].0));
    figures.insert("cluster_cpu_over_serve".into(), json!(steady[1].1 / steady[0].1));
    figures.insert("counts_exact".into(), json!(true));
    Ok((rows, Json::Object(figures)))
}

/// Prints the rows of [`rows`] with their ratios.
pub fn print(sentences: u64, runs: usize, rows: &[String], figures: &Json) {
    println!(
        "word count from a local JetStream stream (8 partitions), {sentences} sentences, {SPAN} messages a batch, \
         each weir process on a core of its own, median of {runs} runs"
    );
    println!(
        "| served by | wall s, from the deploy | words/s, from the deploy | words/s, steady | weir CPU s | \
         CPU s per million words, steady | nats-server and etcd CPU s per million words, steady |"
    );
    println!("|---|---|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    println!(
        "steady, from the first commit to the last: 2 hosts / 1 host (words/s): {:.2}; \
         cluster / weir serve (CPU s per million words): {:.2}",
        figures["two_hosts_over_one"].as_f64().unwrap_or(0.0),
        figures["cluster_cpu_over_serve"].as_f64().unwrap_or(0.0)
    );
}
