//! What a served topology's status says: its run state and the figures of
//! its run's report, as the API, the dashboard and the metrics show them.

use super::host::Host;
use serde::Serialize;
use std::collections::BTreeMap;
use weir_engine::coordinator::RunReport;
use weir_engine::metrics::{GroupSizes, TupleCounts};

/// Whether a served topology runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    /// Its coordinator is running batches.
    Running,
    /// Stopped at a batch boundary (or not started).
    #[default]
    Stopped,
    /// Halted by an error (`Status::error` says which).
    Failed,
}

/// How a deployment is doing.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Status {
    /// The bundle's topology it runs.
    pub topology: String,
    /// Running, stopped or failed.
    pub state: RunState,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// The last committed txid.
    pub last_committed: u64,
    /// Batches committed since it was last started.
    pub batches: u64,
    /// Spout tuples committed since it was last started.
    pub tuples: u64,
    /// Failed attempts replayed since it was last started.
    pub replays: u64,
    /// Batches per second since it was last started.
    pub batches_per_s: f64,
    /// Tuples per second since it was last started.
    pub tuples_per_s: f64,
    /// Commit latency, p50 and p99, in milliseconds.
    pub commit_p50_ms: Option<f64>,
    /// Commit latency p99, in milliseconds.
    pub commit_p99_ms: Option<f64>,
    /// How many batches the commit groups held since it was last started.
    pub commit_groups: GroupSizes,
    /// Batches per commit group since it was last started.
    pub commit_group_mean: Option<f64>,
    /// Milliseconds spent in each operator since it was last started (a
    /// guest's in its calls, a host node's in its work).
    pub operator_ms: BTreeMap<String, f64>,
    /// Tuples in and out of each operator since it was last started.
    pub operator_tuples: BTreeMap<String, TupleCounts>,
    /// How far the committed batches are behind the input, where the spout
    /// knows: bytes for the file spouts, integers for the generator.
    pub spout_lag: Option<u64>,
    /// The same per partition, where the spout names its partitions: a
    /// JetStream spout's subjects, in messages.
    pub spout_lag_partitions: BTreeMap<String, u64>,
    /// Late tuples each window operator found since it was last started.
    pub late_tuples: BTreeMap<String, u64>,
    /// Each time window operator's watermark, in milliseconds, after the
    /// last batch that moved it since it was last started.
    pub watermarks: BTreeMap<String, i64>,
    /// Each window operator's open windows (one per window and group its
    /// state holds), read from what is committed when the status is asked
    /// for; at most [`weir_engine::exec::MAX_COUNTED_WINDOWS`] counted.
    pub open_windows: BTreeMap<String, u64>,
    /// The last failed attempts since it was last started, most recent first.
    pub failures: Vec<FailedAttempt>,
    /// What its spout's lag counts: bytes (a file's or a directory's
    /// lines), messages (JetStream), integers (a generator); none for a
    /// guest's spout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spout_lag_unit: Option<&'static str>,
    /// When it was last started, in milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// Seconds since then, as of the call that asked.
    pub uptime_s: f64,
    /// What its record says: bundle, input, deploy time, upgrades.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployment: Option<Deployed>,
    /// Every commit latency since it was last started: the history takes
    /// each interval's quantiles from it.
    #[serde(skip)]
    pub commit_latency: weir_engine::metrics::Latencies,
}

/// What a deployment's record says of it, as a status shows it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Deployed {
    /// Its bundle's file in the data dir's `bundles/`: `<sha256>.weir`.
    pub bundle: String,
    /// The input of its spout, if it reads one.
    pub input: Option<std::path::PathBuf>,
    /// When it was deployed (absent for a record older than deploy times).
    pub deployed_unix_ms: Option<u64>,
    /// Its last upgrades, oldest first.
    pub upgrades: Vec<super::registry::Upgrade>,
}

/// A failed attempt at a batch, as a status shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FailedAttempt {
    /// The batch's txid.
    pub txid: u64,
    /// The attempt that failed.
    pub attempt: u32,
    /// Why it failed.
    pub error: String,
    /// When it failed, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The operator it failed in, where the error names one.
    pub operator: Option<String>,
}

/// The operator an error names first (`operator NAME: ...`), if any.
fn failing_operator(error: &str) -> Option<String> {
    let rest = error.strip_prefix("operator ")?;
    let (name, _) = rest.split_once(": ")?;
    (!name.is_empty() && !name.contains(char::is_whitespace)).then(|| name.to_owned())
}

impl Status {
    /// A run's status from its report; errors as `host` lets a client see them.
    pub(super) fn of(state: RunState, topology: &str, report: &RunReport, host: &Host) -> Status {
        let seconds = report.elapsed.as_secs_f64().max(1e-9);
        let ms = |q| report.commit_latency.quantile(q).map(|d| d.as_secs_f64() * 1000.0);
        Status {
            topology: topology.to_owned(),
            state,
            error: None,
            last_committed: report.last_committed,
            batches: report.batches,
            tuples: report.tuples,
            replays: report.replays,
            batches_per_s: report.batches as f64 / seconds,
            tuples_per_s: report.tuples as f64 / seconds,
            commit_p50_ms: ms(0.5),
            commit_p99_ms: ms(0.99),
            commit_groups: report.commit_groups,
            commit_group_mean: report.commit_groups.mean(),
            operator_ms: report.operator_time.iter().map(|(op, d)| (op.clone(), d.as_secs_f64() * 1000.0)).collect(),
            operator_tuples: report.operator_tuples.clone(),
            spout_lag: report.spout_lag,
            spout_lag_partitions: report.partition_lag.clone(),
            spout_lag_unit: None,
            started_unix_ms: super::registry::now_unix_ms().saturating_sub(report.elapsed.as_millis() as u64),
            uptime_s: report.elapsed.as_secs_f64(),
            deployment: None,
            late_tuples: report.late_tuples.clone(),
            watermarks: report.watermarks.clone(),
            open_windows: BTreeMap::new(),
            commit_latency: report.commit_latency.clone(),
            failures: report
                .failures
                .iter()
                .rev()
                .map(|f| FailedAttempt {
                    txid: f.txid,
                    attempt: f.attempt,
                    error: host.public(&f.error),
                    at_ms: f.at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
                    operator: failing_operator(&f.error),
                })
                .collect(),
        }
    }

    pub(super) fn failed(topology: &str, error: String) -> Status {
        Status { topology: topology.to_owned(), state: RunState::Failed, error: Some(error), ..Status::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_the_operator_its_error_names_first() {
        assert_eq!(failing_operator("operator split: retry: boom").as_deref(), Some("split"));
        assert_eq!(failing_operator("the spout failed: operator x: y"), None);
        assert_eq!(failing_operator("operator : y"), None);
    }

    #[test]
    fn run_states_serialise_as_words() {
        let words: Vec<String> = [RunState::Running, RunState::Stopped, RunState::Failed]
            .iter()
            .map(|s| serde_json::to_string(s).unwrap())
            .collect();
        assert_eq!(words, ["\"running\"", "\"stopped\"", "\"failed\""]);
    }

    fn host(dir: &std::path::Path) -> Host {
        Host {
            db: std::sync::Arc::new(weir_state::Db::open(&dir.join("data")).unwrap()),
            bundles: dir.join("bundles"),
            engine: weir_runtime::engine(false).unwrap(),
            cache: weir_runtime::ComponentCache::new(dir.join("cache")),
            sandbox: weir_config::SandboxConfig::default(),
            run: weir_config::RunConfig::default(),
            inputs: weir_io::spout::InputScope::default(),
            nats: None,
            kafka: None,
            max_deployments: weir_config::DEFAULT_MAX_DEPLOYMENTS,
        }
    }

    #[test]
    fn a_status_shows_the_commit_groups_of_its_report() {
        let dir = tempfile::tempdir().unwrap();
        let host = host(dir.path());
        let mut report = RunReport::default();
        for batches in [1, 5, 3] {
            report.commit_groups.record(batches);
        }
        let status = Status::of(RunState::Running, "t", &report, &host);
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["commit_groups"], serde_json::json!({"groups": 3, "batches": 9, "max": 5}));
        assert_eq!(json["commit_group_mean"], 3.0);
        let idle = serde_json::to_value(Status::of(RunState::Stopped, "t", &RunReport::default(), &host));
        assert_eq!(idle.unwrap()["commit_group_mean"], serde_json::Value::Null);
    }
}
