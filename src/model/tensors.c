/* tensors.c - the checkpoint layout a config implies (see tensors.h).
 *
 * Written as straight-line code per block kind so it can be read against
 * research/k3-tensors.md line by line. Kimi Linear differs in: no prefix, no
 * AttnRes tensors, A_log [1,1,H,1], low-rank output gate g_a/g_b, MLA without
 * q compression or output gate, experts on the full width in bf16, no latent
 * projections (research §1.7, §2.4, §2.5).
 *
 * dtypes: linears, norms and embeddings bf16; the KDA conv weights, A_log,
 * dt_bias and o_norm fp32 and the router bias fp32 (k3-tensors.md). The Kimi
 * Linear listing in the research notes gives shapes only; k3 assumes the same
 * fp32 set there (same modeling code lineage). The router weight gate.weight
 * is not treated as a linear (it is never quantized and is read in fp32). */
#include "model/tensors.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"

struct walk {
    const struct k3_model_config *cfg;
    k3_tensor_spec_fn fn;
    void *ctx;
    int layer, expert;
    enum k3_tensor_kind kind;
    char prefix[96];            /* "language_model.model.layers.12." etc. */
};

static int emit(struct walk *w, int is_linear, int mxfp4, enum k3_dtype dtype, const char *suffix,
                int n_dims, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    struct k3_tensor_spec s;
    memset(&s, 0, sizeof s);
    int len = snprintf(s.name, sizeof s.name, "%s%s", w->prefix, suffix);
    K3_CHECK(len >= 0 && (size_t)len < sizeof s.name, "tensor name %s%s is longer than %zu bytes", w->prefix,
             suffix, sizeof s.name - 1);
    s.is_linear = is_linear;
    s.mxfp4 = mxfp4;
    s.dtype = dtype;
    s.n_dims = n_dims;
    s.shape[0] = d0;
    s.shape[1] = d1;
    s.shape[2] = d2;
    s.shape[3] = d3;
    s.kind = w->kind;
    s.layer = w->layer;
    s.expert = w->expert;
    return w->fn(&s, w->ctx);
}

/* Shorthands: a bf16 linear [out, in], a 1-D vector, a general tensor. */
#define LIN(sfx, o, i) do { int rc_ = emit(w, 1, 0, K3_DTYPE_BF16, sfx, 2, o, i, 0, 0); if (rc_) return rc_; } while (0)
#define VEC(sfx, dt, n) do { int rc_ = emit(w, 0, 0, dt, sfx, 1, n, 0, 0, 0); if (rc_) return rc_; } while (0)
#define TEN(sfx, dt, nd, a, b, c, d) do { int rc_ = emit(w, 0, 0, dt, sfx, nd, a, b, c, d); if (rc_) return rc_; } while (0)

static int walk_kda(struct walk *w)
{
    const struct k3_model_config *c = w->cfg;
    const int64_t d = c->hidden_size, H = c->kda_n_heads, Dh = c->kda_head_dim;
    const int64_t HD = H * Dh, W = c->kda_conv_kernel;
    w->kind = K3_TK_KDA;
    LIN("self_attn.q_proj", HD, d);
    LIN("self_attn.k_proj", HD, d);
    LIN("self_attn.v_proj", HD, d);
    TEN("self_attn.q_conv1d.weight", K3_DTYPE_F32, 3, HD, 1, W, 0);
    TEN("self_attn.k_conv1d.weight", K3_DTYPE_F32, 3, HD, 1, W, 0);
    TEN("self_attn.v_conv1d.weight", K3_DTYPE_F32, 3, HD, 1, W, 0);
    if (c->arch == K3_ARCH_KIMI_K3)
        VEC("self_attn.A_log", K3_DTYPE_F32, Dh); /* padded to head_dim; first H used */
    else
        TEN("self_attn.A_log", K3_DTYPE_F32, 4, 1, 1, H, 1);
    VEC("self_attn.dt_bias", K3_DTYPE_F32, HD);
    LIN("self_attn.f_a_proj", Dh, d);
    LIN("self_attn.f_b_proj", HD, Dh);
    LIN("self_attn.b_proj", H, d);
    if (c->kda_use_full_rank_gate) {
        LIN("self_attn.g_proj", HD, d);
    } else {
        LIN("self_attn.g_a_proj", Dh, d);
        LIN("self_attn.g_b_proj", HD, Dh);
    }
    VEC("self_attn.o_norm.weight", K3_DTYPE_F32, Dh);
    LIN("self_attn.o_proj", d, HD);
    return 0;
}

static int walk_mla(struct walk *w)
{
    const struct k3_model_config *c = w->cfg;
    const int64_t d = c->hidden_size, Hm = c->n_heads;
    const int64_t qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    w->kind = K3_TK_MLA;
    if (c->q_lora_rank) {
        LIN("self_attn.q_a_proj", c->q_lora_rank, d);
        VEC("self_attn.q_a_layernorm.weight", K3_DTYPE_BF16, c->q_lora_rank);
        LIN("self_attn.q_b_proj", Hm * qk, c->q_lora_rank);
    } else {
        LIN("self_attn.q_proj", Hm * qk, d);
    }
    LIN("self_attn.kv_a_proj_with_mqa", c->kv_lora_rank + c->qk_rope_head_dim, d);
    VEC("self_attn.kv_a_layernorm.weight", K3_DTYPE_BF16, c->kv_lora_rank);
    LIN("self_attn.kv_b_proj", Hm * (c->qk_nope_head_dim + c->v_head_dim), c->kv_lora_rank);
    if (c->mla_use_output_gate) LIN("self_attn.g_proj", Hm * c->v_head_dim, d);
    LIN("self_attn.o_proj", d, Hm * c->v_head_dim);
    return 0;
}

static int walk_moe(struct walk *w)
{
    const struct k3_model_config *c = w->cfg;
    const int64_t d = c->hidden_size, m = c->moe_intermediate_size;
    const int64_t lw = k3_model_config_expert_width(c);
    char sfx[96];
    w->kind = K3_TK_ROUTER;
    TEN("block_sparse_moe.gate.weight", K3_DTYPE_BF16, 2, c->n_experts, d, 0, 0);
    VEC("block_sparse_moe.gate.e_score_correction_bias", K3_DTYPE_F32, c->n_experts);
    if (c->routed_expert_hidden_size) {
        w->kind = K3_TK_LATENT;
        LIN("block_sparse_moe.routed_expert_down_proj", lw, d);
    }
    w->kind = K3_TK_EXPERT;
    for (int e = 0; e < c->n_experts; e++) {
        w->expert = e;
        static const char *proj[3] = {"w1", "w3", "w2"};
        for (int p = 0; p < 3; p++) {
            snprintf(sfx, sizeof sfx, "block_sparse_moe.experts.%d.%s", e, proj[p]);
            int64_t out = p < 2 ? m : lw, in = p < 2 ? lw : m;
            int rc = emit(w, 1, c->experts_mxfp4, K3_DTYPE_BF16, sfx, 2, out, in, 0, 0);
            if (rc) return rc;
        }
    }
    w->expert = -1;
    if (c->routed_expert_hidden_size) {
        w->kind = K3_TK_LATENT;
        if (c->latent_moe_use_norm)
            VEC("block_sparse_moe.routed_expert_norm.weight", K3_DTYPE_BF16, lw);
        LIN("block_sparse_moe.routed_expert_up_proj", d, lw);
    }
    if (c->n_shared_experts) {
        const int64_t sm = c->n_shared_experts * m;
        w->kind = K3_TK_SHARED_EXPERT;
        LIN("block_sparse_moe.shared_experts.gate_proj", sm, d);
        LIN("block_sparse_moe.shared_experts.up_proj", sm, d);
        LIN("block_sparse_moe.shared_experts.down_proj", d, sm);
    }
    return 0;
}

static int walk_layer(struct walk *w, int l)
{
    const struct k3_model_config *c = w->cfg;
    const int64_t d = c->hidden_size;
    w->layer = l;
    w->expert = -1;
    snprintf(w->prefix, sizeof w->prefix, "%smodel.layers.%d.", c->tensor_prefix, l);
    w->kind = K3_TK_NORM;
    VEC("input_layernorm.weight", K3_DTYPE_BF16, d);
    VEC("post_attention_layernorm.weight", K3_DTYPE_BF16, d);
    if (c->attn_res_block_size) {
        w->kind = K3_TK_ATTN_RES;
        VEC("self_attention_res_norm.weight", K3_DTYPE_BF16, d);
        TEN("self_attention_res_proj.weight", K3_DTYPE_BF16, 2, 1, d, 0, 0);
        VEC("mlp_res_norm.weight", K3_DTYPE_BF16, d);
        TEN("mlp_res_proj.weight", K3_DTYPE_BF16, 2, 1, d, 0, 0);
    }
    int rc = k3_model_config_layer_is_mla(c, l) ? walk_mla(w) : walk_kda(w);
    if (rc) return rc;
    if (k3_model_config_layer_is_moe(c, l)) return walk_moe(w);
    w->kind = K3_TK_DENSE_MLP;
    LIN("mlp.gate_proj", c->intermediate_size, d);
    LIN("mlp.up_proj", c->intermediate_size, d);
    LIN("mlp.down_proj", d, c->intermediate_size);
    return 0;
}

int k3_model_tensors_foreach(const struct k3_model_config *cfg, int layer_lo, int layer_hi,
                             k3_tensor_spec_fn fn, void *ctx)
{
    struct walk wk = {.cfg = cfg, .fn = fn, .ctx = ctx, .layer = -1, .expert = -1};
    struct walk *w = &wk;
    const int64_t d = cfg->hidden_size, V = cfg->vocab_size;
    if (layer_lo < 0) layer_lo = 0;
    if (layer_hi > cfg->n_layers - 1) layer_hi = cfg->n_layers - 1;
    snprintf(w->prefix, sizeof w->prefix, "%smodel.", cfg->tensor_prefix);
    w->kind = K3_TK_EMBED;
    TEN("embed_tokens.weight", K3_DTYPE_BF16, 2, V, d, 0, 0);
    for (int l = layer_lo; l <= layer_hi; l++) {
        int rc = walk_layer(w, l);
        if (rc) return rc;
    }
    w->layer = -1;
    w->expert = -1;
    snprintf(w->prefix, sizeof w->prefix, "%smodel.", cfg->tensor_prefix);
    if (cfg->attn_res_block_size) {
        w->kind = K3_TK_ATTN_RES;
        VEC("output_attn_res_norm.weight", K3_DTYPE_BF16, d);
        TEN("output_attn_res_proj.weight", K3_DTYPE_BF16, 2, 1, d, 0, 0);
    }
    w->kind = K3_TK_NORM;
    VEC("norm.weight", K3_DTYPE_BF16, d);
    snprintf(w->prefix, sizeof w->prefix, "%s", cfg->tensor_prefix);
    w->kind = K3_TK_HEAD;
    LIN("lm_head", V, d);
    return 0;
}

char *k3_model_tensor_name(const struct k3_model_config *cfg, char *buf, size_t n,
                           const char *fmt, ...)
{
    int k = snprintf(buf, n, "%s", cfg->tensor_prefix);
    if (k < 0 || (size_t)k >= n) return buf;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + k, n - (size_t)k, fmt, ap);
    va_end(ap);
    return buf;
}

const char *k3_tensor_kind_name(enum k3_tensor_kind kind)
{
    static const char *names[K3_TK_COUNT] = {
        [K3_TK_EMBED] = "embedding", [K3_TK_HEAD] = "lm_head", [K3_TK_NORM] = "norms",
        [K3_TK_ATTN_RES] = "attn_res", [K3_TK_KDA] = "kda", [K3_TK_MLA] = "mla",
        [K3_TK_DENSE_MLP] = "dense_mlp", [K3_TK_ROUTER] = "router", [K3_TK_LATENT] = "latent_proj",
        [K3_TK_EXPERT] = "routed_experts", [K3_TK_SHARED_EXPERT] = "shared_experts",
    };
    return (unsigned)kind < K3_TK_COUNT ? names[kind] : "?";
}

int64_t k3_tensor_spec_numel(const struct k3_tensor_spec *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->n_dims; i++) n *= s->shape[i];
    return n;
}

uint64_t k3_tensor_spec_bytes(const struct k3_tensor_spec *s)
{
    uint64_t n = (uint64_t)k3_tensor_spec_numel(s);
    if (s->is_linear && s->mxfp4) return n / 2 + n / 32;
    return n * k3_dtype_bytes(s->dtype);
}

static int count_one(const struct k3_tensor_spec *s, void *ctx)
{
    struct k3_model_counts *c = ctx;
    c->n_tensors[s->kind] += s->is_linear && s->mxfp4 ? 2 : 1;
    c->params[s->kind] += k3_tensor_spec_numel(s);
    c->bytes[s->kind] += k3_tensor_spec_bytes(s);
    return 0;
}

int k3_model_counts_compute(const struct k3_model_config *cfg, int layer_lo, int layer_hi,
                            struct k3_model_counts *out)
{
    memset(out, 0, sizeof *out);
    int rc = k3_model_tensors_foreach(cfg, layer_lo, layer_hi, count_one, out);
    if (rc) return rc;
    double frac = (double)cfg->n_experts_per_token / cfg->n_experts;
    for (int k = 0; k < K3_TK_COUNT; k++) {
        out->n_tensors_total += out->n_tensors[k];
        out->params_total += out->params[k];
        out->bytes_total += out->bytes[k];
        if (k == K3_TK_EXPERT) {
            /* Every MoE layer has the same expert count, so the share is exact. */
            out->params_active += (int64_t)(out->params[k] / cfg->n_experts) *
                                  cfg->n_experts_per_token;
            out->bytes_active += (double)out->bytes[k] * frac;
        } else {
            out->params_active += out->params[k];
            out->bytes_active += (double)out->bytes[k];
        }
    }
    return 0;
}
