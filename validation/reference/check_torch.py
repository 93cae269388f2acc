"""check_torch - the C forward pass against references nobody here wrote (issue 4).

1. kimi-linear-tiny (seeds 1 and 2; prompts of 1, 17, 64, 100, 300 tokens): `k3 logits`
   against the native `KimiLinearForCausalLM` of transformers (CPU, float32, torch-only
   paths: FLA is hidden from transformers so it takes its pure-PyTorch `torch_chunk_kda`
   instead of Triton kernels). Acceptance: max|d|/max|ref| <= 1e-4.
2. The KDA op against flash-linear-attention's `fla.ops.kda.naive` (`naive_recurrent_kda`,
   `naive_chunk_kda`, pure PyTorch, float64): for every KDA layer of k3-tiny and
   kimi-linear-tiny, the inputs of the delta rule are rebuilt (validation/reference/k3ref.py,
   float64) from the C dump `L{l}.attn_norm`, run through both FLA functions, and compared
   with the C dump `L{l}.kda.o` (tolerance 1e-4 of max|ref|).

3. A checkpoint written by another tool: the tiny checkpoints re-written with the
   `safetensors` package (its own header layout, tensor order reversed, three shards, a fresh
   index) must give bitwise the same `k3 logits` as the original.

Needs the heavy packages of torch-requirements.txt, in their own venv:
  python3 -m venv .venv-torch && .venv-torch/bin/pip install -r validation/reference/torch-requirements.txt
  .venv-torch/bin/python3 validation/reference/check_torch.py --k3 build/k3 --configs configs/models --work DIR
"""
import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare as cmp  # noqa: E402
import k3ref  # noqa: E402

TOL = 1e-4

HF_SCRIPT = r"""
import sys
sys.modules["fla"] = None   # force transformers' pure-PyTorch KDA/conv paths (no Triton on CPU)
import numpy as np, torch
from transformers import AutoModelForCausalLM
model_dir, ids_path, out_path = sys.argv[1:4]
m, info = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, output_loading_info=True)
bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
if bad:
    raise SystemExit(f"transformers did not load the checkpoint cleanly: {bad}")
m.eval()
ids = np.load(ids_path)
with torch.no_grad():
    logits = m(torch.tensor(ids[None], dtype=torch.long)).logits[0]
np.save(out_path, logits.double().numpy())
print(type(m).__name__)
"""


def gen(k3, configs, work, model, seed):
    ck = os.path.join(work, f"{model}-s{seed}")
    if not os.path.exists(os.path.join(ck, "config.json")):
        subprocess.run([k3, "gen-weights", "--model-config", os.path.join(configs, model, "config.json"),
                        "--out", ck, "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
    return ck


def check_transformers(a):
    n_fail = 0
    script = os.path.join(a.work, "hf_logits.py")
    with open(script, "w") as f:
        f.write(HF_SCRIPT)
    print(f"# transformers KimiLinearForCausalLM (float32, CPU) vs k3 logits, tol {TOL:g}")
    print(f"# {'model':18s} {'seed':>4s} {'tokens':>6s} {'max|d|/max|ref|':>16s} {'% tol':>6s}")
    for seed in (1, 2):
        ck = gen(a.k3, a.configs, a.work, "kimi-linear-tiny", seed)
        vocab = k3ref.Config(ck).vocab
        rng = np.random.default_rng(seed)
        for n in (1, 17, 64, 100, 300):
            ids = rng.integers(0, vocab, n).astype(np.int64)
            ids_path, hf_path = os.path.join(a.work, "ids.npy"), os.path.join(a.work, "hf.npy")
            np.save(ids_path, ids)
            r = subprocess.run([sys.executable, script, ck, ids_path, hf_path], capture_output=True, text=True)
            if r.returncode != 0:
                print(r.stdout + r.stderr)
                raise SystemExit("the transformers run failed")
            c_logits, _ = cmp.run_c(a.k3, ck, [int(t) for t in ids], a.work, dump=None)
            e = cmp.rel_err(c_logits, np.load(hf_path))
            ok = e <= TOL
            n_fail += not ok
            print(f"  {'kimi-linear-tiny':18s} {seed:4d} {n:6d} {e:16.3e} {100 * e / TOL:6.1f} {'' if ok else 'FAIL'}")
    return n_fail


def check_fla(a):
    import torch
    from fla.ops.kda.naive import naive_chunk_kda, naive_recurrent_kda
    n_fail = 0
    print(f"# KDA op: C L{{l}}.kda.o vs fla.ops.kda.naive (float64) on inputs rebuilt from C L{{l}}.attn_norm, tol {TOL:g}")
    print(f"# {'model':18s} {'layer':>5s} {'tokens':>6s} {'recurrent':>11s} {'chunk64':>11s} {'fla rec vs k3ref':>16s}")
    for model in ("k3-tiny", "kimi-linear-tiny"):
        ck = gen(a.k3, a.configs, a.work, model, 1)
        cfg = k3ref.Config(ck)
        ckpt = k3ref.Checkpoint(ck)
        for n in (17, 100):
            ids = [int(t) for t in np.random.default_rng(n).integers(0, cfg.vocab, n)]
            _, ci = cmp.run_c(a.k3, ck, ids, a.work)
            _, ri = k3ref.forward(ck, ids)
            for l in sorted(cfg.kda_layers):
                pre = f"{cfg.prefix}model.layers.{l}.self_attn."
                q, k, v, g, beta = k3ref.kda_inputs(cfg, ckpt, pre, ci[f"L{l}.attn_norm"].astype(np.float64))
                t = lambda x: torch.from_numpy(np.ascontiguousarray(x))[None]
                K = cfg.kda_dim
                o_rec = naive_recurrent_kda(t(q), t(k), t(v), t(g), t(beta), scale=K ** -0.5)
                # naive_chunk_kda needs T % 64 == 0: pad at the end (causal, so the first n
                # outputs do not see the padding).
                pad = (-n) % 64
                p3 = lambda x: np.pad(x, ((0, pad),) + ((0, 0),) * (x.ndim - 1))
                o_chk = naive_chunk_kda(t(p3(q)), t(p3(k)), t(p3(v)), t(p3(g)), t(p3(beta)), scale=K ** -0.5)
                o_rec = (o_rec[0] if isinstance(o_rec, tuple) else o_rec)[0].reshape(n, -1).numpy()
                o_chk = (o_chk[0] if isinstance(o_chk, tuple) else o_chk)[0][:n].reshape(n, -1).numpy()
                c_o = ci[f"L{l}.kda.o"]
                e_rec, e_chk = cmp.rel_err(c_o, o_rec), cmp.rel_err(c_o, o_chk)
                # FLA's recurrence on the reference's own inputs vs the reference's own output.
                q2, k2, v2, g2, b2 = k3ref.kda_inputs(cfg, ckpt, pre, ri[f"L{l}.attn_norm"])
                o_ref = naive_recurrent_kda(t(q2), t(k2), t(v2), t(g2), t(b2), scale=K ** -0.5)
                o_ref = (o_ref[0] if isinstance(o_ref, tuple) else o_ref)[0].reshape(n, -1).numpy()
                e_ref = cmp.rel_err(o_ref, ri[f"L{l}.kda.o"])
                ok = e_rec <= TOL and e_chk <= TOL and e_ref <= TOL
                n_fail += not ok
                print(f"  {model:18s} {l:5d} {n:6d} {e_rec:11.3e} {e_chk:11.3e} {e_ref:16.3e} {'' if ok else 'FAIL'}")
    return n_fail


def check_rewritten(a):
    import json
    from safetensors.torch import load_file, save_file  # torch: bf16 tensors (numpy has none)
    n_fail = 0
    print("# checkpoints re-written with the safetensors package (reversed order, 3 shards): k3 logits bitwise")
    for model in ("k3-tiny", "kimi-linear-tiny"):
        ck = gen(a.k3, a.configs, a.work, model, 1)
        out = os.path.join(a.work, f"{model}-rewritten")
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(ck, "model.safetensors.index.json")) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        tensors = {}
        for fn in files:
            tensors.update(load_file(os.path.join(ck, fn)))
        names = sorted(tensors, reverse=True)
        shards = [names[i::3] for i in range(3)]
        weight_map = {}
        for i, sh in enumerate(shards):
            fn = f"model-{i + 1:05d}-of-00003.safetensors"
            save_file({k: tensors[k] for k in sh}, os.path.join(out, fn), metadata={"format": "pt"})
            weight_map.update({k: fn for k in sh})
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": int(sum(t.numel() * t.element_size() for t in tensors.values()))},
                       "weight_map": weight_map}, f)
        with open(os.path.join(ck, "config.json")) as f, open(os.path.join(out, "config.json"), "w") as g:
            g.write(f.read())
        ids = [int(t) for t in np.random.default_rng(3).integers(0, k3ref.Config(ck).vocab, 33)]
        l0, _ = cmp.run_c(a.k3, ck, ids, a.work, dump=None)
        l1, _ = cmp.run_c(a.k3, out, ids, a.work, dump=None)
        same = np.array_equal(l0, l1)
        n_fail += not same
        print(f"  {model:18s} {len(tensors)} tensors: {'bitwise equal' if same else 'DIFFER'}")
    return n_fail


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k3", required=True)
    ap.add_argument("--configs", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    n_fail = check_rewritten(a) + check_fla(a) + check_transformers(a)
    print(f"{'all checks passed' if not n_fail else f'{n_fail} checks failed'}")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
