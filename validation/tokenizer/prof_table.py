#!/usr/bin/env python3
"""prof_table.py BINARY SAMPLES [FUNCTION]: tok_prof's samples as a table.

Without FUNCTION: the share of samples in each function of BINARY (nm -n; an address past
the last symbol of the binary, in a shared library such as libc, counts as "(outside)").
With FUNCTION: its hottest instructions and their source lines (addr2line)."""
import bisect
import collections
import subprocess
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, path = sys.argv[1], sys.argv[2]
    addrs = [int(line, 16) for line in open(path) if line.strip()]
    if not addrs:
        sys.exit("no samples")
    syms = []
    nm = subprocess.run(["nm", "-n", "-S", "--defined-only", binary], capture_output=True, text=True, check=True)
    for line in nm.stdout.splitlines():
        p = line.split()
        if len(p) == 4 and p[2] in "tTwW":
            syms.append((int(p[0], 16), int(p[1], 16), p[3]))
    starts = [s[0] for s in syms]

    def name(a):
        i = bisect.bisect_right(starts, a) - 1
        return syms[i][2] if i >= 0 and a < syms[i][0] + max(syms[i][1], 1) else "(outside)"

    total = len(addrs)
    if len(sys.argv) == 3:
        for fn, n in collections.Counter(name(a) for a in addrs).most_common(25):
            print("%6.2f%%  %s" % (100 * n / total, fn))
        return
    top = collections.Counter(a for a in addrs if name(a) == sys.argv[3]).most_common(30)
    lines = subprocess.run(["addr2line", "-e", binary] + ["%x" % a for a, _ in top],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    for (a, n), src in zip(top, lines):
        print("%6.2f%%  %x  %s" % (100 * n / total, a, src.rsplit("/", 1)[-1]))


if __name__ == "__main__":
    main()
