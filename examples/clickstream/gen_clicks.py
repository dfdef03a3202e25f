#!/usr/bin/env python3
"""Writes N clicks, one JSON object a line: {"user": "user-U", "page": "/P"}.

Users and pages are drawn from a seeded generator, pages skewed so that a
few are popular: the same arguments always write the same file.

    examples/clickstream/gen_clicks.py -n 20000 --seed 7 > /tmp/clicks.jsonl
"""

import argparse
import json
import random
import sys

PAGES = ["/", "/search", "/cart", "/checkout", "/help"] + [f"/products/{n}" for n in range(40)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20000, help="clicks to write (default 20000)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the generator (default 7)")
    parser.add_argument("--users", type=int, default=500, help="distinct users (default 500)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    weights = [1.0 / (rank + 1) for rank in range(len(PAGES))]
    out = sys.stdout
    for _ in range(args.n):
        user = f"user-{rng.randrange(args.users)}"
        page = rng.choices(PAGES, weights)[0]
        out.write(json.dumps({"user": user, "page": page}, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
