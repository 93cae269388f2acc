/* attn_res.c - the AttnRes mix AR(P, B; γ, p) of research/model-architecture.md
 * §3.3, per token: scores of the RMS-normalised candidates against the folded
 * query q = γ ⊙ p, softmax over candidates, weighted sum of the raw candidates.
 * All in fp64, rounded once to fp32. */
#include "kernels/cpu/attn_res.h"

#include <math.h>

#include "core/log.h"
#include "kernels/cpu/cpu.h"

#define MAX_CAND 64

static void attn_res_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    const struct k3_attn_res_params *p = ctx;
    double s[MAX_CAND];
    for (int64_t t = begin; t < end; t++) {
        double mx = -INFINITY;
        for (int j = 0; j < p->n_cand; j++) {
            const float *v = p->cand[j] + t * p->d;
            double ss = 0, dq = 0;
            for (int64_t c = 0; c < p->d; c++) {
                ss += (double)v[c] * v[c];
                dq += (double)v[c] * p->q[c];
            }
            s[j] = dq / sqrt(ss / (double)p->d + p->eps);
            if (s[j] > mx) mx = s[j];
        }
        double sum = 0;
        for (int j = 0; j < p->n_cand; j++) {
            s[j] = exp(s[j] - mx);
            sum += s[j];
        }
        float *o = p->out + t * p->d;
        for (int64_t c = 0; c < p->d; c++) {
            double acc = 0;
            for (int j = 0; j < p->n_cand; j++) acc += s[j] * p->cand[j][t * p->d + c];
            o[c] = (float)(acc / sum);
        }
    }
}

void k3_cpu_attn_res(struct k3_backend *be, const struct k3_attn_res_params *p)
{
    K3_CHECK(p->n_cand >= 1 && p->n_cand <= MAX_CAND, "%d AttnRes candidates (max %d)",
             p->n_cand, MAX_CAND);
    k3_pool_for(k3_cpu_pool(be), p->n, attn_res_range, (void *)p);
}
