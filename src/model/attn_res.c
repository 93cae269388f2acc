/* attn_res.c - the Block AttnRes mix (research/model-architecture.md §3.3,
 * §10.1) as the layer loop uses it: candidates are the completed block
 * snapshots plus the current partial sum, the query is the folded
 * norm.weight ⊙ proj.weight of the sub-layer. The bookkeeping (when to
 * snapshot, when the partial sum restarts) is in k3.c, next to the loop. */
#include "model/blocks.h"

void attn_res_mix(struct k3_forward *f, const float *q, const float *const *cand, int n_cand,
                  int64_t n, float *out)
{
    struct k3_attn_res_params p = {.cand = cand, .n_cand = n_cand, .q = q, .out = out, .n = n,
                                   .d = f->cfg->hidden_size, .eps = f->cfg->rms_norm_eps};
    f->be->ops->attn_res(f->be, &p);
}
