#!/usr/bin/env python3
"""ab_libs.py OUT/ab_libs.jsonl: ab_libs.sh's runs as a table, by input and library: the
best and the median-of-medians ms over the processes, and the library's time over lib 0's
(tok_ab's per-process median ratio): its median over the processes, and their range."""
import collections
import json
import statistics
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    runs = collections.defaultdict(list)
    for line in open(sys.argv[1]):
        j = json.loads(line)
        runs[(j["file"].rsplit("/", 1)[-1], j["lib"].rsplit("/", 1)[-1])].append(j)
    print("| input | library | processes | best ms | median ms | vs lib 0, median | range |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (f, lib), v in sorted(runs.items()):
        r = sorted(x["ratio_med"] for x in v)
        print("| %s | %s | %d | %.2f | %.2f | %+.1f%% | %+.1f%% .. %+.1f%% |" % (
            f, lib, len(v), min(x["best_ms"] for x in v), statistics.median(x["med_ms"] for x in v),
            100 * (statistics.median(r) - 1), 100 * (r[0] - 1), 100 * (r[-1] - 1)))


if __name__ == "__main__":
    main()
