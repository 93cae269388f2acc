/* glu.c - see ops.h (struct k3_glu_params). SiTU-GLU as in
 * research/model-architecture.md §4.2/§10.2:
 *   [β·tanh(g/β)·σ(g)] · [β_lin·tanh(u/β_lin)], β on the gate branch only.
 * Evaluated in fp64 and rounded once. */
#include "kernels/cpu/glu.h"

#include <math.h>

#include "kernels/cpu/cpu.h"

float k3_glu_value(enum k3_glu_act act, float g, float u, double beta, double beta_lin)
{
    double sg = 1.0 / (1.0 + exp(-(double)g));
    if (act == K3_GLU_SILU) return (float)((double)g * sg * (double)u);
    double a = beta * tanh((double)g / beta) * sg;
    double b = beta_lin * tanh((double)u / beta_lin);
    return (float)(a * b);
}

static void glu_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    const struct k3_glu_params *p = ctx;
    for (int64_t i = begin; i < end; i++)
        for (int64_t c = 0; c < p->m; c++)
            p->y[i * p->ldy + c] = k3_glu_value(p->act, p->gate[i * p->ldg + c],
                                                p->up[i * p->ldu + c], p->beta, p->beta_lin);
}

void k3_cpu_glu(struct k3_backend *be, const struct k3_glu_params *p)
{
    k3_pool_for(k3_cpu_pool(be), p->n, glu_range, (void *)p);
}
