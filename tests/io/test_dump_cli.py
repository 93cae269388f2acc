"""test_dump_cli - `k3 dump` end to end on synthetic k3-tiny and kimi-linear-tiny.

  python3 test_dump_cli.py K3 WORKDIR MPIRUN... [--tok-dir DIR,DIR]

1. Every dumped hidden state equals the float64 reference's intermediate for the same
   tokens (validation/reference/k3ref.py): the output of decoder layer L and the final
   state as the issue defines them; float32 within 1e-4 relative (of the tensor's max),
   bfloat16 within bf16 rounding of each value.
2. On 2 and 4 ranks (tp x adp: 1x2, 2x1, 2x2; shared file, per-rank files, the H5Dwrite
   path) the same checks against the reference, and the same tokens, masks and offsets.
3. Bad input stops with exit 2 and a message: malformed JSONL, unknown layer, an output
   path that cannot be written, a file that is not a dump; nothing is overwritten.
4. The numpy loader (validation/dump/k3dump.py) reads the samples back.
5. With --tok-dir (the Kimi tokenizer): a chat (messages) input, whose loss mask covers
   exactly the assistant turns.
Prints 'N passed, N failed'.
"""
import json
import os
import random
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "validation", "reference"))
sys.path.insert(0, os.path.join(ROOT, "validation", "dump"))
import k3ref  # noqa: E402
import k3dump  # noqa: E402

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}", flush=True)


def run(cmd, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(cmd, capture_output=True, text=True, env=e)
    return p.returncode, p.stdout + p.stderr


def layer_ref_name(arch_block, n_layers, L):
    """The reference's name for 'the output of decoder layer L' (issue 11)."""
    if not arch_block:
        return f"L{L}.out"                       # Kimi Linear: residual stream after layer L
    return f"L{L + 1}.attn_in" if L + 1 < n_layers else "final_in"   # K3: the AttnRes mix


def write_input(path, n, seed, vocab=1024):
    r = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            m = r.randint(2, 70)
            line = {"id": f"s{i}", "prompt_ids": [r.randrange(vocab) for _ in range(m)]}
            if i % 3 == 1:
                line["loss_mask"] = [int(t % 2 == 0) for t in range(m)]
            f.write(json.dumps(line) + "\n")


_ref_cache = {}


def reference(model, ids, want):
    key = (model, tuple(int(x) for x in ids))
    if key not in _ref_cache:
        _ref_cache[key] = k3ref.forward(model, ids, want)[1]
    return _ref_cache[key]


def compare_with_ref(h5, model, layers):
    cfg = k3ref.Config(model)
    f = h5py.File(h5, "r")
    bf16 = f.attrs["dtype"] == "bfloat16"
    off, tok = f["sample_offsets"][:], f["tokens"][:]
    want = {layer_ref_name(cfg.block, cfg.n_layers, L) for L in layers} | {"final_norm"}
    worst = 0.0
    for i in range(len(off) - 1):
        inter = reference(model, tok[off[i]:off[i + 1]], want)
        for name in [f"layer_{L}" for L in layers] + ["final"]:
            ref_name = "final_norm" if name == "final" else layer_ref_name(cfg.block, cfg.n_layers, int(name[6:]))
            r = inter[ref_name]
            c = f["hidden/" + name][off[i]:off[i + 1]]
            if bf16:
                c = k3dump.bf16_to_float32(c).astype(np.float64)
                # bf16 keeps 8 significant bits: half an ulp is 2^-8 of the value; plus the
                # float32 forward's own error, measured against the tensor's scale
                ok = np.abs(c - r) <= 2.0 ** -8 * np.abs(r) + 1e-4 * np.abs(r).max()
                check(ok.all(), f"{h5} sample {i} {name}: {int((~ok).sum())} values beyond bf16 rounding")
            else:
                e = float(np.abs(c - r).max() / np.abs(r).max())
                worst = max(worst, e)
                check(e <= 1e-4, f"{h5} sample {i} {name}: rel err {e:.3g} > 1e-4")
    return worst


def same_datasets(a, b, hidden=True):
    fa, fb = h5py.File(a, "r"), h5py.File(b, "r")
    keys = ["tokens", "loss_mask", "sample_offsets", "sample_ids"]
    keys += ["hidden/" + k for k in fa["hidden"]] if hidden else []
    return all(np.array_equal(fa[k][:], fb[k][:]) for k in keys) and sorted(fa["hidden"]) == sorted(fb["hidden"])


def main():
    k3, work = sys.argv[1], sys.argv[2]
    rest = sys.argv[3:]
    tok_dir = None
    if "--tok-dir" in rest:
        i = rest.index("--tok-dir")
        tok_dir = rest[i + 1]
        rest = rest[:i] + rest[i + 2:]
    mpirun = rest
    os.makedirs(work, exist_ok=True)
    q = ["--log-level", "warn", "--threads", "1"]

    for cfgname, layers in [("k3-tiny", [0, 3, 8]), ("kimi-linear-tiny", [1, 8])]:
        model = os.path.join(work, cfgname)
        if not os.path.exists(os.path.join(model, "config.json")):
            rc, out = run([k3, "gen-weights", "--model-config", os.path.join(ROOT, "configs/models", cfgname, "config.json"),
                           "--out", model])
            check(rc == 0, f"gen-weights {cfgname}: {out}")
        inp = os.path.join(work, f"{cfgname}.jsonl")
        write_input(inp, 7, seed=len(cfgname))
        ls = ",".join(map(str, layers))
        outs = {}
        for dtype in ["float32", "bfloat16"]:
            out1 = os.path.join(work, f"{cfgname}-{dtype}-np1.h5")
            for p in [out1, out1 + ".journal"]:
                if os.path.exists(p):
                    os.remove(p)
            rc, log = run([k3, "dump", "--model", model, "--input", inp, "--out", out1, "--layers", ls, "--final",
                           "--dtype", dtype, "--set", "dump.chunk_tokens=32"] + q)
            check(rc == 0, f"dump {cfgname} {dtype}: {log}")
            if rc == 0:
                worst = compare_with_ref(out1, model, layers)
                if dtype == "float32":
                    print(f"# {cfgname} float32: worst relative error vs the float64 reference {worst:.2e} "
                          f"({worst / 1e-4:.1%} of the 1e-4 tolerance)")
            outs[dtype] = out1
        # Several ranks (the sharded forward; the writer's layouts): the reference again,
        # and the same tokens, masks and offsets as one rank. The hidden states are not
        # bit-identical (all-reduce and MoE combine add in another order).
        if mpirun and cfgname == "k3-tiny":   # the layouts do not depend on the architecture
            for np_, tp, adp, env, tag, dt in [
                    (2, 1, 2, {}, "shared", "float32"), (2, 1, 2, {"K3_DUMP_PER_RANK_FILES": "1"}, "perrank", "float32"),
                    (2, 2, 1, {"K3_DUMP_HDF5_IO": "1"}, "hdf5io", "float32"), (4, 2, 2, {}, "shared", "float32"),
                    (4, 2, 2, {}, "shared", "bfloat16")]:
                out2 = os.path.join(work, f"{cfgname}-np{np_}-tp{tp}-adp{adp}-{tag}-{dt}.h5")
                for p in [out2, out2 + ".journal"]:
                    if os.path.exists(p):
                        os.remove(p)
                rc, log = run(mpirun + ["-np", str(np_), k3, "dump", "--model", model, "--input", inp, "--out", out2,
                                        "--layers", ls, "--final", "--dtype", dt, "--tp", str(tp), "--adp",
                                        str(adp), "--set", "dump.chunk_tokens=32"] + q, env)
                check(rc == 0, f"dump {cfgname} np{np_} tp{tp} adp{adp} {tag}: {log}")
                if rc == 0:
                    check(same_datasets(outs["float32"], out2, hidden=False), f"{out2}: metadata differs from np1")
                    worst = compare_with_ref(out2, model, layers)
                    if dt == "float32":
                        print(f"# {cfgname} float32 on {np_} ranks (tp {tp} x adp {adp}, {tag}): worst relative "
                              f"error {worst:.2e} ({worst / 1e-4:.1%} of the tolerance)")
        # numpy loader
        d = k3dump.DumpFile(outs["bfloat16"])
        check(len(d) == 7 and d.layers == sorted(layers) and d.has_final, "loader metadata")
        s = d.sample(3)
        lines = [json.loads(x) for x in open(inp)]
        check(list(s["input_ids"]) == lines[3]["prompt_ids"], "loader tokens of sample 3")
        check(list(s["loss_mask"]) == lines[3].get("loss_mask", [1] * len(s["input_ids"])),
              "loader loss mask of sample 3")
        check(d.sample_ids()[:2] == ["s0", "s1"], "sample ids")
        check(list(d.sample(1)["loss_mask"]) == lines[1]["loss_mask"], "explicit loss_mask kept")
        check(d.attrs["layers"] == ls and "tokenizer_hash" in d.attrs and "input_hash" in d.attrs
              and "model_config" in d.attrs and "k3_version" in d.attrs, "attributes")

    # Bad input: exit 2, a message, nothing overwritten.
    model = os.path.join(work, "k3-tiny")
    good = os.path.join(work, "k3-tiny.jsonl")
    bad = os.path.join(work, "bad.jsonl")
    with open(bad, "w") as f:
        f.write('{"id": 1, "prompt_ids": [1, 2]}\n{"id": 2, "prompt_ids": [1, 2\n')
    cases = [
        (["--input", bad, "--out", os.path.join(work, "x.h5"), "--layers", "1"], "bad.jsonl:2: not valid JSON"),
        (["--input", good, "--out", os.path.join(work, "x.h5"), "--layers", "1,9"], "layer 9 does not exist"),
        (["--input", good, "--out", os.path.join(work, "x.h5"), "--layers", "1,1"], "listed twice"),
        (["--input", good, "--out", os.path.join(work, "x.h5")], "nothing to dump"),
        (["--input", good, "--out", os.path.join(work, "no/such/dir/x.h5"), "--layers", "1"], "cannot create"),
        (["--input", good, "--out", bad, "--layers", "1"], "not a dump of this command"),
        (["--input", good, "--out", os.path.join(work, "x.h5"), "--layers", "1", "--dtype", "fp8"], "--dtype must be"),
        (["--input", os.path.join(work, "none.jsonl"), "--out", os.path.join(work, "x.h5"), "--layers", "1"],
         "cannot read"),
    ]
    with open(os.path.join(work, "vocab.jsonl"), "w") as f:
        f.write('{"id": 1, "prompt_ids": [1, 5000]}\n')
    cases.append((["--input", os.path.join(work, "vocab.jsonl"), "--out", os.path.join(work, "x.h5"), "--layers", "1"],
                  "prompt_ids[1] must be a token id in [0, 1024)"))
    before = open(bad).read()
    for args, msg in cases:
        rc, log = run([k3, "dump", "--model", model] + args + q)
        check(rc == 2 and msg in log, f"bad input {msg!r}: rc {rc}, {log.strip()}")
    check(open(bad).read() == before, "a non-dump file at --out is left alone")

    # Chat input: the loss mask covers the assistant turns.
    if tok_dir:
        model = os.path.join(work, "k3-tiny-chat")
        if not os.path.exists(os.path.join(model, "config.json")):
            rc, out = run([k3, "gen-weights", "--model-config", os.path.join(ROOT, "configs/models/k3-tiny-chat/config.json"),
                           "--out", model, "--tokenizer", tok_dir])
            check(rc == 0, f"gen-weights k3-tiny-chat: {out}")
        chat = os.path.join(work, "chat.jsonl")
        with open(chat, "w") as f:
            f.write(json.dumps({"id": "c0", "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is two plus two?"},
                {"role": "assistant", "content": "Four, of course."},
                {"role": "user", "content": "And three plus three?"},
                {"role": "assistant", "content": "Six."}]}) + "\n")
            f.write(json.dumps({"id": "p1", "prompt_ids": [1, 2, 3]}) + "\n")
        out = os.path.join(work, "chat.h5")
        for p in [out, out + ".journal"]:
            if os.path.exists(p):
                os.remove(p)
        rc, log = run([k3, "dump", "--model", model, "--input", chat, "--out", out, "--layers", "2"] + q)
        check(rc == 0, f"chat dump: {log}")
        if rc == 0:
            d = k3dump.DumpFile(out)
            s = d.sample(0)
            ids, mask = s["input_ids"], s["loss_mask"]
            rc, txt = run([k3, "tokenize", "--model", model, "--decode", "--text", json.dumps([int(x) for x in ids[mask == 1]])])
            masked = txt
            rc2, txt_all = run([k3, "tokenize", "--model", model, "--decode", "--text", json.dumps([int(x) for x in ids[mask == 0]])])
            check("Four, of course." in masked and "Six." in masked, f"assistant text is masked in: {masked!r}")
            check("two plus two" not in masked and "Be brief" not in masked, f"user/system text is not: {masked!r}")
            check("two plus two" in txt_all, "user text outside the mask")
            print(f"# chat sample: {len(ids)} tokens, {int(mask.sum())} in the loss mask")

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
