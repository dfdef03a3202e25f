"""The polyglot topology's split, in Python: each sentence into its words.
Its first attempt at batch 2 fails, so that every run replays a batch."""

from weir import Operators, Retry


def split(t):
    if t.batch.txid == 2 and t.batch.attempt == 0:
        raise Retry("batch 2 fails its first attempt, to show a replay")
    return t.str("sentence").split()


def topology():
    return Operators("polyglot").function("split", split, ["word"])
