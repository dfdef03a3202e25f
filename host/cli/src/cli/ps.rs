//! `weir ps`: the topologies a server runs, a row each in aligned columns,
//! with their rate over the server's last sampling interval (not since the
//! start, which an idle topology would still show high); or, with
//! `--json`, the statuses with that rate as `current_tuples_per_s`.

use super::client::{Method, ServerArgs, print_cluster_shares};
use anyhow::Result;
use clap::Args;
use serde_json::Value;

#[derive(Args, Debug)]
pub struct PsArgs {
    #[command(flatten)]
    server: ServerArgs,
}

/// The columns: heading, and whether figures are aligned right.
const COLUMNS: [(&str, bool); 8] = [
    ("NAME", false),
    ("TOPOLOGY", false),
    ("STATE", false),
    ("LAST COMMITTED", true),
    ("BATCHES", true),
    ("TUPLES/S", true),
    ("REPLAYS", true),
    ("ERROR", false),
];

/// Longest error shown in the table: its first line, cut.
const ERROR_CHARS: usize = 80;

/// A status's rate over the last interval of its history; its rate since
/// the start where the server has no sample yet.
fn current_rate(status: &Value) -> Option<f64> {
    let samples = status["history"]["tuples_per_s"].as_array();
    match samples.and_then(|s| s.last()) {
        Some(last) => last.as_f64(),
        None => status["tuples_per_s"].as_f64(),
    }
}

/// What the table shows of `status`, a cell per column.
fn cells(status: &Value) -> Vec<String> {
    let text = |field: &str| status[field].as_str().unwrap_or("?").to_owned();
    let count = |field: &str| status[field].as_u64().map_or("–".to_owned(), |n| n.to_string());
    let error = status["error"].as_str().and_then(|e| e.lines().next()).unwrap_or("");
    let error = match error.char_indices().nth(ERROR_CHARS) {
        Some((at, _)) => format!("{}…", &error[..at]),
        None => error.to_owned(),
    };
    vec![
        text("name"),
        text("topology"),
        text("state"),
        count("last_committed"),
        count("batches"),
        current_rate(status).map_or("–".to_owned(), |r| format!("{r:.0}")),
        count("replays"),
        error,
    ]
}

/// `rows` under their headings, each column as wide as its widest cell.
fn table(rows: &[Vec<String>]) -> Vec<String> {
    let headings: Vec<String> = COLUMNS.iter().map(|(h, _)| (*h).to_owned()).collect();
    let all: Vec<&Vec<String>> = std::iter::once(&headings).chain(rows).collect();
    let widths: Vec<usize> =
        (0..COLUMNS.len()).map(|c| all.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    all.iter()
        .map(|row| {
            let line: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(c, cell)| {
                    let pad = " ".repeat(widths[c] - cell.chars().count());
                    match (COLUMNS[c].1, c + 1 == COLUMNS.len()) {
                        (true, _) => format!("{pad}{cell}"),
                        (false, true) => cell.clone(),
                        (false, false) => format!("{cell}{pad}"),
                    }
                })
                .collect();
            line.join("  ").trim_end().to_owned()
        })
        .collect()
}

pub fn run(args: PsArgs) -> Result<()> {
    let answer = args.server.call(Method::Get, &["v1", "topologies"], &[("history", "true")])?;
    let mut statuses: Vec<Value> = answer.as_array().cloned().unwrap_or_default();
    for status in &mut statuses {
        status["current_tuples_per_s"] = current_rate(status).map_or(Value::Null, Value::from);
    }
    if args.server.json {
        for status in &mut statuses {
            if let Some(fields) = status.as_object_mut() {
                fields.remove("history");
            }
        }
        println!("{}", serde_json::to_string_pretty(&statuses)?);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = statuses.iter().map(cells).collect();
    for (line, status) in table(&rows).iter().zip(std::iter::once(None).chain(statuses.iter().map(Some))) {
        println!("{line}");
        if let Some(status) = status {
            print_cluster_shares(status);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn columns_line_up_whatever_the_widths_and_the_rate_is_the_last_intervals() {
        let statuses = [
            json!({"name": "a-long-topology-name", "topology": "wc", "state": "running", "last_committed": 40,
                   "batches": 40, "tuples_per_s": 79201.3, "replays": 0, "history": {"tuples_per_s": [500.0, 0.0]}}),
            json!({"name": "b", "topology": "word-count", "state": "failed", "last_committed": 2, "batches": 1,
                   "tuples_per_s": 3.0, "replays": 12, "error": "operator split: trap\nwasm backtrace:\n  0: x"}),
        ];
        let rows: Vec<Vec<String>> = statuses.iter().map(cells).collect();
        let lines = table(&rows);
        assert_eq!(lines[1].split_whitespace().nth(5), Some("0"), "the last interval's rate: {lines:?}");
        assert_eq!(lines[2].split_whitespace().nth(5), Some("3"), "no sample yet: since the start");
        assert!(lines[2].ends_with("operator split: trap"), "{lines:?}");
        // Every column starts where its heading does.
        for heading in ["TOPOLOGY", "STATE"] {
            let at = lines[0].find(heading).unwrap();
            for line in &lines[1..] {
                assert!(line[..at].ends_with("  ") && !line[at..].starts_with(' '), "{heading}: {lines:#?}");
            }
        }
        // Figures end where their heading ends.
        for heading in ["LAST COMMITTED", "TUPLES/S", "REPLAYS"] {
            let end = lines[0].find(heading).unwrap() + heading.len();
            for line in &lines[1..] {
                assert!(line[..end].ends_with(|c: char| c.is_ascii_digit()), "{heading}: {lines:#?}");
            }
        }
    }
}
