//! Event-time windows against the plain word count: the windowed word
//! count (`examples/word-count-windowed`: each word counted per minute of
//! event time, in tumbling windows, each minute's count stored) over the
//! canonical corpus with a timestamp added to each sentence, a millisecond
//! apart, at the main table's batch size and max pending, in rounds with
//! the plain word count, steady words/s from the same run. Then what open
//! windows cost in memory: 2,000,000 of them (200,000 sensors, 10 each,
//! the topology `open-windows` of `tests/guests/windows`), and 1,400,000
//! of them closing in one batch, against a state of as many keys.

use crate::{Bench, Config, Engine, Measured, SMALL, median, steady};
use anyhow::{Result, bail};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use weir_sdk::Value;
use weir_state::Db;

const TOPOLOGY: &str = "word-count-windowed";

/// The windowed word count's component.
pub fn wasm(root: &Path) -> PathBuf {
    root.join("target/guests/wasm32-wasip2/release/word_count_windowed.wasm")
}

/// The component of the open windows' topologies (the window tests').
pub fn open_wasm(root: &Path) -> PathBuf {
    root.join("target/guests/wasm32-wasip2/release/windows.wasm")
}

/// Sensors of the open windows' readings, and readings of each.
const SENSORS: u64 = 200_000;
const ROUNDS: u64 = 10;
/// Windows a closing batch closes: the first 7 seconds of every sensor.
const CLOSED: u64 = 7 * SENSORS;

/// The open windows' readings, `sensor,ts,value`: every sensor once each
/// second for `ROUNDS` seconds, a window of a second each, which a max
/// delay of 10 s keeps open; with `closing`, one more reading at 17 s,
/// which moves the watermark to 7 s and closes the first 7 seconds'.
fn open_readings(bench: &Bench, closing: bool) -> Result<PathBuf> {
    let path = bench.work.join(if closing { "open-windows-closing.txt" } else { "open-windows.txt" });
    if !path.exists() {
        let mut out = BufWriter::new(std::fs::File::create(&path)?);
        for round in 0..ROUNDS {
            for sensor in 0..SENSORS {
                writeln!(out, "s{sensor},{},{}", round * 1_000 + sensor % 1_000, (sensor * 7 + round) % 100)?;
            }
        }
        if closing {
            writeln!(out, "s0,17000,0")?;
        }
        out.flush()?;
    }
    Ok(path)
}

/// Peak RSS of runs of the open windows, and of as many keys in a state.
pub struct OpenWindows {
    /// 2,000,000 windows left open.
    pub open_mib: f64,
    /// The same, then 1,400,000 of them closed in one batch.
    pub closing_mib: f64,
    /// A persistent aggregate of as many keys, over the same readings.
    pub keys_mib: f64,
}

impl OpenWindows {
    /// The figure held to the target: the peak, closing included.
    pub fn peak_mib(&self) -> f64 {
        self.open_mib.max(self.closing_mib)
    }
}

/// Runs topology `topology` of `wasm` over `input` (batch 10,000) into a
/// fresh data dir, which it returns with the run's measures.
fn run_open(bench: &Bench, wasm: &Path, topology: &str, input: &Path) -> Result<(Measured, PathBuf)> {
    let data = bench.work.join(format!("data-{topology}"));
    let _ = std::fs::remove_dir_all(&data);
    let report = bench.work.join("report.json");
    let mut command = std::process::Command::new(&bench.weir);
    command.arg("run").arg(wasm).args(["--topology", topology]);
    command.arg("--cache-dir").arg(bench.work.join("cache")).arg("--data").arg(&data).arg("--input").arg(input);
    command.args(["--batch-size", "10000"]).arg("--report-json").arg(&report);
    command.stdout(std::process::Stdio::null()).env("WEIR_LOG", "warn");
    Ok((crate::measure(command, &report)?, data))
}

/// Measures the open windows, `runs` runs of each, median peak RSS, and
/// checks the closing run: 1,400,000 windows closed, 600,000 left open.
pub fn measure_open(bench: &Bench, wasm: &Path, runs: usize) -> Result<OpenWindows> {
    let (open, closing) = (open_readings(bench, false)?, open_readings(bench, true)?);
    let mut figures: [Vec<Measured>; 3] = Default::default();
    for round in 0..runs {
        eprintln!("round {} of {runs}: 2,000,000 open windows, closing, and as many keys", round + 1);
        figures[0].push(run_open(bench, wasm, "open-windows", &open)?.0);
        let (closed, data) = run_open(bench, wasm, "open-windows", &closing)?;
        if round == 0 {
            check_closing(&data)?;
        }
        figures[1].push(closed);
        figures[2].push(run_open(bench, wasm, "open-keys", &open)?.0);
    }
    let [open, closing, keys] = figures.map(|runs| median(runs).peak_rss_kib as f64 / 1024.0);
    Ok(OpenWindows { open_mib: open, closing_mib: closing, keys_mib: keys })
}

/// Checks the closing run's state: each of the first 7 seconds closed with
/// every sensor's window, and the other 3 seconds' windows still open.
fn check_closing(data: &Path) -> Result<()> {
    let db = Db::open(data)?;
    let closed = db.scan("open-windows", "closed")?;
    let counted: i64 = closed
        .iter()
        .map(|(_, stored)| match stored.value() {
            Value::I64(n) => *n,
            _ => 0,
        })
        .sum();
    let open = db.scan("open-windows", "open")?;
    let still_open = open.iter().filter(|(key, _)| matches!(key.first(), Some(Value::I64(_)))).count() as u64;
    // The closing reading's own window is open too.
    if (closed.len(), counted as u64, still_open) != (7, CLOSED, ROUNDS * SENSORS - CLOSED + 1) {
        bail!("the closing run closed {counted} windows over {} seconds and left {still_open} open", closed.len());
    }
    Ok(())
}

/// The corpus of `sentences` sentences, each line led by its timestamp:
/// its line number, in milliseconds.
fn timestamped(bench: &Bench, sentences: u64) -> Result<PathBuf> {
    let path = bench.work.join(format!("corpus-{sentences}-timestamped.txt"));
    if !path.exists() {
        let corpus = std::io::BufReader::new(std::fs::File::open(bench.corpus(sentences)?)?);
        let mut out = BufWriter::new(std::fs::File::create(&path)?);
        for (ts, line) in corpus.lines().enumerate() {
            writeln!(out, "{ts} {}", line?)?;
        }
        out.flush()?;
    }
    Ok(path)
}

/// Steady words/s and peak RSS of the plain and the windowed word count,
/// and what open windows cost.
pub struct Windowed {
    pub plain: f64,
    pub windowed: f64,
    pub plain_rss_mib: f64,
    pub windowed_rss_mib: f64,
    pub open: OpenWindows,
}

/// Measures both, `runs` rounds each, and checks the windowed counts: each
/// word's closed minutes and open windows together hold its whole count.
pub fn measure(bench: &Bench, wasm: &Path, open_wasm: &Path, sentences: u64, runs: usize) -> Result<Windowed> {
    let config =
        |sentences| Config { engine: Engine::Wasm, sentences, batch_size: 10_000, max_pending: 4, parallelism: 1 };
    let (inputs, small_inputs) = (timestamped(bench, sentences)?, timestamped(bench, SMALL)?);
    let mut plain: (Vec<Measured>, Vec<Measured>) = Default::default();
    let mut windowed: (Vec<Measured>, Vec<Measured>) = Default::default();
    for round in 0..runs {
        eprintln!("round {} of {runs}: the plain and the windowed word count", round + 1);
        plain.0.push(bench.run_once(&config(sentences), round)?.0);
        plain.1.push(bench.run_once(&config(SMALL), round)?.0);
        let (big, data) = bench.run_guest(wasm, &inputs, &config(sentences), round)?;
        if round == 0 {
            check(&data, &bench.corpus(sentences)?.with_extension("counts.json"))?;
        }
        windowed.0.push(big);
        windowed.1.push(bench.run_guest(wasm, &small_inputs, &config(SMALL), round)?.0);
    }
    let mib = |m: &Measured| m.peak_rss_kib as f64 / 1024.0;
    let (plain_big, plain_small) = (median(plain.0), median(plain.1));
    let (windowed_big, windowed_small) = (median(windowed.0), median(windowed.1));
    Ok(Windowed {
        plain: steady(sentences, &plain_big, &plain_small),
        windowed: steady(sentences, &windowed_big, &windowed_small),
        plain_rss_mib: mib(&plain_big),
        windowed_rss_mib: mib(&windowed_big),
        open: measure_open(bench, open_wasm, runs)?,
    })
}

/// Checks that each word's stored minutes and open windows add up to its
/// count in the ground truth at `truth`.
fn check(data: &Path, truth_path: &Path) -> Result<()> {
    let truth: BTreeMap<String, i64> = serde_json::from_str(&std::fs::read_to_string(truth_path)?)?;
    let db = Db::open(data)?;
    let mut counted: BTreeMap<String, i64> = BTreeMap::new();
    let entries = db.scan(TOPOLOGY, "minute-counts")?.into_iter().map(|(key, stored)| (key, stored, 1));
    let open = db.scan(TOPOLOGY, "open-minutes")?.into_iter().map(|(key, stored)| (key, stored, 2));
    for (key, stored, word_at) in entries.chain(open) {
        match (key.get(word_at), stored.value()) {
            (Some(Value::Str(word)), Value::I64(n)) => *counted.entry(word.clone()).or_default() += n,
            // The watermark and the late count, beside the open windows.
            _ if word_at == 2 && key.len() == 1 => {}
            _ => bail!("unexpected entry {key:?} => {stored:?}"),
        }
    }
    if counted != truth {
        let (words, expected) = (counted.len(), truth.len());
        bail!("the windowed counts differ from {} ({words} words, {expected} expected)", truth_path.display());
    }
    Ok(())
}

pub fn print(w: &Windowed, runs: usize) {
    println!(
        "Event-time windows: word count per minute of event time (tumbling windows, a timestamp added to each \
         sentence, 1 ms apart), batch 10,000, max pending 4, median of {runs} runs"
    );
    println!("| topology | steady words/s | peak RSS MiB |");
    println!("|---|---|---|");
    println!("| word count | {:.2} M | {:.0} |", w.plain / 1e6, w.plain_rss_mib);
    println!("| windowed word count | {:.2} M | {:.0} |", w.windowed / 1e6, w.windowed_rss_mib);
    println!(
        "windowed/plain ratio: {:.2}; counts check: the minutes and open windows add up to the ground truth",
        w.windowed / w.plain
    );
    println!();
    println!(
        "Open windows: 200,000 sensors, a reading each second for 10 s, tumbling windows of a second held open by \
         a max delay of 10 s (tests/guests/windows, open-windows), batch 10,000, median of {runs} runs"
    );
    println!("| run | peak RSS MiB |");
    println!("|---|---|");
    println!("| 2,000,000 open windows | {:.0} |", w.open.open_mib);
    println!("| 2,000,000 open windows, then 1,400,000 closed in one batch | {:.0} |", w.open.closing_mib);
    println!("| a state of 2,000,000 keys over the same readings (open-keys) | {:.0} |", w.open.keys_mib);
    println!("closing check: 1,400,000 windows closed, 600,000 left open");
}

pub fn json(w: &Windowed) -> Json {
    json!({
        "plain_steady_words_per_s": w.plain,
        "windowed_steady_words_per_s": w.windowed,
        "ratio": w.windowed / w.plain,
        "plain_peak_rss_mib": w.plain_rss_mib,
        "windowed_peak_rss_mib": w.windowed_rss_mib,
        "open_windows_peak_rss_mib": w.open.open_mib,
        "open_windows_closing_peak_rss_mib": w.open.closing_mib,
        "open_keys_peak_rss_mib": w.open.keys_mib,
    })
}
