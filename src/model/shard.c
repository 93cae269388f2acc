/* shard.c - one rank's slice of the weights (model/parallel.h), as views.
 *
 * k3_weights_shard() narrows the views k3_weights_load() built: heads of KDA
 * and MLA, hidden units of the dense MLP and the shared experts, and rows of
 * lm_head are cut to this rank's contiguous range of its attention group;
 * routed experts other than this rank's lose their views (data NULL). Views
 * copy nothing, and the mapping is read lazily, so a rank only ever reads the
 * pages of its own slice. Splits need not be even: a rank may hold zero heads
 * (tp 8 on a 4-head model), and then contributes zeros to the all-reduce.
 *
 * Column-parallel (output rows split): q/k/v, conv taps, A_log, dt_bias,
 * f_b, b, g / g_b (KDA); q or q_b, kv_b, g (MLA); gate, up; the latent
 * down-projection; lm_head.
 * Row-parallel (input columns split, partial sums): o_proj, down, the latent
 * up-projection.
 * Replicated: norms, f_a, g_a, q_a, kv_a (the latent is shared by all heads),
 * the router, embeddings. */
#include "model/shard.h"

#include <string.h>

struct k3_mat k3_mat_rows(const struct k3_mat *m, int64_t r0, int64_t nr)
{
    struct k3_mat s = *m;
    s.rows = nr;
    switch (m->fmt) {
    case K3_WFMT_F32: s.data = (const float *)m->data + r0 * m->ld; break;
    case K3_WFMT_BF16:
    case K3_WFMT_F16: s.data = (const uint16_t *)m->data + r0 * m->ld; break;
    case K3_WFMT_F8_E4M3: s.data = (const uint8_t *)m->data + r0 * m->ld; break;
    case K3_WFMT_MXFP4:
        s.data = (const uint8_t *)m->data + r0 * (m->ld / 2);
        s.scale = m->scale + r0 * (m->ld / 32);
        break;
    }
    return s;
}

int k3_mat_cols(const struct k3_mat *m, int64_t c0, int64_t nc, struct k3_mat *out,
                struct k3_err *err)
{
    struct k3_mat s = *m;
    s.cols = nc;
    switch (m->fmt) {
    case K3_WFMT_F32: s.data = (const float *)m->data + c0; break;
    case K3_WFMT_BF16:
    case K3_WFMT_F16: s.data = (const uint16_t *)m->data + c0; break;
    case K3_WFMT_F8_E4M3: s.data = (const uint8_t *)m->data + c0; break;
    case K3_WFMT_MXFP4:
        /* A column cut must not split a 32-wide scale block. */
        if (c0 % 32 || (nc % 32 && c0 + nc != m->cols))
            return k3_err_set(err, "an MXFP4 matrix can only be cut at multiples of 32 columns "
                              "(asked for [%lld, %lld))", (long long)c0, (long long)(c0 + nc));
        s.data = (const uint8_t *)m->data + c0 / 2;
        s.scale = m->scale + c0 / 32;
        break;
    }
    *out = s;
    return 0;
}

static int rows_of(struct k3_mat *m, int64_t unit, long long b, long long e)
{
    *m = k3_mat_rows(m, b * unit, (e - b) * unit);
    return 0;
}

static int cols_of(struct k3_mat *m, int64_t unit, long long b, long long e, struct k3_err *err)
{
    return k3_mat_cols(m, b * unit, (e - b) * unit, m, err);
}

static int shard_mlp(struct k3_mlp_weights *m, int64_t units, const struct k3_shard *s,
                     struct k3_err *err)
{
    long long b, e;
    k3_split(units, s->tp, s->tp_rank, &b, &e);
    rows_of(&m->gate, 1, b, e);
    rows_of(&m->up, 1, b, e);
    return cols_of(&m->down, 1, b, e, err);
}

int k3_weights_shard(struct k3_weights *w, const struct k3_shard *s, struct k3_err *err)
{
    const struct k3_model_config *c = w->cfg;
    if (s->tp < 1 || s->tp_rank < 0 || s->tp_rank >= s->tp || s->ep < 1 || s->ep_rank < 0 ||
        s->ep_rank >= s->ep)
        return k3_err_set(err, "bad shard: tp rank %d of %d, ep rank %d of %d", s->tp_rank, s->tp,
                          s->ep_rank, s->ep);
    if (s->tp == 1 && s->ep == 1) return 0;
    long long b, e;
    int64_t K = c->kda_head_dim, W = c->kda_conv_kernel;
    int64_t dq = c->qk_nope_head_dim + c->qk_rope_head_dim, dkv = c->qk_nope_head_dim + c->v_head_dim;
    int64_t dv = c->v_head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        struct k3_layer_weights *lw = &w->layers[l];
        if (lw->is_mla) {
            struct k3_mla_weights *m = &lw->mla;
            k3_split(c->n_heads, s->tp, s->tp_rank, &b, &e);
            if (m->q_a.data) rows_of(&m->q_b, dq, b, e);
            else rows_of(&m->q, dq, b, e);
            rows_of(&m->kv_b, dkv, b, e);
            if (m->g.data) rows_of(&m->g, dv, b, e);
            if (cols_of(&m->o, dv, b, e, err)) return -1;
        } else {
            struct k3_kda_weights *k = &lw->kda;
            k3_split(c->kda_n_heads, s->tp, s->tp_rank, &b, &e);
            rows_of(&k->q, K, b, e);
            rows_of(&k->k, K, b, e);
            rows_of(&k->v, K, b, e);
            k->q_conv += b * K * W;
            k->k_conv += b * K * W;
            k->v_conv += b * K * W;
            k->a_log += b;
            k->dt_bias += b * K;
            rows_of(&k->f_b, K, b, e);
            rows_of(&k->b, 1, b, e);
            if (k->g.data) rows_of(&k->g, K, b, e);
            else rows_of(&k->g_b, K, b, e);
            if (cols_of(&k->o, K, b, e, err)) return -1;
        }
        if (lw->is_moe) {
            struct k3_moe_weights *m = &lw->moe;
            if (m->latent_down.data) {
                k3_split(m->latent_down.rows, s->tp, s->tp_rank, &b, &e);
                rows_of(&m->latent_down, 1, b, e);
                if (cols_of(&m->latent_up, 1, b, e, err)) return -1;
            }
            int per = (c->n_experts + s->ep - 1) / s->ep;
            for (int x = 0; x < c->n_experts; x++) {
                if (x / per == s->ep_rank) continue;
                m->w1[x].data = m->w2[x].data = m->w3[x].data = NULL;
                m->w1[x].scale = m->w2[x].scale = m->w3[x].scale = NULL;
            }
            if (m->has_shared &&
                shard_mlp(&m->shared, (int64_t)c->n_shared_experts * c->moe_intermediate_size, s, err))
                return -1;
        } else if (shard_mlp(&lw->mlp, c->intermediate_size, s, err)) {
            return -1;
        }
    }
    k3_split(c->vocab_size, s->tp, s->tp_rank, &b, &e);
    rows_of(&w->lm_head, 1, b, e);
    return 0;
}

static int64_t mat_bytes(const struct k3_mat *m)
{
    if (!m->data) return 0;
    switch (m->fmt) {
    case K3_WFMT_F32: return m->rows * m->cols * 4;
    case K3_WFMT_BF16:
    case K3_WFMT_F16: return m->rows * m->cols * 2;
    case K3_WFMT_F8_E4M3: return m->rows * m->cols;
    case K3_WFMT_MXFP4: return m->rows * (m->cols / 2 + m->cols / 32);
    }
    return 0;
}

void k3_weights_shard_bytes(const struct k3_weights *w, int64_t *dense_bytes, int64_t *expert_bytes)
{
    const struct k3_model_config *c = w->cfg;
    int64_t dn = mat_bytes(&w->embed) + mat_bytes(&w->lm_head), ex = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const struct k3_layer_weights *lw = &w->layers[l];
        const struct k3_mat *mats[] = {&lw->kda.q, &lw->kda.k, &lw->kda.v, &lw->kda.f_a, &lw->kda.f_b,
                                       &lw->kda.b, &lw->kda.g_a, &lw->kda.g_b, &lw->kda.g, &lw->kda.o,
                                       &lw->mla.q, &lw->mla.q_a, &lw->mla.q_b, &lw->mla.kv_a,
                                       &lw->mla.kv_b, &lw->mla.g, &lw->mla.o, &lw->mlp.gate,
                                       &lw->mlp.up, &lw->mlp.down, &lw->moe.router,
                                       &lw->moe.latent_down, &lw->moe.latent_up,
                                       &lw->moe.shared.gate, &lw->moe.shared.up, &lw->moe.shared.down};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) dn += mat_bytes(mats[i]);
        if (lw->is_moe)
            for (int x = 0; x < c->n_experts; x++)
                ex += mat_bytes(&lw->moe.w1[x]) + mat_bytes(&lw->moe.w2[x]) + mat_bytes(&lw->moe.w3[x]);
    }
    *dense_bytes = dn;
    *expert_bytes = ex;
}
