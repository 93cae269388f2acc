#!/usr/bin/env python3
"""bench.py - k3's tokenizer against the published fast tokenizers, same machine, same texts,
same run: latency and MB/s on one thread and on all cores, ratios, and every tokenizer's ids
checked against the reference (tiktoken + the Kimi wrapper's cuts, kimi_ref.py).

    bench.py --tok-bench BUILD/validation/tokenizer/tok_bench --data ../shared/data
             [--threads N] [--min-seconds S] [--json out.json]

Each tokenizer runs in its own process per thread count (the Rust ones read
RAYON_NUM_THREADS at start), is loaded before timing, and is timed on the whole text per
call; the latency is the median over repetitions. Inputs (built at run time from
corpus.py's real text, never repeated unless the name says so): prose, code, cjk, mixed,
and long prompts of 10K, 200K and 1M Kimi tokens, plus 1M built from one repeated 200 KB
block (some tokenizers cache pieces). tiktoken is timed as Encoding.encode_ordinary (no
wrapper walk: the tougher baseline); k3 and the others are timed doing the full Kimi
encode, cuts included where they implement them."""
import argparse
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


# ---- worker: one tokenizer, one thread count ---------------------------------------------

def load_competitor(name, model, config):
    import kimi_ref
    enc = kimi_ref.load(model, config)
    specials = {enc.decode([i]): i for i in range(enc.n_vocab - 256, enc.n_vocab)}
    if name == "tiktoken":
        return lambda text: enc.encode_ordinary(text), lambda r: r
    if name == "basetenkenizer":
        import basetenkenizer
        d = tempfile.mkdtemp()
        os.symlink(model, os.path.join(d, "tiktoken.model"))
        os.symlink(config, os.path.join(d, "tokenizer_config.json"))
        tok = basetenkenizer.Tokenizer.from_json_str(
            basetenkenizer.tiktoken_model_to_tokenizer_json(d))
        return (lambda text: tok.encode_segments([(text, False)], tiktoken_safe=True),
                lambda r: list(r.ids))
    if name == "gigatoken":
        import gigatoken
        tok = gigatoken.Tokenizer.from_tiktoken(model, pretokenizer="kimi", special_tokens=specials)
        return lambda text: tok.encode(text), lambda r: [int(x) for x in r]
    if name == "fastokens":
        import fastokens
        from fastokens._tiktoken import split_like_tiktoken_text_piece
        tok = fastokens.Tokenizer.from_tiktoken(model, pattern=kimi_ref.PAT_STR,
                                                special_tokens=specials)
        return (lambda text: tok.encode_segments([(p, False) for p in split_like_tiktoken_text_piece(text)]),
                lambda r: list(r.ids))
    if name == "quicktok":
        import quicktok
        raise RuntimeError("PyPI quicktok %s exposes only %s (a BPE trainer with its own save "
                           "format); it cannot load a tiktoken rank file or the Kimi pattern"
                           % (getattr(quicktok, "__version__", "0.2.0"),
                              [x for x in dir(quicktok) if not x.startswith("_")]))
    raise ValueError(name)


def worker(args):
    out = {"name": args.worker, "threads": args.threads, "results": {}}
    try:
        encode, ids_of = load_competitor(args.worker, args.model, args.config)
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        out["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(out))
        return 0
    for name in sorted(os.listdir(args.inputs)):
        if not name.endswith(".txt"):
            continue
        with open(os.path.join(args.inputs, name), encoding="utf-8") as f:
            text = f.read()
        r = encode(text)  # warm-up, and the ids to check
        with open(os.path.join(args.out, f"{args.worker}.{args.threads}.{name}.ids"), "w") as f:
            json.dump(ids_of(r), f)
        times, total = [], 0.0
        while len(times) < 3 or (total < args.min_seconds and len(times) < 200):
            t0 = time.perf_counter()
            encode(text)
            dt = time.perf_counter() - t0
            times.append(dt)
            total += dt
        out["results"][name] = {"s": statistics.median(times), "reps": len(times)}
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
    # The long-prompt pool: every real category, interleaved in 2,000-character blocks.
    cats = [real[k] for k in ("prose_en", "code_c", "zh", "code_py", "ja", "mixed", "ko", "code_js")]
    blocks, pos = [], [0] * len(cats)
    while any(p < len(c) for p, c in zip(pos, cats)):
        for i, c in enumerate(cats):
            if pos[i] < len(c):
                blocks.append(c[pos[i]:pos[i] + 2000])
                pos[i] += 2000
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok-bench")
    ap.add_argument("--data", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--min-seconds", type=float, default=1.0)
    ap.add_argument("--json")
    ap.add_argument("--only", default=",".join(COMPETITORS))
    ap.add_argument("--worker")
    ap.add_argument("--inputs")
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
    inputs = build_inputs(inp, args.model, args.config)
    enc = kimi_ref.load(args.model, args.config)
    ref = {k + ".txt": kimi_ref.encode(enc, v, allow_special=False) for k, v in inputs.items()}
    print(f"# inputs built and reference ids computed in {time.time() - t0:.1f} s; "
          f"{os.cpu_count()} CPUs, all-core runs use {args.threads} threads", flush=True)
    names = sorted(ref)
    results = {}  # (tokenizer, threads) -> {input: seconds}
    errors, parity = {}, {}

    # k3: one process does both thread counts (its pool is explicit).
    cmd = [args.tok_bench, args.model, args.config, str(args.threads), str(args.min_seconds), out] + \
          [os.path.join(inp, n) for n in names]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
    for line, n in zip(p.stdout.strip().split("\n"), names):
        d = json.loads(line)
        results.setdefault(("k3", 1), {})[n] = d["st_s"]
        results.setdefault(("k3", args.threads), {})[n] = d["mt_s"]
        with open(os.path.join(out, f"{names.index(n)}.ids"), "rb") as f:
            import array
            a = array.array("i")
            a.frombytes(f.read())
        parity.setdefault("k3", {})[n] = list(a) == ref[n] and d["mt_ids_equal"]
    for name in args.only.split(","):
        for threads in sorted({1, args.threads}):
            if name == "tiktoken" and threads != 1:
                continue  # one text, one thread: tiktoken has no parallel path for it
            env = dict(os.environ, RAYON_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
            cmd = [sys.executable, __file__, "--worker", name, "--threads", str(threads),
                   "--inputs", inp, "--out", out, "--data", args.data,
                   "--min-seconds", str(args.min_seconds)]
            if threads == 1 and name != "tiktoken":
                cmd = ["taskset", "-c", "0"] + cmd  # one core, whatever the library does
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            if p.returncode:
                errors[name] = p.stderr.strip().split("\n")[-1]
                continue
            d = json.loads(p.stdout.strip().split("\n")[-1])
            if "error" in d:
                errors[name] = d["error"]
                break
            results[(name, threads)] = {n: r["s"] for n, r in d["results"].items()}
            if threads == 1 or name not in parity:
                parity[name] = {}
                for n in names:
                    with open(os.path.join(out, f"{name}.{threads}.{n}.ids")) as f:
                        parity[name][n] = json.load(f) == ref[n]

    mb = {n: len(inputs[n[:-4]].encode()) / 1e6 for n in names}
    ntok = {n: len(ref[n]) for n in names}
    rows = []
    print(f"\n# {'input':<18} {'MB':>6} {'tokens':>9}  {'tokenizer':<15} {'thr':>3} {'ms':>10} "
          f"{'MB/s':>8}  {'k3 speedup':>10}  ids==ref")
    for n in names:
        for (tk, thr), res in sorted(results.items(), key=lambda x: (x[0][1], x[0][0] != "k3", x[0][0])):
            if n not in res:
                continue
            s = res[n]
            k3s = results[("k3", thr)][n] if ("k3", thr) in results else None
            speed = "" if tk == "k3" else f"{s / k3s:9.1f}x"
            ok = parity.get(tk, {}).get(n)
            print(f"  {n[:-4]:<18} {mb[n]:>6.2f} {ntok[n]:>9}  {tk:<15} {thr:>3} {s * 1e3:>10.2f} "
                  f"{mb[n] / s:>8.1f}  {speed:>10}  {'yes' if ok else 'NO'}")
            rows.append({"input": n[:-4], "mb": mb[n], "tokens": ntok[n], "tokenizer": tk,
                         "threads": thr, "latency_s": s, "mb_s": mb[n] / s,
                         "k3_speedup": None if tk == "k3" else s / k3s, "ids_equal_reference": ok})
        print()
    # k3 single-thread against tiktoken, all cores against each competitor's best.
    print("# k3 vs tiktoken (both one thread):", ", ".join(
        f"{n[:-4]} {results[('tiktoken', 1)][n] / results[('k3', 1)][n]:.1f}x"
        for n in names if ("tiktoken", 1) in results))
    for name, e in errors.items():
        print(f"# {name}: not benchmarked: {e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "errors": errors, "threads": args.threads,
                       "cpus": os.cpu_count()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
