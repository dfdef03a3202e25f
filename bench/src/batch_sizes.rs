//! The Wasm guest against the limit program at batch sizes of 1,000,
//! 10,000 and 100,000, in rounds as the main table is.

use crate::{Bench, Config, Engine, Measured, SMALL, median, steady};
use anyhow::Result;
use serde_json::{Value as Json, json};

/// The batch sizes measured besides the main table's 10,000.
const OTHER_SIZES: [u64; 2] = [1000, 100_000];

/// Steady words/s and peak RSS of the guest and the limit at one batch size.
#[derive(Clone, Copy)]
pub struct AtSize {
    pub batch_size: u64,
    /// The max pending it ran at.
    pub max_pending: u64,
    pub wasm: f64,
    pub limit: f64,
    pub wasm_rss_mib: f64,
    pub limit_rss_mib: f64,
}

fn mib(m: &Measured) -> f64 {
    m.peak_rss_kib as f64 / 1024.0
}

/// Measures the guest and the limit at [`OTHER_SIZES`], `runs` rounds each,
/// and returns them with `at_10k` (from the main table) in batch-size order.
pub fn measure(bench: &Bench, sentences: u64, runs: usize, at_10k: AtSize) -> Result<Vec<AtSize>> {
    // Weir's default max pending at each size, for the limit's pipeline too.
    let pending = |batch_size: u64| weir_config::default_max_pending(batch_size as usize) as u64;
    let config = |engine, batch_size, sentences| Config {
        engine,
        sentences,
        batch_size,
        max_pending: pending(batch_size),
        parallelism: 1,
    };
    let cells: Vec<(u64, Engine)> =
        OTHER_SIZES.iter().flat_map(|&size| [(size, Engine::Wasm), (size, Engine::Limit)]).collect();
    let mut measured: Vec<(Vec<Measured>, Vec<Measured>)> = cells.iter().map(|_| Default::default()).collect();
    for round in 0..runs {
        eprintln!("round {} of {runs}: the guest and the limit at batch sizes {OTHER_SIZES:?}", round + 1);
        for (&(size, engine), (big, small)) in cells.iter().zip(&mut measured) {
            big.push(bench.run_once(&config(engine, size, sentences), round)?.0);
            small.push(bench.run_once(&config(engine, size, SMALL), round)?.0);
        }
    }
    let mut sizes = vec![at_10k];
    let mut medians = cells.into_iter().zip(measured).map(|(cell, (big, small))| {
        let (big, small) = (median(big), median(small));
        (cell, steady(sentences, &big, &small), mib(&big))
    });
    while let (Some(((size, _), wasm, wasm_rss)), Some((_, limit, limit_rss))) = (medians.next(), medians.next()) {
        sizes.push(AtSize {
            batch_size: size,
            max_pending: pending(size),
            wasm,
            limit,
            wasm_rss_mib: wasm_rss,
            limit_rss_mib: limit_rss,
        });
    }
    sizes.sort_by_key(|s| s.batch_size);
    Ok(sizes)
}

/// The table of [`measure`]'s figures.
pub fn print(sizes: &[AtSize], runs: usize) {
    let at_10k = sizes.iter().find(|s| s.batch_size == 10_000).map_or(f64::NAN, |s| s.wasm);
    let pending = sizes.iter().map(|s| format!("{} at {}", s.max_pending, s.batch_size));
    let pending = pending.collect::<Vec<_>>().join(", ");
    println!(
        "The guest and the limit program by batch size, max pending {pending}, steady words/s, median of {runs} runs"
    );
    println!("| batch size | wasm | limit | wasm/limit | wasm against itself at 10,000 | peak RSS MiB wasm / limit |");
    println!("|---|---|---|---|---|---|");
    for s in sizes {
        println!(
            "| {} | {:.2} M | {:.2} M | {:.2} | {:.2} | {:.0} / {:.0} |",
            s.batch_size,
            s.wasm / 1e6,
            s.limit / 1e6,
            s.wasm / s.limit,
            s.wasm / at_10k,
            s.wasm_rss_mib,
            s.limit_rss_mib
        );
    }
}

pub fn json(sizes: &[AtSize]) -> Json {
    Json::Array(
        sizes
            .iter()
            .map(|s| {
                json!({
                    "batch_size": s.batch_size,
                    "max_pending": s.max_pending,
                    "wasm_steady_words_per_s": s.wasm,
                    "limit_steady_words_per_s": s.limit,
                    "wasm_peak_rss_mib": s.wasm_rss_mib,
                    "limit_peak_rss_mib": s.limit_rss_mib,
                })
            })
            .collect(),
    )
}
