/* attn.c - causal softmax attention (see ops.h, struct k3_attn_params).
 * The pool splits (query, head) pairs. Scores are fp64 dot products; the
 * softmax subtracts the max and sums in fp64; the value sum is fp64. Two
 * passes over the keys (scores into a per-worker buffer, then the weighted
 * sum) keep it simple; the buffer holds n_kv scores. */
#include "kernels/cpu/attn.h"

#include <math.h>
#include <stdlib.h>

#include "core/log.h"
#include "kernels/cpu/cpu.h"

static void attn_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    const struct k3_attn_params *p = ctx;
    double *s = malloc(sizeof(double) * (size_t)(p->n_kv + p->dv));
    K3_CHECK(s, "out of memory");
    double *acc = s + p->n_kv;
    for (int64_t qh = begin; qh < end; qh++) {
        int64_t i = qh / p->n_head;
        int h = (int)(qh % p->n_head);
        int64_t n_vis = p->pos0 + i + 1;
        K3_CHECK(n_vis <= p->n_kv, "query at position %lld sees beyond %lld keys",
                 (long long)(p->pos0 + i), (long long)p->n_kv);
        const float *q = p->q + i * p->q_ts + h * p->q_hs;
        double mx = -INFINITY;
        for (int64_t t = 0; t < n_vis; t++) {
            const float *k = p->k + t * p->k_ts + h * p->k_hs;
            double d = 0;
            for (int c = 0; c < p->dqk; c++) d += (double)q[c] * k[c];
            s[t] = d * p->scale;
            if (s[t] > mx) mx = s[t];
        }
        double sum = 0;
        for (int64_t t = 0; t < n_vis; t++) {
            s[t] = exp(s[t] - mx);
            sum += s[t];
        }
        for (int c = 0; c < p->dv; c++) acc[c] = 0;
        for (int64_t t = 0; t < n_vis; t++) {
            const float *v = p->v + t * p->v_ts + h * p->v_hs;
            for (int c = 0; c < p->dv; c++) acc[c] += s[t] * v[c];
        }
        float *o = p->o + i * p->o_ts + h * p->o_hs;
        for (int c = 0; c < p->dv; c++) o[c] = (float)(acc[c] / sum);
    }
    free(s);
}

void k3_cpu_attn(struct k3_backend *be, const struct k3_attn_params *p)
{
    k3_pool_for(k3_cpu_pool(be), p->n * p->n_head, attn_range, (void *)p);
}
