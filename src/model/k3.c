/* k3.c - the Kimi K3 layer loop: Block Attention Residuals around KDA / gated
 * MLA attention and the dense / Stable LatentMoE MLPs
 * (research/model-architecture.md §3.3, §8.3, §10.1).
 *
 *   P = embed(ids); B = []
 *   for l:  a_in = AR(B + [P]) if B else P
 *           if l % block == 0: B.append(P); P = none
 *           a = Attn_l(RMSNorm_in(a_in));   P = a if P is none else P + a
 *           m_in = AR(B + [P]);              P = P + MLP_l(RMSNorm_post(m_in))
 *   logits = lm_head(RMSNorm_final(AR(B + [P])))
 * A slice of tokens (of one or more sequences) goes through all layers at
 * once; snapshots are per token and live only within the slice. */
#include "model/blocks.h"

void k3_arch_k3_run(struct k3_forward *f, const struct fwd_slice *s)
{
    const struct k3_model_config *cfg = f->cfg;
    const struct k3_weights *w = f->w;
    int64_t d = cfg->hidden_size, n = s->n;
    const float *cand[K3_MAX_LAYERS + 1];
    int n_snap = 0;

    /* [n, d] P: the token embeddings. */
    fwd_embed(f, s, f->h);
    fwd_dump(f, f->h, n, d, "embed");

    for (int l = 0; l < cfg->n_layers; l++) {
        const struct k3_layer_weights *lw = &w->layers[l];
        /* Mix before attention (none at layer 0: B is empty). */
        for (int j = 0; j < n_snap; j++) cand[j] = f->snap[j];
        cand[n_snap] = f->h;
        if (n_snap) attn_res_mix(f, lw->attn_res_q, cand, n_snap + 1, n, f->a_in);
        else fwd_copy(f, f->a_in, d, f->h, d, n, d);
        fwd_dump(f, f->a_in, n, d, "L%d.attn_in", l);
        /* Snapshot the raw stream at a block start; P restarts from the attention output. */
        int restart = l % cfg->attn_res_block_size == 0;
        if (restart) fwd_copy(f, f->snap[n_snap++], d, f->h, d, n, d);

        fwd_rmsnorm(f, f->a_in, lw->attn_norm, n, d, cfg->rms_norm_eps, f->xn);
        fwd_dump(f, f->xn, n, d, "L%d.attn_norm", l);
        if (lw->is_mla) mla_block(f, l, s, f->xn, f->a_out);
        else kda_block(f, l, s, f->xn, f->a_out);
        fwd_tp_all_reduce(f, f->a_out, n * d, "attention");
        fwd_dump(f, f->a_out, n, d, "L%d.attn_out", l);
        if (restart) fwd_copy(f, f->h, d, f->a_out, d, n, d);
        else fwd_add(f, f->h, f->h, f->a_out, n, d);

        /* Mix before the MLP: all snapshots (B is never empty here) plus P. */
        for (int j = 0; j < n_snap; j++) cand[j] = f->snap[j];
        cand[n_snap] = f->h;
        attn_res_mix(f, lw->mlp_res_q, cand, n_snap + 1, n, f->m_in);
        fwd_dump(f, f->m_in, n, d, "L%d.mlp_in", l);
        fwd_rmsnorm(f, f->m_in, lw->mlp_norm, n, d, cfg->rms_norm_eps, f->xn);
        fwd_dump(f, f->xn, n, d, "L%d.mlp_norm", l);
        mlp_sublayer(f, l, f->xn, n, f->m_out);
        fwd_dump(f, f->m_out, n, d, "L%d.mlp_out", l);
        fwd_add(f, f->h, f->h, f->m_out, n, d);
        fwd_dump(f, f->h, n, d, "L%d.out", l);
    }

    /* Output mix, then the final norm (mix-then-norm: the order matters), then lm_head. */
    for (int j = 0; j < n_snap; j++) cand[j] = f->snap[j];
    cand[n_snap] = f->h;
    attn_res_mix(f, w->out_res_q, cand, n_snap + 1, n, f->a_in);
    fwd_dump(f, f->a_in, n, d, "final_in");
    fwd_rmsnorm(f, f->a_in, w->final_norm, n, d, cfg->rms_norm_eps, f->xn);
    fwd_dump(f, f->xn, n, d, "final_norm");
    /* the wanted rows only (a_in is free now) */
    fwd_slice_logits(f, s, f->xn, f->a_in);
}
