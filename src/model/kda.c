/* kda.c - one Kimi Delta Attention sub-layer (research/model-architecture.md
 * §1.2; K3 differences §10.3): projections, short conv + SiLU with the
 * sequence's conv tails, q/k L2 norm (eps 1e-6 inside the sqrt, q scaled by
 * K^-1/2), decay gate (softplus or lower-bound form), β = sigmoid(b_proj x),
 * the delta rule on the sequence's state (chunked for multi-token calls,
 * recurrent for one token; in a batched slice the conv and the delta rule run
 * per sequence, everything else over all rows), then the per-head sigmoid-gated RMSNorm with the
 * low-rank or full-rank output gate, and o_proj. */
#include <math.h>
#include <string.h>

#include "model/blocks.h"

void kda_block(struct k3_forward *f, int l, const struct fwd_slice *s, const float *xn, float *out)
{
    const struct k3_model_config *cfg = f->cfg;
    const struct k3_kda_weights *w = &f->w->layers[l].kda;
    const struct k3_ops *ops = f->be->ops;
    int H = f->kda_heads, K = cfg->kda_head_dim, W = cfg->kda_conv_kernel;
    int64_t HK = (int64_t)H * K, n = s->n;
    fwd_scratch_reset(f);
    if (H == 0) { /* a sharded rank without heads adds nothing to the all-reduce */
        memset(out, 0, sizeof(float) * (size_t)(n * cfg->hidden_size));
        return;
    }

    /* [n, H·K] q, k, v: projection, then causal conv + SiLU continuing each
     * sequence's tails on its rows. */
    const struct k3_mat *proj[3] = {&w->q, &w->k, &w->v};
    const float *taps[3] = {w->q_conv, w->k_conv, w->v_conv};
    float *qkv[3];
    for (int j = 0; j < 3; j++) {
        float *raw = fwd_take(f, n * HK);
        qkv[j] = fwd_take(f, n * HK);
        fwd_linear(f, proj[j], xn, n, raw);
        for (int i = 0; i < s->n_seg; i++) {
            const struct fwd_seg *sg = &s->seg[i];
            struct k3_conv_params cp = {.x = raw + sg->row0 * HK, .ldx = HK, .w = taps[j],
                                        .tail = sg->c->layer[l].kda_tail[j], .y = qkv[j] + sg->row0 * HK,
                                        .n = sg->n, .d = HK, .width = W};
            ops->conv(f->be, &cp);
        }
    }
    float *q = qkv[0], *k = qkv[1], *v = qkv[2];
    /* q̂ = q/‖q‖ · K^-1/2, k̂ = k/‖k‖ per head (§1.2 steps 4-5). */
    struct k3_l2norm_params ln = {.x = q, .y = q, .n_rows = n * H, .d = K, .eps = 1e-6, .scale = 1 / sqrt((double)K)};
    ops->l2norm(f->be, &ln);
    ln.x = ln.y = k;
    ln.scale = 1;
    ops->l2norm(f->be, &ln);
    fwd_dump(f, q, n, HK, "L%d.kda.q", l);
    fwd_dump(f, k, n, HK, "L%d.kda.k", l);
    fwd_dump(f, v, n, HK, "L%d.kda.v", l);

    /* [n, H·K] log decay g from the low-rank f_b(f_a(x)). */
    float *fa = fwd_take(f, n * w->f_a.rows), *fb = fwd_take(f, n * HK), *g = fwd_take(f, n * HK);
    fwd_linear(f, &w->f_a, xn, n, fa);
    fwd_linear(f, &w->f_b, fa, n, fb);
    struct k3_kda_gate_params gp = {.f = fb, .ldf = HK, .dt_bias = w->dt_bias, .a_log = w->a_log, .g = g,
                                    .n = n, .n_head = H, .head_dim = K,
                                    .form = cfg->kda_has_gate_lower_bound ? K3_KDA_GATE_LOWER_BOUND
                                                                          : K3_KDA_GATE_SOFTPLUS,
                                    .lower_bound = cfg->kda_gate_lower_bound};
    ops->kda_gate(f->be, &gp);
    fwd_dump(f, g, n, HK, "L%d.kda.g", l);

    /* [n, H] β = sigmoid(b_proj x). */
    float *beta = fwd_take(f, n * H);
    fwd_linear(f, &w->b, xn, n, beta);
    struct k3_ew_params sig = {.op = K3_EW_SIGMOID, .a = beta, .lda = H, .y = beta, .ldy = H, .n = n, .m = H};
    ops->ew(f->be, &sig);
    fwd_dump(f, beta, n, H, "L%d.kda.beta", l);

    /* [n, H, K] delta rule, each sequence on its state (chunked when it has
     * several tokens here, as a call of that sequence alone would be). */
    float *o = fwd_take(f, n * HK);
    for (int i = 0; i < s->n_seg; i++) {
        const struct fwd_seg *sg = &s->seg[i];
        int64_t r = sg->row0 * HK;
        struct k3_kda_params kp = {.q = q + r, .k = k + r, .v = v + r, .g = g + r, .beta = beta + sg->row0 * H,
                                   .state = sg->c->layer[l].kda_state, .o = o + r, .n = sg->n, .n_head = H,
                                   .dk = K, .dv = K, .chunk = sg->n > 1 ? f->opts.kda_chunk : 0};
        ops->kda(f->be, &kp);
    }
    fwd_dump(f, o, n, HK, "L%d.kda.o", l);

    /* [n, H·K] output gate, low rank (Kimi Linear) or full rank (K3). */
    float *gate = fwd_take(f, n * HK);
    if (w->g.data) {
        fwd_linear(f, &w->g, xn, n, gate);
    } else {
        float *ga = fwd_take(f, n * w->g_a.rows);
        fwd_linear(f, &w->g_a, xn, n, ga);
        fwd_linear(f, &w->g_b, ga, n, gate);
    }
    /* y[h] = RMSNorm_K(o[h]) · o_norm · sigmoid(gate[h]), then o_proj. */
    struct k3_rmsnorm_params rn = {.x = o, .ldx = K, .w = w->o_norm, .gate = gate, .ldg = K, .y = o, .ldy = K,
                                   .n_rows = n * H, .d = K, .eps = cfg->rms_norm_eps};
    ops->rmsnorm(f->be, &rn);
    fwd_linear(f, &w->o, o, n, out);
}
