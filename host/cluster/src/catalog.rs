//! The cluster's deployments, recorded in etcd under `topologies/<name>`,
//! and the units of work each one is cut into: its spout's partitions and
//! its states' hash slots, which the leader assigns to hosts.

use super::assignment::Assignment;
use anyhow::{Context, Result, bail};
use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use weir_sdk::topology::{SpoutDef, TopologyDef};

/// Hash slots per state: fixed for a deployed topology, since every stored
/// value, changelog subject and replay's routing depends on the number.
pub const DEFAULT_SLOTS: u32 = 64;

/// A topology deployed to the cluster, as its record in etcd holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterDeployment {
    /// The bundle's topology it runs.
    pub topology: String,
    /// The bundle's SHA-256, in hex: its object's name in the cluster's
    /// bundle store.
    pub bundle: String,
    /// The bundle's size in bytes.
    pub bundle_bytes: u64,
    /// The input of the topology's spout, if it reads one.
    pub input: Option<PathBuf>,
    /// Hash slots per state.
    pub slots: u32,
    /// Its states' names and kinds: an upgrade must keep them.
    #[serde(default)]
    pub states: Vec<(String, String)>,
    /// Whether it should run (`weir stop` and `weir resume` set it).
    #[serde(default = "running")]
    pub running: bool,
    /// Its units of work, in order.
    pub units: Vec<String>,
    /// The host the deploy was made on.
    pub deployed_by: String,
    pub deployed_unix_ms: u64,
}

/// A topology's assignment as the leader writes it: why it changed last,
/// beside whom each unit went to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssignmentRecord {
    #[serde(flatten)]
    pub assignment: Assignment,
    /// What made the leader write this epoch.
    pub reason: String,
}

/// A topology of the cluster, with its assignment once the leader wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClusterTopology {
    pub deployment: ClusterDeployment,
    pub assignment: Option<AssignmentRecord>,
    /// The assignment key's etcd revision (0: none yet): the leader's next
    /// write compares it.
    #[serde(skip)]
    pub assignment_revision: i64,
}

/// The units of `definition`'s work: one, `whole/<topology>`, for a
/// topology placed `whole` on one host; else `partition/<subject>` for
/// each of a JetStream spout's `partitions` (its subject patterns where
/// none are given; `partition/0` for a spout of one partition), and
/// `slot/<state>/<n>` for each of its states' slots.
pub fn units(definition: &TopologyDef, partitions: Option<&[String]>, slots: u32, whole: bool) -> Vec<String> {
    if whole {
        return vec![whole_unit(&definition.name)];
    }
    let mut units: Vec<String> = match (definition.spout(), partitions) {
        (Some(SpoutDef::JetStream(_)), Some(partitions)) => {
            partitions.iter().map(|s| format!("partition/{s}")).collect()
        }
        (Some(SpoutDef::JetStream(stream)), None) => stream.subjects.iter().map(|s| format!("partition/{s}")).collect(),
        _ => vec!["partition/0".to_owned()],
    };
    for state in definition.states() {
        units.extend((0..slots).map(|slot| format!("slot/{}/{slot}", state.name)));
    }
    units.sort();
    units
}

/// The one unit of a topology placed whole on one host.
pub fn whole_unit(topology: &str) -> String {
    format!("whole/{topology}")
}

fn running() -> bool {
    true
}

fn prefix(cluster: &str, what: &str) -> String {
    format!("/weir/{cluster}/{what}/")
}

fn topology_key(cluster: &str, name: &str) -> String {
    format!("{}{name}", prefix(cluster, "topologies"))
}

pub(super) fn assignment_key(cluster: &str, name: &str) -> String {
    format!("{}{name}", prefix(cluster, "assignment"))
}

/// Records `deployment` under `name`, unless the cluster has a topology of
/// that name already; says whether it did.
pub async fn create(client: &mut Client, cluster: &str, name: &str, deployment: &ClusterDeployment) -> Result<bool> {
    let key = topology_key(cluster, name);
    let value = serde_json::to_vec(deployment)?;
    let txn = Txn::new().when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)]).and_then([TxnOp::put(
        key.as_str(),
        value,
        None,
    )]);
    let done = client.txn(txn).await.with_context(|| format!("recording topology {name} in etcd"))?;
    Ok(done.succeeded())
}

/// Changes topology `name`'s record with `change`, against any concurrent
/// change (read again and retried); returns the record as written, or
/// `None` when the cluster has no topology `name`.
pub async fn update(
    client: &mut Client,
    cluster: &str,
    name: &str,
    change: impl Fn(&mut ClusterDeployment),
) -> Result<Option<ClusterDeployment>> {
    let key = topology_key(cluster, name);
    for _ in 0..16 {
        let got = client.get(key.as_str(), None).await.with_context(|| format!("reading topology {name} in etcd"))?;
        let Some(kv) = got.kvs().first() else { return Ok(None) };
        let mut deployment: ClusterDeployment = serde_json::from_slice(kv.value())
            .with_context(|| format!("the record of topology {name} in etcd cannot be read"))?;
        change(&mut deployment);
        let txn = Txn::new()
            .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, kv.mod_revision())])
            .and_then([TxnOp::put(key.as_str(), serde_json::to_vec(&deployment)?, None)]);
        if client.txn(txn).await.with_context(|| format!("writing topology {name} in etcd"))?.succeeded() {
            return Ok(Some(deployment));
        }
    }
    bail!("topology {name}'s record kept changing under this change: try again")
}

/// Removes topology `name`, its assignment and its commit log (its batch
/// records and commit record: a topology deployed later under the name
/// starts afresh); says whether it was there.
pub async fn remove(client: &mut Client, cluster: &str, name: &str) -> Result<bool> {
    let key = topology_key(cluster, name);
    let batches = format!("{}{name}/", prefix(cluster, "batches"));
    let txn = Txn::new().when([Compare::create_revision(key.as_str(), CompareOp::Greater, 0)]).and_then([
        TxnOp::delete(key.as_str(), None),
        TxnOp::delete(assignment_key(cluster, name), None),
        TxnOp::delete(format!("{}{name}", prefix(cluster, "committed")), None),
        TxnOp::delete(batches, Some(etcd_client::DeleteOptions::new().with_prefix())),
    ]);
    let done = client.txn(txn).await.with_context(|| format!("removing topology {name} from etcd"))?;
    Ok(done.succeeded())
}

/// Topology `name`'s assignment as etcd holds it now.
pub async fn assignment(client: &mut Client, cluster: &str, name: &str) -> Result<Option<AssignmentRecord>> {
    let key = assignment_key(cluster, name);
    let got = client.get(key.as_str(), None).await.with_context(|| format!("reading topology {name}'s assignment"))?;
    let Some(kv) = got.kvs().first() else { return Ok(None) };
    let record = serde_json::from_slice(kv.value())
        .with_context(|| format!("the assignment of topology {name} in etcd cannot be read"))?;
    Ok(Some(record))
}

/// Every topology of the cluster, with its assignment. A record that cannot
/// be read is left out, with a warning: etcd is shared, and one bad key
/// must not hide the rest.
pub async fn list(client: &mut Client, cluster: &str) -> Result<BTreeMap<String, ClusterTopology>> {
    let all = Some(GetOptions::new().with_prefix());
    let topologies_prefix = prefix(cluster, "topologies");
    let listed =
        client.get(topologies_prefix.as_str(), all.clone()).await.context("reading the cluster's topologies")?;
    let mut out = BTreeMap::new();
    for kv in listed.kvs() {
        let name = String::from_utf8_lossy(&kv.key()[topologies_prefix.len()..]).into_owned();
        match serde_json::from_slice::<ClusterDeployment>(kv.value()) {
            Ok(deployment) => {
                out.insert(name, ClusterTopology { deployment, assignment: None, assignment_revision: 0 });
            }
            Err(e) => tracing::warn!("cluster {cluster}: the record of topology {name:?} cannot be read: {e}"),
        }
    }
    let assignments_prefix = prefix(cluster, "assignment");
    let listed = client.get(assignments_prefix.as_str(), all).await.context("reading the cluster's assignments")?;
    for kv in listed.kvs() {
        let name = String::from_utf8_lossy(&kv.key()[assignments_prefix.len()..]).into_owned();
        let Some(topology) = out.get_mut(&name) else { continue };
        match serde_json::from_slice::<AssignmentRecord>(kv.value()) {
            Ok(record) => {
                topology.assignment = Some(record);
                topology.assignment_revision = kv.mod_revision();
            }
            Err(e) => tracing::warn!("cluster {cluster}: the assignment of topology {name:?} cannot be read: {e}"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::prelude::*;

    #[test]
    fn a_topologys_units_are_its_partitions_and_each_states_slots() {
        let topology = Topology::new("t");
        let stream = topology.new_stream(JetStream::transactional("clicks", ["clicks.0", "clicks.1"]).string("page"));
        stream.group_by(["page"]).persistent_aggregate(State::transactional("pages"), Count, ["count"]);
        stream.group_by(["page"]).persistent_aggregate(State::opaque("views"), Count, ["count"]);
        let definition = topology.build().definition().clone();
        let units = units(&definition, None, 3, false);
        assert_eq!(
            units,
            [
                "partition/clicks.0",
                "partition/clicks.1",
                "slot/pages/0",
                "slot/pages/1",
                "slot/pages/2",
                "slot/views/0",
                "slot/views/1",
                "slot/views/2"
            ]
        );

        let file = Topology::new("f");
        file.new_stream(FileLines::new("line")).each(["line"], Identity, ["copy"]);
        let units = super::units(file.build().definition(), None, DEFAULT_SLOTS, false);
        assert_eq!(units, ["partition/0"], "a file spout is one partition, and no state has slots");

        let expanded = ["clicks.0".to_owned(), "clicks.1".to_owned(), "clicks.2".to_owned()];
        let units = super::units(&definition, Some(&expanded), 1, false);
        assert_eq!(
            units,
            ["partition/clicks.0", "partition/clicks.1", "partition/clicks.2", "slot/pages/0", "slot/views/0"]
        );
        // Placed whole, a topology is one unit, whatever its spout and states.
        assert_eq!(super::units(&definition, Some(&expanded), 3, true), ["whole/t"]);
    }

    struct Identity;

    impl Function for Identity {
        fn execute(&self, tuple: &Tuple<'_>, out: &mut Emitter<'_>) -> Result<(), Error> {
            out.emit([tuple.str(0)?])
        }
    }
}
