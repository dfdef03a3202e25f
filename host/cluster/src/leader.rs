//! What the leader keeps in etcd: each topology's assignment of its units
//! to the live hosts, written under a new epoch whenever a host joins or
//! leaves or a topology is deployed. Each write is a transaction that
//! holds only while this host still leads (its election key is the one
//! etcd has) and nobody wrote the assignment since it was read, so that a
//! deposed leader cannot overwrite its successor's work.

use super::assignment::{Assignment, assign_among};
use super::catalog::{AssignmentRecord, ClusterTopology, assignment_key};
use anyhow::{Context, Result};
use etcd_client::{Client, Compare, CompareOp, LeaderKey, Txn, TxnOp};
use std::collections::{BTreeMap, BTreeSet};

/// Why the assignment changed from `previous` to cover `hosts`.
fn reason(previous: &Assignment, hosts: &[String]) -> String {
    if previous.units.is_empty() {
        return "topology deployed".into();
    }
    let owners: BTreeSet<&str> = previous.units.values().map(|o| o.host.as_str()).collect();
    let live: BTreeSet<&str> = hosts.iter().map(String::as_str).collect();
    let mut reasons: Vec<String> = Vec::new();
    reasons.extend(owners.difference(&live).map(|h| format!("host {h} left")));
    reasons.extend(live.difference(&owners).map(|h| format!("host {h} joined")));
    if reasons.is_empty() {
        reasons.push("the topology's units changed".into());
    }
    reasons.join(", ")
}

/// Brings every topology's assignment in line with `hosts`, as the leader
/// holding `leader`. Updates `topologies` with what it wrote. A write that
/// etcd refuses (leadership lost, or a concurrent write) is left for the
/// next round, when the picture is read afresh.
pub async fn reassign(
    client: &mut Client,
    cluster: &str,
    leader: &LeaderKey,
    hosts: &[String],
    topologies: &mut BTreeMap<String, ClusterTopology>,
) -> Result<()> {
    let leader_key = String::from_utf8_lossy(leader.key()).into_owned();
    // The topologies each host runs whole, so that the next one placed
    // whole goes to the least busy.
    let mut busy: BTreeMap<String, usize> = BTreeMap::new();
    let whole_owners = |assignment: &Assignment| -> Vec<String> {
        assignment.units.iter().filter(|(unit, _)| unit.starts_with("whole/")).map(|(_, o)| o.host.clone()).collect()
    };
    for topology in topologies.values() {
        for host in topology.assignment.iter().flat_map(|r| whole_owners(&r.assignment)) {
            *busy.entry(host).or_default() += 1;
        }
    }
    for (name, topology) in topologies.iter_mut() {
        let previous = topology.assignment.as_ref().map(|r| r.assignment.clone()).unwrap_or_default();
        for host in whole_owners(&previous) {
            busy.entry(host).and_modify(|n| *n -= 1);
        }
        let next = assign_among(&previous, hosts, &topology.deployment.units, &busy);
        for host in whole_owners(&next) {
            *busy.entry(host).or_default() += 1;
        }
        if next == previous && topology.assignment.is_some() {
            continue;
        }
        let record = AssignmentRecord { reason: reason(&previous, hosts), assignment: next };
        let key = assignment_key(cluster, name);
        let txn = Txn::new()
            .when([
                Compare::create_revision(leader_key.as_str(), CompareOp::Equal, leader.rev()),
                Compare::mod_revision(key.as_str(), CompareOp::Equal, topology.assignment_revision),
            ])
            .and_then([TxnOp::put(key.as_str(), serde_json::to_vec(&record)?, None)]);
        let done = client.txn(txn).await.with_context(|| format!("writing the assignment of topology {name}"))?;
        if !done.succeeded() {
            tracing::info!(
                "cluster {cluster}: the assignment of topology {name} was not written (leadership or the record changed); reading it again"
            );
            continue;
        }
        tracing::info!(
            "cluster {cluster}: topology {name} assigned at epoch {} over {} hosts: {}",
            record.assignment.epoch,
            hosts.len(),
            record.reason
        );
        topology.assignment = Some(record);
        // Unknown until read again: the next round reads before it writes.
        topology.assignment_revision = -1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assignment::assign;

    #[test]
    fn the_reason_names_the_hosts_that_came_and_went() {
        let hosts = |ids: &[&str]| ids.iter().map(|h| h.to_string()).collect::<Vec<_>>();
        let units: Vec<String> = (0..4).map(|n| format!("u{n}")).collect();
        let first = assign(&Assignment::default(), &hosts(&["a", "b"]), &units);
        assert_eq!(reason(&Assignment::default(), &hosts(&["a", "b"])), "topology deployed");
        assert_eq!(reason(&first, &hosts(&["a", "c"])), "host b left, host c joined");
        assert_eq!(reason(&first, &hosts(&["a", "b"])), "the topology's units changed");
    }
}
