#!/usr/bin/env python3
"""Writes the canonical word-count corpus: N sentences of 8 words drawn from a
Zipf-like vocabulary w0..w9999 (weight of rank r is 1/(r+1)) by CPython's
random.Random(42), one sentence per line, and the exact count of every word to
OUT's .counts.json. Byte for byte the benchmark's corpus: N = 1,000,000 has
sha256 b367d94cf130e24bdc3ff96a0f8ac9f8deb913efd7c253cb2269c1c61fd2fddb."""
import argparse
import collections
import itertools
import json
import os
import random

WORDS_PER_SENTENCE = 8


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--sentences", type=int, default=1_000_000)
    parser.add_argument("-o", "--out", default="corpus.txt")
    args = parser.parse_args()

    vocab = [f"w{rank}" for rank in range(10_000)]
    cumulative = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocab))))
    words = random.Random(42).choices(vocab, cum_weights=cumulative, k=args.sentences * WORDS_PER_SENTENCE)
    with open(args.out, "w", encoding="ascii", newline="\n") as out:
        for start in range(0, len(words), WORDS_PER_SENTENCE):
            out.write(" ".join(words[start:start + WORDS_PER_SENTENCE]) + "\n")
    counts = collections.Counter(words)
    truth = os.path.splitext(args.out)[0] + ".counts.json"
    with open(truth, "w", encoding="ascii") as out:
        json.dump(dict(sorted(counts.items(), key=lambda kv: int(kv[0][1:]))), out, separators=(",", ":"))
        out.write("\n")


if __name__ == "__main__":
    main()
