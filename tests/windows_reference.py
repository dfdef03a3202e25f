#!/usr/bin/env python3
"""Sensor readings for the window tests, and the windows they must give.

  windows_reference.py generate --seed S -n N -o FILE
      writes N readings `sensor,timestamp,value`, a line each: timestamps
      mostly rising, some out of order, some late, and a gap that leaves
      windows empty.

  windows_reference.py expect --kind KIND --batch B [--parallelism P] [--clock C]... FILE
      prints, as JSON, every window the topology KIND of the `windows` test
      guest emits over FILE cut into batches of B lines, and the number of
      late readings: {"windows": [[key..., value], ...], "late": n,
      "late_readings": [[sensor, timestamp, value], ...]}. The spout deals
      each batch's lines into P partitions, line i of a batch to partition
      i % P; event-time windows keep a watermark per partition. For
      processing-time windows, each --clock START:STEP[:THROUGH] says that
      batch txid was emitted at START + STEP * txid, up to txid THROUGH
      (the next clock from there on): the n-th batch a run emits afresh
      is emitted at the n-th reading of the clock WEIR_CLOCK pins.

A line `skip` is a spout tuple the guest's parse function drops: it takes
its place in the dealing, and nothing of it reaches a window.

The windows are computed here on their own, from the rules docs/windows.md
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


def batches(path, size, partitions=1):
    """Each batch's readings, each with the spout partition it was dealt
    into: (partition, (sensor, ts, value))."""
    with open(path) as f:
        lines = [line.rstrip("\n") for line in f]
    for at in range(0, len(lines), size):
        batch = []
        for i, line in enumerate(lines[at : at + size]):
            if line == "skip":
                continue
            sensor, ts, value = line.split(",")
            batch.append((i % partitions, (sensor, int(ts), int(value))))
        yield batch


class Watermark:
    """Flink's watermark over partitioned input, moved batch by batch: a
    partition's watermark is its greatest timestamp less the max delay; the
    operation's is the least over the partitions that have brought a
    reading and are not idle (none of theirs while the greatest timestamp
    overall moved on by more than the idle timeout since the last batch
    that brought one), and it never goes back. A window closes once the
    watermark reaches its end plus the lateness."""

    def __init__(self, delay, lateness, partitions=1, idle=None):
        self.delay, self.lateness, self.idle = delay, lateness, idle
        self.greatest = None
        self.partitions = [{"greatest": None, "active": None} for _ in range(partitions)]
        self.watermark = None

    def closed_through(self):
        return float("-inf") if self.watermark is None else self.watermark - self.lateness

    def end_batch(self, seen):
        """After a batch whose readings' greatest timestamp per partition
        is `seen`."""
        for ts in seen.values():
            self.greatest = ts if self.greatest is None else max(self.greatest, ts)
        if self.greatest is None:
            return
        for p, ts in seen.items():
            part = self.partitions[p]
            part["greatest"] = ts if part["greatest"] is None else max(part["greatest"], ts)
            part["active"] = self.greatest
        counted = [
            part["greatest"]
            for part in self.partitions
            if part["greatest"] is not None
            and not (self.idle is not None and self.greatest - part["active"] > self.idle)
        ]
        least = (min(counted) if counted else self.greatest) - self.delay
        self.watermark = least if self.watermark is None else max(self.watermark, least)


def see(seen, partition, ts):
    seen[partition] = ts if partition not in seen else max(seen[partition], ts)


def joined(values):
    return " ".join(str(v) for v in values)


def by_count(path, batch, size, slide, aggregate, partitions=1):
    """Per sensor, its readings numbered in the order of the file: every
    `slide` readings, a window of the last `size`, starting at its end
    less `size` (below 0 for the first windows of a sliding one)."""
    seen = {}
    out = []
    for readings in batches(path, batch, partitions):
        before = {s: len(v) for s, v in seen.items()}
        for _, (sensor, _, value) in readings:
            seen.setdefault(sensor, []).append(value)
        for sensor, values in seen.items():
            end = (before.get(sensor, 0) // slide + 1) * slide
            while end <= len(values):
                start = end - size
                out.append([sensor, start, end, aggregate(values[max(start, 0) : end])])
                end += slide
    return out, []


def by_time(
    path, batch, size, slide, delay, lateness, aggregate, grouped=True, clock=None, partitions=1, idle=None
):
    """Windows [start, start + size), start a multiple of slide; a window
    closes once the watermark reaches its end plus lateness; a reading
    whose windows all closed is late, and one late for some joins the open
    ones only. With `clock` (processing time), every reading of batch txid
    is at clock(txid), one watermark for all."""
    watermark = Watermark(delay, lateness, 1 if clock else partitions, idle)
    open_windows = {}
    late = []
    out = []

    for txid, readings in enumerate(batches(path, batch, partitions), start=1):
        closed_before = watermark.closed_through()
        seen = {}
        if clock:
            see(seen, 0, clock(txid))
        for partition, (sensor, ts, value) in readings:
            if clock:
                ts, partition = clock(txid), 0
            see(seen, partition, ts)
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
        watermark.end_batch(seen)
        closed = watermark.closed_through()
        for key in sorted(k for k in open_windows if k[2] <= closed):
            sensor, start, end = key
            values = open_windows.pop(key)
            head = [sensor] if grouped else []
            out.append(head + [start, end, aggregate(values)])
    return out, late


def by_session(path, batch, gap, delay, lateness, aggregate, partitions=1, idle=None):
    """Per sensor: a reading at t opens [t, t + gap), and sessions that meet
    (one's start at or before the other's end) merge; sessions close as
    time windows do. A reading is late only when its own session would
    have closed and it meets no open session (Flink's rule: late when
    every window it would belong to, merged, has closed)."""
    watermark = Watermark(delay, lateness, partitions, idle)
    sessions = {}
    late = []
    out = []

    for readings in batches(path, batch, partitions):
        closed_before = watermark.closed_through()
        seen = {}
        for partition, (sensor, ts, value) in readings:
            see(seen, partition, ts)
            start, end, values = ts, ts + gap, [value]
            meets = [s for s in sessions.get(sensor, []) if s[0] <= end and start <= s[1]]
            if end <= closed_before and not meets:
                late.append([sensor, ts, value])
                continue
            apart = []
            for s in sessions.get(sensor, []):
                if s[0] <= end and start <= s[1]:
                    start, end, values = min(start, s[0]), max(end, s[1]), values + s[2]
                else:
                    apart.append(s)
            sessions[sensor] = apart + [(start, end, values)]
        watermark.end_batch(seen)
        closed = watermark.closed_through()
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
    def run(path, batch, partitions):
        windows, late = kind(path, batch, partitions)
        return [w[:-1] + t for w in windows for t in w[-1]], late
    return run


# Each kind over (file, batch size, spout partitions).
KINDS = {
    "count-tumbling": lambda p, b, n: by_count(p, b, 3, 3, sum, n),
    "count-sliding": lambda p, b, n: by_count(p, b, 4, 2, joined, n),
    "count-sliding-sum": lambda p, b, n: by_count(p, b, 50, 20, sum, n),
    "time-tumbling": lambda p, b, n: by_time(p, b, 1_000, 1_000, 300, 200, max, partitions=n),
    "time-sliding": lambda p, b, n: by_time(p, b, 1_000, 250, 150, 0, joined, partitions=n),
    "time-all": lambda p, b, n: by_time(p, b, 500, 500, 100, 0, len, grouped=False, partitions=n),
    "time-skew": lambda p, b, n: by_time(p, b, 1_000, 1_000, 0, 0, sum, partitions=n, idle=5_000),
    "time-held": lambda p, b, n: by_time(p, b, 1_000, 1_000, 0, 0, sum, partitions=n),
    "session-greatest": lambda p, b, n: by_session(p, b, 150, 300, 100, max, n),
    "session-sum": lambda p, b, n: by_session(p, b, 120, 200, 0, sum, n),
    "session-flink": lambda p, b, n: by_session(p, b, 5_000, 2_000, 3_000, sum, n),
    "count-general": lambda p, b, n: by_count(p, b, 4, 2, joined, n),
    "time-general": spread(lambda p, b, n: by_time(p, b, 1_000, 500, 300, 0, extremes, partitions=n)),
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
    expect.add_argument("--parallelism", type=int, default=1)
    expect.add_argument("--clock", action="append", default=[])
    expect.add_argument("file")
    args = parser.parse_args()
    if args.command == "generate":
        generate(args.seed, args.n, args.o)
    else:
        if args.kind in PROCESSING_TIME:
            windows, late = PROCESSING_TIME[args.kind](args.file, args.batch, pinned(args.clock))
        else:
            windows, late = KINDS[args.kind](args.file, args.batch, args.parallelism)
        print(json.dumps({"windows": windows, "late": len(late), "late_readings": late}))


if __name__ == "__main__":
    main()
