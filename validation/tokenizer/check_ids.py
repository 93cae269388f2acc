#!/usr/bin/env python3
"""check_ids.py - the C tokenizer's ids against the reference (kimi_ref.py: tiktoken from
PyPI + the wrapper's cuts), on several MB of real and synthetic text, in both modes, on one
thread and on several; plus the round trip decode(encode(x)) == x.

    check_ids.py --tok-batch BUILD/tests/tokenizer/tok_batch --data ../shared/data [--mb 1.0]
Exits 1 on any mismatch, printing the category, the first differing token and the text
around it."""
import argparse
import os
import random
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import kimi_ref  # noqa: E402


def tok_batch(args, tail, data, count):
    """Runs tok_batch (args.tok_batch, args.model, args.config, then the arguments tail) on the
    packed cases data; returns the ids of its count cases and its stderr, which it shows."""
    p = subprocess.run([args.tok_batch, args.model, args.config] + tail, input=data,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = p.stderr.decode(errors="replace")
    sys.stderr.write(err.replace("chunks found", "# chunks found"))
    p.check_returncode()
    out, off = [], 0
    for _ in range(count):
        (n,) = struct.unpack_from("<I", p.stdout, off)
        off += 4
        out.append(list(struct.unpack_from("<%di" % n, p.stdout, off)))
        off += 4 * n
    return out, err


def chunks_found(err):
    """The count of tok_batch's "chunks found N" line (again and conv modes)."""
    return int(err.rsplit("chunks found", 1)[1])


def run_batch(args, mode, threads, texts, again=False):
    """(ids, found): the ids of texts from tok_batch, and None; again: each text's third call
    (its chunks found among the kept ones), and the number of chunks found."""
    data = b"".join(struct.pack("<I", len(t)) + t for t in texts)
    out, err = tok_batch(args, [mode, str(threads)] + (["again"] if again else []), data, len(texts))
    return out, chunks_found(err) if again else None


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def report(enc, name, text, got, want):
    i = first_diff(got, want)
    ctx = lambda ids: [enc.decode_single_token_bytes(t) for t in ids[max(0, i - 3):i + 4]]
    print(f"MISMATCH {name}: {len(got)} vs {len(want)} tokens, first difference at token {i}\n"
          f"  c:   {got[max(0, i - 3):i + 4]} {ctx(got)}\n"
          f"  ref: {want[max(0, i - 3):i + 4]} {ctx(want)}", file=sys.stderr)


def with_specials(text, rng, names):
    parts = text.split("\n")
    for _ in range(max(1, len(parts) // 20)):
        i = rng.randrange(len(parts))
        parts[i] = parts[i][:len(parts[i]) // 2] + rng.choice(names) + parts[i][len(parts[i]) // 2:]
    return "\n".join(parts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok-batch", required=True)
    ap.add_argument("--data", required=True, help="the shared data dir (kimi-tokenizer/, kimi-k3/)")
    ap.add_argument("--mb", type=float, default=1.0, help="MB per real category")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    enc = kimi_ref.load_data(args)
    cap = int(args.mb * 1e6)
    cats = corpus.build(cap, max(200_000, cap // 3), seed=7)
    bad = 0
    for name, text in cats.items():
        if not isinstance(text, bytes) and len(text.encode()) < corpus.MIN_REAL_BYTES:
            print(f"FAIL {name}: only {len(text.encode())} bytes of text on this machine; install "
                  f"the packages in .ci/apt-packages.txt", file=sys.stderr)
            bad += 1
    # Cases: (name, bytes for C, str for the reference)
    cases = []
    for name, text in cats.items():
        if isinstance(text, bytes):
            cases.append((name, text, text.decode("utf-8", errors="replace")))
        else:
            cases.append((name, text.encode(), text))
    all_text = "".join(t for _, _, t in cases)
    cases.append(("all_concatenated", all_text.encode(), all_text))  # > 400k chars: slices
    rng = random.Random(3)
    names = [enc.decode([i]) for i in range(enc.n_vocab - 256, enc.n_vocab)]
    spec = [(n + "+specials", with_specials(t, rng, names)) for n, _, t in cases[:6]]
    t0 = time.time()
    want_plain = [kimi_ref.encode(enc, t, allow_special=False) for _, _, t in cases]
    want_spec = [kimi_ref.encode(enc, t, allow_special=True) for _, t in spec]
    t_ref = time.time() - t0
    total = sum(len(b) for _, b, _ in cases)
    print(f"# {len(cases)} texts, {total / 1e6:.1f} MB, {sum(map(len, want_plain))} tokens; "
          f"reference {t_ref:.1f} s")
    print(f"# {'case':<22} {'mode':<14} {'threads':>7} {'bytes':>10} {'tokens':>9}  result")
    # the third pass: each text three times in one process, the third call's ids (the kept
    # chunks, tok_chunks.c), which must have found chunks
    for threads, again in ((1, False), (args.threads, False), (1, True)):
        plain = [b for _, b, _ in cases]
        got_plain, found = run_batch(args, "plain", threads, plain, again)
        got_spec, _ = run_batch(args, "special", threads, [t.encode() for _, t in spec], again)
        if again and not found:
            print("FAIL: the third calls found no kept chunk", file=sys.stderr)
            bad += 1
        rows = [(n, "plain", b, g, w) for (n, b, _), g, w in zip(cases, got_plain, want_plain)]
        rows += [(n, "special", t.encode(), g, w) for (n, t), g, w in zip(spec, got_spec, want_spec)]
        for name, mode, b, got, want in rows:
            ok = got == want
            # Round trip: the ids' bytes are the (sanitized) input.
            rt = b"".join(enc.decode_single_token_bytes(i) for i in got)
            ok_rt = rt == b.decode("utf-8", errors="replace").encode()
            print(f"  {name:<22} {mode + ('/again' if again else ''):<14} {threads:>7} {len(b):>10} {len(want):>9}  "
                  f"{'ok' if ok else 'MISMATCH'}{'' if ok_rt else ' ROUNDTRIP-FAIL'}")
            if not ok:
                report(enc, name, b, got, want)
            bad += (not ok) + (not ok_rt)
    # Plain mode must not recognize specials; special mode must.
    if not any(i >= enc.n_vocab - 256 for i in want_spec[0]):
        print("FAIL: the special-token cases contain no special token", file=sys.stderr)
        bad += 1
    print(f"{'FAIL' if bad else 'PASS'}: {bad} failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
