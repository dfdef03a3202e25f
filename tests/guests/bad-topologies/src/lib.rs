//! Topologies the host must refuse when it loads them, each for one reason
//! its error names: the field, the operator, the state.

use weir_sdk::prelude::*;

/// Appends nothing; never runs.
struct Nothing;

impl Function for Nothing {
    fn execute(&self, _tuple: &Tuple<'_>, _out: &mut Emitter<'_>) -> Result<(), Error> {
        Ok(())
    }
}

impl MapFunction for Nothing {
    fn execute(&self, _tuple: &Tuple<'_>) -> Result<Vec<Value>, Error> {
        Ok(vec![Value::Null])
    }
}

impl StateUpdater for Nothing {
    fn update_state(&self, _state: &dyn MapState, _tuples: &[Tuple<'_>], _out: &mut Emitter<'_>) -> Result<(), Error> {
        Ok(())
    }
}

impl CombinerAggregator for Nothing {
    fn init(&self, _tuple: &Tuple<'_>) -> Result<Value, Error> {
        Ok(Value::I64(1))
    }
    fn combine(&self, a: Value, _b: Value) -> Result<Value, Error> {
        Ok(a)
    }
    fn zero(&self) -> Value {
        Value::I64(0)
    }
}

impl Aggregator for Nothing {
    type State = ();
    fn init(&self, _info: &BatchInfo, _out: &mut Emitter<'_>) -> Result<(), Error> {
        Ok(())
    }
    fn aggregate(&self, _state: &mut (), _tuple: &Tuple<'_>, _out: &mut Emitter<'_>) -> Result<(), Error> {
        Ok(())
    }
    fn complete(&self, _state: (), _out: &mut Emitter<'_>) -> Result<(), Error> {
        Ok(())
    }
}

fn lines(name: &str) -> weir_sdk::builder::TopologyBuilder {
    Topology::new(name)
}

/// Counts each line of the input, read into `field`, in the state `state`.
fn count_lines(name: &str, field: &str, state: &str) -> weir_sdk::builder::TopologyBuilder {
    let topology = lines(name);
    let stream = topology.new_stream(FileLines::new(field));
    stream.group_by([field]).persistent_aggregate(State::transactional(state), Count, ["count"]);
    topology
}

fn topologies() -> Vec<Topology> {
    let unknown_field = lines("unknown-field");
    unknown_field.new_stream(FileLines::new("line")).each(["nope"], Nothing, ["x"]).name("reads-nope");

    // `map` replaces the tuple: `line` is gone after it.
    let after_map = lines("field-gone-after-map");
    after_map
        .new_stream(FileLines::new("line"))
        .map(["line"], Nothing, ["upper"])
        .name("upper")
        .each(["line"], Nothing, ["x"])
        .name("reads-line");

    let unknown_projected = lines("unknown-projected-field");
    unknown_projected.new_stream(FileLines::new("line")).project(["line", "nope"]).name("keep-nope");

    let unknown_in_query = lines("unknown-field-in-query");
    unknown_in_query.new_stream(FileLines::new("line"));
    unknown_in_query.new_query_stream("q").each(["nope"], Nothing, ["x"]).name("query-reads-nope");

    let duplicate = lines("duplicate-output");
    duplicate.new_stream(FileLines::new("line")).each(["line"], Nothing, ["line"]).name("appends-line");

    let general = lines("general-persisted");
    general
        .new_stream(FileLines::new("line"))
        .group_by(["line"])
        .persistent_aggregate_over(State::transactional("lines"), ["line"], General(Nothing), ["x"])
        .name("persist-general");

    let two_kinds = lines("state-of-two-kinds");
    let stream = two_kinds.new_stream(FileLines::new("line"));
    stream.group_by(["line"]).persistent_aggregate(State::transactional("shared"), Count, ["count"]).name("count");
    stream.partition_persist(State::transactional("shared"), ["line"], Nothing, []).name("update");

    let map_and_value = lines("state-map-and-single-value");
    let stream = map_and_value.new_stream(FileLines::new("line"));
    stream.group_by(["line"]).persistent_aggregate(State::transactional("shared"), Count, ["count"]).name("per-line");
    stream.persistent_aggregate(State::transactional("shared"), Count, ["count"]).name("overall");

    // Names a host must not take into table names, file names, logs and
    // metrics labels.
    let quoted = count_lines("quote\"d", "line", "counts");
    let spaced = lines("space-in-operator");
    let stream = spaced.new_stream(FileLines::new("line")).each(["line"], Nothing, ["x"]).name("split words");
    stream.group_by(["x"]).persistent_aggregate(State::transactional("counts"), Count, ["count"]);
    let newline = count_lines("newline-in-field", "line\nbreak", "counts");
    let slash = count_lines("slash-in-state", "line", "a/b");

    // A combiner whose init sees no field can only count.
    let fieldless = lines("fieldless-combiner");
    fieldless
        .new_stream(FileLines::new("line"))
        .group_by(["line"])
        .persistent_aggregate(State::transactional("counts"), Nothing, ["count"])
        .name("count-lines");

    vec![
        quoted.build(),
        spaced.build(),
        newline.build(),
        slash.build(),
        fieldless.build(),
        unknown_field.build(),
        after_map.build(),
        unknown_projected.build(),
        unknown_in_query.build(),
        duplicate.build(),
        general.build(),
        two_kinds.build(),
        map_and_value.build(),
        Topology::new("empty").build(),
    ]
}

weir_sdk::export!(topologies);
