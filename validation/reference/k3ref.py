"""k3ref - an independent float64 reference of the Kimi K3 / Kimi Linear forward pass.

Written from the published equations as restated in shared/research/model-architecture.md
(§1 KDA, §2 MLA / MoE / router, §3.3 Block AttnRes, §4.2 Stable LatentMoE + SiTU, §5 MXFP4,
§8 K3, §10 confirmations), not from the C code. Everything is numpy float64; weights are read
from the safetensors files as stored (bf16/f16/f32/f8 widened exactly, MXFP4 dequantised
exactly) and then used in float64.

The whole sequence is processed at once: attention is a masked softmax over all positions,
KDA is the token-by-token recurrence (the definition, not the chunked form).

Named intermediates (the same names as `k3 logits --dump`), each [n_tokens, width]:
  embed                       token embeddings
  L{l}.attn_in                input of the attention sub-layer (after the AttnRes mix for K3;
                              the residual stream for Kimi Linear)
  L{l}.attn_norm              input_layernorm output
  L{l}.kda.q, .k, .v          [n, H*K] after conv + SiLU and L2 norm (q also scaled by K^-1/2)
  L{l}.kda.g, L{l}.kda.beta   log decay [n, H*K], beta [n, H] (after the sigmoid)
  L{l}.mla.q                  [n, H*(dn+dr)] queries
  L{l}.mla.latent             [n, r+dr] the latent cache rows: RMSNorm(c_kv) | k_pe
  L{l}.kda.o / L{l}.mla.o     core output per head, concatenated [n, H*dv], before the output
                              gate/norm and o_proj
  L{l}.moe.latent_in          [n, l] latent down-projection (K3)
  L{l}.moe.routed             [n, l or d] weighted sum of the routed experts (before the latent
                              norm / up-projection and before the shared experts)
  L{l}.attn_out               o_proj output
  L{l}.mlp_in                 input of the MLP sub-layer (after the AttnRes mix / residual add)
  L{l}.mlp_norm               post_attention_layernorm output
  L{l}.mlp_out                MLP / MoE output (before the residual add)
  L{l}.out                    the residual stream after the layer (K3: the partial sum P)
  final_in                    input of the final norm (after the output AttnRes mix for K3)
  final_norm                  the final norm output (what lm_head sees)
  logits                      [n, vocab]
"""
import json
import os
import struct

import numpy as np

# ----------------------------------------------------------------------------- safetensors

_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def _f8e4m3_table():
    t = np.zeros(256, dtype=np.float64)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        e = (b >> 3) & 0xF
        m = b & 7
        if e == 0xF and m == 7:
            t[b] = np.nan
        elif e == 0:
            t[b] = s * (m / 8.0) * 2.0 ** -6
        else:
            t[b] = s * (1 + m / 8.0) * 2.0 ** (e - 7)
    return t


_F8 = _f8e4m3_table()


class Checkpoint:
    """Reads every tensor of a checkpoint directory (index + shards, or one file)."""

    def __init__(self, path):
        self.path = path
        idx = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(idx):
            with open(idx) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        self.raw = {}
        for fn in files:
            with open(os.path.join(path, fn), "rb") as f:
                data = f.read()
            (hlen,) = struct.unpack("<Q", data[:8])
            header = json.loads(data[8:8 + hlen])
            base = 8 + hlen
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                a, b = info["data_offsets"]
                self.raw[name] = (info["dtype"], tuple(info["shape"]), data[base + a:base + b])

    def has(self, name):
        return name in self.raw

    def get(self, name):
        """The tensor as float64 (or uint8 for U8), in its stored shape."""
        dt, shape, buf = self.raw[name]
        if dt == "F32":
            a = np.frombuffer(buf, dtype="<f4").astype(np.float64)
        elif dt == "F64":
            a = np.frombuffer(buf, dtype="<f8").astype(np.float64)
        elif dt == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        elif dt == "F16":
            a = np.frombuffer(buf, dtype="<f2").astype(np.float64)
        elif dt == "F8_E4M3":
            a = _F8[np.frombuffer(buf, dtype=np.uint8)]
        elif dt == "U8":
            return np.frombuffer(buf, dtype=np.uint8).reshape(shape)
        else:
            raise ValueError(f"{name}: dtype {dt} not supported by the reference")
        return a.reshape(shape)

    def linear(self, base):
        """A linear layer's weight [out, in] as float64: plain `.weight`, or MXFP4
        (`weight_packed` U8 [out, in/2], element 2j in the low nibble; `weight_scale`
        U8 E8M0 [out, in/32]): value = E2M1[nibble] * 2^(scale - 127)."""
        if self.has(base + ".weight"):
            return self.get(base + ".weight")
        packed = self.get(base + ".weight_packed")
        scale = self.get(base + ".weight_scale")
        out, half = packed.shape
        nib = np.empty((out, half * 2), dtype=np.uint8)
        nib[:, 0::2] = packed & 0xF
        nib[:, 1::2] = packed >> 4
        vals = _E2M1[nib]
        exps = np.repeat(scale.astype(np.float64) - 127.0, 32, axis=1)[:, :half * 2]
        w = vals * np.exp2(exps)
        w[np.repeat(scale == 0xFF, 32, axis=1)[:, :half * 2]] = np.nan
        return w


# ---------------------------------------------------------------------------------- config

class Config:
    def __init__(self, path):
        with open(os.path.join(path, "config.json")) as f:
            top = json.load(f)
        self.is_k3 = "text_config" in top
        c = top["text_config"] if self.is_k3 else top
        self.prefix = "language_model." if self.is_k3 else ""
        g = lambda k, d=None: c.get(k, top.get(k, d))
        self.vocab = g("vocab_size")
        self.d = c["hidden_size"]
        self.n_layers = c["num_hidden_layers"]
        self.eps = c.get("rms_norm_eps", 1e-5)
        self.inter = c.get("intermediate_size")
        self.act = c.get("hidden_act", "silu")
        self.situ_beta = c.get("activation_situ_beta", 4.0)
        self.situ_lin = c.get("activation_situ_linear_beta", 25.0)
        self.n_heads = c["num_attention_heads"]
        self.q_lora = c.get("q_lora_rank")
        self.kv_lora = c["kv_lora_rank"]
        self.nope = c["qk_nope_head_dim"]
        self.rope = c["qk_rope_head_dim"]
        self.vdim = c["v_head_dim"]
        self.mla_gate = bool(c.get("mla_use_output_gate", False))
        lac = c["linear_attn_config"]
        self.kda_layers = set(i - 1 for i in lac["kda_layers"])   # published 1-based
        self.kda_heads = lac["num_heads"]
        self.kda_dim = lac["head_dim"]
        self.conv_w = lac.get("short_conv_kernel_size", 4)
        self.lower_bound = lac.get("gate_lower_bound")
        self.full_rank_gate = bool(lac.get("use_full_rank_gate", False))
        self.block = c.get("attn_res_block_size") or 0
        self.first_dense = c.get("first_k_dense_replace", 1)
        self.moe_freq = c.get("moe_layer_freq", 1)
        self.n_experts = c["num_experts"]
        self.topk = c["num_experts_per_token"]
        self.n_shared = c.get("num_shared_experts", 0)
        self.moe_inter = c["moe_intermediate_size"]
        self.latent = c.get("routed_expert_hidden_size") or 0
        self.latent_norm = bool(c.get("latent_moe_use_norm", False))
        self.renorm = bool(c.get("moe_renormalize", True))
        self.rsf = c.get("routed_scaling_factor", 1.0)


# ---------------------------------------------------------------------------------- blocks

def rmsnorm(x, w, eps):
    """weight * x / sqrt(mean(x^2) + eps) over the last axis (no bf16 rounding)."""
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def silu(x):
    return x * sigmoid(x)


def glu(cfg, gate, up):
    if cfg.act == "situ":
        # SiTU-GLU (§4.2): [b tanh(g/b) sigmoid(g)] * [b_lin tanh(u/b_lin)]
        b, bl = cfg.situ_beta, cfg.situ_lin
        return (b * np.tanh(gate / b) * sigmoid(gate)) * (bl * np.tanh(up / bl))
    return silu(gate) * up


def mlp(cfg, x, w_gate, w_up, w_down):
    return glu(cfg, x @ w_gate.T, x @ w_up.T) @ w_down.T


def short_conv(x, w):
    """Causal depthwise conv, zero history, then SiLU. x [n, D], w [D, W]: tap W-1 is the
    current token."""
    n, _ = x.shape
    W = w.shape[1]
    xp = np.concatenate([np.zeros((W - 1, x.shape[1])), x], axis=0)
    c = np.zeros_like(x)
    for j in range(W):
        c += w[:, j] * xp[j:j + n]
    return silu(c)


def kda_inputs(cfg, ck, pre, x):
    """KDA's inputs to the delta rule (§1.2 steps 1-7) from the normed input x [n, d]:
    q [n,H,K] L2-normalised (NOT yet scaled), k [n,H,K] L2-normalised, v [n,H,K],
    g [n,H,K] log decay, beta [n,H]."""
    H, K = cfg.kda_heads, cfg.kda_dim
    n = x.shape[0]
    lin = lambda nm: ck.linear(pre + nm)
    conv = lambda nm: ck.get(pre + nm).reshape(H * K, -1)
    q = short_conv(x @ lin("q_proj").T, conv("q_conv1d.weight")).reshape(n, H, K)
    k = short_conv(x @ lin("k_proj").T, conv("k_conv1d.weight")).reshape(n, H, K)
    v = short_conv(x @ lin("v_proj").T, conv("v_conv1d.weight")).reshape(n, H, K)
    q = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True) + 1e-6)
    k = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + 1e-6)
    f = ((x @ lin("f_a_proj").T) @ lin("f_b_proj").T).reshape(n, H, K)
    a_log = ck.get(pre + "A_log").reshape(-1)[:H]          # K3 pads A_log to 128; first H used
    A = np.exp(a_log)[None, :, None]
    z = f + ck.get(pre + "dt_bias").reshape(H, K)[None]
    if cfg.lower_bound is not None:
        g = cfg.lower_bound * sigmoid(A * z)
    else:
        g = -A * np.logaddexp(0.0, z)                        # -exp(A_log) * softplus
    beta = sigmoid(x @ lin("b_proj").T)                      # [n, H]
    return q, k, v, g, beta


def kda(cfg, ck, pre, x, dump, tag):
    """One KDA layer (§1.2) on the normed input x [n, d]."""
    H, K = cfg.kda_heads, cfg.kda_dim
    n = x.shape[0]
    lin = lambda nm: ck.linear(pre + nm)
    q, k, v, g, beta = kda_inputs(cfg, ck, pre, x)
    q = q * K ** -0.5
    for nm, a in (("q", q), ("k", k), ("v", v), ("g", g)):
        dump(f"{tag}.kda.{nm}", a.reshape(n, H * K))
    dump(tag + ".kda.beta", beta)
    S = np.zeros((H, K, K))                                  # [H, K(key), V(value)]
    o = np.zeros((n, H, K))
    for t in range(n):
        S = S * np.exp(g[t])[:, :, None]
        delta = beta[t][:, None] * (v[t] - np.einsum("hk,hkv->hv", k[t], S))
        S = S + k[t][:, :, None] * delta[:, None, :]
        o[t] = np.einsum("hk,hkv->hv", q[t], S)
    dump(tag + ".kda.o", o.reshape(n, H * K))
    if cfg.full_rank_gate:
        gate = x @ lin("g_proj").T
    else:
        gate = (x @ lin("g_a_proj").T) @ lin("g_b_proj").T
    y = rmsnorm(o, ck.get(pre + "o_norm.weight"), cfg.eps) * sigmoid(gate.reshape(n, H, K))
    return y.reshape(n, H * K) @ lin("o_proj").T


def mla(cfg, ck, pre, x, dump, tag):
    """One NoPE MLA layer (§2.4) on the normed input x [n, d]; causal over the sequence."""
    H, dn, dr, dv, r = cfg.n_heads, cfg.nope, cfg.rope, cfg.vdim, cfg.kv_lora
    n = x.shape[0]
    lin = lambda nm: ck.linear(pre + nm)
    if cfg.q_lora:
        q = rmsnorm(x @ lin("q_a_proj").T, ck.get(pre + "q_a_layernorm.weight"), 1e-6) @ lin("q_b_proj").T
    else:
        q = x @ lin("q_proj").T
    dump(tag + ".mla.q", q)
    q = q.reshape(n, H, dn + dr)
    kva = x @ lin("kv_a_proj_with_mqa").T
    c_kv = rmsnorm(kva[:, :r], ck.get(pre + "kv_a_layernorm.weight"), 1e-6)
    k_pe = kva[:, r:]                                        # [n, dr], shared by all heads
    dump(tag + ".mla.latent", np.concatenate([c_kv, k_pe], axis=1))
    kv = (c_kv @ lin("kv_b_proj").T).reshape(n, H, dn + dv)
    k_nope, v = kv[:, :, :dn], kv[:, :, dn:]
    s = (np.einsum("ihc,jhc->hij", q[:, :, :dn], k_nope) +
         np.einsum("ihc,jc->hij", q[:, :, dn:], k_pe)) * (dn + dr) ** -0.5
    s = np.where(np.tril(np.ones((n, n), dtype=bool))[None], s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = np.einsum("hij,jhc->ihc", p, v).reshape(n, H * dv)
    dump(tag + ".mla.o", o)
    if cfg.mla_gate:
        o = o * sigmoid(x @ lin("g_proj").T)
    return o @ lin("o_proj").T


def moe(cfg, ck, pre, x, dump, tag):
    """Router + routed experts (+ K3 latent projections and norm) + shared experts (§2.5, §4.2)."""
    n = x.shape[0]
    s = sigmoid(x @ ck.linear(pre + "gate").T)               # [n, E]
    bias_name = pre + "gate.e_score_correction_bias"
    c = s + (ck.get(bias_name) if ck.has(bias_name) else 0.0)
    idx = np.argsort(-c, axis=-1, kind="stable")[:, :cfg.topk]
    w = np.take_along_axis(s, idx, axis=-1)
    if cfg.renorm and cfg.topk > 1:
        w = w / (w.sum(axis=-1, keepdims=True) + 1e-20)
    w = w * cfg.rsf
    z = x @ ck.linear(pre + "routed_expert_down_proj").T if cfg.latent else x
    if cfg.latent:
        dump(tag + ".moe.latent_in", z)
    y = np.zeros_like(z)
    for e in np.unique(idx):
        rows, slot = np.nonzero(idx == e)
        ep = f"{pre}experts.{e}."
        out = mlp(cfg, z[rows], ck.linear(ep + "w1"), ck.linear(ep + "w3"), ck.linear(ep + "w2"))
        y[rows] += w[rows, slot][:, None] * out
    dump(tag + ".moe.routed", y)
    if cfg.latent:
        if cfg.latent_norm:
            y = rmsnorm(y, ck.get(pre + "routed_expert_norm.weight"), cfg.eps)
        y = y @ ck.linear(pre + "routed_expert_up_proj").T
    if cfg.n_shared:
        sp = pre + "shared_experts."
        y = y + mlp(cfg, x, ck.linear(sp + "gate_proj"), ck.linear(sp + "up_proj"), ck.linear(sp + "down_proj"))
    return y


def attn_res(ck, name, cands, eps):
    """AR(P, B) of §3.3: softmax over candidates of (V_j / rms(V_j)) . (norm.weight * proj.weight),
    weighted sum of the raw candidates."""
    q = ck.get(name + "_norm.weight") * ck.get(name + "_proj.weight").reshape(-1)
    V = np.stack(cands)                                      # [m, n, d]
    s = np.einsum("mnd,d->mn", V / np.sqrt(np.mean(V * V, axis=-1, keepdims=True) + eps), q)
    a = np.exp(s - s.max(axis=0, keepdims=True))
    a /= a.sum(axis=0, keepdims=True)
    return np.einsum("mn,mnd->nd", a, V)


# --------------------------------------------------------------------------------- forward

def forward(path, ids, want=None):
    """Logits [n, vocab] (float64) for one sequence, and the intermediates named in `want`
    (a set of names, or None for all)."""
    cfg = Config(path)
    ck = Checkpoint(path)
    P = cfg.prefix
    inter = {}

    def dump(name, a):
        if want is None or name in want:
            inter[name] = np.array(a, dtype=np.float64)

    ids = np.asarray(ids, dtype=np.int64)
    h = ck.get(P + "model.embed_tokens.weight")[ids]
    dump("embed", h)
    B = []                                                   # AttnRes block snapshots (K3)
    for l in range(cfg.n_layers):
        pre = f"{P}model.layers.{l}."
        tag = f"L{l}"
        # --- attention sub-layer
        if cfg.block:
            a_in = attn_res(ck, pre + "self_attention_res", B + [h], cfg.eps) if B else h
            if l % cfg.block == 0:
                B.append(h)
                h = None
        else:
            a_in = h
        dump(tag + ".attn_in", a_in)
        xn = rmsnorm(a_in, ck.get(pre + "input_layernorm.weight"), cfg.eps)
        dump(tag + ".attn_norm", xn)
        if l in cfg.kda_layers:
            a = kda(cfg, ck, pre + "self_attn.", xn, dump, tag)
        else:
            a = mla(cfg, ck, pre + "self_attn.", xn, dump, tag)
        dump(tag + ".attn_out", a)
        if cfg.block:
            h = a if h is None else h + a
            m_in = attn_res(ck, pre + "mlp_res", B + [h], cfg.eps)
        else:
            h = a_in + a
            m_in = h
        dump(tag + ".mlp_in", m_in)
        # --- MLP sub-layer
        xn = rmsnorm(m_in, ck.get(pre + "post_attention_layernorm.weight"), cfg.eps)
        dump(tag + ".mlp_norm", xn)
        if l >= cfg.first_dense and l % cfg.moe_freq == 0:
            m = moe(cfg, ck, pre + "block_sparse_moe.", xn, dump, tag)
        else:
            mp = pre + "mlp."
            m = mlp(cfg, xn, ck.linear(mp + "gate_proj"), ck.linear(mp + "up_proj"), ck.linear(mp + "down_proj"))
        dump(tag + ".mlp_out", m)
        h = h + m if cfg.block else m_in + m
        dump(tag + ".out", h)
    if cfg.block:
        h = attn_res(ck, P + "model.output_attn_res", B + [h], cfg.eps)
    dump("final_in", h)
    hn = rmsnorm(h, ck.get(P + "model.norm.weight"), cfg.eps)
    dump("final_norm", hn)
    head = P + "lm_head" if ck.has(P + "lm_head.weight") or ck.has(P + "lm_head.weight_packed") else "lm_head"
    logits = hn @ ck.linear(head).T
    dump("logits", logits)
    return logits, inter


def main():
    import argparse
    ap = argparse.ArgumentParser(description="float64 reference forward pass (one sequence)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True, help="logits .npy (float64)")
    ap.add_argument("--dump-dir", help="write every intermediate as NAME.npy here")
    a = ap.parse_args()
    ids = [int(t) for t in a.ids.split(",")]
    logits, inter = forward(a.model, ids, None if a.dump_dir else set())
    np.save(a.out, logits)
    if a.dump_dir:
        os.makedirs(a.dump_dir, exist_ok=True)
        for k, v in inter.items():
            np.save(os.path.join(a.dump_dir, k + ".npy"), v)


if __name__ == "__main__":
    main()
