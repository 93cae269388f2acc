/* kimi_linear.c - the Kimi Linear layer loop: pre-norm residual blocks of
 * KDA / NoPE MLA attention and the dense / MoE MLPs
 * (research/model-architecture.md §2.3):
 *   h = x + Attn(RMSNorm_in(x));  y = h + FFN(RMSNorm_post(h))
 *   logits = lm_head(RMSNorm_final(y_last)) */
#include "model/blocks.h"

void k3_arch_kimi_linear_run(struct k3_forward *f, const struct fwd_slice *s)
{
    const struct k3_model_config *cfg = f->cfg;
    const struct k3_weights *w = f->w;
    int64_t d = cfg->hidden_size, n = s->n;

    /* [n, d] h: the token embeddings. */
    fwd_embed(f, s, f->h);
    fwd_dump(f, f->h, n, d, "embed");

    for (int l = 0; l < cfg->n_layers; l++) {
        const struct k3_layer_weights *lw = &w->layers[l];
        fwd_dump(f, f->h, n, d, "L%d.attn_in", l);
        fwd_rmsnorm(f, f->h, lw->attn_norm, n, d, cfg->rms_norm_eps, f->xn);
        fwd_dump(f, f->xn, n, d, "L%d.attn_norm", l);
        if (lw->is_mla) mla_block(f, l, s, f->xn, f->a_out);
        else kda_block(f, l, s, f->xn, f->a_out);
        fwd_tp_all_reduce(f, f->a_out, n * d, "attention");
        fwd_dump(f, f->a_out, n, d, "L%d.attn_out", l);
        fwd_add(f, f->h, f->h, f->a_out, n, d);
        fwd_dump(f, f->h, n, d, "L%d.mlp_in", l);

        fwd_rmsnorm(f, f->h, lw->mlp_norm, n, d, cfg->rms_norm_eps, f->xn);
        fwd_dump(f, f->xn, n, d, "L%d.mlp_norm", l);
        mlp_sublayer(f, l, f->xn, n, f->m_out);
        fwd_dump(f, f->m_out, n, d, "L%d.mlp_out", l);
        fwd_add(f, f->h, f->h, f->m_out, n, d);
        fwd_dump(f, f->h, n, d, "L%d.out", l);
    }

    fwd_dump(f, f->h, n, d, "final_in");
    fwd_rmsnorm(f, f->h, w->final_norm, n, d, cfg->rms_norm_eps, f->xn);
    fwd_dump(f, f->xn, n, d, "final_norm");
    /* the wanted rows only (a_in is free now) */
    fwd_slice_logits(f, s, f->xn, f->a_in);
}
