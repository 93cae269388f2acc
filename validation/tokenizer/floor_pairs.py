#!/usr/bin/env python3
"""floor_pairs.py - the acceptance floor (k3 against tiktoken, one thread, the 1M-token input)
with both tokenizers in one process and their calls interleaved, so that every pair of calls
meets the same state of a shared machine (bench.py's rounds time each side in its own process,
seconds apart, and a host whose L3 is taken by neighbours for a few seconds moves one side of a
round and not the other).

    floor_pairs.py --lib K3.so --data ../shared/data --text long_1m.txt [--pairs 24] [--parts]

K3.so: the tokenizer as a shared library (tok_so.sh). Run it pinned to one core (taskset -c 0).
Each pair times one k3 call on new text (its kept memos emptied first, untimed: k3_tok_forget)
and one tiktoken call (Encoding.encode_ordinary, the same baseline as bench.py), in turns
k3-first and tiktoken-first; neither is charged for freeing its result. k3's ids are checked
against the reference (tiktoken behind the Kimi wrapper's cuts, kimi_ref.py) first. Prints
each pair's ratio, their median and range, and how many pairs reach 10x.

--parts: then the same for each of the long input's categories alone (bench.py builds it from
LONG_BLOCK characters of each of LONG_PARTS in turn; part k is blocks k, k + 8, ...): where in
the floor's input k3 is furthest from tiktoken (run 107). Each part's ids are checked too."""
import argparse
import ctypes
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


class Ids(ctypes.Structure):
    _fields_ = [("ids", ctypes.POINTER(ctypes.c_int32)), ("n", ctypes.c_size_t), ("cap", ctypes.c_size_t)]


class K3:
    """k3's tokenizer from a shared library: load, encode (plain text), forget."""

    def __init__(self, lib, model, config):
        self.lib = ctypes.CDLL(lib)
        self.lib.k3_tok_load_files.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                               ctypes.c_char_p, ctypes.c_char_p]
        self.lib.k3_tok_encode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                           ctypes.c_void_p, ctypes.POINTER(Ids)]
        self.lib.k3_tok_encode.restype = None
        self.lib.k3_tok_ids_free.argtypes = [ctypes.POINTER(Ids)]
        self.lib.k3_tok_forget.argtypes = [ctypes.c_void_p]
        self.tok = ctypes.c_void_p()
        err = ctypes.create_string_buffer(4096)  # struct k3_err: one message buffer
        if self.lib.k3_tok_load_files(ctypes.byref(self.tok), model.encode(), config.encode(), err):
            sys.exit(f"floor_pairs.py: {lib}: {err.value.decode(errors='replace')}")

    def encode(self, data, keep=False, before=None):
        """(seconds, ids or None) of one call on new text; before() runs between the forget and
        the call (untimed)."""
        self.lib.k3_tok_forget(self.tok)
        if before:
            before()
        ids = Ids()
        t0 = time.perf_counter()
        self.lib.k3_tok_encode(self.tok, data, len(data), 0, None, ctypes.byref(ids))
        dt = time.perf_counter() - t0
        out = ids.ids[:ids.n] if keep else None
        self.lib.k3_tok_ids_free(ctypes.byref(ids))
        return dt, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--text", required=True, help="the input file (bench.py --save-inputs writes long_1m.txt)")
    ap.add_argument("--pairs", type=int, default=24)
    ap.add_argument("--parts", action="store_true", help="also each category of the long input alone")
    ap.add_argument("--thrash", type=int, default=0, metavar="MiB",
                    help="before every timed call (each side's), write a line of every 64 bytes of a buffer "
                         "this large, so that neither call finds what came before it in the caches (for k3 "
                         "after its forget, which writes its memos' seeds: run 131)")
    args = ap.parse_args()
    import corpus
    import kimi_ref
    enc = kimi_ref.load_data(args)
    k3 = K3(args.lib, args.model, args.config)
    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    data = text.encode("utf-8")
    ref = kimi_ref.encode(enc, text, allow_special=False)
    _, ids = k3.encode(data, keep=True)
    if ids != ref:
        sys.exit("floor_pairs.py: k3's ids differ from the reference")
    # lazy initialisation of both on text that shares no word with the input
    syn = corpus.synthetic(50_000, seed=99)
    warm = syn["base64"] + syn["digits"]
    enc.encode_ordinary(warm)
    k3.encode(warm.encode())
    r = enc.encode_ordinary(text)  # tiktoken: its later calls, as bench.py times it
    del r
    ratios = []
    print(f"# floor, interleaved: {os.path.basename(args.text)}, {len(data) / 1e6:.2f} MB, {len(ref)} ids; "
          f"{args.pairs} pairs of one k3 call (new text) and one tiktoken call in one process")
    before = thrasher(args.thrash)
    if before:
        print(f"# each call after a write of {args.thrash} MiB")
    for i, (t_k3, t_tt) in enumerate(timed_pairs(k3, enc, text, data, args.pairs, before)):
        ratios.append(t_tt / t_k3)
        print(f"#   pair {i + 1}: k3 {t_k3 * 1e3:.2f} ms, tiktoken {t_tt * 1e3:.2f} ms: {t_tt / t_k3:.1f}x", flush=True)
    print(f"# floor, interleaved: median {statistics.median(ratios):.1f}x (range {min(ratios):.1f}x .. "
          f"{max(ratios):.1f}x); {sum(r >= 10 for r in ratios)} of {len(ratios)} pairs at 10x or more")
    if args.parts:
        parts(k3, enc, kimi_ref, text, max(3, args.pairs // 2), before)
    return 0


def thrasher(mib):
    """None, or a function that writes a line of every 64 bytes of a buffer of mib MiB."""
    if not mib:
        return None
    buf = bytearray(mib << 20)
    view = memoryview(buf)
    ones = bytes([1]) * ((mib << 20) // 64)

    def touch():
        view[::64] = ones
    return touch


def timed_pairs(k3, enc, text, data, n, before=None):
    """n pairs of one k3 call (new text) and one tiktoken call, k3 first in even pairs and
    tiktoken first in odd ones: each pair's (k3 seconds, tiktoken seconds). before: run before
    each timed call (untimed)."""
    for i in range(n):
        for side in (("k3", "tt") if i % 2 == 0 else ("tt", "k3")):
            if side == "k3":
                t_k3, _ = k3.encode(data, before=before)
            else:
                if before:
                    before()
                t0 = time.perf_counter()
                r = enc.encode_ordinary(text)
                t_tt = time.perf_counter() - t0
                del r
        yield t_k3, t_tt


def pairs_of(k3, enc, text, data, n, before=None):
    """Medians of n interleaved pairs: (k3 seconds, tiktoken seconds, ratio)."""
    ts = list(timed_pairs(k3, enc, text, data, n, before))
    return (statistics.median(a for a, _ in ts), statistics.median(b for _, b in ts),
            statistics.median(b / a for a, b in ts))


def parts(k3, enc, kimi_ref, text, n, before=None):
    """The long input's categories alone, n interleaved pairs each."""
    from bench import LONG_BLOCK, LONG_PARTS
    k = len(LONG_PARTS)
    print(f"# the parts: blocks of {LONG_BLOCK} characters in turn, {n} pairs each; a part's k3 time is "
          f"its share of the sum of the parts'")
    rows = []
    for i, name in enumerate(LONG_PARTS):
        t = "".join(text[b:b + LONG_BLOCK] for b in range(i * LONG_BLOCK, len(text), k * LONG_BLOCK))
        if not t:  # a text shorter than the parts
            continue
        d = t.encode("utf-8")
        _, ids = k3.encode(d, keep=True)
        if ids != kimi_ref.encode(enc, t, allow_special=False):
            sys.exit(f"floor_pairs.py: k3's ids differ from the reference on part {name}")
        rows.append((name, len(d), len(ids)) + pairs_of(k3, enc, t, d, n, before))
    total = sum(r[3] for r in rows)
    for name, nb, ni, tk, tt, r in rows:
        print(f"#   {name:9s} {nb / 1e6:5.2f} MB {ni:7d} ids: k3 {tk * 1e3:6.2f} ms ({tk / max(ni, 1) * 1e9:5.1f} ns an id, "
              f"{tk / total:4.0%}), tiktoken {tt * 1e3:7.2f} ms ({tt / max(ni, 1) * 1e9:5.1f} ns an id): {r:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
