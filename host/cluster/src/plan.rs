//! A topology as a cluster runs it, and who owns what of it under one
//! assignment.
//!
//! A cluster runs a topology whose spout is a JetStream stream and whose
//! commit phase is persistent aggregates of built-in aggregators (count,
//! sum, min, max) fed by the process phase: every host combines its
//! partitions' partials, the owners of the keys' slots combine what every
//! host sent and commit them. Other commit phases (state updaters, windows,
//! combiner and reducer guests, streams read after a state) are refused at
//! deploy, saying so.

use super::assignment::{Assignment, Owner};
use anyhow::{Result, bail};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use weir_engine::instances::OperatorSource;
use weir_plan::{Op, Phase, Plan};
use weir_sdk::operator::Builtin;
use weir_sdk::topology::{AggregatorKind, JetStreamDef, SpoutDef, StateKind, TopologyDef};

/// A persistent aggregate: its node, state and aggregator.
#[derive(Clone, Debug)]
pub struct Aggregate {
    pub node: usize,
    pub state: String,
    pub builtin: Builtin,
    pub kind: StateKind,
}

/// A topology loaded for a cluster.
pub struct ClusterPlan {
    /// The name it is deployed under.
    pub name: String,
    pub definition: TopologyDef,
    pub plan: Arc<Plan>,
    pub source: OperatorSource,
    pub spout: JetStreamDef,
    pub aggregates: Vec<Aggregate>,
}

impl ClusterPlan {
    /// `plan` of `definition` as a cluster runs it; refused, naming the
    /// operator, where a cluster cannot run it yet.
    pub fn new(definition: &TopologyDef, plan: Arc<Plan>, source: OperatorSource) -> Result<ClusterPlan> {
        let topology = &definition.name;
        let Some(SpoutDef::JetStream(spout)) = definition.spout() else {
            bail!("topology {topology}: a cluster reads its input from a JetStream stream, and this spout is not one")
        };
        let mut aggregates = Vec::new();
        for index in plan.data_nodes() {
            let node = &plan.nodes[index];
            if node.phase != Phase::Commit {
                continue;
            }
            let refused = |what: &str| {
                anyhow::anyhow!(
                    "topology {topology}: operator {} {what}; a cluster runs persistent aggregates of built-in \
                     aggregators fed by the process phase (see docs/cluster.md)",
                    node.id
                )
            };
            let Op::PersistentAggregate { state, aggregator, .. } = &node.op else {
                return Err(refused("reads or writes state in the commit phase"));
            };
            let AggregatorKind::Builtin(builtin) = aggregator.kind else {
                return Err(refused("aggregates with a guest aggregator"));
            };
            if plan.nodes[node.inputs[0]].phase != Phase::Process || !node.children.is_empty() {
                return Err(refused("has a stream read in the commit phase"));
            }
            let kind = plan.states[state].kind;
            aggregates.push(Aggregate { node: index, state: state.clone(), builtin, kind });
        }
        Ok(ClusterPlan {
            name: plan.stored_as.clone(),
            definition: definition.clone(),
            spout: spout.clone(),
            plan,
            source,
            aggregates,
        })
    }

    /// The aggregate writing `state`.
    pub fn aggregate(&self, state: &str) -> Option<&Aggregate> {
        self.aggregates.iter().find(|a| a.state == state)
    }
}

/// Who owns what under one assignment.
#[derive(Clone, Debug, Default)]
pub struct Owners {
    pub epoch: u64,
    /// Each host's partitions.
    pub partitions: BTreeMap<String, Vec<String>>,
    /// Each state's slots' owners, by slot.
    pub slots: BTreeMap<String, Vec<Option<Owner>>>,
}

impl Owners {
    /// Reads `assignment`'s units: `partition/<subject>` and
    /// `slot/<state>/<n>` under `slots` slots a state.
    pub fn of(assignment: &Assignment, slots: u32) -> Owners {
        let mut owners = Owners { epoch: assignment.epoch, ..Owners::default() };
        for (unit, owner) in &assignment.units {
            if let Some(partition) = unit.strip_prefix("partition/") {
                owners.partitions.entry(owner.host.clone()).or_default().push(partition.to_owned());
            } else if let Some((state, slot)) = unit.strip_prefix("slot/").and_then(|u| u.rsplit_once('/'))
                && let Ok(slot) = slot.parse::<u32>()
                && slot < slots
            {
                let owned = owners.slots.entry(state.to_owned()).or_insert_with(|| vec![None; slots as usize]);
                owned[slot as usize] = Some(owner.clone());
            }
        }
        owners
    }

    /// The hosts that read partitions.
    pub fn senders(&self) -> BTreeSet<&str> {
        self.partitions.keys().map(String::as_str).collect()
    }

    /// The hosts that own slots.
    pub fn receivers(&self) -> BTreeSet<&str> {
        self.slots.values().flatten().flatten().map(|o| o.host.as_str()).collect()
    }

    /// The owner of slot `slot` of `state`.
    pub fn owner(&self, state: &str, slot: u32) -> Option<&Owner> {
        self.of_state(state).get(slot as usize)?.as_ref()
    }

    /// The owners of `state`'s slots, by slot (none for a state with none):
    /// looked up once for the keys of a batch rather than once a key.
    pub fn of_state(&self, state: &str) -> &[Option<Owner>] {
        self.slots.get(state).map_or(&[], Vec::as_slice)
    }

    /// The slots `host` owns, with the epoch it got each at.
    pub fn owned_by(&self, host: &str) -> BTreeMap<(String, u32), u64> {
        let mut owned = BTreeMap::new();
        for (state, slots) in &self.slots {
            for (slot, owner) in slots.iter().enumerate() {
                if let Some(owner) = owner.as_ref().filter(|o| o.host == host) {
                    owned.insert((state.clone(), slot as u32), owner.since);
                }
            }
        }
        owned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_read_from_the_units_and_hostile_units_are_passed_over() {
        let owner = |host: &str, since| Owner { host: host.into(), since };
        let units = [
            ("partition/corpus.0", owner("h1", 1)),
            ("partition/corpus.1", owner("h2", 1)),
            ("slot/counts/0", owner("h2", 1)),
            ("slot/counts/1", owner("h3", 2)),
            ("slot/counts/9", owner("h3", 2)),
            ("slot/counts/x", owner("h3", 2)),
        ];
        let assignment = Assignment { epoch: 2, units: units.into_iter().map(|(u, o)| (u.to_owned(), o)).collect() };
        let owners = Owners::of(&assignment, 2);
        assert_eq!(owners.senders(), BTreeSet::from(["h1", "h2"]));
        assert_eq!(owners.receivers(), BTreeSet::from(["h2", "h3"]));
        assert_eq!(owners.owner("counts", 1).map(|o| o.host.as_str()), Some("h3"));
        assert_eq!(owners.owner("counts", 9), None, "a slot past the state's slots is no slot");
        assert_eq!(owners.owned_by("h3"), BTreeMap::from([(("counts".to_owned(), 1), 2)]));
    }
}
