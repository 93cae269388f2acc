/* moe.c - routed experts on the CPU (see ops.h, struct k3_moe_params).
 *
 * Expert-major: for each expert that any token chose, gather its tokens,
 * run w1/w3 (k3_cpu_matmul, parallel over output rows), the GLU, w2, and add
 * weight · output into those tokens' rows of y. Experts are visited in index
 * order, so the fp32 sum order is fixed (independent of threads and of the
 * top-k order). The gather buffers are the backend's kept scratch. */
#include "kernels/cpu/moe.h"

#include <string.h>

#include "core/log.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/glu.h"
#include "kernels/cpu/matmul.h"

void k3_cpu_moe(struct k3_backend *be, const struct k3_moe_params *p)
{
    if (p->n <= 0) return;
    int64_t d_in = p->w1[0].cols, m = p->w1[0].rows, d_out = p->w2[0].rows;
    int64_t n = p->n;
    memset(p->y, 0, sizeof(float) * (size_t)(n * d_out));
    /* The gather buffers, from the calling thread's OP scratch (the matmuls
     * below use the RANGE scratch of every worker, the caller's included). */
    size_t n_f = (size_t)(n + n * d_in + 2 * n * m + n * d_out);
    int64_t *tok = k3_cpu_scratch(be, 0, K3_CPU_SLOT_OP, sizeof(int64_t) * (size_t)n + sizeof(float) * n_f);
    float *tw = (float *)(tok + n), *xe = tw + n, *h1 = xe + n * d_in, *h3 = h1 + n * m, *oe = h3 + n * m;
    for (int e = 0; e < p->n_expert; e++) {
        int64_t ne = 0;
        for (int64_t i = 0; i < n; i++)
            for (int j = 0; j < p->k; j++)
                if (p->idx[i * p->k + j] == e) {
                    tok[ne] = i;
                    tw[ne] = p->w[i * p->k + j];
                    ne++;
                }
        if (!ne) continue;
        K3_CHECK(p->w1[e].data, "expert %d selected but not loaded on this rank", e);
        K3_CHECK(p->w1[e].cols == d_in && p->w3[e].rows == m && p->w2[e].cols == m,
                 "expert %d has other shapes than expert 0", e);
        for (int64_t r = 0; r < ne; r++)
            memcpy(xe + r * d_in, p->x + tok[r] * d_in, sizeof(float) * (size_t)d_in);
        struct k3_matmul_params mm = {.x = xe, .ldx = d_in, .w = &p->w1[e], .y = h1, .ldy = m, .n = ne};
        k3_cpu_matmul(be, &mm);
        mm.w = &p->w3[e];
        mm.y = h3;
        k3_cpu_matmul(be, &mm);
        for (int64_t r = 0; r < ne * m; r++)
            h1[r] = k3_glu_value(p->act, h1[r], h3[r], p->beta, p->beta_lin);
        struct k3_matmul_params down = {.x = h1, .ldx = m, .w = &p->w2[e], .y = oe, .ldy = d_out, .n = ne};
        k3_cpu_matmul(be, &down);
        for (int64_t r = 0; r < ne; r++) {
            float *y = p->y + tok[r] * d_out;
            for (int64_t c = 0; c < d_out; c++) y[c] += tw[r] * oe[r * d_out + c];
        }
    }
}
