#!/usr/bin/env python3
"""floor_ab.py - builds of k3's tokenizer compared in the floor's own setting: every k3 call
(new text, one thread) comes right after a tiktoken call on the same text, as in floor_pairs.py,
whose tiktoken call leaves the caches full of its own data. tok_ab (ab_libs.sh) alternates
only k3 builds, which leave each other's tables in L3; this measures what a change is worth
where the floor is measured.

    floor_ab.py --data ../shared/data --text long_1m.txt [--rounds 12] [--between tt|none] A.so B.so ...

Each round calls every library once, in an order that rotates from round to round, each call
after one tiktoken call (--between none: after nothing, the libraries' calls back to back).
Prints each library's median and best k3 time, tiktoken's median, and each library's median
over the rounds of its time over the first library's in the same round. Ids are checked
against the reference first (every library)."""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--between", choices=("tt", "none"), default="tt")
    ap.add_argument("libs", nargs="+")
    args = ap.parse_args()
    import kimi_ref
    from floor_pairs import K3
    enc = kimi_ref.load_data(args)
    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    data = text.encode("utf-8")
    ref = kimi_ref.encode(enc, text, allow_special=False)
    libs = [K3(p, args.model, args.config) for p in args.libs]
    for p, k in zip(args.libs, libs):
        if k.encode(data, keep=True)[1] != ref:
            sys.exit(f"floor_ab.py: {p}: ids differ from the reference")
    enc.encode_ordinary(text)
    t_k3 = [[] for _ in libs]
    t_tt = []
    for r in range(args.rounds):
        for j in range(len(libs)):
            k = (j + r) % len(libs)
            if args.between == "tt":
                t0 = time.perf_counter()
                res = enc.encode_ordinary(text)
                t_tt.append(time.perf_counter() - t0)
                del res
            t_k3[k].append(libs[k].encode(data)[0])
    print(f"# floor_ab: {os.path.basename(args.text)}, {len(data) / 1e6:.2f} MB, {len(ref)} ids; {args.rounds} rounds, "
          f"each k3 call after {'a tiktoken call' if args.between == 'tt' else 'the last k3 call'}")
    if t_tt:
        print(f"# tiktoken median {statistics.median(t_tt) * 1e3:.2f} ms")
    for p, ts in zip(args.libs, t_k3):
        rel = statistics.median(a / b for a, b in zip(ts, t_k3[0]))
        print(f"# {os.path.basename(p)}: median {statistics.median(ts) * 1e3:.2f} ms, best {min(ts) * 1e3:.2f} ms, "
              f"over the first {rel - 1:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
