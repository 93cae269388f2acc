#!/usr/bin/env python3
"""bench.py - k3's tokenizer against the published fast tokenizers, same machine, same texts,
same run: latency and MB/s on one thread and on all cores, ratios, and every tokenizer's ids
checked against the reference (tiktoken + the Kimi wrapper's cuts, kimi_ref.py).

    bench.py --tok-bench BUILD/validation/tokenizer/tok_bench --data ../shared/data
             [--threads N] [--min-seconds S] [--json out.json]

Each competitor runs in a fresh process per (thread count, input) (the Rust ones read
RAYON_NUM_THREADS at start; one-thread runs are also pinned to one core), is loaded before
timing and timed on the whole text per call: "cold" is its first call on the text (after one
call on unrelated base64/digit text, so lazy initialisation is not counted), "warm" the median of
later calls on the same text (caches full). k3 runs in tok_bench: its one-thread figures from
a process pinned to the same core as the competitors' one-thread runs, its all-core ones from a
second, unpinned process with an explicit pool; it keeps memos of pieces between calls (like
the competitors' caches), so its
"cold" is the median of calls each made after k3_tok_forget emptied them, and its "warm" the
median of calls that follow a call on the same text. Inputs (built at run time from
corpus.py's real text, never repeated unless the name says so): prose, code, cjk, mixed,
and long prompts of 10K, 200K and 1M Kimi tokens, plus 1M built from one repeated 200 KB
block (some tokenizers cache pieces). tiktoken is timed as Encoding.encode_ordinary (no
wrapper walk: the tougher baseline); k3 and the others are timed doing the full Kimi
encode, cuts included where they implement them. No one is timed freeing its result
(tiktoken's list of a million ints: about 2% of its call, 11-24 ms of 0.7-1.4 s on the busy
dev VM; until session 20 the warm calls' timing included it). With --k3-lib the floor is also measured with both
tokenizers in one process, their calls interleaved (floor_pairs.py)."""
import argparse
import array
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

COMPETITORS = ["tiktoken", "basetenkenizer", "gigatoken", "fastokens", "quicktok"]
# The long prompts: these real categories in turn, LONG_BLOCK characters of each.
LONG_PARTS = ("prose_en", "code_c", "zh", "code_py", "ja", "mixed", "ko", "code_js")
LONG_BLOCK = 2000


# ---- worker: one tokenizer, one thread count ---------------------------------------------

def load_competitor(name, model, config):
    """(make, encode, ids_of): make() builds a fresh tokenizer object (not timed), encode(obj,
    text) is the timed call, ids_of(result) gives a list of ids."""
    import kimi_ref
    enc = kimi_ref.load(model, config)
    specials = {enc.decode([i]): i for i in range(enc.n_vocab - 256, enc.n_vocab)}
    if name == "tiktoken":
        return (lambda: kimi_ref.load(model, config), lambda e, text: e.encode_ordinary(text),
                lambda r: r)
    if name == "basetenkenizer":
        import basetenkenizer
        d = tempfile.mkdtemp()
        os.symlink(model, os.path.join(d, "tiktoken.model"))
        os.symlink(config, os.path.join(d, "tokenizer_config.json"))
        js = basetenkenizer.tiktoken_model_to_tokenizer_json(d)
        return (lambda: basetenkenizer.Tokenizer.from_json_str(js),
                lambda tok, text: tok.encode_segments([(text, False)], tiktoken_safe=True),
                lambda r: list(r.ids))
    if name == "gigatoken":
        import gigatoken
        return (lambda: gigatoken.Tokenizer.from_tiktoken(model, pretokenizer="kimi",
                                                          special_tokens=specials),
                lambda tok, text: tok.encode(text), lambda r: [int(x) for x in r])
    if name == "fastokens":
        import fastokens
        from fastokens._tiktoken import split_like_tiktoken_text_piece
        return (lambda: fastokens.Tokenizer.from_tiktoken(model, pattern=kimi_ref.PAT_STR,
                                                          special_tokens=specials),
                lambda tok, text: tok.encode_segments(
                    [(p, False) for p in split_like_tiktoken_text_piece(text)]),
                lambda r: list(r.ids))
    if name == "quicktok":
        try:
            import quicktok
        except ImportError as e:
            raise RuntimeError(f"not installed here ({e}); PyPI quicktok 0.2.0 has no wheel "
                               "for this Python") from None
        raise RuntimeError("PyPI quicktok %s exposes only %s (a BPE trainer with its own save "
                           "format); it cannot load a tiktoken rank file or the Kimi pattern"
                           % (getattr(quicktok, "__version__", "0.2.0"),
                              [x for x in dir(quicktok) if not x.startswith("_")]))
    raise ValueError(name)


def worker(args):
    """One tokenizer, one thread count, one input, in a fresh process: after one call on
    unrelated text (lazy initialisation), the first call on the input is cold (no cache holds
    its words), the rest warm (the same text again)."""
    out = {"name": args.worker, "threads": args.threads, "input": args.input}
    try:
        make, encode, ids_of = load_competitor(args.worker, args.model, args.config)
        tok = make()
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        out["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(out))
        return 0
    with open(os.path.join(args.inputs, args.input), encoding="utf-8") as f:
        text = f.read()
    # Lazy initialisation (thread pools, tables) happens on a first call on unrelated text:
    # base64 and digits share no word with any input.
    import corpus
    syn = corpus.synthetic(50_000, seed=99)
    encode(tok, syn["base64"] + syn["digits"])
    t0 = time.perf_counter()
    r = encode(tok, text)
    cold = time.perf_counter() - t0
    with open(os.path.join(args.out, f"{args.worker}.{args.threads}.{args.input}.ids"), "w") as f:
        json.dump(ids_of(r), f)
    times, total = [], 0.0
    del r
    while len(times) < 3 or (total < args.min_seconds and len(times) < 200):
        t0 = time.perf_counter()
        r = encode(tok, text)
        dt = time.perf_counter() - t0
        del r  # freeing the result (a million Python ints) is the caller's time, not the tokenizer's
        times.append(dt)
        total += dt
    out["cold_s"] = cold
    out["warm_s"] = statistics.median(times)
    print(json.dumps(out))
    return 0


# ---- driver --------------------------------------------------------------------------------

def build_inputs(d, model, config):
    import corpus
    import kimi_ref
    enc = kimi_ref.load(model, config)
    real = corpus.real(1_500_000)
    for k in list(real):  # drop roff control lines from man pages: keep the prose
        real[k] = "\n".join(l for l in real[k].split("\n") if not l.startswith((".", "'\\\"")))
    inputs = {
        "prose": real["prose_en"][:1_000_000],
        "code": (real["code_c"][:400_000] + real["code_py"][:400_000] + real["code_js"][:200_000]),
        "cjk": real["zh"][:350_000] + real["ja"][:350_000] + real["ko"][:350_000],
        "mixed": real["mixed"][:1_000_000],
    }
    # The long-prompt pool: every real category, interleaved in LONG_BLOCK-character blocks.
    cats = [real[k] for k in LONG_PARTS]
    blocks, pos = [], [0] * len(cats)
    while any(p < len(c) for p, c in zip(pos, cats)):
        for i, c in enumerate(cats):
            if pos[i] < len(c):
                blocks.append(c[pos[i]:pos[i] + LONG_BLOCK])
                pos[i] += LONG_BLOCK
    pool = "".join(blocks)
    ids = enc.encode_ordinary(pool)
    for n, label in ((10_000, "long_10k"), (200_000, "long_200k"), (1_000_000, "long_1m")):
        if len(ids) < n:
            sys.exit(f"bench.py: only {len(ids)} tokens of real text on this machine; need {n}")
        inputs[label] = enc.decode(ids[:n])
    block = enc.decode(ids[:60_000])
    inputs["long_1m_repeated"] = (block * (1_000_000 // 60_000 + 2))
    rep_ids = enc.encode_ordinary(inputs["long_1m_repeated"])
    inputs["long_1m_repeated"] = enc.decode(rep_ids[:1_000_000])
    for k, v in inputs.items():
        with open(os.path.join(d, k + ".txt"), "w", encoding="utf-8") as f:
            f.write(v)
    return inputs


def floor_rounds(args, inp, out):
    """The acceptance floor measured in pairs: each round times k3 on long_1m (new text, one
    thread) and then tiktoken on it, back to back and pinned to the same core, so that a burst
    of load on a shared machine falls on both sides of a round's ratio rather than on one
    tokenizer's whole stretch. Prints every round's ratio and their median."""
    f = os.path.join(inp, "long_1m.txt")
    ratios = []
    print(f"# floor, paired: long_1m, one thread, {args.floor_rounds} rounds of k3 (median of calls on "
          "new text) then tiktoken (median of its later calls), both on core 0")
    for r in range(args.floor_rounds):
        d = os.path.join(out, f"floor{r}")
        os.makedirs(d, exist_ok=True)
        p = subprocess.run(["taskset", "-c", "0", args.tok_bench, args.model, args.config, "1",
                            str(args.min_seconds), d, f], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, check=True)
        k3 = json.loads(p.stdout.strip().split("\n")[-1])["st_s"]
        p = subprocess.run(["taskset", "-c", "0", sys.executable, __file__, "--worker", "tiktoken",
                            "--threads", "1", "--inputs", inp, "--input", "long_1m.txt", "--out", d,
                            "--data", args.data, "--min-seconds", str(args.min_seconds)],
                           stdout=subprocess.PIPE, text=True, check=True)
        tt = json.loads(p.stdout.strip().split("\n")[-1])["warm_s"]
        ratios.append(tt / k3)
        print(f"#   round {r + 1}: k3 {k3 * 1e3:.2f} ms, tiktoken {tt * 1e3:.2f} ms: {tt / k3:.1f}x", flush=True)
    print(f"# floor, paired: median of the rounds' ratios {statistics.median(ratios):.1f}x "
          f"(range {min(ratios):.1f}x .. {max(ratios):.1f}x)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok-bench")
    ap.add_argument("--data", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--min-seconds", type=float, default=1.0)
    ap.add_argument("--json")
    ap.add_argument("--only", default=",".join(COMPETITORS),
                    help="competitors to run (k3 always runs; naming it here is allowed)")
    ap.add_argument("--floor-rounds", type=int, default=5,
                    help="paired rounds of the acceptance floor (long_1m, one thread: k3 then "
                         "tiktoken back to back, each round's ratio); 0 skips them")
    ap.add_argument("--k3-lib", help="k3's tokenizer as a shared library (tok_so.sh): the floor also "
                    "with both tokenizers in one process, calls interleaved (floor_pairs.py)")
    ap.add_argument("--floor-pairs", type=int, default=24,
                    help="pairs of interleaved calls for floor_pairs.py (with --k3-lib); 0 skips them")
    ap.add_argument("--prebuilt", help="a directory of NAME.txt inputs made by --save-inputs")
    ap.add_argument("--save-inputs", help="build the inputs into this directory and stop")
    ap.add_argument("--worker")
    ap.add_argument("--inputs")
    ap.add_argument("--input")
    ap.add_argument("--out")
    args = ap.parse_args()
    args.model = os.path.join(os.path.abspath(args.data), "kimi-tokenizer/tiktoken.model")
    args.config = os.path.join(os.path.abspath(args.data), "kimi-k3/tokenizer_config.json")
    if args.worker:
        return worker(args)

    import kimi_ref
    tmp = tempfile.mkdtemp(prefix="k3_tokbench_")
    inp, out = os.path.join(tmp, "in"), os.path.join(tmp, "out")
    os.makedirs(inp)
    os.makedirs(out)
    t0 = time.time()
    if args.save_inputs:
        os.makedirs(args.save_inputs, exist_ok=True)
        build_inputs(args.save_inputs, args.model, args.config)
        return 0
    if args.prebuilt:
        inputs = {}
        for n in sorted(os.listdir(args.prebuilt)):
            if n.endswith(".txt"):
                with open(os.path.join(args.prebuilt, n), encoding="utf-8") as f:
                    inputs[n[:-4]] = f.read()
                with open(os.path.join(inp, n), "w", encoding="utf-8") as f:
                    f.write(inputs[n[:-4]])
    else:
        inputs = build_inputs(inp, args.model, args.config)
    enc = kimi_ref.load(args.model, args.config)
    ref = {k + ".txt": kimi_ref.encode(enc, v, allow_special=False) for k, v in inputs.items()}
    print(f"# inputs built and reference ids computed in {time.time() - t0:.1f} s; "
          f"{os.cpu_count()} CPUs, all-core runs use {args.threads} threads", flush=True)
    names = sorted(ref)
    results = {}  # (tokenizer, threads) -> {input: seconds}
    errors, parity = {}, {}

    # k3: the one-thread figures from a process on core 0, where every competitor's one-thread
    # run is (an unpinned process may move between cores and leave its memos behind: about
    # 1.3-1.7x slower on the GPU machine's host, run 14), the all-core ones from a second process
    # with its pool; cold: each call after k3_tok_forget; warm: after a call on the same text;
    # medians. Both processes' ids are checked.
    for threads in sorted({1, args.threads}):
        d_ids = os.path.join(out, f"k3.{threads}")
        os.makedirs(d_ids)
        cmd = [args.tok_bench, args.model, args.config, str(threads), str(args.min_seconds), d_ids] + \
              [os.path.join(inp, n) for n in names]
        if threads == 1:
            cmd = ["taskset", "-c", "0"] + cmd
        # the all-core process times only its pool: the one-thread figures come from the one above
        env = dict(os.environ, TOK_BENCH_POOL_ONLY="1" if threads > 1 else "0")
        p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, env=env)
        for line, n in zip(p.stdout.strip().split("\n"), names):
            d = json.loads(line)
            key = "st" if threads == 1 else "mt"
            results.setdefault(("k3", threads), {})[n] = {"cold_s": d[key + "_s"], "warm_s": d[key + "_warm_s"]}
            with open(os.path.join(d_ids, f"{names.index(n)}.ids"), "rb") as f:
                a = array.array("i")
                a.frombytes(f.read())
            ok = list(a) == ref[n] and d["mt_ids_equal"]
            parity.setdefault("k3", {})[n] = parity.get("k3", {}).get(n, True) and ok
    for name in [x for x in args.only.split(",") if x and x != "k3"]:
        for threads in sorted({1, args.threads}):
            if name == "tiktoken" and threads != 1:
                continue  # one text, one thread: tiktoken has no parallel path for it
            if name in errors:
                break
            env = dict(os.environ, RAYON_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
            for n in names:
                cmd = [sys.executable, __file__, "--worker", name, "--threads", str(threads),
                       "--inputs", inp, "--input", n, "--out", out, "--data", args.data,
                       "--min-seconds", str(args.min_seconds)]
                if threads == 1:
                    cmd = ["taskset", "-c", "0"] + cmd  # one core, whatever the library does
                p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=env)
                if p.returncode:
                    errors[name] = (p.stderr.strip().split("\n") or ["?"])[-1]
                    break
                d = json.loads(p.stdout.strip().split("\n")[-1])
                if "error" in d:
                    errors[name] = d["error"]
                    break
                results.setdefault((name, threads), {})[n] = {"cold_s": d["cold_s"], "warm_s": d["warm_s"]}
                if threads == 1 or n not in parity.get(name, {}):
                    with open(os.path.join(out, f"{name}.{threads}.{n}.ids")) as f:
                        parity.setdefault(name, {})[n] = json.load(f) == ref[n]
            print(f"# {name} on {threads} thread(s): done", flush=True)

    mb = {n: len(inputs[n[:-4]].encode()) / 1e6 for n in names}
    ntok = {n: len(ref[n]) for n in names}
    rows = []
    print("# latency: cold = the first call on the text in a fresh process (after one call on "
          "unrelated base64/digits for lazy initialisation; no cache holds its words), "
          "warm = median of later calls on the same text. k3: cold = median of calls each made "
          "after emptying its kept memos (k3_tok_forget), warm = median of calls after one on "
          "the same text.")
    print("# speedup = competitor latency / k3 latency at the same thread count (cold, and warm)")
    print(f"# {'input':<16} {'MB':>5} {'tokens':>8}  {'tokenizer':<14} {'thr':>3} {'cold ms':>9} "
          f"{'MB/s':>7} {'warm ms':>9} {'MB/s':>7}  {'k3 x cold':>9} {'k3 x warm':>9}  ids==ref")
    for n in names:
        for (tk, thr), res in sorted(results.items(), key=lambda x: (x[0][1], x[0][0] != "k3", x[0][0])):
            if n not in res:
                continue
            c, w = res[n]["cold_s"], res[n]["warm_s"]
            k3 = results[("k3", thr)][n]
            sc = "" if tk == "k3" else f"{c / k3['cold_s']:8.1f}x"
            sw = "" if tk == "k3" else f"{w / k3['warm_s']:8.1f}x"
            ok = parity.get(tk, {}).get(n)
            print(f"  {n[:-4]:<16} {mb[n]:>5.2f} {ntok[n]:>8}  {tk:<14} {thr:>3} {c * 1e3:>9.2f} "
                  f"{mb[n] / c:>7.1f} {w * 1e3:>9.2f} {mb[n] / w:>7.1f}  {sc:>9} {sw:>9}  "
                  f"{'yes' if ok else 'NO'}")
            rows.append({"input": n[:-4], "mb": mb[n], "tokens": ntok[n], "tokenizer": tk,
                         "threads": thr, "cold_s": c, "warm_s": w, "ids_equal_reference": ok})
        print()
    if ("tiktoken", 1) in results:
        # the acceptance figure: k3 on new text (cold) against tiktoken's best (warm)
        print("# k3 one thread vs tiktoken one thread:", ", ".join(
            f"{n[:-4]} {results[('tiktoken', 1)][n]['warm_s'] / results[('k3', 1)][n]['cold_s']:.1f}x"
            for n in names))
        print(f"# k3 {args.threads} threads vs tiktoken one thread:", ", ".join(
            f"{n[:-4]} {results[('tiktoken', 1)][n]['warm_s'] / results[('k3', args.threads)][n]['cold_s']:.1f}x"
            for n in names))
        print("# k3 one thread, the same text again (warm), vs tiktoken one thread:", ", ".join(
            f"{n[:-4]} {results[('tiktoken', 1)][n]['warm_s'] / results[('k3', 1)][n]['warm_s']:.1f}x"
            for n in names))
    if args.floor_rounds and "long_1m.txt" in names and ("tiktoken", 1) in results:
        floor_rounds(args, inp, out)
    if args.k3_lib and args.floor_pairs and "long_1m.txt" in names:
        p = subprocess.run(["taskset", "-c", "0", sys.executable, os.path.join(HERE, "floor_pairs.py"),
                            "--lib", args.k3_lib, "--data", args.data, "--text", os.path.join(inp, "long_1m.txt"),
                            "--pairs", str(args.floor_pairs)], stdout=subprocess.PIPE, text=True, check=True)
        print(p.stdout, end="", flush=True)
    print("# ids==ref for tiktoken: encode_ordinary alone lacks the wrapper's cuts, so it differs "
          "wherever a cut falls (runs of more than 25,000 characters, e.g. CJK without spaces)")
    for name, e in errors.items():
        print(f"# {name}: not benchmarked: {e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "errors": errors, "threads": args.threads,
                       "cpus": os.cpu_count()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
