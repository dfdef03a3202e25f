//! A topology as a cluster runs it, and who owns what of it under one
//! assignment.
//!
//! A topology whose spout is a JetStream stream and whose commit phase is
//! persistent aggregates of built-in aggregators (count, sum, min, max;
//! not first, whose result depends on the order partials meet in) fed by
//! the process phase is partitioned: every host combines its
//! partitions' partials, the owners of the keys' slots combine what every
//! host sent and commit them. Every other topology (state updaters,
//! windows, combiner and reducer guests, streams read after a state, sinks,
//! spouts other than JetStream) is placed whole on one host, which runs it
//! with the single-host engine (`whole`).

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
    /// The stream a partitioned topology reads; `None` for one placed whole.
    pub spout: Option<JetStreamDef>,
    /// A partitioned topology's aggregates; none for one placed whole.
    pub aggregates: Vec<Aggregate>,
    /// Why the topology is placed whole on one host, when it is: what the
    /// partitioned mode cannot run of it.
    pub whole: Option<String>,
}

impl ClusterPlan {
    /// `plan` of `definition` as a cluster runs it: partitioned where it
    /// can be, placed whole on one host otherwise (saying why).
    pub fn new(definition: &TopologyDef, plan: Arc<Plan>, source: OperatorSource) -> Result<ClusterPlan> {
        let (spout, aggregates, whole) = match partitioned(definition, &plan) {
            Ok((spout, aggregates)) => (Some(spout), aggregates, None),
            Err(why) => (None, Vec::new(), Some(format!("{why:#}"))),
        };
        Ok(ClusterPlan {
            name: plan.stored_as.clone(),
            definition: definition.clone(),
            spout,
            plan,
            source,
            aggregates,
            whole,
        })
    }

    /// The aggregate writing `state`.
    pub fn aggregate(&self, state: &str) -> Option<&Aggregate> {
        self.aggregates.iter().find(|a| a.state == state)
    }

    /// The stream a partitioned topology reads.
    pub fn stream(&self) -> Result<&JetStreamDef> {
        match &self.spout {
            Some(spout) => Ok(spout),
            None => bail!("topology {} is placed whole on one host, not partitioned", self.name),
        }
    }
}

/// What the partitioned mode runs of `plan`: its stream and aggregates;
/// an error saying what it cannot run, naming the operator, otherwise.
fn partitioned(definition: &TopologyDef, plan: &Plan) -> Result<(JetStreamDef, Vec<Aggregate>)> {
    let topology = &definition.name;
    let Some(SpoutDef::JetStream(spout)) = definition.spout() else {
        bail!("topology {topology}: its spout is not a JetStream stream")
    };
    let mut aggregates = Vec::new();
    for index in plan.data_nodes() {
        let node = &plan.nodes[index];
        if node.phase != Phase::Commit {
            continue;
        }
        let refused = |what: &str| anyhow::anyhow!("topology {topology}: operator {} {what}", node.id);
        let Op::PersistentAggregate { state, aggregator, .. } = &node.op else {
            return Err(refused("reads or writes state in the commit phase"));
        };
        let AggregatorKind::Builtin(builtin) = aggregator.kind else {
            return Err(refused("aggregates with a guest aggregator"));
        };
        // Which value is first depends on the order the hosts' partials
        // meet in, which is not one host's partition order.
        if builtin == Builtin::First {
            return Err(refused("aggregates with first"));
        }
        if plan.nodes[node.inputs[0]].phase != Phase::Process || !node.children.is_empty() {
            return Err(refused("has a stream read in the commit phase"));
        }
        let kind = plan.states[state].kind;
        aggregates.push(Aggregate { node: index, state: state.clone(), builtin, kind });
    }
    Ok((spout.clone(), aggregates))
}

/// Who owns what under one assignment.
#[derive(Clone, Debug, Default)]
pub struct Owners {
    pub epoch: u64,
    /// Each host's partitions.
    pub partitions: BTreeMap<String, Vec<String>>,
    /// Each state's slots' owners, by slot.
    pub slots: BTreeMap<String, Vec<Option<Owner>>>,
    /// The owner of a topology placed whole.
    pub whole: Option<Owner>,
}

impl Owners {
    /// Reads `assignment`'s units: `partition/<subject>` and
    /// `slot/<state>/<n>` under `slots` slots a state.
    pub fn of(assignment: &Assignment, slots: u32) -> Owners {
        let mut owners = Owners { epoch: assignment.epoch, ..Owners::default() };
        for (unit, owner) in &assignment.units {
            if unit.starts_with("whole/") {
                owners.whole = Some(owner.clone());
            } else if let Some(partition) = unit.strip_prefix("partition/") {
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

    /// For a topology placed whole, its owner as the owner of every slot
    /// of each of `states`, so that reads go to it as to slots' owners.
    pub fn with_states<'a>(mut self, states: impl IntoIterator<Item = &'a String>, slots: u32) -> Owners {
        if let Some(owner) = &self.whole {
            for state in states {
                self.slots.insert(state.clone(), vec![Some(owner.clone()); slots as usize]);
            }
        }
        self
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
        // Without a whole unit, naming states changes nothing.
        assert_eq!(owners.clone().with_states(&["counts".to_owned()], 2).slots, owners.slots);
    }

    #[test]
    fn a_topology_placed_whole_has_its_owner_answer_for_every_slot_of_every_state() {
        let owner = Owner { host: "h2".into(), since: 3 };
        let units = [("whole/t".to_owned(), owner.clone())];
        let assignment = Assignment { epoch: 3, units: units.into_iter().collect() };
        let states = ["counts".to_owned(), "open".to_owned()];
        let owners = Owners::of(&assignment, 4).with_states(&states, 4);
        assert_eq!(owners.whole, Some(owner.clone()));
        assert!(owners.senders().is_empty(), "a whole unit is no partition");
        for state in &states {
            assert!((0..4).all(|slot| owners.owner(state, slot) == Some(&owner)), "{state}");
        }
        assert_eq!(owners.owned_by("h2").len(), 8);
    }
}
