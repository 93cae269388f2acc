/* router.c - see ops.h (struct k3_router_params), research/model-architecture.md
 * §2.5. Top-k by repeated selection of the largest remaining biased score;
 * ties go to the lower expert index (torch.topk's order on ties is not
 * specified; random weights make ties improbable). */
#include "kernels/cpu/router.h"

#include <math.h>

#include "core/log.h"
#include "kernels/cpu/cpu.h"

struct router_job {
    const struct k3_router_params *p;
    struct k3_backend *be;
};

static void router_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    const struct router_job *job = ctx;
    const struct k3_router_params *p = job->p;
    int E = p->n_expert;
    double *s = k3_cpu_scratch(job->be, worker, K3_CPU_SLOT_RANGE, sizeof(double) * 2 * (size_t)E);
    double *c = s + E;
    for (int64_t t = begin; t < end; t++) {
        const float *l = p->logits + t * E;
        for (int e = 0; e < E; e++) {
            s[e] = 1.0 / (1.0 + exp(-(double)l[e]));
            c[e] = s[e] + (p->bias ? p->bias[e] : 0.0);
        }
        int32_t *idx = p->idx + t * p->k;
        float *w = p->w + t * p->k;
        double sum = 0;
        for (int j = 0; j < p->k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (c[e] != -INFINITY && (best < 0 || c[e] > c[best])) best = e;
            idx[j] = best;
            c[best] = -INFINITY;
            sum += s[best];
        }
        double norm = (p->renorm && p->k > 1) ? 1.0 / (sum + 1e-20) : 1.0;
        for (int j = 0; j < p->k; j++) w[j] = (float)(s[idx[j]] * norm * p->scale);
    }
}

void k3_cpu_router(struct k3_backend *be, const struct k3_router_params *p)
{
    K3_CHECK(p->k >= 1 && p->k <= p->n_expert, "top-%d of %d experts", p->k, p->n_expert);
    struct router_job job = {p, be};
    k3_pool_for(k3_cpu_pool(be), p->n, router_range, &job);
}
