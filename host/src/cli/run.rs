//! `weir run`: run a topology over an input file.

use anyhow::Result;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Duration;
use weir::config::{DEFAULT_BATCH_SIZE, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PENDING, RunConfig};
use weir::coordinator::{self, RunReport};
use weir::runtime::{self, ComponentCache};
use weir::spout::FileLines;
use weir::state::Db;
use weir::{guest_build, topology};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// A component (.wasm), or a guest crate's directory, which is built for
    /// wasm32-wasip2 first.
    path: PathBuf,
    /// Directory holding the topology's state (created if missing). Run again
    /// with the same directory to resume after the last committed batch.
    #[arg(long)]
    data: PathBuf,
    /// The file whose lines the topology's spout emits.
    #[arg(long)]
    input: PathBuf,
    /// Lines per batch.
    #[arg(long, default_value_t = DEFAULT_BATCH_SIZE as u64, value_parser = clap::value_parser!(u64).range(1..))]
    batch_size: u64,
    /// Batches processing at once; commits stay in txid order.
    #[arg(long, default_value_t = DEFAULT_MAX_PENDING as u64, value_parser = clap::value_parser!(u64).range(1..))]
    max_pending: u64,
    /// Attempts a failing batch gets before the topology halts.
    #[arg(long, default_value_t = DEFAULT_MAX_ATTEMPTS, value_parser = clap::value_parser!(u32).range(1..))]
    max_attempts: u32,
    /// Which topology to run, when the component defines several.
    #[arg(long)]
    topology: Option<String>,
    /// Where compiled components are cached [default: $WEIR_CACHE_DIR, else
    /// ~/.cache/weir].
    #[arg(long)]
    cache_dir: Option<PathBuf>,
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

pub fn run(args: RunArgs) -> Result<()> {
    let wasm = if args.path.is_dir() { guest_build::build(&args.path)? } else { args.path.clone() };
    let config = RunConfig {
        batch_size: args.batch_size as usize,
        max_pending: args.max_pending as usize,
        max_attempts: args.max_attempts,
    };
    let mut spout = FileLines::open(&args.input)?;
    let db = Db::open(&args.data)?;
    let engine = runtime::engine()?;
    let cache = ComponentCache::new(args.cache_dir.clone().unwrap_or_else(runtime::default_cache_dir));
    let loaded = topology::load(&engine, &cache, &wasm, args.topology.as_deref())?;
    let name = loaded.plan.topology.clone();
    tracing::info!(
        "topology {name} from {} ({})",
        wasm.display(),
        if loaded.component.was_cached() { "compiled component loaded from cache" } else { "compiled" }
    );
    let bar = progress_bar();
    let report = coordinator::run(&db, loaded.plan, loaded.component, &mut spout, &config, &mut |r: &RunReport| {
        bar.set_message(format!(
            "txid {} committed · {} batches · {:.0} tuples/s",
            r.last_committed,
            r.batches,
            rate(r.tuples, r.elapsed)
        ));
    });
    bar.finish_and_clear();
    let report = report?;
    println!(
        "{name}: committed {} batches ({} tuples) in {:.2}s, {:.0} tuples/s; last committed txid {}{}",
        report.batches,
        report.tuples,
        report.elapsed.as_secs_f64(),
        rate(report.tuples, report.elapsed),
        report.last_committed,
        if report.replays > 0 { format!("; {} failed attempts replayed", report.replays) } else { String::new() }
    );
    Ok(())
}
