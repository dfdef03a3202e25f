#!/usr/bin/env python3
"""Writes batches.json: packed batches encoded independently of any SDK, with
the rows they hold. Every SDK's codec tests decode and re-encode them."""
import json
import struct

def value(v):
    kind, x = next(iter(v.items()))
    if kind == "null": return b"\x00"
    if kind == "bool": return b"\x02" if x else b"\x01"
    if kind == "i64": return b"\x03" + struct.pack("<q", x)
    if kind == "f64": return b"\x04" + struct.pack("<d", x)
    if kind == "str":
        b = x.encode("utf-8"); return b"\x05" + struct.pack("<I", len(b)) + b
    if kind == "bytes":
        b = bytes.fromhex(x); return b"\x06" + struct.pack("<I", len(b)) + b
    raise ValueError(kind)

def batch(arity, rows):
    out = struct.pack("<II", len(rows), arity)
    for tag, values in rows:
        assert len(values) == arity
        out += struct.pack("<I", tag) + b"".join(value(v) for v in values)
    return out

CASES = [
    ("empty", 1, []),
    ("sentences", 1, [[0, [{"str": "the cat sat"}]], [1, [{"str": ""}]]]),
    ("every-kind", 6, [[7, [{"null": None}, {"bool": True}, {"i64": -9007199254740993},
                            {"f64": -0.5}, {"str": "grüße ✓"}, {"bytes": "00ff10"}]],
                       [4294967295, [{"bool": False}, {"i64": 0}, {"f64": 1e300},
                                     {"i64": 9223372036854775807}, {"null": None}, {"bytes": ""}]]]),
    ("grouped-words", 1, [[0, [{"str": "w1"}]], [1, [{"str": "w2"}]], [0, [{"str": "w1"}]]]),
]

cases = [{"name": n, "hex": batch(a, r).hex(), "arity": a, "rows": r} for n, a, r in CASES]
with open("batches.json", "w") as f:
    json.dump(cases, f, indent=1, ensure_ascii=False)
    f.write("\n")
