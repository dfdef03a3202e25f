#!/usr/bin/env python3
"""Sensor readings for the window tests, and the windows they must give.

  windows_reference.py generate --seed S -n N -o FILE
      writes N readings `sensor,timestamp,value`, a line each: timestamps
      mostly rising, some out of order, some late, and a gap that leaves
      windows empty.

  windows_reference.py expect --kind KIND --batch B [--clock C]... FILE
      prints, as JSON, every window the topology KIND of the `windows` test
      guest emits over FILE cut into batches of B lines, and the number of
      late readings: {"windows": [[key..., value], ...], "late": n,
      "late_readings": [[sensor, timestamp, value], ...]}. For
      processing-time windows, each --clock START:STEP[:THROUGH] says that
      batch txid was emitted at START + STEP * txid, up to txid THROUGH
      (the next clock from there on): the n-th batch a run emits afresh
      is emitted at the n-th reading of the clock WEIR_CLOCK pins.

The windows are computed here on their own, from the rules the README
states, not from Weir's code.
"""

import argparse
import json
import random

SENSORS = ["s0", "s1", "s2", "s3"]


def generate(seed, n, out):
    rng = random.Random(seed)
    with open(out, "w") as f:
        t = 0
        for i in range(n):
            t += rng.randint(0, 40)
            if i == n // 2:
                t += 5_000
            ts = t
            roll = rng.random()
            if roll < 0.15:
                ts = t - rng.randint(0, 400)
            elif roll < 0.18:
                ts = t - rng.randint(1_000, 3_000)
            f.write(f"{rng.choice(SENSORS)},{ts},{rng.randint(-50, 100)}\n")


def batches(path, size):
    with open(path) as f:
        lines = [line.rstrip("\n") for line in f]
    for at in range(0, len(lines), size):
        batch = []
        for line in lines[at : at + size]:
            sensor, ts, value = line.split(",")
            batch.append((sensor, int(ts), int(value)))
        yield batch


def joined(values):
    return " ".join(str(v) for v in values)


def by_count(path, batch, size, slide, aggregate):
    """Per sensor: every `slide` readings, a window of the last `size`."""
    seen = {}
    out = []
    for readings in batches(path, batch):
        before = {s: len(v) for s, v in seen.items()}
        for sensor, _, value in readings:
            seen.setdefault(sensor, []).append(value)
        for sensor, values in seen.items():
            end = (before.get(sensor, 0) // slide + 1) * slide
            while end <= len(values):
                start = max(end - size, 0)
                out.append([sensor, start, end, aggregate(values[start:end])])
                end += slide
    return out, []


def by_time(path, batch, size, slide, delay, lateness, aggregate, grouped=True, clock=None):
    """Windows [start, start + size), start a multiple of slide; a window
    closes once the greatest timestamp less delay reaches its end plus
    lateness; a reading whose windows all closed is late. With `clock`
    (processing time), every reading of batch txid is at clock(txid)."""
    greatest = None
    open_windows = {}
    late = []
    out = []

    def closed_through():
        return float("-inf") if greatest is None else greatest - delay - lateness

    for txid, readings in enumerate(batches(path, batch), start=1):
        closed_before = closed_through()
        for sensor, ts, value in readings:
            if clock:
                ts = clock(txid)
            greatest = ts if greatest is None else max(greatest, ts)
            taken = False
            start = (ts // slide) * slide
            while start + size > ts:
                if start + size > closed_before:
                    key = (sensor if grouped else None, start, start + size)
                    open_windows.setdefault(key, []).append(value)
                    taken = True
                start -= slide
            if not taken:
                late.append([sensor, ts, value])
        closed = closed_through()
        for key in sorted(k for k in open_windows if k[2] <= closed):
            sensor, start, end = key
            values = open_windows.pop(key)
            head = [sensor] if grouped else []
            out.append(head + [start, end, aggregate(values)])
    return out, late


def by_session(path, batch, gap, delay, lateness, aggregate):
    """Per sensor: a reading at t opens [t, t + gap), and sessions that meet
    (one's start at or before the other's end) merge; sessions close as
    time windows do, and a reading whose own session would have closed is
    late."""
    greatest = None
    sessions = {}
    late = []
    out = []

    def closed_through():
        return float("-inf") if greatest is None else greatest - delay - lateness

    for readings in batches(path, batch):
        closed_before = closed_through()
        for sensor, ts, value in readings:
            greatest = ts if greatest is None else max(greatest, ts)
            if ts + gap <= closed_before:
                late.append([sensor, ts, value])
                continue
            start, end, values = ts, ts + gap, [value]
            apart = []
            for s in sessions.get(sensor, []):
                if s[0] <= end and start <= s[1]:
                    start, end, values = min(start, s[0]), max(end, s[1]), values + s[2]
                else:
                    apart.append(s)
            sessions[sensor] = apart + [(start, end, values)]
        closed = closed_through()
        for sensor in sorted(sessions):
            for start, end, values in sessions[sensor]:
                if end <= closed:
                    out.append([sensor, start, end, aggregate(values)])
            sessions[sensor] = [s for s in sessions[sensor] if s[1] > closed]
    return out, late


def extremes(values):
    """The general aggregator Extremes: a low and a high tuple."""
    return [["low", min(values)], ["high", max(values)]]


def spread(kind):
    """The windows of a general aggregator emitting several tuples a
    window: one entry per tuple, its leading values part of the key."""
    def run(path, batch):
        windows, late = kind(path, batch)
        return [w[:-1] + t for w in windows for t in w[-1]], late
    return run


KINDS = {
    "count-tumbling": lambda p, b: by_count(p, b, 3, 3, sum),
    "count-sliding": lambda p, b: by_count(p, b, 4, 2, joined),
    "time-tumbling": lambda p, b: by_time(p, b, 1_000, 1_000, 300, 200, max),
    "time-sliding": lambda p, b: by_time(p, b, 1_000, 250, 150, 0, joined),
    "time-all": lambda p, b: by_time(p, b, 500, 500, 100, 0, len, grouped=False),
    "session-greatest": lambda p, b: by_session(p, b, 150, 300, 100, max),
    "session-sum": lambda p, b: by_session(p, b, 120, 200, 0, sum),
    "count-general": lambda p, b: by_count(p, b, 4, 2, joined),
    "time-general": spread(lambda p, b: by_time(p, b, 1_000, 500, 300, 0, extremes)),
}

PROCESSING_TIME = {
    "duration-tumbling": lambda p, b, c: by_time(p, b, 1_000, 1_000, 0, 0, sum, clock=c),
    "duration-sliding": lambda p, b, c: by_time(p, b, 1_000, 400, 0, 0, joined, clock=c),
}


def pinned(clocks):
    """The time of batch txid by the clocks given as START:STEP[:THROUGH]."""
    parsed = []
    for text in clocks:
        parts = [int(p) for p in text.split(":")]
        parsed.append((parts[0], parts[1], parts[2] if len(parts) > 2 else None))

    def at(txid):
        for start, step, through in parsed:
            if through is None or txid <= through:
                return start + step * txid
        raise SystemExit(f"no clock for txid {txid}")

    return at


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate")
    gen.add_argument("--seed", type=int, required=True)
    gen.add_argument("-n", type=int, required=True)
    gen.add_argument("-o", required=True)
    expect = commands.add_parser("expect")
    expect.add_argument("--kind", choices=sorted(KINDS) + sorted(PROCESSING_TIME), required=True)
    expect.add_argument("--batch", type=int, required=True)
    expect.add_argument("--clock", action="append", default=[])
    expect.add_argument("file")
    args = parser.parse_args()
    if args.command == "generate":
        generate(args.seed, args.n, args.o)
    else:
        if args.kind in PROCESSING_TIME:
            windows, late = PROCESSING_TIME[args.kind](args.file, args.batch, pinned(args.clock))
        else:
            windows, late = KINDS[args.kind](args.file, args.batch)
        print(json.dumps({"windows": windows, "late": len(late), "late_readings": late}))


if __name__ == "__main__":
    main()
