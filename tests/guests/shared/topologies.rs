//! Topologies more than one test guest defines, each with operators of its
//! own. Each guest includes this file as a module of its own (`#[path]`),
//! as it does `operators.rs`.

use weir_sdk::prelude::*;

/// `jetstream-lines`: counts the words `split` finds in the JSON lines of
/// the JetStream stream `lines` (subjects `lines.*`). The guests differ in
/// which lines their `split` takes.
pub fn jetstream_lines(split: impl Function) -> Topology {
    Topology::new("jetstream-lines")
        .new_stream(JetStream::transactional("lines", ["lines.*"]).json(["line"]))
        .each(["line"], split, ["word"])
        .name("split")
        .group_by(["word"])
        .persistent_aggregate(State::transactional("counts"), Count, ["count"])
        .name("count")
        .build()
}
