/* matmul.c - the CPU matmul (see ops.h, struct k3_matmul_params).
 *
 * trans = 0 (linear layer): the pool splits the weight rows (output features).
 * A worker decodes ROWS_PER_STEP weight rows to fp32 once and reuses them for
 * every token, so decoding bf16/MXFP4 costs O(rows·cols) however many tokens
 * there are. Dot products use 8 independent fp32 partial sums (a fixed order,
 * so results do not depend on the thread count; the compiler may vectorise
 * them).
 * trans = 1 (x·w, MLA absorption): the pool splits the output columns; each
 * worker walks the weight rows and accumulates x[i,r]·w[r,c] in fp32. */
#include "kernels/cpu/matmul.h"

#include <string.h>

#include "core/dtype.h"
#include "core/log.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/mat.h"

#define ROWS_PER_STEP 4

static float dot8(const float *a, const float *b, int64_t n)
{
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
    for (; i < n; i++) s[i & 7] += a[i] * b[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* bf16 row · fp32 x without decoding the row first: for few tokens (decode)
 * the weights are read once either way, and skipping the row buffer halves
 * the passes over them. Same partial-sum order as dot8, so the result is
 * bitwise that of decode-then-dot8. */
static float dot8_bf16(const uint16_t *w, const float *x, int64_t n)
{
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += k3_bf16_to_f32(w[i + j]) * x[i + j];
    for (; i < n; i++) s[i & 7] += k3_bf16_to_f32(w[i]) * x[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

#define FUSED_BF16_MAX_TOKENS 4

struct matmul_job {
    const struct k3_matmul_params *p;
    struct k3_backend *be;
};

static void matmul_nt_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    const struct matmul_job *job = ctx;
    const struct k3_matmul_params *p = job->p;
    const struct k3_mat *w = p->w;
    int64_t cols = w->cols;
    if (w->fmt == K3_WFMT_BF16 && p->n <= FUSED_BF16_MAX_TOKENS) {
        for (int64_t r = begin; r < end; r++) {
            const uint16_t *wr = (const uint16_t *)w->data + r * w->ld;
            for (int64_t i = 0; i < p->n; i++) {
                float d = dot8_bf16(wr, p->x + i * p->ldx, cols);
                float *y = p->y + i * p->ldy + r;
                *y = p->accumulate ? *y + d : d;
            }
        }
        return;
    }
    float *buf = k3_cpu_scratch(job->be, worker, K3_CPU_SLOT_RANGE, sizeof(float) * (size_t)(cols * ROWS_PER_STEP));
    for (int64_t r0 = begin; r0 < end; r0 += ROWS_PER_STEP) {
        int nr = (int)(end - r0 < ROWS_PER_STEP ? end - r0 : ROWS_PER_STEP);
        for (int j = 0; j < nr; j++) k3_mat_row_f32(w, r0 + j, 0, cols, buf + j * cols);
        for (int64_t i = 0; i < p->n; i++) {
            const float *x = p->x + i * p->ldx;
            float *y = p->y + i * p->ldy + r0;
            for (int j = 0; j < nr; j++) {
                float d = dot8(buf + j * cols, x, cols);
                y[j] = p->accumulate ? y[j] + d : d;
            }
        }
    }
}

static void matmul_tn_range(void *ctx, int64_t begin, int64_t end, int worker)
{
    const struct matmul_job *job = ctx;
    const struct k3_matmul_params *p = job->p;
    const struct k3_mat *w = p->w;
    int64_t nc = end - begin;
    /* MXFP4 rows are decoded from an even column: widen the window by one. */
    int64_t c0 = begin & ~(int64_t)1;
    size_t n_row = (size_t)(end - c0), n_acc = (size_t)(p->n * nc);
    float *row = k3_cpu_scratch(job->be, worker, K3_CPU_SLOT_RANGE, sizeof(float) * (n_row + n_acc));
    float *acc = row + n_row;
    memset(acc, 0, sizeof(float) * n_acc);
    for (int64_t r = 0; r < w->rows; r++) {
        k3_mat_row_f32(w, r, c0, end, row);
        const float *wr = row + (begin - c0);
        for (int64_t i = 0; i < p->n; i++) {
            float xi = p->x[i * p->ldx + r];
            float *a = acc + i * nc;
            for (int64_t c = 0; c < nc; c++) a[c] += xi * wr[c];
        }
    }
    for (int64_t i = 0; i < p->n; i++) {
        float *y = p->y + i * p->ldy + begin;
        for (int64_t c = 0; c < nc; c++) y[c] = p->accumulate ? y[c] + acc[i * nc + c] : acc[i * nc + c];
    }
}

void k3_cpu_matmul(struct k3_backend *be, const struct k3_matmul_params *p)
{
    if (p->n <= 0) return;
    struct matmul_job job = {p, be};
    if (!p->trans) k3_pool_for(k3_cpu_pool(be), p->w->rows, matmul_nt_range, &job);
    else k3_pool_for(k3_cpu_pool(be), p->w->cols, matmul_tn_range, &job);
}
