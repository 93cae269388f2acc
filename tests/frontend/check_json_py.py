"""check_json_py.py - k3's JSON writer (src/frontend/json_py.c) against Python's json.dumps
on random documents: ensure_ascii=False, both separator styles, with and without
sort_keys. Documents mix ints (to int64), floats chosen to hit repr edge cases (shortest
round trip, exponent thresholds 1e16 / 1e-4, subnormals, -0.0), strings with control
characters, quotes, backslashes, non-ASCII and astral characters, nesting and duplicate-free
keys in random order (keys without U+0000, which jansson refuses).

    check_json_py.py --batch BUILD/tests/frontend/json_py_batch [--docs 10000] [--seed 1]
"""
import argparse
import json
import math
import random
import struct
import subprocess
import sys


def rand_float(r):
    k = r.randrange(9)
    if k == 0:
        return struct.unpack("<d", struct.pack("<Q", r.getrandbits(64)))[0]
    if k == 1:
        return r.choice([0.0, -0.0, 0.1, 0.2, 0.3, 1.0, 1e16, 1e15, 9999999999999998.0, 1e-4,
                         1e-5, 0.0001234, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
                         1e22, 1e21, 123456789012345678.0, 0.5, 100.0, 1.5e300, 3.14159])
    if k == 2:
        return r.uniform(-1e6, 1e6)
    if k == 3:
        return float(r.randrange(-10**6, 10**6)) / r.choice([1, 10, 100, 1000, 3, 7])
    if k == 4:
        return r.random() * 10 ** r.randrange(-30, 30)
    if k == 5:
        return float(r.randrange(-2**53, 2**53))
    if k == 6:
        return 10.0 ** r.randrange(-20, 25)
    if k == 7:
        return -r.random() * 10 ** r.randrange(-320, 300)
    return round(r.uniform(-100, 100), r.randrange(0, 6))


CHARS = ["a", "Z", " ", '"', "\\", "/", "\n", "\r", "\t", "\b", "\f", "\x00", "\x01", "\x1f",
         "\x7f", "é", "中", "文", "\u2028", "\u3000", "😀", "\U0010fffd", "&", "<|open|>", "'"]


def rand_str(r):
    return "".join(r.choice(CHARS) for _ in range(r.randrange(0, 8)))


def rand_key(r):
    # jansson refuses U+0000 inside object keys (JSON_ALLOW_NUL covers values only), so a
    # request with such a key is a 400 before it reaches the writer; keys here avoid it.
    return rand_str(r).replace("\x00", "\x01")


def rand_value(r, depth=0):
    k = r.randrange(8 if depth < 4 else 6)
    if k == 0:
        return None
    if k == 1:
        return r.random() < 0.5
    if k == 2:
        return r.choice([0, -1, 1, 2**63 - 1, -2**63, r.randrange(-2**63, 2**63),
                         r.randrange(-1000, 1000)])
    if k == 3:
        f = rand_float(r)
        return f if math.isfinite(f) else 0.5
    if k == 4 or k == 5:
        return rand_str(r)
    if k == 6:
        return [rand_value(r, depth + 1) for _ in range(r.randrange(0, 5))]
    return {rand_key(r) + str(i): rand_value(r, depth + 1) for i in range(r.randrange(0, 5))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", required=True)
    ap.add_argument("--docs", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    r = random.Random(a.seed)
    docs = [rand_value(r) for _ in range(a.docs)]
    # The input the C side parses: Python's own output (finite floats round-trip exactly).
    inp = "".join(json.dumps(d, ensure_ascii=True) + "\n" for d in docs).encode()
    bad = 0
    for flags in range(4):
        compact, sort = flags & 1, flags & 2
        seps = (",", ":") if compact else (", ", ": ")
        out = subprocess.run([a.batch, str(flags)], input=inp, capture_output=True, check=True)
        lines = out.stdout.decode("utf-8").split("\n")[:-1]
        if len(lines) != len(docs):
            print(f"flags {flags}: {len(lines)} lines for {len(docs)} documents")
            return 1
        for d, got in zip(docs, lines):
            want = json.dumps(d, ensure_ascii=False, separators=seps, sort_keys=bool(sort))
            if got != want:
                bad += 1
                if bad <= 5:
                    print(f"flags {flags}:\n  python {want!r}\n  k3     {got!r}")
    n = 4 * len(docs)
    print(f"json_py vs json.dumps: {n - bad} of {n} identical ({len(docs)} documents x 4 styles)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
