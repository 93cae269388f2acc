/* ew.c - see ops.h (struct k3_ew_params). One switch per element; y may alias a. */
#include "kernels/cpu/ew.h"

#include <math.h>

#include "kernels/cpu/cpu.h"

static void ew_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    const struct k3_ew_params *p = ctx;
    for (int64_t i = begin; i < end; i++) {
        const float *a = p->a + i * p->lda;
        const float *b = p->b ? p->b + i * p->ldb : NULL;
        float *y = p->y + i * p->ldy;
        for (int64_t c = 0; c < p->m; c++) {
            switch (p->op) {
            case K3_EW_ADD: y[c] = a[c] + b[c]; break;
            case K3_EW_SIGMOID: y[c] = 1.0f / (1.0f + expf(-a[c])); break;
            case K3_EW_MUL_SIGMOID: y[c] = a[c] / (1.0f + expf(-b[c])); break;
            case K3_EW_COPY: y[c] = a[c]; break;
            }
        }
    }
}

void k3_cpu_ew(struct k3_backend *be, const struct k3_ew_params *p)
{
    k3_pool_for(k3_cpu_pool(be), p->n, ew_range, (void *)p);
}
