//! What the builder writes into the definition: operator ids, parallelism
//! per stage, and the ids of chained aggregators.

use super::{FileLines, State, Topology, describe};
use crate::operator::{Count, Error, Function};
use crate::topology::{AggregatorDef, AggregatorKind, NodeDef, OperationDef, StateDef, StateKind, parse_description};
use crate::tuple::{Emitter, Tuple};

struct Nothing;
impl Function for Nothing {
    fn execute(&self, _: &Tuple<'_>, _: &mut Emitter<'_>) -> Result<(), Error> {
        Ok(())
    }
}

#[test]
fn description_round_trips_and_names_operators() {
    let topology = Topology::new("t")
        .new_stream(FileLines::new("line"))
        .each(["line"], Nothing, ["word"])
        .name("split")
        .group_by(["word"])
        .persistent_aggregate(State::opaque("counts"), Count, ["count"])
        .build();
    assert!(topology.function("split").is_some());
    assert!(topology.function("each-1").is_none());
    let json = describe(&[topology]);
    let defs = parse_description(&json).unwrap();
    assert_eq!(defs[0].name, "t");
    assert_eq!(
        defs[0].nodes[2],
        NodeDef {
            id: "persistent-aggregate-2".into(),
            inputs: vec![1],
            parallelism: 1,
            op: OperationDef::PersistentAggregate {
                state: StateDef { name: "counts".into(), kind: StateKind::Opaque, cache_size: None },
                group: vec!["word".into()],
                aggregator: AggregatorDef {
                    id: "persistent-aggregate-2".into(),
                    kind: AggregatorKind::Builtin(crate::operator::Builtin::Count),
                    input: vec![],
                    output: vec!["count".into()],
                },
            },
        }
    );
}

#[test]
fn parallelism_covers_the_stage_back_to_the_last_repartition() {
    let t = Topology::new("t");
    t.new_stream(FileLines::new("line"))
        .each(["line"], Nothing, ["word"])
        .shuffle()
        .each(["word"], Nothing, ["x"])
        .each(["x"], Nothing, ["y"])
        .parallelism_hint(3);
    let def = t.build();
    let hints: Vec<u32> = def.definition().nodes.iter().map(|n| n.parallelism).collect();
    assert_eq!(hints, [1, 1, 3, 3, 3]);
}

#[test]
fn chained_aggregators_get_their_own_ids() {
    let t = Topology::new("t");
    t.new_stream(FileLines::new("line"))
        .chained_agg()
        .aggregate([], Count, ["n"])
        .aggregate(["line"], crate::operator::Max, ["longest"])
        .chain_end()
        .name("stats");
    let def = t.build();
    let OperationDef::Aggregate { aggregators, .. } = &def.definition().nodes[1].op else { panic!() };
    let ids: Vec<&str> = aggregators.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["stats", "stats.1"]);
}
