/* kda_gate.c - see ops.h (struct k3_kda_gate_params), model-architecture.md
 * §1.2 step 6 and §10.3. Computed in fp64 then stored as fp32: g feeds a
 * cumulative sum, so its rounding should be a single final one. softplus uses
 * the overflow-safe form log1p(e^-|z|) + max(z, 0). */
#include "kernels/cpu/kda_gate.h"

#include <math.h>

#include "kernels/cpu/cpu.h"

static void gate_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    const struct k3_kda_gate_params *p = ctx;
    int64_t hk = (int64_t)p->n_head * p->head_dim;
    for (int64_t t = begin; t < end; t++) {
        const float *f = p->f + t * p->ldf;
        float *g = p->g + t * hk;
        for (int64_t c = 0; c < hk; c++) {
            double a = exp((double)p->a_log[c / p->head_dim]);
            double z = (double)f[c] + (double)p->dt_bias[c];
            double v;
            if (p->form == K3_KDA_GATE_SOFTPLUS) {
                double sp = log1p(exp(-fabs(z))) + (z > 0 ? z : 0);
                v = -a * sp;
            } else {
                v = p->lower_bound / (1.0 + exp(-a * z));
            }
            g[c] = (float)v;
        }
    }
}

void k3_cpu_kda_gate(struct k3_backend *be, const struct k3_kda_gate_params *p)
{
    k3_pool_for(k3_cpu_pool(be), p->n, gate_range, (void *)p);
}
