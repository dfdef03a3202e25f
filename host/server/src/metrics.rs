//! `/metrics`: the served topologies' figures in the Prometheus (OpenMetrics)
//! text format, written by `prometheus-client`, which escapes label values
//! (a deployment's name may hold quotes and backslashes).

use super::status::{RunState, Status};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use weir_cluster::ClusterView;

/// What the exposition is, for the Content-Type header.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(&'static str, String)>;

/// The exposition of `all` (each topology's name and status) and, in a
/// cluster, of this host's view of it, built afresh for each scrape.
pub fn exposition(all: &[(String, Status)], cluster: Option<&ClusterView>) -> Result<String, std::fmt::Error> {
    let up = Family::<Labels, Gauge>::default();
    let last_committed = Family::<Labels, Gauge<u64, AtomicU64>>::default();
    let batches = Family::<Labels, Counter>::default();
    let tuples = Family::<Labels, Counter>::default();
    let replays = Family::<Labels, Counter>::default();
    let commit_p99 = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let commit_groups = Family::<Labels, Counter>::default();
    let commit_group_max = Family::<Labels, Gauge<u64, AtomicU64>>::default();
    let operator_seconds = Family::<Labels, Counter<f64, AtomicU64>>::default();
    let spout_lag = Family::<Labels, Gauge<u64, AtomicU64>>::default();
    let partition_lag = Family::<Labels, Gauge<u64, AtomicU64>>::default();
    let late_tuples = Family::<Labels, Counter>::default();
    let open_windows = Family::<Labels, Gauge<u64, AtomicU64>>::default();
    for (name, status) in all {
        let topology = vec![("topology", name.clone())];
        up.get_or_create(&topology).set(i64::from(status.state == RunState::Running));
        last_committed.get_or_create(&topology).set(status.last_committed);
        batches.get_or_create(&topology).inc_by(status.batches);
        tuples.get_or_create(&topology).inc_by(status.tuples);
        replays.get_or_create(&topology).inc_by(status.replays);
        if let Some(ms) = status.commit_p99_ms {
            commit_p99.get_or_create(&topology).set(ms / 1000.0);
        }
        commit_groups.get_or_create(&topology).inc_by(status.commit_groups.groups);
        commit_group_max.get_or_create(&topology).set(status.commit_groups.max);
        if let Some(lag) = status.spout_lag {
            spout_lag.get_or_create(&topology).set(lag);
        }
        for (partition, lag) in &status.spout_lag_partitions {
            let labels = vec![("topology", name.clone()), ("partition", partition.clone())];
            partition_lag.get_or_create(&labels).set(*lag);
        }
        for (window, late) in &status.late_tuples {
            let labels = vec![("topology", name.clone()), ("operator", window.clone())];
            late_tuples.get_or_create(&labels).inc_by(*late);
        }
        for (window, open) in &status.open_windows {
            let labels = vec![("topology", name.clone()), ("operator", window.clone())];
            open_windows.get_or_create(&labels).set(*open);
        }
        for (operator, ms) in &status.operator_ms {
            let labels = vec![("topology", name.clone()), ("operator", operator.clone())];
            operator_seconds.get_or_create(&labels).inc_by(ms / 1000.0);
        }
    }
    let mut registry = Registry::default();
    // Counters get their `_total` suffix from the encoder.
    registry.register("weir_topology_up", "1 when the topology is running", up);
    registry.register("weir_last_committed_txid", "The last committed txid", last_committed);
    registry.register("weir_batches_committed", "Batches committed since the topology started", batches);
    registry.register("weir_tuples_committed", "Spout tuples committed since the topology started", tuples);
    registry.register("weir_replays", "Failed batch attempts replayed since the topology started", replays);
    registry.register("weir_commit_latency_p99_seconds", "Commit latency, 99th percentile", commit_p99);
    registry.register(
        "weir_commit_groups",
        "Commits since the topology started, each of a group of batches: batches committed over this is the mean \
         group size",
        commit_groups,
    );
    registry.register("weir_commit_group_max_batches", "The most batches one commit group held", commit_group_max);
    registry.register(
        "weir_operator_seconds",
        "Time spent in each guest operator since the topology started",
        operator_seconds,
    );
    registry.register(
        "weir_spout_lag",
        "Input not yet committed, where the spout knows: bytes for file spouts, messages for JetStream spouts",
        spout_lag,
    );
    registry.register(
        "weir_spout_partition_lag",
        "Messages not yet committed in each partition of a JetStream spout",
        partition_lag,
    );
    registry.register(
        "weir_late_tuples",
        "Tuples each window operator found late (every window they fall into had closed) since the topology started",
        late_tuples,
    );
    registry.register(
        "weir_open_windows",
        "Windows each window operator holds open (one per window and group), as committed",
        open_windows,
    );
    if let Some(view) = cluster {
        register_cluster(&mut registry, view);
    }
    let mut out = String::new();
    encode(&mut out, &registry)?;
    Ok(out)
}

/// The cluster's series: its members, its leader, and per topology the
/// assignment's epoch and each host's units.
fn register_cluster(registry: &mut Registry, view: &ClusterView) {
    let member = Family::<Labels, Gauge>::default();
    let leader = Family::<Labels, Gauge>::default();
    let epoch = Family::<Labels, Gauge<u64, AtomicU64>>::default();
    let units = Family::<Labels, Gauge<u64, AtomicU64>>::default();
    let this = vec![("cluster", view.cluster.clone()), ("host", view.host.clone())];
    member.get_or_create(&this).set(i64::from(view.member));
    for host in &view.hosts {
        let labels = vec![("cluster", view.cluster.clone()), ("host", host.id.clone())];
        leader.get_or_create(&labels).set(i64::from(view.leader.as_deref() == Some(host.id.as_str())));
    }
    for (name, topology) in &view.topologies {
        let Some(record) = &topology.assignment else { continue };
        epoch.get_or_create(&vec![("topology", name.clone())]).set(record.assignment.epoch);
        for (host, share) in record.assignment.shares() {
            for (kind, count) in [("partition", share.partitions.len()), ("slot", share.slots)] {
                if count > 0 {
                    let labels = vec![("topology", name.clone()), ("host", host.to_owned()), ("kind", kind.to_owned())];
                    units.get_or_create(&labels).set(count as u64);
                }
            }
        }
    }
    registry.register("weir_cluster_member", "1 while this host holds a live lease in its cluster", member);
    registry.register("weir_cluster_leader", "1 for the member that leads the cluster, 0 for the others", leader);
    registry.register("weir_cluster_assignment_epoch", "The epoch of a topology's assignment to hosts", epoch);
    registry.register("weir_cluster_units", "A topology's units (spout partitions, state slots) each host owns", units);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let status = Status {
            state: RunState::Running,
            last_committed: 7,
            spout_lag: Some(5),
            spout_lag_partitions: [("clicks.0".to_owned(), 2), ("clicks.1".to_owned(), 3)].into(),
            operator_ms: [("split".to_owned(), 1500.0)].into(),
            late_tuples: [("minutes".to_owned(), 9)].into(),
            open_windows: [("minutes".to_owned(), 4)].into(),
            batches: 12,
            commit_groups: weir_engine::metrics::GroupSizes { groups: 4, batches: 12, max: 6 },
            ..Status::default()
        };
        let text = exposition(&[("a\"b\\c".to_owned(), status)], None).unwrap();
        assert!(text.contains("weir_topology_up{topology=\"a\\\"b\\\\c\"} 1\n"), "{text}");
        assert!(text.contains("weir_last_committed_txid{topology=\"a\\\"b\\\\c\"} 7\n"), "{text}");
        assert!(
            text.contains("weir_operator_seconds_total{topology=\"a\\\"b\\\\c\",operator=\"split\"} 1.5\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE weir_batches_committed counter\n"), "{text}");
        assert!(text.contains("weir_spout_lag{topology=\"a\\\"b\\\\c\"} 5\n"), "{text}");
        assert!(
            text.contains("weir_spout_partition_lag{topology=\"a\\\"b\\\\c\",partition=\"clicks.1\"} 3\n"),
            "{text}"
        );
        assert!(text.contains("weir_commit_groups_total{topology=\"a\\\"b\\\\c\"} 4\n"), "{text}");
        assert!(text.contains("weir_commit_group_max_batches{topology=\"a\\\"b\\\\c\"} 6\n"), "{text}");
        assert!(text.contains("weir_late_tuples_total{topology=\"a\\\"b\\\\c\",operator=\"minutes\"} 9\n"), "{text}");
        assert!(text.contains("weir_open_windows{topology=\"a\\\"b\\\\c\",operator=\"minutes\"} 4\n"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(!text.contains("weir_cluster"), "{text}");
    }

    #[test]
    fn a_cluster_host_shows_the_members_the_leader_and_each_hosts_units() {
        use weir_cluster::assignment::{Assignment, Owner};
        use weir_cluster::catalog::{AssignmentRecord, ClusterDeployment, ClusterTopology};
        let owner = |host: &str| Owner { host: host.into(), since: 1 };
        let units = [("partition/p0", "h1"), ("slot/counts/0", "h1"), ("slot/counts/1", "h2")];
        let assignment =
            Assignment { epoch: 3, units: units.iter().map(|(unit, host)| (unit.to_string(), owner(host))).collect() };
        let deployment = ClusterDeployment {
            topology: "wc".into(),
            bundle: "00".into(),
            bundle_bytes: 1,
            input: None,
            slots: 2,
            states: vec![("counts".into(), "Transactional".into())],
            running: true,
            units: units.iter().map(|(unit, _)| unit.to_string()).collect(),
            deployed_by: "h1".into(),
            deployed_unix_ms: 0,
        };
        let topology = ClusterTopology {
            deployment,
            assignment: Some(AssignmentRecord { assignment, reason: "topology deployed".into() }),
            assignment_revision: 5,
        };
        let member = |id: &str| weir_cluster::Member { id: id.into(), api: String::new(), joined_unix_ms: 0 };
        let view = ClusterView {
            cluster: "c1".into(),
            host: "h2".into(),
            member: true,
            leader: Some("h1".into()),
            hosts: vec![member("h1"), member("h2")],
            error: None,
            topologies: [("wc".to_owned(), topology)].into(),
            leader_key: None,
            topologies_read: true,
            changes: Default::default(),
        };
        let text = exposition(&[], Some(&view)).unwrap();
        for line in [
            "weir_cluster_member{cluster=\"c1\",host=\"h2\"} 1\n",
            "weir_cluster_leader{cluster=\"c1\",host=\"h1\"} 1\n",
            "weir_cluster_leader{cluster=\"c1\",host=\"h2\"} 0\n",
            "weir_cluster_assignment_epoch{topology=\"wc\"} 3\n",
            "weir_cluster_units{topology=\"wc\",host=\"h1\",kind=\"partition\"} 1\n",
            "weir_cluster_units{topology=\"wc\",host=\"h1\",kind=\"slot\"} 1\n",
            "weir_cluster_units{topology=\"wc\",host=\"h2\",kind=\"slot\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} missing from {text}");
        }
    }
}
