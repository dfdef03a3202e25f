//! The machine's limit for this workload, measured in the same run: the
//! least program that does word count with durable exactly-once commits.
//! Partial counts per batch in a hash map, keys sorted, one durable redb
//! write transaction per batch holding `(txid, count)` per word (a stored
//! txid equal to the batch's means applied already) and a progress record,
//! the next batch counted while the previous one commits. No sandbox, no
//! stream graph, no generality: what Weir does beyond this is its cost.

use anyhow::{Context, Result, bail};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use weir_engine::metrics::Latencies;

/// The limit program's database, in the data dir it is given.
pub const DB_FILE: &str = "limit.redb";

const COUNTS: TableDefinition<&str, (u64, i64)> = TableDefinition::new("counts");
const PROGRESS: TableDefinition<&str, u64> = TableDefinition::new("progress");

type Counts = HashMap<String, i64, foldhash::fast::RandomState>;

/// What the run did, as `weir run --report-json` reports it.
pub struct Report {
    pub batches: u64,
    pub elapsed: Duration,
    pub first_batch_ready: Option<Duration>,
    pub commit_latency: Latencies,
}

/// Counts the words of `input` in batches of `batch_size` lines into the
/// database at `db_path`, up to `max_pending` batches counted ahead of the
/// commits, committing up to `group` counted batches in one durable write
/// (as Weir groups commits: what is ready, up to its group size), their
/// counts merged per word first.
pub fn run(db_path: &Path, input: &Path, batch_size: usize, max_pending: usize, group: usize) -> Result<Report> {
    let started = Instant::now();
    let db = Database::create(db_path).with_context(|| format!("creating {}", db_path.display()))?;
    let file = std::fs::File::open(input).with_context(|| format!("reading {}", input.display()))?;
    let (batches, counted) = mpsc::sync_channel::<(u64, Vec<(String, i64)>)>(max_pending.max(1));
    std::thread::scope(|scope| {
        let counter = scope.spawn(move || -> Result<()> {
            let mut lines = BufReader::with_capacity(1 << 20, file).lines();
            for txid in 1.. {
                let mut counts = Counts::default();
                let mut read = 0;
                for line in lines.by_ref().take(batch_size) {
                    for word in line?.split_whitespace() {
                        match counts.get_mut(word) {
                            Some(n) => *n += 1,
                            None => {
                                counts.insert(word.to_owned(), 1);
                            }
                        }
                    }
                    read += 1;
                }
                if read == 0 {
                    return Ok(());
                }
                let mut sorted: Vec<(String, i64)> = counts.into_iter().collect();
                sorted.sort_unstable();
                if batches.send((txid, sorted)).is_err() {
                    return Ok(());
                }
            }
            Ok(())
        });
        let mut report = Report {
            batches: 0,
            elapsed: Duration::ZERO,
            first_batch_ready: None,
            commit_latency: Latencies::default(),
        };
        while let Ok((txid, sorted)) = counted.recv() {
            report.first_batch_ready.get_or_insert_with(|| started.elapsed());
            let commit_started = Instant::now();
            let (mut last, mut merged, mut batches) = (txid, None::<BTreeMap<String, i64>>, 1);
            while batches < group.max(1) {
                let Ok((next, more)) = counted.try_recv() else { break };
                let merged = merged.get_or_insert_with(|| sorted.iter().cloned().collect());
                for (word, n) in more {
                    *merged.entry(word).or_insert(0) += n;
                }
                (last, batches) = (next, batches + 1);
            }
            match merged {
                Some(merged) => commit(&db, txid, last, &merged.into_iter().collect::<Vec<_>>())?,
                None => commit(&db, txid, last, &sorted)?,
            }
            report.commit_latency.record(commit_started.elapsed());
            report.batches += batches as u64;
        }
        counter.join().expect("the counting thread panicked")?;
        report.elapsed = started.elapsed();
        Ok(report)
    })
}

/// Commits batches `txid..=last` (their counts `sorted`, merged) in one
/// durable write transaction.
fn commit(db: &Database, txid: u64, last_txid: u64, sorted: &[(String, i64)]) -> Result<()> {
    let txn = db.begin_write()?;
    {
        let mut progress = txn.open_table(PROGRESS)?;
        let last = progress.get("last-committed")?.map_or(0, |v| v.value());
        if txid != last + 1 {
            bail!("txid {txid} follows {last}");
        }
        let txid = last_txid;
        let mut counts = txn.open_table(COUNTS)?;
        for (word, n) in sorted {
            if let Some(mut stored) = counts.get_mut(word.as_str())? {
                let (stored_txid, count) = stored.value();
                if stored_txid != txid {
                    stored.insert((txid, count + n))?;
                }
                continue;
            }
            counts.insert(word.as_str(), (txid, *n))?;
        }
        progress.insert("last-committed", txid)?;
    }
    txn.commit()?;
    Ok(())
}

/// The stored counts, to check against the ground truth.
pub fn counts(db_path: &Path) -> Result<BTreeMap<String, i64>> {
    let db = Database::open(db_path)?;
    let txn = db.begin_read()?;
    let table = txn.open_table(COUNTS)?;
    let mut out = BTreeMap::new();
    for entry in table.iter()? {
        let (word, value) = entry?;
        out.insert(word.value().to_owned(), value.value().1);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_program_counts_exactly_in_batches() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.txt");
        std::fs::write(&input, "a b a\nb c\n\na\n").unwrap();
        let db = dir.path().join(DB_FILE);
        let report = run(&db, &input, 2, 1, 1).unwrap();
        assert_eq!(report.batches, 2);
        assert_eq!(report.commit_latency.count(), 2);
        let expected: BTreeMap<String, i64> = [("a", 3), ("b", 2), ("c", 1)].map(|(w, n)| (w.to_owned(), n)).into();
        assert_eq!(counts(&db).unwrap(), expected);
        // Grouped: the same counts, however the batches fall into groups.
        let lines: String = (0..500).map(|i| format!("w{} w{} x\n", i % 7, i % 3)).collect();
        std::fs::write(&input, &lines).unwrap();
        let grouped = dir.path().join("grouped.redb");
        let report = run(&grouped, &input, 3, 8, 8).unwrap();
        assert_eq!(report.batches, 167);
        let mut want = BTreeMap::new();
        for word in lines.split_whitespace() {
            *want.entry(word.to_owned()).or_insert(0) += 1;
        }
        assert_eq!(counts(&grouped).unwrap(), want);
    }
}
