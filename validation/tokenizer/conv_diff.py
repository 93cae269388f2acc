#!/usr/bin/env python3
"""conv_diff.py - a server's calls against the reference (kimi_ref.py), all in one process:
conversations re-sent with their history in special mode (K3 message framing), their user
messages alone in plain mode, edits in the middle of a history, a system prompt shared by
conversations, the same text in the other mode, calls on the pool and on one thread, and
k3_tok_forget now and then. Each call's ids must equal the reference's, whatever earlier
calls left in the kept memos and chunks (tok_chunks.c), which the other checks only see
within one mode. The text mixes real text, random code points of many scripts, invalid
UTF-8 and special-token names (text in plain mode).

    conv_diff.py --tok-batch BUILD/tests/tokenizer/tok_batch --data ../shared/data \\
        [--seed N] [--calls N] [--budget BYTES]
Exits 1 on any mismatch (printing the call and the first differing token) or when no call
found a kept chunk."""
import argparse
import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_ids  # noqa: E402
import corpus  # noqa: E402
import kimi_ref  # noqa: E402

# Code point ranges the random text draws from: ASCII, Latin, Greek, Cyrillic, Hebrew and
# Arabic, Devanagari, Thai, Hangul jamo, punctuation and spaces, CJK symbols and kana, Han,
# Hangul, fullwidth forms, emoji, supplementary Han, C0 controls, combining marks, any plane.
SCRIPTS = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
           (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x3000, 0x30FF),
           (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF),
           (0x20000, 0x2A6DF), (0x0, 0x1F), (0x300, 0x36F), (0x10000, 0x10FFFF)]
SEPARATORS = [" ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "123456", "\u3000", "\x1c", "\x85"]
INVALID = [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe4\xb8", b"\x80\x80", b"\xf4\x90\x80\x80",
           b"\xf0\x9f\x98"]


class Gen:
    def __init__(self, rng, docs, names):
        self.rng, self.docs, self.names = rng, docs, names

    def random_text(self, n):
        out = []
        while len(out) < n:
            lo, hi = self.rng.choice(SCRIPTS)
            c = self.rng.randrange(lo, hi + 1)
            if 0xD800 <= c <= 0xDFFF:
                continue
            out.append(chr(c))
            if self.rng.random() < 0.15:
                out.append(self.rng.choice(SEPARATORS))
        return "".join(out)

    def message(self, n):
        """About n characters of text, as bytes (sometimes not valid UTF-8)."""
        r = self.rng.random()
        if r < 0.55:
            d = self.rng.choice(self.docs)
            i = self.rng.randrange(max(1, len(d) - n))
            b = d[i:i + n].encode()
        elif r < 0.85:
            b = self.random_text(n).encode()
        elif r < 0.95:
            b = bytearray(self.random_text(n).encode())
            for _ in range(self.rng.randrange(1, 6)):
                i = self.rng.randrange(len(b) + 1)
                b[i:i] = self.rng.choice(INVALID)
            b = bytes(b)
        else:
            b = (self.rng.choice([" ", "a", "\n", "1", "\u4e2d", "\u00e9"]) * n).encode()
        if self.rng.random() < 0.2:  # a special token's name, plain text in plain mode
            i = self.rng.randrange(len(b) + 1)
            b = b[:i] + self.rng.choice(self.names).encode() + b[i:]
        return b

    def size(self):
        return self.rng.choice([20, 100, 300, 700, 2000, 5000, 17000, 40000])


def calls(gen, n_calls, max_history):
    """(flags, bytes) for each call: bit 0 special mode, bit 1 the pool, bit 2 forget first."""
    rng = gen.rng
    system = gen.message(3000)
    frame = [n.encode() for n in gen.names[:8]]  # stand-ins for the role markers
    out, history = [], b""
    while len(out) < n_calls:
        r = rng.random()
        if r < 0.1 or len(history) > max_history:  # a new conversation, same system prompt
            history = frame[0] + system + frame[1]
        user = gen.message(gen.size())
        pool = int(rng.random() < 0.4) << 1
        out.append((0 | pool, user))  # the user's text alone, plain
        if rng.random() < 0.15 and len(history) > 100:  # an edit: the history changes inside
            i = rng.randrange(len(history))
            history = history[:i] + gen.message(gen.size()) + history[i:]
        history += frame[rng.randrange(2, 8)] + user + frame[1]
        forget = int(rng.random() < 0.05) << 2
        out.append((1 | pool | forget, history))  # the whole conversation, specials recognised
        if rng.random() < 0.25:
            out.append((1 | (pool ^ 2), history))  # again, the pool the other way
        if rng.random() < 0.15:
            out.append((0 | pool, history))  # the same bytes in the other mode
        history += gen.message(gen.size())  # the model's answer
    return out[:n_calls]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok-batch", required=True)
    ap.add_argument("--data", required=True, help="the shared data dir (kimi-tokenizer/, kimi-k3/)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--max-history", type=int, default=300_000, help="bytes of a conversation")
    ap.add_argument("--budget", type=int, help="k3_tok_chunk_budget (default: the tokenizer's)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    enc = kimi_ref.load_data(args)
    rng = random.Random(args.seed)
    real = corpus.real(200_000)
    docs = [v for v in real.values() if isinstance(v, str) and len(v) > 1000]
    if not docs:
        print("FAIL: no real text on this machine; install .ci/apt-packages.txt", file=sys.stderr)
        return 1
    names = [enc.decode([i]) for i in range(enc.n_vocab - 256, enc.n_vocab)]
    rng.shuffle(names)
    cases = calls(Gen(rng, docs, names), args.calls, args.max_history)
    data = b"".join(struct.pack("<BI", f, len(b)) + b for f, b in cases)
    tail = ["conv", str(args.threads)] + ([str(args.budget)] if args.budget is not None else [])
    ids, err = check_ids.tok_batch(args, tail, data, len(cases))
    found = check_ids.chunks_found(err)
    bad, total = 0, 0
    for k, ((flags, b), got) in enumerate(zip(cases, ids)):
        want = kimi_ref.encode(enc, b.decode("utf-8", errors="replace"), allow_special=bool(flags & 1))
        total += len(b)
        if got != want:
            bad += 1
            check_ids.report(enc, f"call {k} (flags {flags}, {len(b)} bytes)", b, got, want)
    print(f"# {len(cases)} calls, {total / 1e6:.1f} MB, chunks found {found}, "
          f"seed {args.seed}, budget {args.budget if args.budget is not None else 'default'}")
    if not found:
        print("FAIL: no call found a kept chunk", file=sys.stderr)
        bad += 1
    print(f"{'FAIL' if bad else 'PASS'}: {bad} failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
