//! What a served topology's status says: its run state and the figures of
//! its run's report, as the API, the dashboard and the metrics show them.

use super::host::Host;
use serde::Serialize;
use std::collections::BTreeMap;
use weir_engine::coordinator::RunReport;
use weir_engine::metrics::GroupSizes;

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
    /// Milliseconds spent in each guest operator since it was last started.
    pub operator_ms: BTreeMap<String, f64>,
    /// How far the committed batches are behind the input, where the spout
    /// knows: bytes for the file spouts, integers for the generator.
    pub spout_lag: Option<u64>,
    /// The same per partition, where the spout names its partitions: a
    /// JetStream spout's subjects, in messages.
    pub spout_lag_partitions: BTreeMap<String, u64>,
    /// Late tuples each window operator found since it was last started.
    pub late_tuples: BTreeMap<String, u64>,
    /// The last failed attempts since it was last started, most recent first.
    pub failures: Vec<FailedAttempt>,
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
            spout_lag: report.spout_lag,
            spout_lag_partitions: report.partition_lag.clone(),
            late_tuples: report.late_tuples.clone(),
            failures: report
                .failures
                .iter()
                .rev()
                .map(|f| FailedAttempt { txid: f.txid, attempt: f.attempt, error: host.public(&f.error) })
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
