#!/usr/bin/env python3
"""check_codepoints.py - every code point (U+0000..U+10FFFF, no surrogates) in contexts that
expose its class to the pre-tokenizer (after and before cased letters, as a prefix, next to
digits, Han and a contraction, doubled, in whitespace), through the C tokenizer and the
reference. A code point whose generated Unicode class differs from the reference's regex
engine changes piece boundaries here, hence ids. Exits 1 on a difference and names the code
points.

    check_codepoints.py --tok-batch BUILD/tests/tokenizer/tok_batch --data ../shared/data"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_ids  # noqa: E402
import kimi_ref  # noqa: E402

GROUP = 64


def context(c):
    return f"Ab{c}cD {c}{c}1{c}'S中{c}x\t{c}a \u0301{c}!{c}\r\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok-batch", required=True)
    ap.add_argument("--data", required=True)
    args = ap.parse_args()
    enc = kimi_ref.load_data(args)
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000]
    groups = [cps[i:i + GROUP] for i in range(0, len(cps), GROUP)]
    texts = ["".join(context(chr(cp)) for cp in g) for g in groups]
    got, _ = check_ids.run_batch(args, "plain", 1, [t.encode() for t in texts])
    bad = []
    for g, t, ids in zip(groups, texts, got):
        if ids != enc.encode_ordinary(t):  # < 25,000 chars: the wrapper's cuts do nothing
            bad.extend(cp for cp in g if check_ids.run_batch(args, "plain", 1, [context(chr(cp)).encode()])[0][0]
                       != enc.encode_ordinary(context(chr(cp))))
    print(f"{'FAIL' if bad else 'PASS'}: {len(cps)} code points, {len(bad)} classified differently"
          + (": " + " ".join("U+%04X" % cp for cp in bad[:40]) if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
