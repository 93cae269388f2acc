"""The forward pass on checkpoints other than the shipped configs (issue 4: "any KDA/MLA
layer pattern, any AttnRes block size, KDA head dims other than 128, any expert counts").

Each variant edits k3-tiny or kimi-linear-tiny's config.json, writes a checkpoint with
`k3 gen-weights`, and compares `k3 logits` (prefill, and prefill + decode) with the float64
reference: every intermediate within 1e-4 of max|ref|.
"""
import argparse
import copy
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "validation", "reference"))
import compare as cmp  # noqa: E402
import k3ref  # noqa: E402

TOL = 1e-4


def layers_1based(n, mla0):
    mla = sorted(set(mla0))
    return [i + 1 for i in mla], [i + 1 for i in range(n) if i not in mla]


def variants(k3, kl):
    out = []

    def k3v(name, fn):
        c = copy.deepcopy(k3)
        fn(c["text_config"])
        out.append((name, c))

    def klv(name, fn):
        c = copy.deepcopy(kl)
        fn(c)
        out.append((name, c))

    def pattern(mla):
        def f(t):
            full, kda = layers_1based(t["num_hidden_layers"], mla)
            t["linear_attn_config"]["full_attn_layers"] = full
            t["linear_attn_config"]["kda_layers"] = kda
        return f

    k3v("k3 AttnRes block 1", lambda t: t.update(attn_res_block_size=1))
    k3v("k3 AttnRes block 3", lambda t: t.update(attn_res_block_size=3))
    k3v("k3 AttnRes block > layers", lambda t: t.update(attn_res_block_size=64))
    k3v("k3 MLA at layer 0 and 5", pattern([0, 5]))
    k3v("k3 all KDA but the last", pattern([8]))

    def kda_dims(t):
        t["linear_attn_config"].update(num_heads=3, head_dim=16)
    k3v("k3 KDA 3 heads x 16", kda_dims)

    def no_qlora(t):
        t["q_lora_rank"] = None
    k3v("k3 MLA without q-LoRA", no_qlora)

    def experts(t):
        t.update(num_experts=8, num_experts_per_token=1, num_shared_experts=1, moe_intermediate_size=96)
    k3v("k3 8 experts top-1, 1 shared", experts)
    klv("kimi-linear MLA at layer 0", pattern([0]))

    def kl_experts(t):
        t.update(num_experts=12, num_experts_per_token=3, routed_scaling_factor=1.7)
        t["linear_attn_config"].update(num_heads=2, head_dim=64)
    klv("kimi-linear 12 experts top-3, KDA 2 x 64", kl_experts)
    klv("kimi-linear no shared expert, no renorm, 2 dense", lambda t: t.update(
        num_shared_experts=0, moe_renormalize=False, first_k_dense_replace=2))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k3", required=True)
    ap.add_argument("--configs", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    with open(os.path.join(a.configs, "k3-tiny", "config.json")) as f:
        k3 = json.load(f)
    with open(os.path.join(a.configs, "kimi-linear-tiny", "config.json")) as f:
        kl = json.load(f)
    n_pass = n_fail = 0
    print(f"# {'variant':42s} {'prefill worst':>13s} {'decode worst':>13s}  first over tol")
    for i, (name, cfg) in enumerate(variants(k3, kl)):
        d = os.path.join(a.work, f"variant{i}")
        os.makedirs(d, exist_ok=True)
        cpath = os.path.join(d, "config.json")
        with open(cpath, "w") as f:
            json.dump(cfg, f, indent=2)
        ck = os.path.join(d, "ck")
        r = subprocess.run([a.k3, "gen-weights", "--model-config", cpath, "--out", ck, "--seed", str(11 + i)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"  {name:42s} gen-weights failed: {r.stderr.strip()}")
            n_fail += 1
            continue
        vocab = k3ref.Config(ck).vocab
        ids = [int(t) for t in np.random.default_rng(i).integers(0, vocab, 23)]
        _, ri = k3ref.forward(ck, ids)
        _, ci = cmp.run_c(a.k3, ck, ids, d)
        pw, pfirst, plines = cmp.compare(ci, ri, TOL)
        _, di = cmp.run_c(a.k3, ck, ids, d, decode_from=9)
        dw, dfirst, dlines = cmp.compare(di, ri, TOL)
        first = pfirst or dfirst
        print(f"  {name:42s} {pw:13.3e} {dw:13.3e}  {first[0] if first else '-'}")
        if first:
            print("\n".join(plines if pfirst else dlines))
        n_fail += first is not None
        n_pass += first is None
    print(f"{n_pass} passed, {n_fail} failed")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
