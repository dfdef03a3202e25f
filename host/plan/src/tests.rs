use super::build::order;
use super::subject::SubjectError;
use super::*;
use weir_config::SandboxConfig;
use weir_sdk::operator::Builtin;
use weir_sdk::topology::{
    AggregatorDef, AggregatorKind, NodeDef, OperationDef, SinkDef, SpoutDef, StateDef, StateKind, TopologyDef,
};

fn names(n: &[&str]) -> Vec<String> {
    n.iter().map(|s| s.to_string()).collect()
}

fn node(id: &str, inputs: &[usize], op: OperationDef) -> NodeDef {
    NodeDef { id: id.into(), inputs: inputs.to_vec(), parallelism: 1, op }
}

fn spout() -> NodeDef {
    node("spout", &[], OperationDef::Spout { spout: SpoutDef::FileLines { field: "sentence".into() } })
}

fn each(id: &str, input: usize, reads: &[&str], output: &[&str]) -> NodeDef {
    node(id, &[input], OperationDef::Each { input: names(reads), output: names(output) })
}

fn count(input: usize, group: &[&str]) -> NodeDef {
    node(
        "count",
        &[input],
        OperationDef::PersistentAggregate {
            state: StateDef { name: "counts".into(), kind: StateKind::Transactional, cache_size: None },
            group: names(group),
            aggregator: AggregatorDef {
                id: "count".into(),
                kind: AggregatorKind::Builtin(Builtin::Count),
                input: vec![],
                output: names(&["count"]),
            },
        },
    )
}

fn def(nodes: Vec<NodeDef>) -> TopologyDef {
    TopologyDef { name: "t".into(), nodes, sandbox: Default::default() }
}

fn plan_of(def: &TopologyDef) -> Result<Plan, PlanError> {
    plan(def, &SandboxConfig::default())
}

#[test]
fn word_count_drops_the_sentence_once_split() {
    let plan = plan_of(&def(vec![spout(), each("split", 0, &["sentence"], &["word"]), count(1, &["word"])])).unwrap();
    let Op::Function { kept, input, .. } = &plan.nodes[1].op else { panic!() };
    assert!(kept.is_empty());
    assert!(input.whole_tuple);
    assert_eq!(plan.nodes[1].fields, ["word"]);
    assert_eq!(plan.nodes[1].phase, Phase::Process);
    assert_eq!(plan.nodes[2].phase, Phase::Commit);
    assert_eq!(plan.nodes[2].fields, ["word", "count"]);
    let Op::PersistentAggregate { in_place, .. } = plan.nodes[2].op else { panic!() };
    assert!(in_place, "nothing reads the counts during a batch: they combine in the commit");
}

#[test]
fn fields_later_operators_read_are_kept() {
    let plan =
        plan_of(&def(vec![spout(), each("split", 0, &["sentence"], &["word"]), count(1, &["sentence", "word"])]))
            .unwrap();
    let Op::Function { kept, .. } = &plan.nodes[1].op else { panic!() };
    assert_eq!(kept, &[0]);
}

#[test]
fn load_errors_name_the_place() {
    let err = plan_of(&def(vec![spout(), each("split", 0, &["line"], &["word"]), count(1, &[])])).unwrap_err();
    assert!(
        matches!(&err, PlanError::MissingField { operator, field, fields, .. }
            if operator == "split" && field == "line" && *fields == ["sentence"]),
        "{err}"
    );
    let err = plan_of(&def(vec![spout(), each("a", 0, &["sentence"], &["sentence"]), count(1, &[])])).unwrap_err();
    assert!(
        matches!(&err, PlanError::FieldExists { operator, field, .. } if operator == "a" && field == "sentence"),
        "{err}"
    );
    let err =
        plan_of(&def(vec![spout(), each("a", 0, &["sentence"], &["w"]), each("a", 1, &["w"], &["x"])])).unwrap_err();
    assert!(matches!(&err, PlanError::DuplicateOperator { operator, .. } if operator == "a"), "{err}");
    let err = plan_of(&def(vec![])).unwrap_err();
    assert!(matches!(&err, PlanError::Empty { topology } if topology == "t"), "{err}");
    let err =
        plan_of(&def(vec![spout(), each("a", 2, &["sentence"], &["w"]), each("b", 1, &["w"], &["x"])])).unwrap_err();
    assert!(matches!(&err, PlanError::Cycle { operator, .. } if operator == "a"), "{err}");
    let err = plan_of(&def(vec![spout(), each("a", 0, &["sentence"], &["w"])])).unwrap_err();
    assert!(matches!(&err, PlanError::PersistsNothing { .. }), "{err}");
    let mut general = count(0, &[]);
    if let OperationDef::PersistentAggregate { aggregator, .. } = &mut general.op {
        aggregator.kind = AggregatorKind::General;
    }
    let err = plan_of(&def(vec![spout(), general])).unwrap_err();
    assert!(
        matches!(&err, PlanError::GeneralPersisted { operator, aggregator, .. }
            if operator == "count" && aggregator == "count"),
        "{err}"
    );
    let mut second = count(0, &[]);
    second.id = "again".into();
    let err = plan_of(&def(vec![spout(), count(0, &[]), second])).unwrap_err();
    assert!(
        matches!(&err, PlanError::TwoWriters { state, first, second, .. }
            if state == "counts" && first == "count" && second == "again"),
        "{err}"
    );
    let mut bad = def(vec![spout(), count(0, &[])]);
    bad.name = "a/b".into();
    let err = plan_of(&bad).unwrap_err();
    assert!(matches!(&err, PlanError::NameNotAllowed { of: NameOf::Topology, name, .. } if name == "a/b"), "{err}");
    // The topology's own name is the place: nothing comes before it.
    assert!(err.to_string().starts_with("topology name \"a/b\" is not allowed"), "{err}");
}

/// A line of `depth` nodes: a spout, filters, a count.
fn chain(depth: usize) -> TopologyDef {
    // Listed reader-first: a recursive walk from node 0 would go `depth` deep.
    let mut nodes = vec![count(1, &["sentence"])];
    for i in 1..depth - 1 {
        nodes.push(node(&format!("f{i}"), &[i + 1], OperationDef::Filter { input: names(&["sentence"]) }));
    }
    nodes.push(spout());
    def(nodes)
}

fn refusal(def: &TopologyDef, limits: TopologyLimits) -> String {
    let config = SandboxConfig { topology: limits, ..SandboxConfig::default() };
    format!("{:#}", plan(def, &config).unwrap_err())
}

#[test]
fn names_are_letters_digits_dashes_underscores_and_dots() {
    let word_count = || def(vec![spout(), each("split", 0, &["sentence"], &["word"]), count(1, &["word"])]);
    let mut fine = word_count();
    fine.name = "Word_count-2.b".into();
    plan_of(&fine).unwrap();
    let refused_name = |edit: &dyn Fn(&mut TopologyDef)| {
        let mut def = word_count();
        edit(&mut def);
        plan_of(&def).unwrap_err()
    };
    let not_allowed = |err: &PlanError, what: NameOf, hostile: &str| {
        matches!(err, PlanError::NameNotAllowed { topology, of, name } if *of == what && name == hostile
            && (what == NameOf::Topology || topology == "t"))
    };
    // However hostile, a name is quoted and escaped in the message.
    for name in ["", ".hidden", "quote\"d", "a b", "../x", "tab\t", "é"] {
        let err = refused_name(&|d| d.name = name.into());
        assert!(not_allowed(&err, NameOf::Topology, name), "{err}");
        assert!(err.to_string().starts_with(&format!("topology name {} is not allowed", json(name))), "{err}");
    }
    let err = refused_name(&|d| d.nodes[1].id = "split words".into());
    assert!(not_allowed(&err, NameOf::Operator, "split words"), "{err}");
    let err = refused_name(&|d| {
        if let OperationDef::PersistentAggregate { state, .. } = &mut d.nodes[2].op {
            state.name = "../../escape".into();
        }
    });
    assert!(not_allowed(&err, NameOf::State, "../../escape"), "{err}");
    let err =
        refused_name(&|d| d.nodes[0].op = OperationDef::Spout { spout: SpoutDef::FileLines { field: "a\nb".into() } });
    assert!(not_allowed(&err, NameOf::Field, "a\nb"), "{err}");
    assert!(err.to_string().contains("topology t: field name \"a\\nb\" is not allowed"), "{err}");
    let err = refused_name(&|d| d.nodes.push(node("q", &[], OperationDef::QueryStream { name: "what?".into() })));
    assert!(not_allowed(&err, NameOf::Query, "what?"), "{err}");
    let long = "x".repeat(129);
    let err = refused_name(&|d| d.name = long.clone());
    assert!(
        matches!(&err, PlanError::NameTooLong { of: NameOf::Topology, start, len: 129, max: 128, .. }
            if *start == "x".repeat(32)),
        "{err}"
    );
    fine.name = "x".repeat(128);
    plan_of(&fine).unwrap();
}

#[test]
fn each_cap_refuses_a_topology_naming_its_flag() {
    let word_count = || def(vec![spout(), each("split", 0, &["sentence"], &["word"]), count(1, &["word"])]);
    let limits = TopologyLimits::default;
    let cases: Vec<(TopologyDef, TopologyLimits, &str)> = vec![
        (
            word_count(),
            TopologyLimits { max_nodes: 2, ..limits() },
            "topology t has 3 nodes, more than this host allows (2; see --max-nodes)",
        ),
        (
            def(vec![spout(), node("m", &[0, 0, 0], OperationDef::Merge), count(1, &[])]),
            TopologyLimits { max_nodes: 3, ..limits() },
            "topology t: its nodes read 4 inputs in all, more than this host allows (3; see --max-nodes)",
        ),
        (
            def(vec![spout(), each("split", 0, &["sentence"], &["a", "b", "c"]), count(1, &[])]),
            TopologyLimits { max_node_fields: 3, ..limits() },
            "topology t: operator split lists 4 names (fields and aggregators), more than this host allows \
             (3; see --max-node-fields)",
        ),
        (
            def(vec![spout(), each("e1", 0, &["sentence"], &["a"]), each("e2", 1, &["a"], &["b"]), count(2, &[])]),
            TopologyLimits { max_node_fields: 2, ..limits() },
            "topology t: operator e2's tuples have 3 fields, more than this host allows (2; see \
             --max-node-fields)",
        ),
        (
            word_count(),
            TopologyLimits { max_fields: 3, ..limits() },
            "topology t's tuples have at least 5 fields in all (added up over its nodes), more than this host \
             allows (3; see --max-fields)",
        ),
        (
            def(vec![spout(), count(0, &[])]),
            TopologyLimits { max_states: 0, ..limits() },
            "topology t has 1 states, more than this host allows (0; see --max-states)",
        ),
        (
            def(vec![spout(), count(0, &[]), node("q", &[], OperationDef::QueryStream { name: "q".into() })]),
            TopologyLimits { max_queries: 0, ..limits() },
            "topology t has 1 query streams, more than this host allows (0; see --max-queries)",
        ),
        (
            {
                let mut d = word_count();
                d.nodes[1].parallelism = u32::MAX;
                d
            },
            limits(),
            "topology t: operator split asks for a parallelism of 4294967295, more than this host allows (64; \
             see --max-parallelism)",
        ),
        (
            {
                let mut d = word_count();
                d.nodes[1].parallelism = 40;
                d.nodes.push(each("again", 1, &["word"], &["w2"]));
                d.nodes[3].parallelism = 40;
                d
            },
            TopologyLimits { max_instances: 79, ..limits() },
            "topology t runs 80 guest operator instances in all (each guest operator once per partition), more \
             than this host allows (79; see --max-instances)",
        ),
        (
            {
                let mut d = word_count();
                if let OperationDef::PersistentAggregate { state, .. } = &mut d.nodes[2].op {
                    state.cache_size = Some(usize::MAX);
                }
                d
            },
            limits(),
            "topology t: state counts asks for a cache of 18446744073709551615 entries, more than this host \
             allows (1000000; see --max-state-cache)",
        ),
    ];
    for (def, limits, expected) in cases {
        assert_eq!(refusal(&def, limits), expected);
    }
    // Built-in nodes take no guest instances: only `split` counts.
    let mut wide = word_count();
    wide.nodes[1].parallelism = 64;
    wide.nodes[2].parallelism = 64;
    plan(&wide, &SandboxConfig { topology: TopologyLimits { max_instances: 64, ..limits() }, ..Default::default() })
        .unwrap();
}

#[test]
fn the_parallelism_flag_is_held_to_the_same_caps() {
    let plan = plan_of(&def(vec![spout(), each("split", 0, &["sentence"], &["word"]), count(1, &["word"])])).unwrap();
    plan.with_parallelism(64).check_parallelism(&TopologyLimits::default()).unwrap();
    let err = plan.with_parallelism(65).check_parallelism(&TopologyLimits::default()).unwrap_err();
    let spout = Excess::Parallelism { operator: "spout".into(), parallelism: 65 };
    assert!(matches!(&err, PlanError::OverCap { excess, max: 64, .. } if *excess == spout), "{err}");
    let err = plan
        .with_parallelism(8)
        .check_parallelism(&TopologyLimits { max_instances: 7, ..TopologyLimits::default() })
        .unwrap_err();
    assert!(matches!(&err, PlanError::OverCap { excess: Excess::Instances(8), max: 7, .. }), "{err}");
}

#[test]
fn a_deep_chain_is_walked_without_recursion() {
    let depth = 200_000;
    let limits =
        TopologyLimits { max_nodes: depth, max_fields: 2 * depth, max_instances: depth, ..TopologyLimits::default() };
    // A recursive walk 200,000 deep overflows any stack; this one fits
    // in a quarter of a megabyte.
    let planned = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            let config = SandboxConfig { topology: limits, ..SandboxConfig::default() };
            let plan = plan(&chain(depth), &config).unwrap();
            (plan.nodes.len(), plan.nodes[0].op.clone(), plan.nodes[depth - 1].id.clone())
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(planned, (depth, Op::Spout, "count".to_owned()));
    let err = plan(&chain(depth), &SandboxConfig::default()).unwrap_err();
    assert!(matches!(err, PlanError::OverCap { excess: Excess::Nodes(200_000), max: 1000, .. }), "{err}");
    let mut cycle = chain(depth);
    cycle.nodes[depth - 1] = node("spin", &[1], OperationDef::Filter { input: names(&["sentence"]) });
    let err = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || order(&cycle).unwrap_err())
        .unwrap()
        .join()
        .unwrap();
    assert!(matches!(&err, PlanError::Cycle { topology, operator } if topology == "t" && operator == "f1"), "{err}");
}

#[test]
fn a_guest_combiner_must_read_a_field_to_persist() {
    let persist = |kind: AggregatorKind, input: &[&str]| {
        let mut node = count(0, &["sentence"]);
        if let OperationDef::PersistentAggregate { aggregator, .. } = &mut node.op {
            aggregator.kind = kind;
            aggregator.input = names(input);
        }
        plan_of(&def(vec![spout(), node]))
    };
    let err = persist(AggregatorKind::Combiner, &[]).unwrap_err();
    assert!(
        matches!(&err, PlanError::CombinerWithoutInput { operator, aggregator, .. }
            if operator == "count" && aggregator == "count"),
        "{err}"
    );
    persist(AggregatorKind::Combiner, &["sentence"]).unwrap();
    persist(AggregatorKind::Reducer, &[]).unwrap();
    let err = persist(AggregatorKind::Builtin(Builtin::Sum), &[]).unwrap_err();
    assert!(
        matches!(&err, PlanError::BuiltinInputs { aggregator, builtin: Builtin::Sum, .. } if aggregator == "count"),
        "{err}"
    );
}

fn sink(id: &str, input: usize, subject: &str, payload: weir_sdk::topology::SinkPayloadDef) -> NodeDef {
    let sink = SinkDef::JetStream { subject: subject.into(), payload };
    node(id, &[input], OperationDef::Sink { sink })
}

#[test]
fn a_sink_after_a_state_commits_with_it_and_reads_every_field_as_json() {
    use weir_sdk::topology::SinkPayloadDef::{Json, Raw};
    let nodes =
        vec![spout(), each("split", 0, &["sentence"], &["word"]), count(1, &["word"]), sink("out", 2, "o", Json)];
    let plan = plan_of(&def(nodes)).unwrap();
    let Op::Sink { input, .. } = &plan.nodes[3].op else { panic!() };
    assert_eq!(input.names, ["word", "count"]);
    assert_eq!(plan.nodes[3].phase, Phase::Commit);
    let Op::PersistentAggregate { in_place, .. } = plan.nodes[2].op else { panic!() };
    assert!(!in_place, "the sink reads the new values");
    let field = || Raw { field: "count".into() };
    let nodes =
        vec![spout(), each("split", 0, &["sentence"], &["word"]), count(1, &["word"]), sink("out", 2, "o", field())];
    let Op::Sink { input, .. } = &plan_of(&def(nodes)).unwrap().nodes[3].op else { panic!() };
    assert_eq!(input.names, ["count"]);
}

#[test]
fn a_sink_on_the_process_phase_after_a_sink_or_to_a_wildcard_is_refused_naming_it() {
    use weir_sdk::topology::SinkPayloadDef::{Json, Raw};
    let refused = |nodes: Vec<NodeDef>| plan_of(&def(nodes)).unwrap_err();
    let split = || each("split", 0, &["sentence"], &["word"]);
    let err = refused(vec![spout(), split(), sink("out", 1, "o", Json), count(1, &["word"])]);
    assert!(matches!(&err, PlanError::SinkInProcessPhase { sink, .. } if sink == "out"), "{err}");
    let err =
        refused(vec![spout(), split(), count(1, &["word"]), sink("out", 2, "o", Json), each("e", 3, &[], &["x"])]);
    assert!(matches!(&err, PlanError::SinkRead { sink, reader, .. } if sink == "out" && reader == "e"), "{err}");
    let err = refused(vec![spout(), split(), count(1, &["word"]), sink("out", 2, "o.*", Json)]);
    assert!(
        matches!(&err, PlanError::SinkSubject { sink, error: SubjectError::Wildcard { subject }, .. }
            if sink == "out" && subject == "o.*"),
        "{err}"
    );
    // The subject's own message follows the place.
    assert_eq!(err.to_string(), "topology t: sink out: subject \"o.*\": a sink publishes to a subject, not a wildcard");
    let err = refused(vec![spout(), split(), count(1, &["word"]), sink("out", 2, "o", Raw { field: "nope".into() })]);
    assert!(matches!(&err, PlanError::MissingField { operator, field, .. } if operator == "out" && field == "nope"));
}

/// Whether an error is the refusal a case expects.
type Refused = fn(&PlanError) -> bool;

fn window(input: usize, window: weir_sdk::topology::WindowDef, kind: AggregatorKind) -> NodeDef {
    node(
        "win",
        &[input],
        OperationDef::Window {
            window,
            state: StateDef { name: "open".into(), kind: StateKind::Opaque, cache_size: None },
            group: names(&["word"]),
            aggregator: AggregatorDef { id: "win".into(), kind, input: names(&["n"]), output: names(&["sum"]) },
        },
    )
}

#[test]
fn a_window_commits_and_outputs_its_bounds_after_its_group() {
    use weir_sdk::topology::WindowDef;
    let event_time = |size_ms, slide_ms| WindowDef::EventTime {
        field: "ts".into(),
        size_ms,
        slide_ms,
        max_delay_ms: 0,
        lateness_ms: 0,
        idle_timeout_ms: None,
    };
    let session = |gap_ms, max_delay_ms, idle_timeout_ms| WindowDef::Session {
        field: "ts".into(),
        gap_ms,
        max_delay_ms,
        lateness_ms: 0,
        idle_timeout_ms,
    };
    let sum = AggregatorKind::Builtin(Builtin::Sum);
    let topology =
        |w, kind| def(vec![spout(), each("parse", 0, &["sentence"], &["word", "ts", "n"]), window(1, w, kind)]);
    let plan = plan_of(&topology(event_time(1000, 250), sum)).unwrap();
    assert_eq!(plan.nodes[2].phase, Phase::Commit);
    assert_eq!(plan.nodes[2].fields, ["word", "window_start", "window_end", "sum"]);
    let Op::Window { time, group, aggregator, .. } = &plan.nodes[2].op else { panic!() };
    assert_eq!((*time, group.as_slice()), (Some(1), &[0][..]));
    assert_eq!(aggregator.input.positions, [4], "after the window's end and start");
    assert_eq!(plan.states["open"].kind, StateKind::Opaque);
    // What a description may not ask of a window, each refused naming it.
    let refusals: [(WindowDef, AggregatorKind, Refused); 9] = [
        (event_time(0, 0), sum, |e| matches!(e, PlanError::WindowZero { size: 0, slide: 0, unit: "ms", .. })),
        (WindowDef::Count { size: 5, slide: 0 }, sum, |e| {
            matches!(e, PlanError::WindowZero { size: 5, slide: 0, unit: "tuples", .. })
        }),
        (event_time(1_000_000, 1), sum, |e| matches!(e, PlanError::TooManyWindows { windows: 1_000_000, .. })),
        (event_time(u64::MAX, 1), sum, |e| matches!(e, PlanError::WindowTime { what: "size", ms: u64::MAX, .. })),
        (session(10, 0, Some(u64::MAX)), sum, |e| {
            matches!(e, PlanError::WindowTime { what: "idle timeout", ms: u64::MAX, .. })
        }),
        (
            session(10, 0, None),
            AggregatorKind::General,
            |e| matches!(e, PlanError::SessionAggregator { kind: AggregatorKind::General, aggregator, .. } if aggregator == "win"),
        ),
        (session(10, 0, None), AggregatorKind::Reducer, |e| {
            matches!(e, PlanError::SessionAggregator { kind: AggregatorKind::Reducer, .. })
        }),
        (session(1, 100_000, None), sum, |e| matches!(e, PlanError::TooManySessions { open: 100_002, .. })),
        (
            WindowDef::EventTime {
                field: "when".into(),
                size_ms: 10,
                slide_ms: 10,
                max_delay_ms: 0,
                lateness_ms: 0,
                idle_timeout_ms: None,
            },
            sum,
            |e| matches!(e, PlanError::MissingField { operator, field, .. } if operator == "win" && field == "when"),
        ),
    ];
    // A late stream reads a window and its input, once per window.
    let late = |id: &str, inputs: &[usize]| node(id, inputs, OperationDef::LateTuples);
    let with_late = |lates: Vec<NodeDef>| {
        let mut nodes =
            vec![spout(), each("parse", 0, &["sentence"], &["word", "ts", "n"]), window(1, event_time(10, 10), sum)];
        nodes.extend(lates);
        def(nodes)
    };
    let plan = plan_of(&with_late(vec![late("late", &[1, 2])])).unwrap();
    assert_eq!(plan.nodes[3].phase, Phase::Commit);
    assert_eq!(plan.nodes[3].fields, ["sentence", "word", "ts", "n"], "the window's input, whole");
    let inputs_refused: Refused = |e| matches!(e, PlanError::LateStreamInputs { late, .. } if late == "late");
    for (lates, refused) in [
        (vec![late("late", &[0, 1])], inputs_refused),
        (vec![late("late", &[0, 2])], inputs_refused),
        (
            vec![late("late", &[1, 2]), late("again", &[1, 2])],
            |e: &PlanError| matches!(e, PlanError::TwoLateStreams { window, .. } if window == "win"),
        ),
    ] {
        let err = plan_of(&with_late(lates)).unwrap_err();
        assert!(refused(&err), "{err}");
    }
    for (w, kind, refused) in refusals {
        let err = plan_of(&topology(w.clone(), kind)).unwrap_err();
        assert!(refused(&err) && err.to_string().starts_with("topology t: "), "{w:?}: {err}");
    }
}
