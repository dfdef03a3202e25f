// Word count in JavaScript: split each sentence of the input into words and
// keep an exactly-once count per word in the state `counts`. The same
// topology as examples/word-count, with the query `words`.

import { Count, FileLines, MapGet, State, Sum, Topology } from "weir";

/** The whitespace-separated words of a sentence (or a query's arguments). */
const split = (t) => t.str(0).split(/\s+/).filter((word) => word.length > 0);

export function topology() {
  const topology = new Topology("word-count");
  const counts = topology
    .newStream(new FileLines("sentence"))
    .each(["sentence"], split, ["word"])
    .name("split")
    .groupBy(["word"])
    .persistentAggregate(State.transactional("counts"), Count, ["count"])
    .name("count");
  topology
    .newQueryStream("words")
    .each(["args"], split, ["word"])
    .name("split-args")
    .groupBy(["word"])
    .stateQuery(counts, ["word"], MapGet, ["count"])
    .name("get-count")
    .aggregate(["count"], Sum, ["sum"])
    .name("sum");
  return topology.build();
}
