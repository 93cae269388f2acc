/* norm.c - RMSNorm and L2 norm over rows (see ops.h). Sums of squares in fp64:
 * rows are up to 7168 wide and this is the reference. No bf16 rounding of the
 * normalised value (KimiRMSNorm does that in bf16 models; this path stays fp32
 * by design, issue 4). */
#include "kernels/cpu/norm.h"

#include <math.h>

#include "kernels/cpu/cpu.h"

static void rmsnorm_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    const struct k3_rmsnorm_params *p = ctx;
    for (int64_t r = begin; r < end; r++) {
        const float *x = p->x + r * p->ldx;
        float *y = p->y + r * p->ldy;
        double ss = 0;
        for (int64_t c = 0; c < p->d; c++) ss += (double)x[c] * x[c];
        float inv = (float)(1.0 / sqrt(ss / (double)p->d + p->eps));
        const float *g = p->gate ? p->gate + r * p->ldg : NULL;
        for (int64_t c = 0; c < p->d; c++) {
            float v = x[c] * inv;
            if (p->w) v *= p->w[c];
            if (g) v *= 1.0f / (1.0f + expf(-g[c]));
            y[c] = v;
        }
    }
}

void k3_cpu_rmsnorm(struct k3_backend *be, const struct k3_rmsnorm_params *p)
{
    k3_pool_for(k3_cpu_pool(be), p->n_rows, rmsnorm_range, (void *)p);
}

static void l2norm_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    const struct k3_l2norm_params *p = ctx;
    for (int64_t r = begin; r < end; r++) {
        const float *x = p->x + r * p->d;
        float *y = p->y + r * p->d;
        double ss = 0;
        for (int64_t c = 0; c < p->d; c++) ss += (double)x[c] * x[c];
        float f = (float)(p->scale / sqrt(ss + p->eps));
        for (int64_t c = 0; c < p->d; c++) y[c] = x[c] * f;
    }
}

void k3_cpu_l2norm(struct k3_backend *be, const struct k3_l2norm_params *p)
{
    k3_pool_for(k3_cpu_pool(be), p->n_rows, l2norm_range, (void *)p);
}
