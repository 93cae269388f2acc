/* weights.c - see weights.h. */
#include "model/weights.h"

#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "model/tensors.h"

struct loader {
    const struct k3_model_config *cfg;
    const struct k3_checkpoint *ck;
    struct k3_weights *w;
    struct k3_err *err;
};

/* An allocation owned by the weights (freed by k3_weights_free). */
static void *own_bytes(struct loader *L, size_t bytes)
{
    struct k3_weights *w = L->w;
    if (w->n_owned == w->cap_owned) {
        int cap = w->cap_owned ? 2 * w->cap_owned : 256;
        void **p = realloc(w->owned, sizeof(void *) * (size_t)cap);
        if (!p) return NULL;
        w->owned = p;
        w->cap_owned = cap;
    }
    void *f = malloc(bytes ? bytes : 1);
    if (f) w->owned[w->n_owned++] = f;
    return f;
}

static float *own(struct loader *L, int64_t n) { return own_bytes(L, sizeof(float) * (size_t)n); }

/* A non-linear tensor as fp32: its first n elements (n <= numel; A_log of K3
 * is stored padded, §10.3). Exact widening of f32/bf16/f16. */
static int vec(struct loader *L, float **out, int64_t n, const char *fmt, int layer)
{
    char name[K3_TENSOR_NAME_BYTES];
    k3_model_tensor_name(L->cfg, name, sizeof name, fmt, layer);
    const struct k3_tensor *t;
    if (k3_checkpoint_get(L->ck, name, &t, L->err)) return -1;
    int64_t numel = 1;
    for (int i = 0; i < t->n_dims; i++) numel *= t->shape[i];
    if (numel < n)
        return k3_err_set(L->err, "tensor %s has %lld elements, the config implies at least %lld",
                          name, (long long)numel, (long long)n);
    float *f = own(L, n);
    if (!f) return k3_err_set(L->err, "out of memory reading %s", name);
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case K3_DTYPE_F32: memcpy(&f[i], (const char *)t->data + 4 * i, 4); break;
        case K3_DTYPE_BF16: {
            uint16_t h;
            memcpy(&h, (const char *)t->data + 2 * i, 2);
            f[i] = k3_bf16_to_f32(h);
            break;
        }
        case K3_DTYPE_F16: {
            uint16_t h;
            memcpy(&h, (const char *)t->data + 2 * i, 2);
            f[i] = k3_f16_to_f32(h);
            break;
        }
        default:
            return k3_err_set(L->err, "tensor %s has dtype %s; expected F32, BF16 or F16", name,
                              k3_dtype_name(t->dtype));
        }
    }
    *out = f;
    return 0;
}

static int vec_opt(struct loader *L, float **out, int64_t n, const char *fmt, int layer)
{
    char name[K3_TENSOR_NAME_BYTES];
    k3_model_tensor_name(L->cfg, name, sizeof name, fmt, layer);
    *out = NULL;
    if (!k3_checkpoint_find(L->ck, name)) return 0;
    return vec(L, out, n, fmt, layer);
}

static int mat_from_linear(struct loader *L, const struct k3_linear *lin, const char *base,
                           struct k3_mat *m)
{
    memset(m, 0, sizeof *m);
    m->rows = lin->out;
    m->cols = lin->in;
    m->ld = lin->in;
    if (lin->mxfp4) {
        m->fmt = K3_WFMT_MXFP4;
        m->data = lin->packed->data;
        m->scale = (const uint8_t *)lin->scale->data;
        if (lin->in % 32)
            return k3_err_set(L->err, "MXFP4 linear %s has %lld inputs, not a multiple of 32", base,
                              (long long)lin->in);
        return 0;
    }
    m->data = lin->weight->data;
    switch (lin->weight->dtype) {
    case K3_DTYPE_F32: m->fmt = K3_WFMT_F32; break;
    case K3_DTYPE_BF16: m->fmt = K3_WFMT_BF16; break;
    case K3_DTYPE_F16: m->fmt = K3_WFMT_F16; break;
    case K3_DTYPE_F8_E4M3: m->fmt = K3_WFMT_F8_E4M3; break;
    default:
        return k3_err_set(L->err, "linear %s has dtype %s", base, k3_dtype_name(lin->weight->dtype));
    }
    return 0;
}

/* A linear by its name without prefix and ".weight"; checks its shape when
 * rows/cols > 0. */
static int mat_base(struct loader *L, struct k3_mat *m, int64_t rows, int64_t cols, const char *name)
{
    char base[K3_TENSOR_NAME_BYTES];
    k3_model_tensor_name(L->cfg, base, sizeof base, "%s", name);
    struct k3_linear lin;
    if (k3_checkpoint_linear(L->ck, base, &lin, L->err)) return -1;
    if ((rows > 0 && lin.out != rows) || (cols > 0 && lin.in != cols))
        return k3_err_set(L->err, "linear %s is [%lld, %lld]; the config implies [%lld, %lld]", base,
                          (long long)lin.out, (long long)lin.in, (long long)rows, (long long)cols);
    return mat_from_linear(L, &lin, base, m);
}

/* The same with a format holding the layer number. */
static int mat(struct loader *L, struct k3_mat *m, int64_t rows, int64_t cols, const char *fmt, int layer)
{
    char name[K3_TENSOR_NAME_BYTES];
    snprintf(name, sizeof name, fmt, layer);
    return mat_base(L, m, rows, cols, name);
}

/* AttnRes: q = norm.weight ⊙ proj.weight, folded once (§10.1). */
static int attn_res_q(struct loader *L, float **q, const char *norm_fmt, const char *proj_fmt, int layer)
{
    int64_t d = L->cfg->hidden_size;
    float *nw, *pw;
    if (vec(L, &nw, d, norm_fmt, layer) || vec(L, &pw, d, proj_fmt, layer)) return -1;
    for (int64_t i = 0; i < d; i++) nw[i] *= pw[i];
    *q = nw;
    return 0;
}

static int load_kda(struct loader *L, int l, struct k3_kda_weights *k)
{
    const struct k3_model_config *c = L->cfg;
    int64_t d = c->hidden_size, H = c->kda_n_heads, K = c->kda_head_dim, HK = H * K;
    int W = c->kda_conv_kernel;
#define P "model.layers.%d.self_attn."
    if (mat(L, &k->q, HK, d, P "q_proj", l) || mat(L, &k->k, HK, d, P "k_proj", l) ||
        mat(L, &k->v, HK, d, P "v_proj", l) ||
        vec(L, &k->q_conv, HK * W, P "q_conv1d.weight", l) ||
        vec(L, &k->k_conv, HK * W, P "k_conv1d.weight", l) ||
        vec(L, &k->v_conv, HK * W, P "v_conv1d.weight", l) ||
        vec(L, &k->a_log, H, P "A_log", l) || vec(L, &k->dt_bias, HK, P "dt_bias", l) ||
        mat(L, &k->f_a, 0, d, P "f_a_proj", l) || mat(L, &k->f_b, HK, k->f_a.rows, P "f_b_proj", l) ||
        mat(L, &k->b, H, d, P "b_proj", l) || vec(L, &k->o_norm, K, P "o_norm.weight", l) ||
        mat(L, &k->o, d, HK, P "o_proj", l))
        return -1;
    if (c->kda_use_full_rank_gate) return mat(L, &k->g, HK, d, P "g_proj", l);
    if (mat(L, &k->g_a, 0, d, P "g_a_proj", l) || mat(L, &k->g_b, HK, k->g_a.rows, P "g_b_proj", l))
        return -1;
    return 0;
}

static int load_mla(struct loader *L, int l, struct k3_mla_weights *m)
{
    const struct k3_model_config *c = L->cfg;
    int64_t d = c->hidden_size, H = c->n_heads, dn = c->qk_nope_head_dim, dr = c->qk_rope_head_dim;
    int64_t dv = c->v_head_dim, r = c->kv_lora_rank, ql = c->q_lora_rank;
    if (ql > 0) {
        if (mat(L, &m->q_a, ql, d, P "q_a_proj", l) || vec(L, &m->q_a_norm, ql, P "q_a_layernorm.weight", l) ||
            mat(L, &m->q_b, H * (dn + dr), ql, P "q_b_proj", l))
            return -1;
    } else if (mat(L, &m->q, H * (dn + dr), d, P "q_proj", l)) {
        return -1;
    }
    if (mat(L, &m->kv_a, r + dr, d, P "kv_a_proj_with_mqa", l) ||
        vec(L, &m->kv_a_norm, r, P "kv_a_layernorm.weight", l) ||
        mat(L, &m->kv_b, H * (dn + dv), r, P "kv_b_proj", l) || mat(L, &m->o, d, H * dv, P "o_proj", l))
        return -1;
    if (c->mla_use_output_gate) return mat(L, &m->g, H * dv, d, P "g_proj", l);
    return 0;
#undef P
}

static int load_moe(struct loader *L, int l, struct k3_moe_weights *m)
{
    const struct k3_model_config *c = L->cfg;
    int64_t d = c->hidden_size, E = c->n_experts, lw = k3_model_config_expert_width(c);
    int64_t mi = c->moe_intermediate_size;
#define P "model.layers.%d.block_sparse_moe."
    if (mat(L, &m->router, E, d, P "gate", l) ||
        vec_opt(L, &m->router_bias, E, P "gate.e_score_correction_bias", l))
        return -1;
    if (c->routed_expert_hidden_size) {
        if (mat(L, &m->latent_down, lw, d, P "routed_expert_down_proj", l) ||
            mat(L, &m->latent_up, d, lw, P "routed_expert_up_proj", l))
            return -1;
        if (c->latent_moe_use_norm && vec(L, &m->latent_norm, lw, P "routed_expert_norm.weight", l))
            return -1;
    }
    struct k3_mat *ws = own_bytes(L, sizeof(struct k3_mat) * (size_t)(3 * E));
    if (!ws) return k3_err_set(L->err, "out of memory");
    m->w1 = ws;
    m->w3 = ws + E;
    m->w2 = ws + 2 * E;
    for (int e = 0; e < E; e++) {
        char f[3][128];
        for (int j = 0; j < 3; j++)
            snprintf(f[j], sizeof f[j], "model.layers.%d.block_sparse_moe.experts.%d.w%d", l, e, j + 1);
        if (mat_base(L, &m->w1[e], mi, lw, f[0]) || mat_base(L, &m->w2[e], lw, mi, f[1]) ||
            mat_base(L, &m->w3[e], mi, lw, f[2]))
            return -1;
    }
    if (c->n_shared_experts > 0) {
        int64_t si = c->n_shared_experts * mi;
        m->has_shared = 1;
        if (mat(L, &m->shared.gate, si, d, P "shared_experts.gate_proj", l) ||
            mat(L, &m->shared.up, si, d, P "shared_experts.up_proj", l) ||
            mat(L, &m->shared.down, d, si, P "shared_experts.down_proj", l))
            return -1;
    }
#undef P
    return 0;
}

int k3_weights_load(const struct k3_model_config *cfg, const struct k3_checkpoint *ck,
                    struct k3_weights *w, struct k3_err *err)
{
    memset(w, 0, sizeof *w);
    w->cfg = cfg;
    struct loader L = {.cfg = cfg, .ck = ck, .w = w, .err = err};
    int64_t d = cfg->hidden_size, V = cfg->vocab_size;
    int attn_res = cfg->attn_res_block_size > 0;
    w->layers = calloc((size_t)cfg->n_layers, sizeof *w->layers);
    if (!w->layers) return k3_err_set(err, "out of memory");
    if (mat(&L, &w->embed, V, d, "model.embed_tokens", 0) || vec(&L, &w->final_norm, d, "model.norm.weight", 0))
        goto fail;
    /* lm_head: K3 prefixes it with language_model. like every LM tensor. */
    if (mat(&L, &w->lm_head, V, d, "lm_head", 0)) goto fail;
    if (attn_res && attn_res_q(&L, &w->out_res_q, "model.output_attn_res_norm.weight",
                               "model.output_attn_res_proj.weight", 0))
        goto fail;
    for (int l = 0; l < cfg->n_layers; l++) {
        struct k3_layer_weights *lw = &w->layers[l];
        lw->is_mla = k3_model_config_layer_is_mla(cfg, l);
        lw->is_moe = k3_model_config_layer_is_moe(cfg, l);
        if (vec(&L, &lw->attn_norm, d, "model.layers.%d.input_layernorm.weight", l) ||
            vec(&L, &lw->mlp_norm, d, "model.layers.%d.post_attention_layernorm.weight", l))
            goto fail;
        if (attn_res && (attn_res_q(&L, &lw->attn_res_q, "model.layers.%d.self_attention_res_norm.weight",
                                    "model.layers.%d.self_attention_res_proj.weight", l) ||
                         attn_res_q(&L, &lw->mlp_res_q, "model.layers.%d.mlp_res_norm.weight",
                                    "model.layers.%d.mlp_res_proj.weight", l)))
            goto fail;
        if (lw->is_mla ? load_mla(&L, l, &lw->mla) : load_kda(&L, l, &lw->kda)) goto fail;
        if (lw->is_moe) {
            if (load_moe(&L, l, &lw->moe)) goto fail;
        } else {
            int64_t I = cfg->intermediate_size;
            if (mat(&L, &lw->mlp.gate, I, d, "model.layers.%d.mlp.gate_proj", l) ||
                mat(&L, &lw->mlp.up, I, d, "model.layers.%d.mlp.up_proj", l) ||
                mat(&L, &lw->mlp.down, d, I, "model.layers.%d.mlp.down_proj", l))
                goto fail;
        }
    }
    return 0;
fail:
    k3_weights_free(w);
    return -1;
}

void k3_weights_free(struct k3_weights *w)
{
    for (int i = 0; i < w->n_owned; i++) free(w->owned[i]);
    free(w->owned);
    free(w->layers);
    memset(w, 0, sizeof *w);
}
