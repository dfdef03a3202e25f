"""Word count in Python: split each sentence of the input into words and
keep an exactly-once count per word in the state `counts`. The same topology
as examples/word-count, with the query `words`."""

from weir import Count, FileLines, MapGet, State, Sum, Topology


def split(t):
    """The whitespace-separated words of a sentence (or a query's arguments)."""
    return t.str(0).split()


def topology():
    topology = Topology("word-count")
    counts = (
        topology.new_stream(FileLines("sentence"))
        .each(["sentence"], split, ["word"])
        .name("split")
        .group_by(["word"])
        .persistent_aggregate(State.transactional("counts"), Count, ["count"])
        .name("count")
    )
    (
        topology.new_query_stream("words")
        .each(["args"], split, ["word"])
        .name("split-args")
        .group_by(["word"])
        .state_query(counts, ["word"], MapGet, ["count"])
        .name("get-count")
        .aggregate(["count"], Sum, ["sum"])
        .name("sum")
    )
    return topology.build()
