//! The cluster rows: the JetStream word count (6 partitions) served by one
//! `weir serve` outside a cluster, and by clusters of 1, 2 and 3 hosts, each
//! weir process held to the same CPU quota (0.25 CPU by default) so that the
//! hosts scale as they would on cores of their own, etcd and nats-server
//! outside the quotas. The default leaves room on two cores: three hosts
//! at 0.4 CPU, with the nats-server and etcd their words cost, would need
//! more than two cores to run at 2.4 times one host. The configurations
//! alternate within each round (one interleaved run), so all meet the same
//! spells of a shared machine. Each run starts its hosts (and etcd) afresh
//! over a stream published once, deploys, and is timed from the deploy to the last batch's commit, and
//! steady, from the first commit to the last (the ratios are of the steady
//! figures: the hosts' start is not throughput; `weir serve`'s steady part
//! starts when the server begins delivering it the stream, as it commits
//! in groups of batches). CPU seconds count every
//! process (the weir hosts, nats-server, etcd), each read from
//! `/proc/<pid>/stat`; the NATS messages and etcd writes of the steady part
//! come from nats-server's `/varz` and etcd's `/metrics`.

use super::jetstream::NatsServer;
use super::owned::Owned;
use super::{Bench, check_counts};
use anyhow::{Context, Result, bail};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Messages of the stream in one batch, in every row.
const SPAN: u64 = 20_000;

/// The stream's partitions (subjects).
const PARTITIONS: u64 = 6;

/// The corpus's sentences hold eight words each (`gen_corpus.py`).
const WORDS_PER_SENTENCE: f64 = 8.0;

/// The longest a run may take.
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// The configurations of each round, in order: hosts, 0 for `weir serve`.
const CONFIGURATIONS: [(&str, usize); 4] =
    [("weir serve, one host", 0), ("cluster of 1 host", 1), ("cluster of 2 hosts", 2), ("cluster of 3 hosts", 3)];

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// How each weir process is held to its share of a CPU.
#[derive(Debug, Clone, PartialEq)]
pub enum Quota {
    /// A cgroup v1 `cpu` group of its own under `root`, `quota_us` of
    /// every `period_us`.
    CgroupV1 { root: PathBuf, quota_us: u64, period_us: u64 },
    /// `systemd-run --scope -p CPUQuota=<percent>%`.
    Systemd { percent: u64 },
    /// None could be set: the hosts share the machine's cores freely.
    Unlimited { why: String },
}

impl Quota {
    /// The first way this machine offers to hold a process to `cpu` CPUs:
    /// cgroup v1's `cpu` controller where it is writable, else
    /// `systemd-run --scope`, else none (saying why).
    pub fn detect(cpu: f64) -> Quota {
        let root = PathBuf::from("/sys/fs/cgroup/cpu");
        let probe = root.join(format!("weir-bench-probe-{}", std::process::id()));
        let cgroup = (|| -> Result<Quota> {
            let period_us: u64 = std::fs::read_to_string(root.join("cpu.cfs_period_us"))?.trim().parse()?;
            let quota_us = quota_us(cpu, period_us)?;
            std::fs::create_dir(&probe)?;
            let written = std::fs::write(probe.join("cpu.cfs_quota_us"), quota_us.to_string());
            std::fs::remove_dir(&probe)?;
            written?;
            Ok(Quota::CgroupV1 { root: root.clone(), quota_us, period_us })
        })();
        let cgroup_error = match cgroup {
            Ok(quota) => return quota,
            Err(e) => format!("cgroup v1 cpu controller: {e:#}"),
        };
        let percent = (cpu * 100.0).round() as u64;
        let systemd = Command::new("systemd-run")
            .args(["--scope", "--quiet", "-p", &format!("CPUQuota={percent}%"), "--", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        match systemd {
            Ok(status) if status.success() => Quota::Systemd { percent },
            Ok(status) => Quota::Unlimited { why: format!("{cgroup_error}; systemd-run --scope exited {status}") },
            Err(e) => Quota::Unlimited { why: format!("{cgroup_error}; systemd-run: {e}") },
        }
    }

    /// Says how the quota is held.
    pub fn describe(&self) -> String {
        match self {
            Quota::CgroupV1 { root, quota_us, period_us } => format!(
                "each weir process in a cgroup of its own under {} held to {quota_us} us of every {period_us} us \
                 ({:.2} CPU)",
                root.display(),
                *quota_us as f64 / *period_us as f64
            ),
            Quota::Systemd { percent } => format!("each weir process under systemd-run --scope -p CPUQuota={percent}%"),
            Quota::Unlimited { why } => format!("NO QUOTA (none could be set: {why}): the hosts share the cores"),
        }
    }

    /// A command running `program` under the quota, named `name`, and the
    /// cgroup it makes (to read and remove once the process is gone).
    fn command(&self, program: &Path, name: &str) -> Result<(Command, Option<PathBuf>)> {
        Ok(match self {
            Quota::CgroupV1 { root, quota_us, .. } => {
                let group = root.join(format!("weir-bench-{}-{name}", std::process::id()));
                if group.exists() {
                    std::fs::remove_dir(&group).with_context(|| format!("removing {}", group.display()))?;
                }
                std::fs::create_dir(&group).with_context(|| format!("making {}", group.display()))?;
                std::fs::write(group.join("cpu.cfs_quota_us"), quota_us.to_string())?;
                // The shell joins the group and then becomes the program, so
                // that every thread of it runs under the quota from its start.
                let mut command = Command::new("sh");
                command.args(["-c", "echo $$ > \"$0\" && exec \"$@\""]).arg(group.join("cgroup.procs")).arg(program);
                (command, Some(group))
            }
            Quota::Systemd { percent } => {
                let mut command = Command::new("systemd-run");
                command.args(["--scope", "--quiet", "-p", &format!("CPUQuota={percent}%"), "--"]).arg(program);
                (command, None)
            }
            Quota::Unlimited { .. } => (Command::new(program), None),
        })
    }
}

/// `cpu` CPUs as microseconds of every `period_us`.
fn quota_us(cpu: f64, period_us: u64) -> Result<u64> {
    if !(cpu > 0.0 && cpu.is_finite()) {
        bail!("a CPU quota must be a positive number of CPUs, not {cpu}");
    }
    // The kernel takes no quota below 1 ms.
    Ok(((cpu * period_us as f64).round() as u64).max(1000))
}

/// Periods a cgroup ran in, and those it was throttled in (`cpu.stat`).
fn throttling(group: &Path) -> (u64, u64) {
    let stat = std::fs::read_to_string(group.join("cpu.stat")).unwrap_or_default();
    let field = |name: &str| stat.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok()).unwrap_or(0);
    (field("nr_periods "), field("nr_throttled "))
}

/// A process of the benchmark's own, reached at `url`: an etcd, or a
/// `weir serve` under the quota. Killed when dropped, its cgroup removed.
struct Process {
    child: Owned,
    url: String,
    cgroup: Option<PathBuf>,
}

impl Drop for Process {
    fn drop(&mut self) {
        // The cgroup can be removed once its process is gone.
        self.child.stop();
        if let Some(group) = &self.cgroup {
            let _ = std::fs::remove_dir(group);
        }
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
        let etcd = Process { child: Owned::new(child), url, cgroup: None };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(&log).unwrap_or_default().contains("ready to serve client requests") {
            if Instant::now() > deadline {
                bail!("etcd was not ready within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(etcd)
    }

    /// A `weir serve` named `name` under `quota`, its data in `data`.
    fn host(bench: &Bench, quota: &Quota, name: &str, data: &Path, extra: &[String]) -> Result<Process> {
        let _ = std::fs::remove_dir_all(data);
        let (mut command, cgroup) = quota.command(&bench.weir, name)?;
        let child = command
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .arg("--cache-dir")
            .arg(bench.work.join("cache"))
            .args(extra)
            .env("WEIR_LOG", std::env::var("WEIR_BENCH_HOST_LOG").unwrap_or("warn".into()))
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(data.with_extension("log"))?)
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(e) => {
                if let Some(group) = &cgroup {
                    let _ = std::fs::remove_dir(group);
                }
                return Err(e).context("starting weir serve");
            }
        };
        let stdout = child.stdout.take().context("stdout")?;
        let mut host = Process { url: String::new(), child: Owned::new(child), cgroup };
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let address = line.trim().strip_prefix("listening on ").context("weir serve did not say where it listens")?;
        host.url = format!("http://{address}");
        Ok(host)
    }

    fn get(&self, path: &str) -> Result<Json> {
        Ok(ureq::get(format!("{}{path}", self.url)).call()?.body_mut().read_json()?)
    }
}

/// CPU seconds process `pid` has used, all its threads.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat.rsplit_once(')').context("/proc stat")?.1.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    // SAFETY: sysconf reads a constant of the system.
    Ok(ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64)
}

/// Seconds process `pid`'s live threads have waited, runnable, for a core
/// (`/proc/<pid>/task/*/schedstat`, the second field), summed over the
/// threads: time lost to a busy machine (or to the quota, where the
/// cgroup was throttled), not to waiting on other processes.
fn run_delay(pid: u32) -> f64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    let nanos: u64 = tasks
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    nanos as f64 / 1e9
}

/// nats-server's counts of messages and bytes in and out (`/varz`).
fn nats_traffic(nats: &NatsServer) -> Result<[f64; 4]> {
    let varz: Json = ureq::get(format!("{}/varz", nats.monitor)).call()?.body_mut().read_json()?;
    Ok(["in_msgs", "out_msgs", "in_bytes", "out_bytes"].map(|f| varz[f].as_f64().unwrap_or(0.0)))
}

/// The JetStream streams whose names start with `prefix`: each one's name,
/// messages stored, bytes stored, and last sequence (`/jsz`).
fn streams(nats: &NatsServer, prefix: &str) -> Result<Vec<(String, f64, f64, f64)>> {
    let jsz: Json =
        ureq::get(format!("{}/jsz?accounts=true&streams=true", nats.monitor)).call()?.body_mut().read_json()?;
    let mut found = Vec::new();
    for account in jsz["account_details"].as_array().into_iter().flatten() {
        for stream in account["stream_detail"].as_array().into_iter().flatten() {
            let name = stream["name"].as_str().unwrap_or_default();
            if name.starts_with(prefix) {
                let state = &stream["state"];
                let number = |f: &str| state[f].as_f64().unwrap_or(0.0);
                found.push((name.to_owned(), number("messages"), number("bytes"), number("last_seq")));
            }
        }
    }
    Ok(found)
}

/// etcd's counts of committed proposals (every write: puts, deletes,
/// transactions, lease grants) and of range reads (`/metrics`).
fn etcd_counts(etcd: &Process) -> Result<[f64; 2]> {
    let text = ureq::get(format!("{}/metrics", etcd.url)).call()?.body_mut().read_to_string()?;
    let metric = |name: &str| {
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    Ok([metric("etcd_server_proposals_committed_total"), metric("etcd_mvcc_range_total")])
}

/// What a run's processes had used and sent: since their start at a
/// reading, over the steady part in a run's figures.
#[derive(Debug, Clone)]
struct Usage {
    /// Each weir process's CPU seconds.
    hosts: Vec<f64>,
    /// Each weir process's, then nats-server's, seconds waiting for a core
    /// while runnable.
    waits: Vec<f64>,
    nats_cpu: f64,
    etcd_cpu: f64,
    /// nats-server's messages in and out, bytes in and out.
    nats: [f64; 4],
    /// etcd's committed proposals and range reads.
    etcd: [f64; 2],
}

impl Usage {
    /// What was used from `earlier` to this reading.
    fn since(&self, earlier: &Usage) -> Usage {
        let minus = |now: &[f64], then: &[f64]| now.iter().zip(then).map(|(n, t)| n - t).collect::<Vec<_>>();
        Usage {
            hosts: minus(&self.hosts, &earlier.hosts),
            waits: minus(&self.waits, &earlier.waits),
            nats_cpu: self.nats_cpu - earlier.nats_cpu,
            etcd_cpu: self.etcd_cpu - earlier.etcd_cpu,
            nats: std::array::from_fn(|i| self.nats[i] - earlier.nats[i]),
            etcd: std::array::from_fn(|i| self.etcd[i] - earlier.etcd[i]),
        }
    }
}

/// What a run's processes had used and sent, and how far it had got, at a
/// moment.
struct Reading {
    at: Instant,
    usage: Usage,
    sentences: u64,
    txid: u64,
}

/// One run's figures over its steady part, from the first commit seen to
/// the last, and from the deploy.
#[derive(Debug, Clone)]
struct Run {
    wall: Duration,
    steady_wall: Duration,
    steady_sentences: u64,
    /// Batches committed in the steady part.
    steady_batches: u64,
    /// What the processes used over the steady part.
    steady: Usage,
    /// The changelog's messages and bytes over the whole run (a cluster's).
    changelog: (f64, f64),
    /// Periods the hosts' cgroups ran in, and were throttled in.
    throttled: (u64, u64),
    replays: u64,
}

impl Run {
    fn words(&self) -> f64 {
        self.steady_sentences as f64 * WORDS_PER_SENTENCE
    }

    fn rate(&self) -> f64 {
        self.words() / self.steady_wall.as_secs_f64()
    }

    fn per_million(&self, cpu: f64) -> f64 {
        cpu / (self.words() / 1e6)
    }

    fn weir_cpu(&self) -> f64 {
        self.steady.hosts.iter().sum()
    }

    fn all_cpu(&self) -> f64 {
        self.weir_cpu() + self.steady.nats_cpu + self.steady.etcd_cpu
    }
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

/// What one run needs that every run shares.
struct Setup<'a> {
    bench: &'a Bench,
    bundle: &'a Path,
    nats: &'a NatsServer,
    corpus: &'a Path,
    sentences: u64,
    quota: &'a Quota,
}

/// One run: `hosts` hosts of a cluster, or one `weir serve` outside any
/// (`hosts` 0), over the stream of `setup.sentences` sentences.
fn run_once(setup: &Setup, hosts: usize) -> Result<Run> {
    let Setup { bench, bundle, nats, corpus, sentences, quota } = *setup;
    // A cluster of its own each run: the changelog and commit log start empty.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cluster = format!("bench{}-{run}", std::process::id());
    let etcd = if hosts > 0 { Some(Process::etcd(&bench.work.join("etcd"))?) } else { None };
    let changelogs_before = streams(nats, "weir-changelog-")?;
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
            // Outside a cluster the batch size is per partition: the
            // partitions together make the span.
            None => extra.extend(["--batch-size".to_owned(), (SPAN / PARTITIONS).to_string()]),
        }
        servers.push(Process::host(bench, quota, &format!("{hosts}-{at}"), &data, &extra)?);
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
    let etcd_pid = etcd.as_ref().map(|e| e.child.id());
    // What the processes have used and sent, and the sentences committed.
    let mut read = |servers: &[Process]| -> Result<Reading> {
        let (sentences, txid) = match &mut record {
            Some(record) => {
                let txid = record.committed("word-count")?;
                ((txid * SPAN).min(sentences), txid)
            }
            None => {
                let status = servers[0].get("/v1/topologies/word-count")?;
                (status["tuples"].as_u64().unwrap_or(0), status["batches"].as_u64().unwrap_or(0))
            }
        };
        let usage = Usage {
            hosts: servers.iter().map(|host| cpu_seconds(host.child.id())).collect::<Result<_>>()?,
            waits: servers.iter().map(|host| host.child.id()).chain([nats.pid()]).map(run_delay).collect(),
            nats_cpu: cpu_seconds(nats.pid())?,
            etcd_cpu: etcd_pid.map(cpu_seconds).transpose()?.unwrap_or(0.0),
            nats: nats_traffic(nats)?,
            etcd: etcd.as_ref().map(etcd_counts).transpose()?.unwrap_or_default(),
        };
        Ok(Reading { at: Instant::now(), usage, sentences, txid })
    };
    let started = Instant::now();
    let mut answer = ureq::post(format!("{}/v1/topologies", servers[0].url))
        .header("content-type", "application/octet-stream")
        .send(std::fs::read(bundle)?)?;
    let deployed: Json = answer.body_mut().read_json()?;
    // `weir serve` reads ahead and commits batches in groups, its first
    // often near the end of the stream: its steady part starts when
    // nats-server begins delivering it the stream (its bundle loaded), and
    // counts every sentence. A cluster's starts at its first commit, past
    // the hosts' start (fencing and restoring slots, the assignment).
    let deployed_at = read(&servers)?;
    let started_reading = |now: &Reading| now.usage.nats[1] - deployed_at.usage.nats[1] > 100.0;
    let mut first: Option<Reading> = None;
    let last = loop {
        let now = read(&servers)?;
        if std::env::var_os("WEIR_BENCH_TRACE").is_some() {
            eprintln!("  {:?}: {} sentences, {:?} CPU s", now.at - started, now.sentences, now.usage.hosts);
        }
        if now.sentences >= sentences {
            break now;
        }
        let begun = if etcd.is_some() { now.sentences > 0 } else { started_reading(&now) };
        if first.is_none() && begun {
            first = Some(now);
        } else if started.elapsed() > RUN_LIMIT {
            bail!("the word count on {hosts} hosts did not finish within {RUN_LIMIT:?}: {deployed}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let first =
        first.context("the run's start (first commit, or the stream's delivery) was not seen before its end")?;
    let throttled = servers
        .iter()
        .filter_map(|s| s.cgroup.as_deref())
        .map(throttling)
        .fold((0, 0), |(p, t), (periods, throttled)| (p + periods, t + throttled));
    let replays = servers
        .iter()
        .filter_map(|s| s.get("/v1/topologies/word-count").ok())
        .filter_map(|t| t["replays"].as_u64())
        .max()
        .unwrap_or(0);
    let scanned = servers[0].get("/v1/topologies/word-count/states/counts")?;
    let counts: BTreeMap<String, i64> = scanned
        .as_array()
        .context("a state scan")?
        .iter()
        .filter_map(|e| Some((e["key"][0].as_str()?.to_owned(), e["value"].as_i64()?)))
        .collect();
    check_counts(counts, corpus).with_context(|| format!("the word count's counts on {hosts} hosts"))?;
    let changelog = streams(nats, "weir-changelog-")?
        .into_iter()
        .filter(|s| !changelogs_before.iter().any(|b| b.0 == s.0))
        // The stream keeps a snapshot and the deltas after it; its last
        // sequence counts every message written, at the kept ones' mean size.
        .map(|(_, messages, bytes, last)| (last, if messages > 0.0 { bytes / messages * last } else { 0.0 }))
        .fold((0.0, 0.0), |(m, b), (messages, bytes)| (m + messages, b + bytes));
    Ok(Run {
        wall: last.at - started,
        steady_wall: last.at - first.at,
        steady_sentences: last.sentences - first.sentences,
        steady_batches: last.txid - first.txid,
        steady: last.usage.since(&first.usage),
        changelog,
        throttled,
        replays,
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

/// The machine's load averages over 1, 5 and 15 minutes.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The median of `runs` by steady words/s.
fn median(runs: &mut [Run]) -> &Run {
    runs.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
    &runs[runs.len() / 2]
}

/// The rows over `sentences` sentences, median of `runs` rounds, each round
/// running every configuration once, each weir process held to `cpu` CPUs.
/// Returns the printed lines and the figures.
pub fn rows(bench: &Bench, wasm: &Path, sentences: u64, runs: usize, cpu: f64) -> Result<(Vec<String>, Json)> {
    let corpus = bench.corpus(sentences)?;
    let bundle = bundle(bench, wasm)?;
    let quota = Quota::detect(cpu);
    eprintln!("quota: {}", quota.describe());
    eprintln!("publishing {sentences} sentences into a local JetStream stream of {PARTITIONS} partitions");
    let nats = NatsServer::start(&bench.work.join("nats-cluster"))?;
    nats.publish_over(&bench.weir, &corpus, &format!("corpus.{{0..{}}}", PARTITIONS - 1))?;
    let setup = Setup { bench, bundle: &bundle, nats: &nats, corpus: &corpus, sentences, quota: &quota };
    let load_before = load_average();
    let mut measured: Vec<Vec<Run>> = CONFIGURATIONS.iter().map(|_| Vec::new()).collect();
    for round in 0..runs {
        for (at, (name, hosts)) in CONFIGURATIONS.iter().enumerate() {
            eprintln!("cluster round {} of {runs}: {name} (load average {})", round + 1, load_average());
            let run = run_once(&setup, *hosts)?;
            eprintln!(
                "  {:.2} M words/s steady, {:.3} CPU s per million words, all processes",
                run.rate() / 1e6,
                run.per_million(run.all_cpu())
            );
            measured[at].push(run);
        }
    }
    let load_after = load_average();
    let mut lines = vec![
        format!(
            "word count from a local JetStream stream ({PARTITIONS} partitions), {sentences} sentences, {SPAN} \
             messages a batch, median of {runs} interleaved rounds (by steady words/s)"
        ),
        format!("quota: {}; etcd and nats-server outside it", quota.describe()),
        format!("load average (1, 5, 15 min): {load_before} before, {load_after} after"),
        "| served by | wall s, from the deploy | words/s, steady | CPU s per million words, all processes | weir | \
         nats-server | etcd | each weir process, CPU share of the wall | each weir process, then nats-server: \
         its threads' seconds runnable and waiting for a core (or the quota), a second |"
            .into(),
        "|---|---|---|---|---|---|---|---|---|".into(),
    ];
    let mut figures = serde_json::Map::new();
    let mut medians = Vec::new();
    for ((name, hosts), runs) in CONFIGURATIONS.iter().zip(&mut measured) {
        let all_rates: Vec<f64> = runs.iter().map(Run::rate).collect();
        let run = median(runs).clone();
        let shares: Vec<String> =
            run.steady.hosts.iter().map(|c| format!("{:.2}", c / run.steady_wall.as_secs_f64())).collect();
        let waiting: Vec<String> =
            run.steady.waits.iter().map(|w| format!("{:.2}", w / run.steady_wall.as_secs_f64())).collect();
        lines.push(format!(
            "| {name} | {:.2} | {:.2} M | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} |",
            run.wall.as_secs_f64(),
            run.rate() / 1e6,
            run.per_million(run.all_cpu()),
            run.per_million(run.weir_cpu()),
            run.per_million(run.steady.nats_cpu),
            run.per_million(run.steady.etcd_cpu),
            shares.join(" / "),
            waiting.join(" / ")
        ));
        let batches = run.steady_batches.max(1) as f64;
        figures.insert(
            (*name).into(),
            json!({
                "hosts": hosts,
                "wall_s": run.wall.as_secs_f64(),
                "steady_s": run.steady_wall.as_secs_f64(),
                "steady_words_per_s": run.rate(),
                "steady_words_per_s_every_round": all_rates,
                "cpu_s_per_million_words": run.per_million(run.all_cpu()),
                "weir_cpu_s_per_million_words": run.per_million(run.weir_cpu()),
                "each_weir_cpu_s_per_million_words": run.steady.hosts.iter().map(|c| run.per_million(*c)).collect::<Vec<_>>(),
                "each_weir_cpu_share_of_wall": run.steady.hosts.iter().map(|c| c / run.steady_wall.as_secs_f64()).collect::<Vec<_>>(),
                "each_weir_then_nats_thread_seconds_waiting_a_second": run.steady.waits.iter().map(|w| w / run.steady_wall.as_secs_f64()).collect::<Vec<_>>(),
                "nats_cpu_s_per_million_words": run.per_million(run.steady.nats_cpu),
                "etcd_cpu_s_per_million_words": run.per_million(run.steady.etcd_cpu),
                "steady_batches": run.steady_batches,
                "nats_msgs_in_per_batch": run.steady.nats[0] / batches,
                "nats_msgs_out_per_batch": run.steady.nats[1] / batches,
                "nats_kib_in_per_batch": run.steady.nats[2] / batches / 1024.0,
                "nats_kib_out_per_batch": run.steady.nats[3] / batches / 1024.0,
                "etcd_writes_per_batch": run.steady.etcd[0] / batches,
                "etcd_reads_per_batch": run.steady.etcd[1] / batches,
                "changelog_messages": run.changelog.0,
                "changelog_bytes": run.changelog.1,
                "quota_periods": run.throttled.0,
                "quota_periods_throttled": run.throttled.1,
                "replays": run.replays,
            }),
        );
        medians.push(run);
    }
    lines.push(String::new());
    lines.push(
        "| served by | batches, steady | NATS messages in / out a batch | NATS KiB in / out a batch | etcd writes / \
         reads a batch | changelog messages / KiB, whole run | periods throttled | replays |"
            .into(),
    );
    lines.push("|---|---|---|---|---|---|---|---|".into());
    for ((name, _), run) in CONFIGURATIONS.iter().zip(&medians) {
        let batches = run.steady_batches.max(1) as f64;
        lines.push(format!(
            "| {name} | {} | {:.0} / {:.0} | {:.0} / {:.0} | {:.1} / {:.1} | {:.0} / {:.0} | {} of {} | {} |",
            run.steady_batches,
            run.steady.nats[0] / batches,
            run.steady.nats[1] / batches,
            run.steady.nats[2] / batches / 1024.0,
            run.steady.nats[3] / batches / 1024.0,
            run.steady.etcd[0] / batches,
            run.steady.etcd[1] / batches,
            run.changelog.0,
            run.changelog.1 / 1024.0,
            run.throttled.1,
            run.throttled.0,
            run.replays
        ));
    }
    let per_word = |r: &Run| r.per_million(r.all_cpu());
    let (serve, one, two, three) = (&medians[0], &medians[1], &medians[2], &medians[3]);
    let ratios = json!({
        "two_hosts_over_one": two.rate() / one.rate(),
        "three_hosts_over_one": three.rate() / one.rate(),
        "one_host_cpu_over_serve": per_word(one) / per_word(serve),
        "two_hosts_cpu_over_serve": per_word(two) / per_word(serve),
        "three_hosts_cpu_over_serve": per_word(three) / per_word(serve),
    });
    lines.push(String::new());
    lines.push(format!(
        "steady words/s: 2 hosts / 1 host {:.2} (target at least 1.7), 3 hosts / 1 host {:.2} (target at least \
         2.4); CPU s per million words, all processes, against weir serve's: 1 host {:.2}, 2 hosts {:.2}, 3 hosts \
         {:.2} (target at most 1.5)",
        ratios["two_hosts_over_one"].as_f64().unwrap_or(0.0),
        ratios["three_hosts_over_one"].as_f64().unwrap_or(0.0),
        ratios["one_host_cpu_over_serve"].as_f64().unwrap_or(0.0),
        ratios["two_hosts_cpu_over_serve"].as_f64().unwrap_or(0.0),
        ratios["three_hosts_cpu_over_serve"].as_f64().unwrap_or(0.0),
    ));
    figures.insert("ratios".into(), ratios);
    figures.insert("quota".into(), json!(quota.describe()));
    figures.insert("load_average".into(), json!({ "before": load_before, "after": load_after }));
    figures.insert("partitions".into(), json!(PARTITIONS));
    figures.insert("span".into(), json!(SPAN));
    figures.insert("counts_exact".into(), json!(true));
    Ok((lines, Json::Object(figures)))
}

/// Prints the lines of [`rows`].
pub fn print(lines: &[String]) {
    for line in lines {
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_is_the_share_of_the_period() {
        assert_eq!(quota_us(0.4, 100_000).unwrap(), 40_000);
        assert_eq!(quota_us(1.5, 100_000).unwrap(), 150_000);
        // The kernel's least quota.
        assert_eq!(quota_us(0.001, 100_000).unwrap(), 1000);
        assert!(quota_us(0.0, 100_000).is_err());
        assert!(quota_us(f64::NAN, 100_000).is_err());
    }

    #[test]
    fn throttling_reads_cpu_stat() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cpu.stat"), "nr_periods 120\nnr_throttled 37\nthrottled_time 999\n").unwrap();
        assert_eq!(throttling(dir.path()), (120, 37));
        assert_eq!(throttling(&dir.path().join("gone")), (0, 0));
    }

    #[test]
    fn a_cgroup_quota_runs_its_program_inside_the_group() {
        let root = tempfile::tempdir().unwrap();
        let quota = Quota::CgroupV1 { root: root.path().to_owned(), quota_us: 40_000, period_us: 100_000 };
        let (mut command, group) = quota.command(Path::new("true"), "t").unwrap();
        let group = group.unwrap();
        assert_eq!(std::fs::read_to_string(group.join("cpu.cfs_quota_us")).unwrap(), "40000");
        let mut child = command.spawn().unwrap();
        let pid = child.id();
        assert!(child.wait().unwrap().success());
        // The shell wrote its own id, which `exec` kept for the program.
        assert_eq!(std::fs::read_to_string(group.join("cgroup.procs")).unwrap().trim(), pid.to_string());
    }
}
