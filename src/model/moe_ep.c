/* moe_ep.c - the MoE sub-layer when experts are spread over ranks
 * (model/parallel.h; research/model-architecture.md §2.5, §4.2, §10.2).
 *
 *   tokens [t0, t1) of the group's n (this TP rank's share):
 *     router on the full width -> top-k ids and weights
 *     z = W_down x (K3 latent) or x (Kimi Linear)
 *     plan + dispatch z to the ranks owning the chosen experts   (mpi/moe_dispatch)
 *     on the owner: every (row, expert) pair -> w · E(z), summed per row
 *     combine back -> y_l; RMSNorm(y_l) and W_up (K3)
 *   K3: W_down and W_up are split over the group by latent columns, with a
 *   transpose in the group on each side; out += shared experts. TP partial
 *   all-reduce(out) over the attention group
 * Every rank calls this once per MoE layer per slice, with n = 0 when its
 * group is idle: the dispatch collectives span all ranks. */
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "core/log.h"
#include "model/blocks.h"

void moe_ep_state_free(struct k3_moe_ep *s)
{
    k3_moe_layout_free(&s->layout);
    free(s->recv);
    free(s->pair_x);
    free(s->pair_y);
    free(s->pair_idx);
    free(s->pair_w);
    free(s->y_recv);
    free(s->routed);
    free(s->zpart);
    free(s->xpose);
    free(s->xpose_counts);
    memset(s, 0, sizeof *s);
}

static enum k3_glu_act act_of(const struct k3_model_config *cfg)
{
    return cfg->hidden_act == K3_ACT_SITU ? K3_GLU_SITU : K3_GLU_SILU;
}

/* Inside the attention group, between "every rank has columns [c0_r, c1_r) of
 * all n rows" and "every rank has all columns of rows [t0_r, t1_r)": one
 * all-to-all-v each way. to_rows = 1: cols -> rows. The blocks are packed
 * row-major per peer in s->xpose, then unpacked into dst. */
static void tp_transpose(struct k3_forward *f, const float *src, float *dst, int64_t n, int64_t width,
                         int to_rows, const char *what)
{
    const struct k3_shard *sh = &f->par->shard;
    struct k3_comm *c = f->par->tp_comm;
    struct k3_moe_ep *s = &f->ep;
    int P = sh->tp, me = sh->tp_rank;
    long long t0, t1, c0, c1;
    k3_split(n, P, me, &t0, &t1);
    k3_split(width, P, me, &c0, &c1);
    size_t *v = s->xpose_counts;
    size_t *sb = v, *so = v + P, *rb = v + 2 * P, *ro = v + 3 * P;
    size_t total_send = 0, total_recv = 0;
    for (int q = 0; q < P; q++) {
        long long qt0, qt1, qc0, qc1;
        k3_split(n, P, q, &qt0, &qt1);
        k3_split(width, P, q, &qc0, &qc1);
        /* cols -> rows: to q goes (q's rows) x (my cols); from q comes (my rows) x (q's cols).
         * rows -> cols: to q goes (my rows) x (q's cols); from q comes (q's rows) x (my cols). */
        size_t send = sizeof(float) * (size_t)(to_rows ? (qt1 - qt0) * (c1 - c0) : (t1 - t0) * (qc1 - qc0));
        size_t recv = sizeof(float) * (size_t)(to_rows ? (t1 - t0) * (qc1 - qc0) : (qt1 - qt0) * (c1 - c0));
        sb[q] = send, so[q] = total_send, total_send += send;
        rb[q] = recv, ro[q] = total_recv, total_recv += recv;
    }
    s->xpose = k3_grow(s->xpose, &s->xpose_cap, total_send + total_recv + 1, 1, 4096,
                   "the expert-parallel buffers");
    char *sendbuf = (char *)s->xpose, *recvbuf = sendbuf + total_send;
    for (int q = 0; q < P; q++) {
        long long qt0, qt1, qc0, qc1;
        k3_split(n, P, q, &qt0, &qt1);
        k3_split(width, P, q, &qc0, &qc1);
        float *o = (float *)(sendbuf + so[q]);
        if (to_rows) /* src is [n, c1 - c0] */
            for (long long i = qt0; i < qt1; i++, o += c1 - c0)
                memcpy(o, src + i * (c1 - c0), sizeof(float) * (size_t)(c1 - c0));
        else /* src is [t1 - t0, width] */
            for (long long i = t0; i < t1; i++, o += qc1 - qc0)
                memcpy(o, src + (i - t0) * width + qc0, sizeof(float) * (size_t)(qc1 - qc0));
    }
    c->ops->all_to_all_v(c, sendbuf, sb, so, recvbuf, rb, ro, what);
    for (int q = 0; q < P; q++) {
        long long qt0, qt1, qc0, qc1;
        k3_split(n, P, q, &qt0, &qt1);
        k3_split(width, P, q, &qc0, &qc1);
        const float *in = (const float *)(recvbuf + ro[q]);
        if (to_rows) /* dst is [t1 - t0, width]: q's columns of my rows */
            for (long long i = t0; i < t1; i++, in += qc1 - qc0)
                memcpy(dst + (i - t0) * width + qc0, in, sizeof(float) * (size_t)(qc1 - qc0));
        else /* dst is [n, c1 - c0]: my columns of q's rows */
            for (long long i = qt0; i < qt1; i++, in += c1 - c0)
                memcpy(dst + i * (c1 - c0), in, sizeof(float) * (size_t)(c1 - c0));
    }
}

void moe_ep_block(struct k3_forward *f, int l, const float *xn, int64_t n, float *out)
{
    const struct k3_model_config *cfg = f->cfg;
    const struct k3_moe_weights *w = &f->w->layers[l].moe;
    const struct k3_model_par *par = f->par;
    const struct k3_ops *ops = f->be->ops;
    struct k3_moe_ep *s = &f->ep;
    int E = cfg->n_experts, k = cfg->n_experts_per_token, latent = w->latent_down.data != NULL;
    int64_t d = cfg->hidden_size, lw = k3_model_config_expert_width(cfg);
    char what[48];
    snprintf(what, sizeof what, "L%d.moe", l);
    fwd_scratch_reset(f);

    /* This TP rank's share of the group's tokens. */
    long long t0, t1;
    k3_split(n, par->shard.tp, par->shard.tp_rank, &t0, &t1);
    int64_t nl = t1 - t0;
    const float *x = xn + t0 * d;
    size_t row = sizeof(float) * (size_t)lw;

    /* [nl, E] router logits -> [nl, k] ids and weights. */
    float *logits = fwd_take(f, nl * E), *wts = fwd_take(f, nl * k);
    int32_t *idx = (int32_t *)fwd_take(f, nl * k);
    if (nl) {
        fwd_linear(f, &w->router, x, nl, logits);
        struct k3_router_params rp = {.logits = logits, .bias = w->router_bias, .idx = idx, .w = wts,
                                      .n = nl, .n_expert = E, .k = k, .renorm = cfg->moe_renormalize,
                                      .scale = cfg->routed_scaling_factor};
        ops->router(f->be, &rp);
    }
    /* [nl, lw] expert inputs. K3: the latent down-projection is split by its
     * output rows, so every rank projects all n tokens onto its latent
     * columns, and a transpose in the group gives each rank full rows. */
    const float *z = x;
    if (latent) {
        float *zl = fwd_take(f, nl * lw);
        if (par->shard.tp == 1) {
            if (nl) fwd_linear(f, &w->latent_down, x, nl, zl);
        } else {
            s->zpart = k3_grow(s->zpart, &s->zpart_cap, sizeof(float) * (size_t)(n * w->latent_down.rows) + 1, 1, 4096,
                   "the expert-parallel buffers");
            if (n && w->latent_down.rows) fwd_linear(f, &w->latent_down, xn, n, s->zpart);
            tp_transpose(f, s->zpart, zl, n, lw, 1, what);
        }
        z = zl;
    }
    fwd_dump(f, z, nl, lw, "L%d.moe.latent_in", l);

    /* Dispatch: [n_recv, lw] rows with their (expert, weight) slots. */
    k3_moe_plan(&s->layout, par->ep_comm, idx, wts, (int)nl, k, what);
    size_t n_recv = s->layout.n_recv;
    s->recv = k3_grow(s->recv, &s->recv_cap, n_recv * row + 1, 1, 4096,
                   "the expert-parallel buffers");
    k3_moe_dispatch(&s->layout, par->ep_comm, z, row, s->recv, what);

    /* Every (row, local expert) pair once: y_pair = w · E(z_row), k = 1 per pair. */
    size_t n_pairs = 0;
    for (size_t i = 0; i < n_recv * (size_t)k; i++) n_pairs += s->layout.recv_slots[i].expert >= 0;
    s->pair_x = k3_grow(s->pair_x, &s->pair_x_cap, n_pairs * row + 1, 1, 4096,
                   "the expert-parallel buffers");
    s->pair_y = k3_grow(s->pair_y, &s->pair_y_cap, n_pairs * row + 1, 1, 4096,
                   "the expert-parallel buffers");
    s->pair_idx = k3_grow(s->pair_idx, &s->pair_idx_cap, n_pairs * sizeof(int32_t) + 1, 1, 4096,
                   "the expert-parallel buffers");
    s->pair_w = k3_grow(s->pair_w, &s->pair_w_cap, n_pairs * sizeof(float) + 1, 1, 4096,
                   "the expert-parallel buffers");
    size_t p = 0;
    for (size_t i = 0; i < n_recv; i++) {
        for (int j = 0; j < k; j++) {
            const struct k3_moe_slot *sl = &s->layout.recv_slots[i * (size_t)k + (size_t)j];
            if (sl->expert < 0) continue;
            memcpy(s->pair_x + p * (size_t)lw, s->recv + i * (size_t)lw, row);
            s->pair_idx[p] = sl->expert;
            s->pair_w[p] = sl->weight;
            p++;
        }
    }
    if (n_pairs) {
        struct k3_moe_params mp = {.x = s->pair_x, .y = s->pair_y, .idx = s->pair_idx, .w = s->pair_w,
                                   .n = (int64_t)n_pairs, .k = 1, .n_expert = E, .w1 = w->w1, .w3 = w->w3,
                                   .w2 = w->w2, .act = act_of(cfg), .beta = cfg->situ_beta,
                                   .beta_lin = cfg->situ_linear_beta};
        ops->moe(f->be, &mp);
    }
    /* Per received row, its pairs in slot order (the origin's top-k order). */
    s->y_recv = k3_grow(s->y_recv, &s->y_recv_cap, n_recv * row + 1, 1, 4096,
                   "the expert-parallel buffers");
    memset(s->y_recv, 0, n_recv * row);
    p = 0;
    for (size_t i = 0; i < n_recv; i++) {
        float *y = s->y_recv + i * (size_t)lw;
        for (int j = 0; j < k; j++) {
            if (s->layout.recv_slots[i * (size_t)k + (size_t)j].expert < 0) continue;
            const float *yp = s->pair_y + p++ * (size_t)lw;
            for (int64_t c = 0; c < lw; c++) y[c] += yp[c];
        }
    }

    /* Combine: [nl, lw] weighted sums back at the origin. */
    s->routed = k3_grow(s->routed, &s->routed_cap, (size_t)(nl * lw) * sizeof(float) + 1, 1, 4096,
                   "the expert-parallel buffers");
    k3_moe_combine(&s->layout, par->ep_comm, s->y_recv, (int)lw, s->routed, what);

    /* [n, d] out: K3's latent up-projection is split by its input columns:
     * after the latent norm (on full rows), a transpose gives every rank its
     * latent columns of all n tokens and its partial sum of W_up y. Kimi
     * Linear: this rank's routed rows in place, zeros elsewhere. */
    memset(out, 0, sizeof(float) * (size_t)(n * d));
    if (latent) {
        if (nl && w->latent_norm) fwd_rmsnorm(f, s->routed, w->latent_norm, nl, lw, cfg->rms_norm_eps, s->routed);
        if (par->shard.tp == 1) {
            if (nl) fwd_linear(f, &w->latent_up, s->routed, nl, out);
        } else {
            int64_t lc = w->latent_up.cols;
            s->zpart = k3_grow(s->zpart, &s->zpart_cap, sizeof(float) * (size_t)(n * lc) + 1, 1, 4096,
                   "the expert-parallel buffers");
            tp_transpose(f, s->routed, s->zpart, n, lw, 0, what);
            if (n && lc) {
                struct k3_matmul_params up = {.x = s->zpart, .ldx = lc, .w = &w->latent_up, .y = out, .ldy = d, .n = n};
                ops->matmul(f->be, &up);
            }
        }
    } else if (nl) {
        memcpy(out + t0 * d, s->routed, sizeof(float) * (size_t)(nl * d));
    }
    /* Shared experts: this rank's hidden units on every token, added. */
    if (w->has_shared && n) mlp_block(f, &w->shared, xn, n, out, 1);
    fwd_tp_all_reduce(f, out, n * d, what);
}
