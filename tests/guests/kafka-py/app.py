"""Word count in Python over a Kafka topic: the Rust test guest's
kafka-word-count and kafka-word-count-opaque, the split in Python."""

from weir import Count, Kafka, State, Topology


def split(t):
    """The whitespace-separated words of a sentence."""
    return t.str(0).split()


def word_count(name, spout, state):
    topology = Topology(name)
    (
        topology.new_stream(spout.string("sentence"))
        .each(["sentence"], split, ["word"])
        .name("split")
        .group_by(["word"])
        .persistent_aggregate(state, Count, ["count"])
        .name("count")
    )
    return topology.build()


def topology():
    return [
        word_count("py-kafka-word-count", Kafka.transactional("corpus"), State.transactional("counts")),
        word_count("py-kafka-word-count-opaque", Kafka.opaque("corpus"), State.opaque("counts")),
    ]
