//! `weir run`: run a topology over an input file.

use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_config::sync::Locked;
use weir_config::{
    DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TIMEOUT_MS, DEFAULT_GROUP_MAX, DEFAULT_GROUP_TIME_MS, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETRY_BACKOFF_MS, RunConfig, default_max_pending,
};
use weir_engine::coordinator::{self, RunReport};
use weir_engine::instances::OperatorSource;
use weir_engine::{guest_build, load};
use weir_io::sink::Publisher;
use weir_io::spout;
use weir_sdk::topology::SPOUT_ID;

use super::engine::EngineArgs;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// A component (.wasm) or bundle (.weir), or a guest directory, built
    /// first: a Rust crate, a Python (app.py) or JavaScript (app.js) guest,
    /// or several guests (weir-bundle.json).
    path: PathBuf,
    /// Directory holding the topology's state (created if missing). Run again
    /// with the same directory to resume after the last committed batch.
    #[arg(long)]
    data: PathBuf,
    /// The file (or, for a directory spout, the directory) whose lines the
    /// topology's spout emits. Not used by spouts that make their own input.
    #[arg(long)]
    input: Option<PathBuf>,
    /// Lines per batch.
    #[arg(long, default_value_t = DEFAULT_BATCH_SIZE as u64, value_parser = clap::value_parser!(u64).range(1..))]
    batch_size: u64,
    /// Batches processing at once, holding at most 64 MiB of input and
    /// results beyond the first; commits stay in txid order [default:
    /// 128,000 divided by the batch size, from 4 to 128].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_pending: Option<u64>,
    /// Instances of each operator that run at once, each over its own
    /// partition of the batch, where the topology sets no parallelism_hint
    /// (at most --max-parallelism).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    parallelism: u64,
    /// Attempts a failing batch gets before the topology halts.
    #[arg(long, default_value_t = DEFAULT_MAX_ATTEMPTS, value_parser = clap::value_parser!(u32).range(1..))]
    max_attempts: u32,
    /// Wait before replaying a failed batch, in milliseconds; doubled for each
    /// further attempt, up to 5 s.
    #[arg(long, default_value_t = DEFAULT_RETRY_BACKOFF_MS)]
    retry_backoff_ms: u64,
    /// Time a batch may take to be processed, in milliseconds; past it the
    /// batch fails and is replayed.
    #[arg(long, default_value_t = DEFAULT_BATCH_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..))]
    batch_timeout_ms: u64,
    /// Batches one commit may hold: those processed by the time the oldest
    /// commits share its durable write. 1 commits each batch on its own, as
    /// a topology with sinks always does.
    #[arg(long, default_value_t = DEFAULT_GROUP_MAX as u64, value_parser = clap::value_parser!(u64).range(1..=1024))]
    group_max: u64,
    /// Time a commit may spend gathering processed batches into its group,
    /// in milliseconds; it never waits for a batch still processing.
    #[arg(long, default_value_t = DEFAULT_GROUP_TIME_MS, value_parser = clap::value_parser!(u64).range(..=60_000))]
    group_time_ms: u64,
    /// Which topology to run, when the component defines several. Repeat it
    /// to run several at once, each over the whole input with its own
    /// coordinator: one failing does not stop the others.
    #[arg(long)]
    topology: Vec<String>,
    /// Also write the run's figures (per topology: batches, tuples, wall
    /// time, time to the first processed batch, commit latency p50/p99; the
    /// process's peak resident memory) to this file, as JSON.
    #[arg(long)]
    report_json: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
}

fn progress_bar() -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("valid template"));
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn rate(count: u64, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(1e-9)
}

fn status_line(reports: &BTreeMap<String, RunReport>) -> String {
    let parts: Vec<String> = reports
        .iter()
        .map(|(name, r)| {
            format!(
                "{name}: txid {} committed · {} batches · {:.0} tuples/s",
                r.last_committed,
                r.batches,
                rate(r.tuples, r.elapsed)
            )
        })
        .collect();
    parts.join("  |  ")
}

pub fn run(args: RunArgs, started: Instant) -> Result<()> {
    let wasm = if args.path.is_dir() { guest_build::build(&args.path)? } else { args.path.clone() };
    let config = RunConfig {
        batch_size: args.batch_size as usize,
        max_pending: args.max_pending.map_or(default_max_pending(args.batch_size as usize), |n| n as usize),
        max_attempts: args.max_attempts,
        retry_backoff: Duration::from_millis(args.retry_backoff_ms),
        batch_timeout: Duration::from_millis(args.batch_timeout_ms),
        group_max: args.group_max as usize,
        group_time: Duration::from_millis(args.group_time_ms),
        follow: None,
        max_outbox_bytes: args.engine.sinks.max_outbox_bytes(),
        ..RunConfig::default()
    };
    let sandbox = args.engine.sandbox();
    let max_parallelism = sandbox.topology.max_parallelism;
    if args.parallelism > u64::from(max_parallelism) {
        bail!(
            "--parallelism {} is more than this host allows ({max_parallelism}; see --max-parallelism)",
            args.parallelism
        );
    }
    let (engine, cache) = args.engine.engine_and_cache(&sandbox)?;
    let mut topologies = load::topologies(&engine, &cache, &wasm, &args.topology, &sandbox)?;
    if args.parallelism > 1 {
        for loaded in &mut topologies {
            let plan = loaded.plan.with_parallelism(args.parallelism as usize);
            plan.check_parallelism(&sandbox.topology)?;
            loaded.plan = Arc::new(plan);
        }
    }
    let nats = args.engine.nats.config()?;
    // What every topology's spout shares; each takes its own name below.
    let kafka = args.engine.kafka.config()?;
    let env =
        spout::SpoutEnv::local("", args.input.as_deref(), config.batch_size, nats.as_ref()).with_kafka(kafka.as_ref());
    for loaded in &topologies {
        let Some(spout) = loaded.definition.spout() else {
            bail!("topology {} has no spout: it only answers queries (see weir query)", loaded.plan.topology);
        };
        let name = &loaded.plan.topology;
        spout::check_input(spout, &spout::SpoutEnv { topology: name, stored_as: name, ..env })?;
        weir_io::sink::check_server(&loaded.plan, nats.as_ref(), kafka.as_ref())?;
    }
    // Spouts and sinks connect before the data dir is made: a start that
    // fails (a server out of reach) leaves nothing behind.
    let mut opened = Vec::with_capacity(topologies.len());
    for loaded in topologies {
        let spout_component = Arc::clone(loaded.components.for_operator(SPOUT_ID));
        let guest = Some((spout_component, loaded.plan.sandboxes.of(SPOUT_ID).clone()));
        let spout_def = loaded.definition.spout().expect("checked above");
        let env = spout::SpoutEnv { topology: &loaded.definition.name, stored_as: &loaded.definition.name, ..env };
        let spout = spout::open(spout_def, &env, guest)?;
        let sinks = Publisher::open(&loaded.plan, nats.as_ref(), kafka.as_ref())?;
        opened.push((loaded, spout, sinks));
    }
    // Opened once the topologies are known good: a refused one leaves no trace.
    let db = args.engine.sandbox.open_db(&args.data, None)?;
    for (loaded, _, _) in &opened {
        db.check_state_kinds(&loaded.plan.stored_as, &loaded.plan.states)?;
    }
    let loaded_after = started.elapsed();
    for (loaded, _, _) in &opened {
        load::remember(&args.data, &loaded.plan.topology, &wasm)?;
    }
    let cached = opened[0].0.components.default.was_cached();
    tracing::info!(
        "{} from {} ({})",
        opened.iter().map(|(t, _, _)| format!("topology {}", t.plan.topology)).collect::<Vec<_>>().join(", "),
        wasm.display(),
        if cached { "compiled component loaded from cache" } else { "compiled" }
    );
    let bar = progress_bar();
    let reports = Mutex::new(BTreeMap::new());
    let outcomes: Vec<(String, Result<RunReport>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = opened
            .into_iter()
            .map(|(loaded, mut spout, mut sinks)| {
                let (db, config, bar, reports) = (&db, &config, &bar, &reports);
                let name = loaded.plan.topology.clone();
                let handle = scope.spawn(move || {
                    coordinator::run(
                        db,
                        loaded.plan,
                        OperatorSource::Wasm(loaded.components),
                        &mut *spout,
                        sinks.as_mut(),
                        config,
                        &AtomicBool::new(false),
                        &mut |r: &RunReport| {
                            let mut reports = reports.locked();
                            reports.insert(loaded.definition.name.clone(), r.clone());
                            bar.set_message(status_line(&reports));
                        },
                    )
                });
                (name, handle)
            })
            .collect();
        handles
            .into_iter()
            .map(|(name, handle)| {
                let outcome = handle.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the run panicked")));
                (name, outcome)
            })
            .collect()
    });
    bar.finish_and_clear();
    let mut failures = Vec::new();
    let mut figures = Vec::new();
    for (name, outcome) in outcomes {
        match outcome {
            Ok(report) => {
                figures.push(report.figures(&name, loaded_after));
                let groups = &report.commit_groups;
                println!(
                    "{name}: committed {} batches ({} tuples) in {:.2}s, {:.0} tuples/s; last committed txid {}; \
                     commits: {} groups, mean {:.1} batches, max {}{}",
                    report.batches,
                    report.tuples,
                    report.elapsed.as_secs_f64(),
                    rate(report.tuples, report.elapsed),
                    report.last_committed,
                    groups.groups,
                    groups.mean().unwrap_or(0.0),
                    groups.max,
                    if report.replays > 0 {
                        format!("; {} failed attempts replayed", report.replays)
                    } else {
                        String::new()
                    }
                )
            }
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    if let Some(path) = &args.report_json {
        let peak = peak_rss_kib();
        for topology in &mut figures {
            topology["process_peak_rss_kib"] = serde_json::json!(peak);
        }
        let json = serde_json::to_string_pretty(&figures)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    match failures.len() {
        0 => Ok(()),
        1 => bail!("{}", failures[0]),
        _ => bail!("{}", failures.join("\n")),
    }
}

/// The process's peak resident memory so far, in KiB (`VmHWM`): its own,
/// where a parent's `wait4` would count the parent's memory at the fork too.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|line| line.strip_prefix("VmHWM:"))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}
