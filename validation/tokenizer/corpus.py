"""corpus.py - real and synthetic text for the tokenizer checks and the benchmark, built at
run time from files every Debian machine with the CI packages has (.ci/apt-packages.txt:
man pages, gettext catalogs, headers, the Python standard library, minified jQuery), so
nothing is copied into the repository. Deterministic for a given machine and seed.

Categories (each a str; `build(max_bytes)` caps each real one):
  prose_en   English man pages (roff) and Python docs strings
  code_c     C headers;  code_py  Python stdlib;  code_js  minified JavaScript
  zh, ja, ko Chinese / Japanese / Korean: gettext catalogs (msgstr) and man pages
  mixed      Russian, Arabic, Hindi, Thai, Vietnamese, ... catalogs interleaved with English
  emoji, digits, spaces, base64, random_unicode, random_bytes (bytes: decode with replace)
"""
import base64
import glob
import gettext
import gzip
import os
import random

MIN_REAL_BYTES = 30_000  # a category smaller than this means the machine lacks its packages


def _read(path):
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None


def _collect(paths, cap):
    out, n = [], 0
    for p in sorted(set(paths)):
        t = _read(p)
        if not t:
            continue
        out.append(t)
        n += len(t.encode())
        if n >= cap:
            break
    return "\n".join(out)


def _catalog(langs, cap, with_ids=False):
    out, n = [], 0
    for lang in langs:
        for p in sorted(glob.glob(f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo")):
            try:
                with open(p, "rb") as f:
                    cat = gettext.GNUTranslations(f)._catalog
            except Exception:
                continue
            for k in sorted(cat, key=str):
                v = cat[k]
                if not isinstance(v, str) or not v:
                    continue
                if with_ids and isinstance(k, str):
                    out.append(k)
                out.append(v)
                n += len(v.encode())
            if n >= cap:
                return "\n".join(out)
    return "\n".join(out)


def real(cap):
    man = lambda lang: glob.glob(f"/usr/share/man/{lang}/man*/*.gz")
    cats = {
        "prose_en": _collect(glob.glob("/usr/share/man/man*/*.gz"), cap),
        "code_c": _collect(glob.glob("/usr/include/*.h") + glob.glob("/usr/include/*/*.h"), cap),
        "code_py": _collect(glob.glob("/usr/lib/python3*/*.py"), cap),
        "code_js": _collect(glob.glob("/usr/share/javascript/*/*.min.js") +
                            glob.glob("/usr/share/javascript/*/*/*.min.js"), cap),
        "zh": _collect(man("zh_CN") + man("zh_TW"), cap // 2) + "\n" +
              _catalog(["zh_CN", "zh_TW"], cap // 2),
        "ja": _collect(man("ja"), cap // 2) + "\n" + _catalog(["ja"], cap // 2),
        "ko": _collect(man("ko"), cap // 2) + "\n" + _catalog(["ko"], cap // 2),
        "mixed": _catalog(["ru", "ar", "hi", "th", "vi", "uk", "el", "he", "fa", "ka", "am",
                           "ta", "bn", "de", "fr", "tr"], cap, with_ids=True),
    }
    return cats


EMOJI = ([chr(c) for c in range(0x1F300, 0x1F650)] + [chr(c) for c in range(0x1F900, 0x1FA00)] +
         ["\u2764\ufe0f", "\U0001F468\u200d\U0001F469\u200d\U0001F467", "\U0001F44D\U0001F3FD",
          "\U0001F1EF\U0001F1F5", "#\ufe0f\u20e3"])


def _fill(nbytes, gen):
    out, n = [], 0
    while n < nbytes:
        x = gen()
        out.append(x)
        n += len(x.encode())
    return "".join(out)


def synthetic(nbytes, seed):
    rng = random.Random(seed)
    words = ["the", "token", "rate", "Kimi", "模型", "テスト", "데이터"]
    pool = [c for c in range(0x20, 0x30000) if not 0xD800 <= c < 0xE000]
    return {
        "emoji": _fill(nbytes, lambda: rng.choice(EMOJI) * rng.choice([1, 1, 1, 2, 3]) +
                       rng.choice(["", " ", "  ", "\n", " " + rng.choice(words) + " ", "!"])),
        "digits": _fill(nbytes, lambda: "".join(rng.choice("0123456789") for _ in
                                                range(rng.choice([1, 7, 40, 300, 3000]))) +
                        rng.choice([" ", ".", ",", "\n", "x", "٣", " 12"])),
        "spaces": _fill(nbytes, lambda: "".join(rng.choice(" \t\n\r\u3000\u00a0\x0b\x0c\x1c\x85")
                                                for _ in range(rng.choice([1, 2, 5, 100, 5000, 30000]))) +
                        rng.choice(["a", "word", "!", "1", "中", "\u0301"])),
        "base64": _fill(nbytes, lambda: base64.b64encode(rng.randbytes(rng.choice([30, 300, 3000, 60000])))
                        .decode() + rng.choice(["\n", " ", '"', "\n\n"])),
        "random_unicode": _fill(nbytes, lambda: chr(rng.choice(pool)) if rng.random() < 0.9
                                else chr(rng.randrange(0x30000, 0x110000))),
        "random_bytes": rng.randbytes(nbytes),
        "cuts": cuts_text(rng),
    }


def cuts_text(rng):
    """Runs around the wrapper's 25,000-character limit, of 1-, 2-, 3- and 4-byte characters,
    spaces that are multi-byte (U+3000, U+00A0, U+0085) or Python-only (U+001C), and more
    than 400,000 characters in all, so both cuts fall inside multi-byte text."""
    units = ["a", "\u00e9", "\u4e2d", "\U0001F600", "ab1", "\u0915\u094d"]
    spaces = [" ", "\u3000", "\u00a0", "\x85", "\x1c", "\t", "\n", " \u3000", "\u1680", "\u2003",
              "\u2028", "\u205f", "\u202f"]
    out = []
    for _ in range(40):
        u = rng.choice(units + spaces)
        k = rng.choice([24_998, 24_999, 25_000, 25_001, 25_002, 50_001, 7])
        run = (u * (k // len(u) + 1))[:k]
        out.append(run)
        out.append(rng.choice(units + spaces) * rng.randrange(1, 4))
    return "".join(out)


def build(cap_real, n_synth, seed=1):
    cats = real(cap_real)
    cats.update(synthetic(n_synth, seed))
    return cats
