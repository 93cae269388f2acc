"""compare - C intermediates (k3 logits --dump all) against the float64 reference.

Every named intermediate is compared in forward order by max|C - ref| / max|ref|; the
report names the first one (and so the first layer) over the tolerance.

  python3 compare.py --k3 build/k3 --model DIR --ids 1,2,3 [--decode-from N] [--tol 1e-4]
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3ref  # noqa: E402


def run_c(k3, model, ids, workdir, decode_from=None, threads=None, dump="all"):
    """Runs `k3 logits`; returns (logits, {name: array})."""
    out = os.path.join(workdir, "c.npy")
    cmd = [k3, "logits", "--model", model, "--ids", ",".join(map(str, ids)), "--out", out,
           "--log-level", "warn"]
    if dump:
        cmd += ["--dump", dump]
    if decode_from is not None:
        cmd += ["--decode-from", str(decode_from)]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    subprocess.run(cmd, check=True)
    inter = {}
    for fn in os.listdir(workdir):
        if fn.startswith("c.") and fn.endswith(".npy") and fn != "c.npy":
            inter[fn[2:-4]] = np.load(os.path.join(workdir, fn))
            os.remove(os.path.join(workdir, fn))
    return np.load(out), inter


def rel_err(c, r):
    return float(np.abs(c.astype(np.float64) - r).max() / max(np.abs(r).max(), 1e-300))


def compare(c_inter, ref_inter, tol):
    """Returns (worst, first_failure or None, lines). Order = reference forward order."""
    lines, first, worst = [], None, 0.0
    for name, r in ref_inter.items():
        if name not in c_inter:
            lines.append(f"  {name:22s} missing from the C dump")
            first = first or (name, float("inf"))
            continue
        c = c_inter[name]
        if c.shape != r.shape:
            lines.append(f"  {name:22s} shape {c.shape} vs reference {r.shape}")
            first = first or (name, float("inf"))
            continue
        e = rel_err(c, r) if np.all(np.isfinite(c)) else float("inf")
        worst = max(worst, e)
        flag = "" if e <= tol else "  <-- over tolerance"
        if e > tol and first is None:
            first = (name, e)
        lines.append(f"  {name:22s} {e:.3e}  ({100 * e / tol:5.1f}% of tol){flag}")
    return worst, first, lines


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--k3", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--decode-from", type=int)
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    ids = [int(t) for t in a.ids.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        _, ci = run_c(a.k3, a.model, ids, tmp, a.decode_from)
    _, ri = k3ref.forward(a.model, ids)
    worst, first, lines = compare(ci, ri, a.tol)
    print("\n".join(lines))
    if first:
        print(f"FIRST DIVERGENCE: {first[0]} ({first[1]:.3e} > {a.tol:g})")
        return 1
    print(f"all {len(ri)} intermediates within {a.tol:g} (worst {worst:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
