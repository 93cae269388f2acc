#!/usr/bin/env python3
"""The gen-weights initialisation keeps a forward pass O(1) through every layer.

For each config: `k3 gen-weights` writes a checkpoint, the independent float64
reference (validation/reference/k3ref.py, written from the published equations,
not from k3's C code) runs 16 random tokens through it, and the residual stream,
the sub-layer outputs and the logits are checked:

  - every intermediate is finite;
  - the residual stream (L{l}.out, the final norm's input) has RMS in [0.05, 5]
    at every layer: it neither dies nor grows with depth;
  - every attention and MLP output has RMS in [0.01, 2];
  - the logits have std in [0.3, 3] and the mean top-1 probability stays below
    0.5: the head is neither flat nor saturated.

usage: check_init_scale.py --k3 K3 --configs DIR --work DIR [--models k3-tiny,kimi-linear-tiny]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import k3ref  # noqa: E402


def rms(a):
    return float(np.sqrt(np.mean(np.square(a))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k3", required=True)
    ap.add_argument("--configs", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default="k3-tiny,kimi-linear-tiny")
    args = ap.parse_args()
    fails = []
    for name in args.models.split(","):
        cfg_path = os.path.join(args.configs, name, "config.json")
        out = os.path.join(args.work, name)
        subprocess.run([args.k3, "gen-weights", "--model-config", cfg_path, "--out", out, "--seed", "11"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(cfg_path) as f:
            cfg = json.load(f)
        tc = cfg.get("text_config", cfg)
        ids = np.random.default_rng(0).integers(0, tc["vocab_size"], 16)
        logits, inter = k3ref.forward(out, ids)
        for k, v in inter.items():
            if not np.isfinite(v).all():
                fails.append(f"{name}: {k} has NaN/Inf")
        print(f"# {name}: RMS per layer (16 random tokens)")
        print(f"# {'layer':>5} {'attn_out':>9} {'mlp_out':>9} {'stream':>9}")
        for layer in range(tc["num_hidden_layers"]):
            a, m, s = (rms(inter[f"L{layer}.{x}"]) for x in ("attn_out", "mlp_out", "out"))
            print(f"  {layer:>5} {a:>9.3f} {m:>9.3f} {s:>9.3f}")
            if not 0.05 <= s <= 5:
                fails.append(f"{name}: layer {layer} stream RMS {s:.3g} outside [0.05, 5]")
            for what, x in (("attn_out", a), ("mlp_out", m)):
                if not 0.01 <= x <= 2:
                    fails.append(f"{name}: layer {layer} {what} RMS {x:.3g} outside [0.01, 2]")
        f = rms(inter["final_in"])
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        top1 = float(p.max(axis=1).mean())
        print(f"  final_in RMS {f:.3f}, logits std {logits.std():.3f}, mean top-1 probability {top1:.4f}")
        if not 0.05 <= f <= 5:
            fails.append(f"{name}: final_in RMS {f:.3g}")
        if not 0.3 <= logits.std() <= 3:
            fails.append(f"{name}: logits std {logits.std():.3g} outside [0.3, 3]")
        if top1 >= 0.5:
            fails.append(f"{name}: saturated head (mean top-1 probability {top1:.3g})")
    for m in fails:
        print("FAIL:", m)
    print(f"{'FAILED' if fails else 'OK'}: {len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
