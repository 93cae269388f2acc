#!/usr/bin/env python3
"""Independent check of a synthetic K3 checkpoint written by `k3 gen-weights`.

Nothing here uses k3 code. The expected layout is derived from the table in
research/k3-tensors.md (parsed from the Markdown, symbols such as d, H, Dh, l
substituted from the checkpoint's config.json), and the safetensors files are
parsed by hand with numpy:

  1. names, shapes and dtypes of every tensor equal the k3-tensors.md table
     scaled to the config (nothing missing, nothing extra);
  2. the files are well-formed safetensors: 8-byte little-endian header length,
     JSON header padded to 8 bytes, data_offsets contiguous from 0, sizes equal
     numel * dtype size, file ends where the last tensor does; the index's
     weight_map names each tensor's shard and metadata.total_size is the sum;
  3. MXFP4 blocks decoded by hand (E2M1 nibbles, element 2j in the low nibble,
     E8M0 scales 2^(e-127)) equal the rows k3 decoded (samples JSON written by
     test_checkpoint), and every block's largest magnitude lands in [4, 6] after
     scaling, as the OCP scale rule implies;
  4. no NaN or Inf anywhere.

usage: check_k3_tensors.py --tensors-md K3_TENSORS_MD --checkpoint DIR [--samples JSON]
"""
import argparse
import json
import os
import re
import sys

import numpy as np

DTYPES = {"BF16": 2, "F32": 4, "F16": 2, "U8": 1, "F8_E4M3": 1, "I32": 4, "I64": 8}
MD_DTYPES = {"bf16": "BF16", "fp32": "F32", "u8": "U8"}
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def symbols(tc):
    """The symbols of the k3-tensors.md header, from a text_config."""
    lac = tc["linear_attn_config"]
    return {
        "d": tc["hidden_size"], "H": lac["num_heads"], "Dh": lac["head_dim"],
        "Hm": tc["num_attention_heads"], "ql": tc["q_lora_rank"], "kvl": tc["kv_lora_rank"],
        "r": tc["qk_rope_head_dim"], "n": tc["qk_nope_head_dim"], "v": tc["v_head_dim"],
        "E": tc["num_experts"], "m": tc["moe_intermediate_size"],
        "ℓ": tc["routed_expert_hidden_size"], "S": tc["num_shared_experts"],
        "I": tc["intermediate_size"], "V": tc["vocab_size"],
    }


def eval_dim(expr, sym):
    expr = expr.strip().replace("·", "*")
    out = re.sub(r"[A-Za-zℓ]+", lambda mt: str(sym[mt.group(0)]), expr)
    if not re.fullmatch(r"[0-9+*/() ]+", out):
        raise ValueError(f"unexpected dimension expression {expr!r}")
    return int(eval(out))  # arithmetic on integers only (checked above)


def parse_shapes(cell, sym):
    cell = re.sub(r"\s\(.*?\)", "", cell)  # " (only the first H entries are used)", not "(n+r)"
    return [[eval_dim(x, sym) for x in grp.split(",")] for grp in re.findall(r"\[([^\]]*)\]", cell)]


def expand_names(names):
    """`a.b.c`, `.x.y` -> a relative name replaces as many trailing components."""
    out = []
    for nm in names:
        if nm.startswith(".") and out:
            k = nm.count(".")
            stem = out[0].split(".")
            out.append(".".join(stem[: len(stem) - k]) + nm)
        else:
            out.append(nm)
    return out


def expected_layout(md_path, tc):
    """{full name: (dtype, shape)} from the k3-tensors.md table."""
    sym = symbols(tc)
    n_layers = tc["num_hidden_layers"]
    lac = tc["linear_attn_config"]
    kda = [l - 1 for l in lac["kda_layers"]]
    mla = [l - 1 for l in lac["full_attn_layers"]]
    dense = list(range(tc["first_k_dense_replace"]))
    moe = [l for l in range(n_layers) if l not in dense]
    rows = []
    with open(md_path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("| ") and not line.startswith("| name") and "---" not in line:
                rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    section, prefix = None, ""
    want = {}

    def add(name_tmpl, dtype, shape, layers, experts=(None,)):
        for L in layers:
            for e in experts:
                nm = name_tmpl.replace("{L}", str(L)).replace("{E}", str(e))
                want["language_model." + nm] = (dtype, shape)

    for cells in rows:
        name_cell, shape_cell, dtype_cell = cells[0], cells[1], cells[2]
        head = re.match(r"\*\*(.+?)\*\*\s*`([^`]*)`(.*)", name_cell)
        if head and not shape_cell:
            label, prefix = head.group(1), head.group(2)
            section = "kda" if label.startswith("KDA") else "mla" if label.startswith("MLA") else "moe"
            continue
        if head and head.group(1) == "Layer 0":  # `model.layers.0.mlp.` `gate_proj`, ...
            names = [prefix0 + ".weight" for prefix0 in re.findall(r"`([^`]*)`", head.group(3))]
            shapes = parse_shapes(shape_cell, sym)
            for nm, sh in zip(names, shapes):
                add(head.group(2) + nm, "BF16", sh, [0])
            continue
        names = expand_names(re.findall(r"`([^`]*)`", name_cell))
        shapes = parse_shapes(shape_cell, sym)
        dtypes = [MD_DTYPES[x.strip()] for x in dtype_cell.split(",")]
        if len(shapes) == 1:
            shapes = shapes * len(names)
        if len(dtypes) == 1:
            dtypes = dtypes * len(names)
        assert len(shapes) == len(names) == len(dtypes), cells
        for nm, sh, dt in zip(names, shapes, dtypes):
            if section is None:
                layers = range(n_layers) if "{L}" in nm else [None]
                add(nm, dt, sh, layers)
            elif section == "kda":
                add(prefix + nm, dt, sh, kda)
            elif section == "mla":
                add(prefix + nm, dt, sh, mla)
            else:
                experts = range(sym["E"]) if "{E}" in nm else (None,)
                add(prefix + nm, dt, sh, moe, experts)
    return want


def read_shard(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header_bytes = raw[8 : 8 + n]
    assert n % 8 == 0, f"{path}: header length {n} is not a multiple of 8"
    header = json.loads(header_bytes)
    data = memoryview(raw)[8 + n :]
    meta = header.pop("__metadata__", None)
    assert meta == {"format": "pt"}, f"{path}: __metadata__ {meta}"
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    pos = 0
    for b, e, k in spans:
        assert b == pos, f"{path}: {k} starts at {b}, expected {pos} (gap or overlap)"
        v = header[k]
        numel = int(np.prod(v["shape"], dtype=np.int64))
        assert e - b == numel * DTYPES[v["dtype"]], f"{path}: {k} size"
        pos = e
    assert pos == len(data), f"{path}: data ends at {pos}, file data has {len(data)} bytes"
    return header, data


def as_f32(dtype, buf):
    if dtype == "BF16":
        u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
        return u.view(np.float32)
    if dtype == "F32":
        return np.frombuffer(buf, dtype="<f4")
    return None


def decode_mxfp4(packed, scale, in_features):
    """[out, in/2] U8 + [out, in/32] U8 -> [out, in] float64, by the book."""
    lo = packed & 0x0F
    hi = packed >> 4
    nib = np.empty((packed.shape[0], in_features), dtype=np.uint8)
    nib[:, 0::2] = lo  # element 2j: low nibble
    nib[:, 1::2] = hi  # element 2j+1: high nibble
    vals = E2M1[nib]
    s = np.ldexp(1.0, scale.astype(np.int64) - 127)
    return vals * np.repeat(s, 32, axis=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensors-md", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--samples")
    args = ap.parse_args()
    fails = []

    def check(cond, msg):
        if not cond:
            fails.append(msg)

    with open(os.path.join(args.checkpoint, "config.json")) as f:
        cfg = json.load(f)
    tc = cfg["text_config"]
    want = expected_layout(args.tensors_md, tc)

    with open(os.path.join(args.checkpoint, "model.safetensors.index.json")) as f:
        index = json.load(f)
    got, where, total, datas = {}, {}, 0, {}
    for shard in sorted(set(index["weight_map"].values())):
        header, data = read_shard(os.path.join(args.checkpoint, shard))
        for k, v in header.items():
            check(k not in got, f"{k} stored twice")
            got[k] = (v["dtype"], v["shape"])
            where[k] = shard
            datas[k] = (v, data)
            total += v["data_offsets"][1] - v["data_offsets"][0]
    check(index["metadata"]["total_size"] == total, "index total_size")
    check(set(index["weight_map"]) == set(got), "index weight_map names differ from the shards")
    check(all(index["weight_map"][k] == where[k] for k in got), "index names the wrong shard")

    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    check(not missing, f"{len(missing)} tensors missing, e.g. {missing[:3]}")
    check(not extra, f"{len(extra)} unexpected tensors, e.g. {extra[:3]}")
    wrong = [k for k in want if k in got and (got[k][0], list(got[k][1])) != (want[k][0], list(want[k][1]))]
    check(not wrong, f"{len(wrong)} tensors with the wrong dtype/shape, e.g. "
                     f"{[(k, got[k], want[k]) for k in wrong[:3]]}")
    print(f"layout: {len(got)} tensors in {len(set(where.values()))} shards; k3-tensors.md scaled to "
          f"the config expects {len(want)}; missing {len(missing)}, extra {len(extra)}, wrong {len(wrong)}")

    # Finite everywhere; MXFP4 scale rule on every block.
    n_blocks = 0
    for k, (v, data) in datas.items():
        b, e = v["data_offsets"]
        vals = as_f32(v["dtype"], data[b:e])
        if vals is not None:
            check(np.isfinite(vals).all(), f"{k}: NaN or Inf")
        if k.endswith(".weight_packed"):
            base = k[: -len(".weight_packed")]
            sv, sdata = datas[base + ".weight_scale"]
            out, half = v["shape"]
            packed = np.frombuffer(data[b:e], dtype=np.uint8).reshape(out, half)
            sb, se = sv["data_offsets"]
            scale = np.frombuffer(sdata[sb:se], dtype=np.uint8).reshape(out, half * 2 // 32)
            check((scale != 0xFF).all(), f"{k}: NaN scale")
            w = decode_mxfp4(packed, scale, half * 2)
            q = np.abs(w).reshape(out, -1, 32).max(axis=2) / np.ldexp(1.0, scale.astype(np.int64) - 127)
            check(((q >= 4) & (q <= 6)).all(), f"{k}: a block maximum outside [4, 6] after scaling")
            n_blocks += q.size
    print(f"values: all finite; {n_blocks} MXFP4 blocks decoded, every block maximum in [4, 6]")

    if args.samples:
        with open(args.samples) as f:
            samples = json.load(f)
        for s in samples:
            base, (r0, r1), n_in = s["linear"], s["rows"], s["in"]
            v, data = datas[base + ".weight_packed"]
            sv, sdata = datas[base + ".weight_scale"]
            b, e = v["data_offsets"]
            out = v["shape"][0]
            packed = np.frombuffer(data[b:e], dtype=np.uint8).reshape(out, n_in // 2)
            sb, se = sv["data_offsets"]
            scale = np.frombuffer(sdata[sb:se], dtype=np.uint8).reshape(out, n_in // 32)
            mine = decode_mxfp4(packed[r0:r1], scale[r0:r1], n_in).ravel()
            theirs = np.array(s["values"], dtype=np.float64)
            check(mine.shape == theirs.shape and np.array_equal(mine, theirs),
                  f"{base} rows {r0}-{r1}: hand decoding differs from k3's "
                  f"(max diff {np.max(np.abs(mine - theirs)) if mine.shape == theirs.shape else 'shape'})")
            # Swapping the nibble order must not also match (the check can fail).
            swapped = packed[r0:r1].copy()
            swapped = ((swapped & 0x0F) << 4) | (swapped >> 4)
            check(not np.array_equal(decode_mxfp4(swapped, scale[r0:r1], n_in).ravel(), theirs),
                  f"{base}: nibble order is not observable in the sample")
        print(f"samples: {len(samples)} MXFP4 row sets decoded by hand equal k3's decoding")

    for m in fails:
        print("FAIL:", m)
    print(f"{'FAILED' if fails else 'OK'}: {len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
