// Word count in JavaScript: split each sentence of the input into words and
// keep an exactly-once count per word in the state `counts`. The same
// topology as examples/word-count, with the query `words`.

import { Count, FileLines, MapGet, State, Sum, Topology } from "weir";

// Whitespace other than single spaces between words.
const ODD_SPACING = /[^\S ]|  |^ | $|^$/;

/** The whitespace-separated words of a sentence (or a query's arguments).
 *  Splitting on " " is one native call; a regex split runs in the
 *  interpreter, match by match, some ten times slower, so it is left to
 *  text with odd spacing. */
const split = (t) => {
  const text = t.str(0);
  return ODD_SPACING.test(text) ? text.split(/\s+/).filter((word) => word.length > 0) : text.split(" ");
};

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
