#!/usr/bin/env python3
"""fuzz_diff.py - differential fuzz test: random strings from an alphabet chosen to hit every
branch of the Kimi pattern (cased letters, Lt/Lm/Lo, marks inside and outside words, Han
letters, digits and symbols, Python-only whitespace U+001C, CR/LF, contractions with 'ſ,
special-token fragments), plus arbitrary code points, through the C tokenizer and the
reference (kimi_ref.py), in both modes. Any difference fails and prints the string.

    fuzz_diff.py --tok-batch BUILD/tests/tokenizer/tok_batch --data ../shared/data [--cases N]"""
import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_ids  # noqa: E402
import kimi_ref  # noqa: E402

ALPHABET = (
    list("aAbZzsStTrReEvVmMlLdD'''\"!?.,;:-_/\\()[]{}<>|=+*&^%$#@~`") +
    list("0123456789") +
    [" ", " ", " ", "\t", "\n", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0",
     "\u3000", "\u2028", "\u200a", "\u180e", "\u200b"] +
    ["\u017f", "\u01c5", "\u1f88", "\u02b0", "\u3005", "\u0627", "\u3042", "\u30a2", "\uac00",
     "\u0e01", "\u00e9", "\u00c9", "\u0410", "\u0430", "\u03a3", "\u03c3", "\u0131", "\u0130",
     "\u1c8a", "\ua7cd", "\ua7cf", "\U0001e900", "\U0001e922"] +
    ["\u0301", "\u0e31", "\u093e", "\u20dd", "\u0300", "\U00016ff0", "\u302a"] +
    ["\u4e2d", "\u6587", "\u3007", "\u3021", "\u2e80", "\u2f00", "\U00016fe2", "\U00020000",
     "\U00031350", "\U0002ebf0", "\u3001", "\u30fc"] +
    ["\u0663", "\u2167", "\u00bd", "\u00b2", "\U0001d7ce", "\u09f4"] +
    ["\U0001F600", "\u200d", "\ufe0f", "\U0001F44D\U0001F3FD", "\u2764"] +
    ["<|open|>", "<|close|>", "[EOS]", "<|", "|>", "<|reserved_token_163600|>", "<osagent_mode>"])


CJK_RANGES = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x3040, 0x30FF),
              (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x3000, 0x303F)]
COMMON_HAN = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴切"


def rand_cjk(rng):
    """CJK text: mostly common characters, some rare ones (their merges rank high), kana,
    hangul, full-width forms and CJK punctuation, the characters-first path's cases."""
    out = []
    for _ in range(rng.choice([1, 2, 3, 5, 10, 20, 45, 120])):
        if rng.random() < 0.7:
            out.append(rng.choice(COMMON_HAN))
        else:
            lo, hi = rng.choice(CJK_RANGES)
            out.append(chr(rng.randrange(lo, hi + 1)))
        if rng.random() < 0.05:
            out.append(rng.choice(["，", "。", " ", "a", "1", "\n", "、", "」"]))
    return "".join(out)


def rand_string(rng):
    if rng.random() < 0.3:
        return rand_cjk(rng)
    n = rng.choice([0, 1, 2, 3, 5, 8, 13, 30, 60, 200])
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.08:
            out.append(chr(rng.choice([rng.randrange(0x80, 0x800), rng.randrange(0x800, 0xD800),
                                       rng.randrange(0xE000, 0x10000), rng.randrange(0x10000, 0x110000)])))
        elif r < 0.16:  # a run of one character: long letter, digit, space and Han runs
            out.append(rng.choice(ALPHABET) * rng.randrange(2, 12))
        else:
            out.append(rng.choice(ALPHABET))
    return "".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok-batch", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--cases", type=int, default=30000)
    ap.add_argument("--seed", type=int, default=12345)
    args = ap.parse_args()
    enc = kimi_ref.load_data(args)
    rng = random.Random(args.seed)
    texts = [rand_string(rng) for _ in range(args.cases)]
    bad = 0
    for mode, allow in (("plain", False), ("special", True)):
        got, _ = check_ids.run_batch(args, mode, 1, [t.encode("utf-8", "surrogatepass") for t in texts])
        for t, g in zip(texts, got):
            w = kimi_ref.encode(enc, t, allow_special=allow)
            if g != w:
                bad += 1
                if bad <= 10:
                    print(f"MISMATCH ({mode}) {t!r}\n  c:   {g}\n  ref: {w}", file=sys.stderr)
    print(f"{'FAIL' if bad else 'PASS'}: {bad} of {2 * len(texts)} random strings differ "
          f"(seed {args.seed})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
