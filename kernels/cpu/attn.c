/* attn.c - causal softmax attention (see ops.h, struct k3_attn_params).
 * The pool splits (query, head) pairs. One pass over the keys with an online
 * softmax (running max m, running sum l, running weighted sum, rescaled by
 * e^{m_old - m_new} when the max grows), all in fp64: the per-worker scratch
 * is dv values whatever the context length, so decode never grows it. */
#include "kernels/cpu/attn.h"

#include <math.h>

#include "core/log.h"
#include "kernels/cpu/cpu.h"

struct attn_job {
    const struct k3_attn_params *p;
    struct k3_backend *be;
};

static void attn_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    const struct attn_job *job = ctx;
    const struct k3_attn_params *p = job->p;
    double *acc = k3_cpu_scratch(job->be, worker, K3_CPU_SLOT_RANGE, sizeof(double) * (size_t)p->dv);
    for (int64_t qh = begin; qh < end; qh++) {
        int64_t i = qh / p->n_head;
        int h = (int)(qh % p->n_head);
        int64_t n_vis = p->pos0 + i + 1;
        K3_CHECK(n_vis <= p->n_kv, "query at position %lld sees beyond %lld keys",
                 (long long)(p->pos0 + i), (long long)p->n_kv);
        const float *q = p->q + i * p->q_ts + h * p->q_hs;
        double mx = -INFINITY, sum = 0;
        for (int c = 0; c < p->dv; c++) acc[c] = 0;
        for (int64_t t = 0; t < n_vis; t++) {
            const float *k = p->k + t * p->k_ts + h * p->k_hs;
            double s = 0;
            for (int c = 0; c < p->dqk; c++) s += (double)q[c] * k[c];
            s *= p->scale;
            if (s > mx) {
                double r = exp(mx - s);   /* 0 for the first key */
                sum *= r;
                for (int c = 0; c < p->dv; c++) acc[c] *= r;
                mx = s;
            }
            double e = exp(s - mx);
            const float *v = p->v + t * p->v_ts + h * p->v_hs;
            sum += e;
            for (int c = 0; c < p->dv; c++) acc[c] += e * v[c];
        }
        float *o = p->o + i * p->o_ts + h * p->o_hs;
        for (int c = 0; c < p->dv; c++) o[c] = (float)(acc[c] / sum);
    }
}

void k3_cpu_attn(struct k3_backend *be, const struct k3_attn_params *p)
{
    struct attn_job job = {p, be};
    k3_pool_for(k3_cpu_pool(be), p->n * p->n_head, attn_range, &job);
}
