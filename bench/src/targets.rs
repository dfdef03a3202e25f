//! The figures the guest is held to, from one run, against their targets.

use crate::Measured;
use crate::batch_sizes::AtSize;
use serde_json::{Value as Json, json};

/// What a full run measured that the targets read.
pub struct Figures<'a> {
    pub sizes: &'a [AtSize],
    /// The latency runs; the median's p99 is the figure.
    pub latency: &'a [Measured],
    /// `languages`' figures: one object per guest language.
    pub languages: &'a Json,
    /// The plain and the windowed word count.
    pub windowed: &'a crate::windows::Windowed,
}

/// One target: what is measured, its figure, how it is printed, and whether
/// it is met.
struct Row {
    measure: String,
    figure: f64,
    shown: String,
    target: &'static str,
    met: bool,
}

fn language<'a>(languages: &'a Json, name: &str) -> Option<&'a Json> {
    languages.as_array()?.iter().find(|l| l["language"] == name)
}

fn rows(f: &Figures) -> Vec<Row> {
    let size = |n: u64| f.sizes.iter().find(|s| s.batch_size == n);
    let ratio = |measure: String, figure: f64, at_least: f64, target| Row {
        measure,
        figure,
        shown: format!("{figure:.2}"),
        target,
        met: figure >= at_least,
    };
    let mut rows = Vec::new();
    if let (Some(small), Some(big)) = (size(1000), size(10_000)) {
        rows.push(ratio(
            "Rust guest at batch 1,000, against itself at 10,000".into(),
            small.wasm / big.wasm,
            0.8,
            "≥ 0.8",
        ));
    }
    for s in f.sizes {
        let measure = format!("Rust guest against the limit program at batch {}", s.batch_size);
        rows.push(ratio(measure, s.wasm / s.limit, 0.9, "≥ 0.9"));
    }
    let p99 = crate::latency::median(f.latency).report["p99_ms"].as_f64().unwrap_or(f64::NAN);
    rows.push(Row {
        measure: "p99 line-to-commit latency at half the maximum rate, batch 1,000".into(),
        figure: p99,
        shown: format!("{p99:.1} ms"),
        target: "≤ 50 ms",
        met: p99 <= 50.0,
    });
    for (name, at_least, target) in [("Python", 1.0e6, "≥ 1.0 M"), ("JavaScript", 0.5e6, "≥ 0.5 M")] {
        let rate = language(f.languages, name).and_then(|l| l["steady_words_per_s"].as_f64()).unwrap_or(f64::NAN);
        rows.push(Row {
            measure: format!("{name} word count, steady words/s"),
            figure: rate,
            shown: format!("{:.2} M", rate / 1e6),
            target,
            met: rate >= at_least,
        });
    }
    rows.push(ratio(
        "Event-time tumbling count per key, against the plain word count".into(),
        f.windowed.windowed / f.windowed.plain,
        0.5,
        "≥ 0.5",
    ));
    let open = f.windowed.open.peak_mib();
    rows.push(Row {
        measure: "peak RSS of 2,000,000 open windows, 1,400,000 of them closing in one batch".into(),
        figure: open,
        shown: format!("{open:.0} MiB"),
        target: "≤ 160 MiB",
        met: open <= 160.0,
    });
    let languages = f.languages.as_array().into_iter().flatten();
    let peak = f
        .sizes
        .iter()
        .map(|s| s.wasm_rss_mib)
        .chain(f.latency.iter().map(|m| m.peak_rss_kib as f64 / 1024.0))
        .chain(languages.filter_map(|l| l["full"]["peak_rss_mib"].as_f64()))
        .fold(0.0, f64::max);
    rows.push(Row {
        measure: "peak RSS of every row above".into(),
        figure: peak,
        shown: format!("{peak:.0} MiB"),
        target: "≤ 96 MiB",
        met: peak <= 96.0,
    });
    rows
}

pub fn print(f: &Figures) {
    println!("Targets, from this run");
    println!("| measure | figure | target | met |");
    println!("|---|---|---|---|");
    for row in rows(f) {
        println!("| {} | {} | {} | {} |", row.measure, row.shown, row.target, if row.met { "yes" } else { "no" });
    }
}

pub fn json(f: &Figures) -> Json {
    Json::Array(
        rows(f)
            .into_iter()
            .map(|r| json!({ "measure": r.measure, "figure": r.figure, "target": r.target, "met": r.met }))
            .collect(),
    )
}
