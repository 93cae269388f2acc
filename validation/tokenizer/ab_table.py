"""ab_table.py OUT - the markdown table of bench_host.sh's pinned A/B: per input, each
tok_bench binary's best and median single-thread latency over the rounds (ms), tiktoken's
(encode_ordinary, best of its per-round medians), and the last binary's ratio to tiktoken
(tiktoken best / binary best, and median / median).

    python3 validation/tokenizer/ab_table.py OUT
"""
import glob
import json
import os
import re
import statistics
import sys


def main():
    out = sys.argv[1]
    runs = {}  # name -> input -> [(st_s, st_min_s)]
    tik = {}   # input -> [warm_s]
    for path in sorted(glob.glob(os.path.join(out, "ab_r*_*.jsonl"))):
        name = re.match(r"ab_r\d+_(.*)\.jsonl$", os.path.basename(path)).group(1)
        with open(path) as f:
            for line in f:
                d = json.loads(line)
                if name == "tiktoken":
                    if "warm_s" in d:
                        tik.setdefault(d["input"][:-4], []).append(d["warm_s"])
                    continue
                inp = os.path.basename(d["file"])[:-4]
                runs.setdefault(name, {}).setdefault(inp, []).append((d["st_s"], d["st_min_s"]))
    names = sorted(runs)
    inputs = sorted({i for n in names for i in runs[n]})
    head = ["input"] + [f"{n} best / median ms" for n in names] + ["tiktoken best / median ms",
                                                                   f"{names[-1]} vs tiktoken"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for i in inputs:
        row = [i]
        for n in names:
            r = runs[n].get(i, [])
            row.append(f"{min(b for _, b in r) * 1e3:.2f} / {statistics.median(m for m, _ in r) * 1e3:.2f}"
                       if r else "-")
        t = tik.get(i, [])
        row.append(f"{min(t) * 1e3:.1f} / {statistics.median(t) * 1e3:.1f}" if t else "-")
        last = runs[names[-1]].get(i, [])
        if t and last:
            row.append(f"{min(t) / min(b for _, b in last):.1f}x / "
                       f"{statistics.median(t) / statistics.median(m for m, _ in last):.1f}x")
        else:
            row.append("-")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
