/* moe.c - the MLP sub-layers: the dense gated MLP (layer 0, shared experts)
 * and the MoE block (research/model-architecture.md §2.5, §4.2, §10.2):
 *   router on the full-width input (sigmoid, bias for selection only, top-k,
 *   renormalise, routed_scaling_factor);
 *   K3 Stable LatentMoE: z = W_down x; y_l = Σ w_j E_j(z) (SiTU-GLU experts,
 *   MXFP4 as stored); y_l = RMSNorm(y_l); y = W_up y_l;
 *   Kimi Linear: experts on x directly (SiLU-GLU);
 *   plus the shared experts on the full-width input. */
#include <string.h>

#include "model/blocks.h"

static enum k3_glu_act glu_act(const struct k3_model_config *cfg)
{
    return cfg->hidden_act == K3_ACT_SITU ? K3_GLU_SITU : K3_GLU_SILU;
}

void mlp_block(struct k3_forward *f, const struct k3_mlp_weights *w, const float *xn, int64_t n,
               float *out, int accumulate)
{
    const struct k3_model_config *cfg = f->cfg;
    int64_t m = w->gate.rows;
    /* [n, m] gate and up, then act(gate, up) in place of gate. */
    float *g = fwd_take(f, n * m), *u = fwd_take(f, n * m);
    fwd_linear(f, &w->gate, xn, n, g);
    fwd_linear(f, &w->up, xn, n, u);
    struct k3_glu_params gp = {.gate = g, .up = u, .ldg = m, .ldu = m, .y = g, .ldy = m, .n = n, .m = m,
                               .act = glu_act(cfg), .beta = cfg->situ_beta, .beta_lin = cfg->situ_linear_beta};
    f->be->ops->glu(f->be, &gp);
    struct k3_matmul_params dp = {.x = g, .ldx = m, .w = &w->down, .y = out, .ldy = w->down.rows, .n = n,
                                  .accumulate = accumulate};
    f->be->ops->matmul(f->be, &dp);
}

void moe_block(struct k3_forward *f, int l, const float *xn, int64_t n, float *out)
{
    const struct k3_model_config *cfg = f->cfg;
    const struct k3_moe_weights *w = &f->w->layers[l].moe;
    const struct k3_ops *ops = f->be->ops;
    int E = cfg->n_experts, k = cfg->n_experts_per_token;
    int64_t lw = k3_model_config_expert_width(cfg);
    fwd_scratch_reset(f);

    /* [n, E] router logits -> [n, k] expert ids and weights. */
    float *logits = fwd_take(f, n * E), *wts = fwd_take(f, n * k);
    int32_t *idx = (int32_t *)fwd_take(f, n * k);
    fwd_linear(f, &w->router, xn, n, logits);
    struct k3_router_params rp = {.logits = logits, .bias = w->router_bias, .idx = idx, .w = wts, .n = n,
                                  .n_expert = E, .k = k, .renorm = cfg->moe_renormalize,
                                  .scale = cfg->routed_scaling_factor};
    ops->router(f->be, &rp);

    /* [n, lw] expert input: the latent down-projection (K3) or x itself. */
    const float *z = xn;
    float *yl = w->latent_down.data ? fwd_take(f, n * lw) : out;
    if (w->latent_down.data) {
        float *zl = fwd_take(f, n * lw);
        fwd_linear(f, &w->latent_down, xn, n, zl);
        z = zl;
        fwd_dump(f, zl, n, lw, "L%d.moe.latent_in", l);
    }
    struct k3_moe_params mp = {.x = z, .y = yl, .idx = idx, .w = wts, .n = n, .k = k, .n_expert = E,
                               .w1 = w->w1, .w3 = w->w3, .w2 = w->w2, .act = glu_act(cfg),
                               .beta = cfg->situ_beta, .beta_lin = cfg->situ_linear_beta};
    ops->moe(f->be, &mp);
    fwd_dump(f, yl, n, lw, "L%d.moe.routed", l);
    if (w->latent_down.data) {
        /* RMSNorm of the latent combine (scale-invariant output), then up to d. */
        if (w->latent_norm) fwd_rmsnorm(f, yl, w->latent_norm, n, lw, cfg->rms_norm_eps, yl);
        fwd_linear(f, &w->latent_up, yl, n, out);
    }
    /* Shared experts on the full-width input, added. */
    if (w->has_shared) mlp_block(f, &w->shared, xn, n, out, 1);
}

void mlp_sublayer(struct k3_forward *f, int l, const float *xn, int64_t n, float *out)
{
    const struct k3_layer_weights *lw = &f->w->layers[l];
    if (lw->is_moe && f->par) {
        moe_ep_block(f, l, xn, n, out);
    } else if (lw->is_moe) {
        moe_block(f, l, xn, n, out);
    } else {
        fwd_scratch_reset(f);
        mlp_block(f, &lw->mlp, xn, n, out, 0);
        fwd_tp_all_reduce(f, out, n * f->cfg->hidden_size, "dense mlp");
    }
}
