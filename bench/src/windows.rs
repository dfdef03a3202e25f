//! Event-time windows against the plain word count: the windowed word
//! count (`examples/word-count-windowed`: each word counted per minute of
//! event time, in tumbling windows, each minute's count stored) over the
//! canonical corpus with a timestamp added to each sentence, a millisecond
//! apart, at the main table's batch size and max pending, in rounds with
//! the plain word count, steady words/s from the same run.

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

/// Steady words/s and peak RSS of the plain and the windowed word count.
pub struct Windowed {
    pub plain: f64,
    pub windowed: f64,
    pub plain_rss_mib: f64,
    pub windowed_rss_mib: f64,
}

/// Measures both, `runs` rounds each, and checks the windowed counts: each
/// word's closed minutes and open windows together hold its whole count.
pub fn measure(bench: &Bench, wasm: &Path, sentences: u64, runs: usize) -> Result<Windowed> {
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
}

pub fn json(w: &Windowed) -> Json {
    json!({
        "plain_steady_words_per_s": w.plain,
        "windowed_steady_words_per_s": w.windowed,
        "ratio": w.windowed / w.plain,
        "plain_peak_rss_mib": w.plain_rss_mib,
        "windowed_peak_rss_mib": w.windowed_rss_mib,
    })
}
