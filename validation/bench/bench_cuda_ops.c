/* bench_cuda_ops.c - the CUDA backend's ops on one GPU, at K3 widths.
 *
 *   k3_bench_cuda_ops [--json] [--reps N]
 *
 * First two references measured in the same run: the copy bandwidth
 * (cudaMemcpy device to device, 1 GiB: read + write counted) and the
 * cuBLASLt bf16 GEMM rate (8192³, fp32 accumulate and output). Then each op
 * at a size well past the 60 MB L2 (or at decode size, where that is the
 * point), timed with CUDA events around 10 back-to-back calls after warm-up,
 * median of N such samples, on random data. Bandwidth-bound ops report GB/s (bytes that must
 * move at least once) and the fraction of the copy bandwidth; GEMMs report
 * TFLOP/s and the fraction of the GEMM reference. Correctness in the same
 * run: the first rows of every output against the CPU twin (#wrong = elements
 * outside the op test's tolerance). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/dtype.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cuda/attn_res.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/sample.h"

static struct k3_backend gpu, cpu;
static int reps = 30, json;
static double copy_gbs, gemm_tflops;

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void *dalloc(size_t bytes)
{
    return k3_cuda_arena_alloc(&k3_cuda_impl(&gpu)->act, bytes, "bench buffer");
}
/* Random fp32 on the device (generated on the host once, in pieces). */
static float *drand_f32(int64_t n, float scale)
{
    float *d = dalloc(sizeof(float) * (size_t)n);
    enum { CH = 1 << 20 };
    float *h = malloc(sizeof(float) * CH);
    for (int64_t o = 0; o < n; o += CH) {
        int64_t m = n - o < CH ? n - o : CH;
        for (int64_t i = 0; i < m; i++) h[i] = frand() * scale;
        K3_CHECK_CUDA(cudaMemcpy(d + o, h, sizeof(float) * (size_t)m, cudaMemcpyHostToDevice));
    }
    K3_CHECK_CUDA(cudaDeviceSynchronize());   /* the backend's stream is non-blocking */
    free(h);
    return d;
}
static uint16_t *drand_bf16(int64_t n, float scale)
{
    uint16_t *d = dalloc(sizeof(uint16_t) * (size_t)n);
    enum { CH = 1 << 20 };
    uint16_t *h = malloc(sizeof(uint16_t) * CH);
    for (int64_t o = 0; o < n; o += CH) {
        int64_t m = n - o < CH ? n - o : CH;
        for (int64_t i = 0; i < m; i++) h[i] = k3_f32_to_bf16(frand() * scale);
        K3_CHECK_CUDA(cudaMemcpy(d + o, h, sizeof(uint16_t) * (size_t)m, cudaMemcpyHostToDevice));
    }
    K3_CHECK_CUDA(cudaDeviceSynchronize());
    free(h);
    return d;
}
static float *host_copy(const void *d, size_t bytes)
{
    float *h = malloc(bytes);
    K3_CHECK_CUDA(cudaDeviceSynchronize());
    K3_CHECK_CUDA(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    return h;
}

typedef void (*run_fn)(void *ctx);

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median time of fn in microseconds: 3 warm-up runs, then reps samples of
 * INNER back-to-back calls between two events (divided by INNER). Timing
 * single calls of a small kernel on an idle GPU would add the host's launch
 * latency (~5-8 µs measured here) to every sample. */
#define INNER 10
static double time_us(run_fn fn, void *ctx)
{
    cudaStream_t s = k3_cuda_impl(&gpu)->stream;
    cudaEvent_t e0, e1;
    K3_CHECK_CUDA(cudaEventCreate(&e0));
    K3_CHECK_CUDA(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) fn(ctx);
    K3_CHECK_CUDA(cudaStreamSynchronize(s));
    float *ms = malloc(sizeof(float) * (size_t)reps);
    for (int i = 0; i < reps; i++) {
        K3_CHECK_CUDA(cudaEventRecord(e0, s));
        for (int j = 0; j < INNER; j++) fn(ctx);
        K3_CHECK_CUDA(cudaEventRecord(e1, s));
        K3_CHECK_CUDA(cudaEventSynchronize(e1));
        K3_CHECK_CUDA(cudaEventElapsedTime(&ms[i], e0, e1));
        ms[i] /= INNER;
    }
    qsort(ms, (size_t)reps, sizeof(float), cmp_f);
    double med = 1000.0 * ms[reps / 2];
    free(ms);
    k3_cuda_backend_sync(&gpu);
    K3_CHECK_CUDA(cudaEventDestroy(e0));
    K3_CHECK_CUDA(cudaEventDestroy(e1));
    return med;
}

/* Elements of got outside atol + rtol·s (s = scale or |want|), or non-finite. */
static long n_wrong(const float *got, const float *want, const float *scale, int64_t n,
                    double atol, double rtol)
{
    long bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double s = scale ? scale[i] : fabs(want[i]);
        if (!isfinite(got[i]) || fabs((double)got[i] - want[i]) > atol + rtol * s) bad++;
    }
    return bad;
}

static void row(const char *op, const char *shape, double us, double bytes, double flops,
                long wrong)
{
    double gbs = bytes / us * 1e-3, tf = flops / us * 1e-6;
    if (json) {
        printf("{\"op\": \"%s\", \"shape\": \"%s\", \"median_us\": %.2f, \"GB_s\": %.1f, "
               "\"TFLOP_s\": %.2f, \"wrong\": %ld}\n", op, shape, us, gbs, tf, wrong);
        return;
    }
    if (flops > 0)
        printf("  %-12s %-30s %10.2f %9.1f %6.1f%% %9.1f %6.1f%% %6ld\n", op, shape, us, gbs,
               100 * gbs / copy_gbs, tf, 100 * tf / gemm_tflops, wrong);
    else
        printf("  %-12s %-30s %10.2f %9.1f %6.1f%% %9s %7s %6ld\n", op, shape, us, gbs,
               100 * gbs / copy_gbs, "-", "-", wrong);
}

/* ---- references ---------------------------------------------------------- */

struct copy_ctx { void *dst, *src; size_t bytes; };
static void run_copy(void *p)
{
    struct copy_ctx *c = p;
    K3_CHECK_CUDA(cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice,
                                  k3_cuda_impl(&gpu)->stream));
}

struct gemm_ctx { const void *a, *b; float *d; int64_t m, n, k; };
static void run_gemm(void *p)
{
    struct gemm_ctx *g = p;
    k3_cuda_gemm_bf16_raw(k3_cuda_impl(&gpu)->mm, g->a, g->b, g->d, g->m, g->n, g->k,
                          k3_cuda_impl(&gpu)->stream);
}

/* ---- ops ----------------------------------------------------------------- */

struct matmul_ctx { struct k3_matmul_params p; };
static void run_matmul(void *p) { gpu.ops->matmul(&gpu, &((struct matmul_ctx *)p)->p); }

static void bench_matmul(int64_t n, int64_t rows, int64_t cols)
{
    struct k3_cuda_arena *act = &k3_cuda_impl(&gpu)->act;
    size_t mark = k3_cuda_arena_mark(act);
    struct k3_mat w = {K3_WFMT_BF16, drand_bf16(rows * cols, 0.05f), NULL, rows, cols, cols};
    float *x = drand_f32(n * cols, 1.0f), *y = dalloc(sizeof(float) * (size_t)(n * rows));
    struct matmul_ctx c = {{x, cols, &w, y, rows, n, 0, 0}};
    double us = time_us(run_matmul, &c);
    /* check: the first rows against the CPU on the same bf16-rounded inputs */
    int64_t nc = n < 2 ? n : 2;
    float *xh = host_copy(x, sizeof(float) * (size_t)(nc * cols));
    float *xa = malloc(sizeof(float) * (size_t)(nc * cols));
    for (int64_t i = 0; i < nc * cols; i++) {
        xh[i] = k3_bf16_to_f32(k3_f32_to_bf16(xh[i]));
        xa[i] = fabsf(xh[i]);
    }
    uint16_t *wb = (uint16_t *)host_copy(w.data, sizeof(uint16_t) * (size_t)(rows * cols));
    float *wf = malloc(sizeof(float) * (size_t)(rows * cols)), *wa = malloc(sizeof(float) * (size_t)(rows * cols));
    for (int64_t i = 0; i < rows * cols; i++) {
        wf[i] = k3_bf16_to_f32(wb[i]);
        wa[i] = fabsf(wf[i]);
    }
    struct k3_mat wc = {K3_WFMT_F32, wf, NULL, rows, cols, cols}, wac = {K3_WFMT_F32, wa, NULL, rows, cols, cols};
    float *want = malloc(sizeof(float) * (size_t)(nc * rows)), *sc = malloc(sizeof(float) * (size_t)(nc * rows));
    cpu.ops->matmul(&cpu, &(struct k3_matmul_params){xh, cols, &wc, want, rows, nc, 0, 0});
    cpu.ops->matmul(&cpu, &(struct k3_matmul_params){xa, cols, &wac, sc, rows, nc, 0, 0});
    float *got = host_copy(y, sizeof(float) * (size_t)(nc * rows));
    long wrong = n_wrong(got, want, sc, nc * rows, 1e-30, 2e-5);
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld bf16[%lldx%lld]", (long long)n, (long long)rows,
             (long long)cols);
    /* bytes: weights once, x read (fp32) once, y written once */
    double bytes = 2.0 * rows * cols + 4.0 * n * cols + 4.0 * n * rows;
    row("matmul", shape, us, bytes, 2.0 * n * rows * cols, wrong);
    free(xh); free(xa); free(wb); free(wf); free(wa); free(want); free(sc); free(got);
    k3_cuda_arena_reset(act, mark);
}

struct norm_ctx { struct k3_rmsnorm_params p; };
static void run_norm(void *p) { gpu.ops->rmsnorm(&gpu, &((struct norm_ctx *)p)->p); }

static void bench_rmsnorm(int64_t n, int64_t d, int gated)
{
    struct k3_cuda_arena *act = &k3_cuda_impl(&gpu)->act;
    size_t mark = k3_cuda_arena_mark(act);
    float *x = drand_f32(n * d, 2.0f), *w = drand_f32(d, 1.0f), *y = dalloc(sizeof(float) * (size_t)(n * d));
    float *g = gated ? drand_f32(n * d, 3.0f) : NULL;
    struct norm_ctx c = {{x, d, w, g, d, y, d, n, d, 1e-6}};
    double us = time_us(run_norm, &c);
    int64_t nc = n < 64 ? n : 64;
    float *xh = host_copy(x, sizeof(float) * (size_t)(nc * d)), *wh = host_copy(w, sizeof(float) * (size_t)d);
    float *gh = gated ? host_copy(g, sizeof(float) * (size_t)(nc * d)) : NULL;
    float *want = malloc(sizeof(float) * (size_t)(nc * d));
    cpu.ops->rmsnorm(&cpu, &(struct k3_rmsnorm_params){xh, d, wh, gh, d, want, d, nc, d, 1e-6});
    float *got = host_copy(y, sizeof(float) * (size_t)(nc * d));
    char shape[64];
    snprintf(shape, sizeof shape, "[%lldx%lld]%s", (long long)n, (long long)d, gated ? " gated" : "");
    row("rmsnorm", shape, us, 4.0 * n * d * (gated ? 3 : 2), 0,
        n_wrong(got, want, NULL, nc * d, 1e-7, 1e-5));
    free(xh); free(wh); free(gh); free(want); free(got);
    k3_cuda_arena_reset(act, mark);
}

struct glu_ctx { struct k3_glu_params p; };
static void run_glu(void *p) { gpu.ops->glu(&gpu, &((struct glu_ctx *)p)->p); }

static void bench_glu(int64_t n, int64_t m, enum k3_glu_act act_kind)
{
    struct k3_cuda_arena *act = &k3_cuda_impl(&gpu)->act;
    size_t mark = k3_cuda_arena_mark(act);
    float *g = drand_f32(n * m, 6.0f), *u = drand_f32(n * m, 6.0f), *y = dalloc(sizeof(float) * (size_t)(n * m));
    struct glu_ctx c = {{g, u, m, m, y, m, n, m, act_kind, 3.0, 5.0}};
    double us = time_us(run_glu, &c);
    int64_t nc = n < 16 ? n : 16;
    float *gh = host_copy(g, sizeof(float) * (size_t)(nc * m)), *uh = host_copy(u, sizeof(float) * (size_t)(nc * m));
    float *want = malloc(sizeof(float) * (size_t)(nc * m));
    cpu.ops->glu(&cpu, &(struct k3_glu_params){gh, uh, m, m, want, m, nc, m, act_kind, 3.0, 5.0});
    float *got = host_copy(y, sizeof(float) * (size_t)(nc * m));
    char shape[64];
    snprintf(shape, sizeof shape, "%s [%lldx%lld]", act_kind == K3_GLU_SITU ? "situ" : "silu",
             (long long)n, (long long)m);
    row("glu", shape, us, 12.0 * n * m, 0, n_wrong(got, want, NULL, nc * m, 1e-6, 1e-5));
    free(gh); free(uh); free(want); free(got);
    k3_cuda_arena_reset(act, mark);
}

struct embed_ctx { struct k3_embed_params p; };
static void run_embed(void *p) { gpu.ops->embed(&gpu, &((struct embed_ctx *)p)->p); }

static void bench_embed(int64_t n, int64_t vocab, int64_t d)
{
    struct k3_cuda_arena *act = &k3_cuda_impl(&gpu)->act;
    size_t mark = k3_cuda_arena_mark(act);
    struct k3_mat w = {K3_WFMT_BF16, drand_bf16(vocab * d, 1.0f), NULL, vocab, d, d};
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((frand() * 0.5f + 0.5f) * (float)(vocab - 1));
    int32_t *dids = dalloc(sizeof(int32_t) * (size_t)n);
    K3_CHECK_CUDA(cudaMemcpy(dids, ids, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice));
    K3_CHECK_CUDA(cudaDeviceSynchronize());
    float *out = dalloc(sizeof(float) * (size_t)(n * d));
    struct embed_ctx c = {{&w, dids, n, out}};
    double us = time_us(run_embed, &c);
    float *got = host_copy(out, sizeof(float) * (size_t)(4 * d));
    long wrong = 0;
    for (int i = 0; i < 4 && i < n; i++) {
        uint16_t *rowb = (uint16_t *)host_copy((const uint16_t *)w.data + (int64_t)ids[i] * d, 2 * (size_t)d);
        for (int64_t c2 = 0; c2 < d; c2++) wrong += got[i * d + c2] != k3_bf16_to_f32(rowb[c2]);
        free(rowb);
    }
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld bf16[%lldx%lld]", (long long)n, (long long)vocab, (long long)d);
    row("embed", shape, us, 6.0 * n * d, 0, wrong);
    free(ids); free(got);
    k3_cuda_arena_reset(act, mark);
}

struct router_ctx { struct k3_router_params p; };
static void run_router(void *p) { gpu.ops->router(&gpu, &((struct router_ctx *)p)->p); }

static void bench_router(int64_t n, int E, int k)
{
    struct k3_cuda_arena *act = &k3_cuda_impl(&gpu)->act;
    size_t mark = k3_cuda_arena_mark(act);
    float *l = drand_f32(n * E, 4.0f), *b = drand_f32(E, 0.3f), *w = dalloc(sizeof(float) * (size_t)(n * k));
    int32_t *idx = dalloc(sizeof(int32_t) * (size_t)(n * k));
    struct router_ctx c = {{l, b, idx, w, n, E, k, 1, 2.5}};
    double us = time_us(run_router, &c);
    int64_t nc = n < 64 ? n : 64;
    float *lh = host_copy(l, sizeof(float) * (size_t)(nc * E)), *bh = host_copy(b, sizeof(float) * (size_t)E);
    int32_t *ih = malloc(sizeof(int32_t) * (size_t)(nc * k)), *ig = (int32_t *)host_copy(idx, sizeof(int32_t) * (size_t)(nc * k));
    float *wh = malloc(sizeof(float) * (size_t)(nc * k));
    cpu.ops->router(&cpu, &(struct k3_router_params){lh, bh, ih, wh, nc, E, k, 1, 2.5});
    float *wg = host_copy(w, sizeof(float) * (size_t)(nc * k));
    long wrong = n_wrong(wg, wh, NULL, nc * k, 1e-30, 1e-6);
    for (int64_t i = 0; i < nc * k; i++) wrong += ih[i] != ig[i];
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld E=%d k=%d", (long long)n, E, k);
    row("router", shape, us, 4.0 * n * E + 8.0 * n * k, 0, wrong);
    free(lh); free(bh); free(ih); free(ig); free(wh); free(wg);
    k3_cuda_arena_reset(act, mark);
}

struct ar_ctx { struct k3_attn_res_norm_params p; int fused; };
static void run_ar(void *p)
{
    struct ar_ctx *c = p;
    if (c->fused) k3_cuda_attn_res_norm(&gpu, &c->p);
    else gpu.ops->attn_res(&gpu, &c->p.mix);
}

static void bench_attn_res(int64_t n, int64_t d, int n_cand, int fused)
{
    struct k3_cuda_arena *act = &k3_cuda_impl(&gpu)->act;
    size_t mark = k3_cuda_arena_mark(act);
    const float *cand[16];
    for (int j = 0; j < n_cand; j++) cand[j] = drand_f32(n * d, 1.0f + (float)j);
    float *q = drand_f32(d, 3.0f / sqrtf((float)d)), *nw = drand_f32(d, 1.0f);
    float *out = dalloc(sizeof(float) * (size_t)(n * d)), *normed = dalloc(sizeof(float) * (size_t)(n * d));
    struct ar_ctx c = {{{cand, n_cand, q, out, n, d, 1e-6}, nw, normed, 1e-6}, fused};
    double us = time_us(run_ar, &c);
    int64_t nc = n < 4 ? n : 4;
    float *ch[16], *qh = host_copy(q, sizeof(float) * (size_t)d);
    float *sc = calloc((size_t)(nc * d), sizeof(float));
    for (int j = 0; j < n_cand; j++) {
        ch[j] = host_copy(cand[j], sizeof(float) * (size_t)(nc * d));
        for (int64_t i = 0; i < nc * d; i++) sc[i] = fmaxf(sc[i], fabsf(ch[j][i]));
    }
    float *want = malloc(sizeof(float) * (size_t)(nc * d));
    cpu.ops->attn_res(&cpu, &(struct k3_attn_res_params){(const float *const *)ch, n_cand, qh,
                                                         want, nc, d, 1e-6});
    float *got = host_copy(out, sizeof(float) * (size_t)(nc * d));
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld d=%lld cand=%d%s", (long long)n, (long long)d, n_cand,
             fused ? " +norm" : "");
    row("attn_res", shape, us, 4.0 * n * d * (n_cand + (fused ? 2 : 1)), 0,
        n_wrong(got, want, sc, nc * d, 1e-30, 1e-4));
    for (int j = 0; j < n_cand; j++) free(ch[j]);
    free(qh); free(sc); free(want); free(got);
    k3_cuda_arena_reset(act, mark);
}

struct ew_ctx { struct k3_ew_params p; };
static void run_ew(void *p) { gpu.ops->ew(&gpu, &((struct ew_ctx *)p)->p); }

static void bench_ew(int64_t n, int64_t m)
{
    struct k3_cuda_arena *act = &k3_cuda_impl(&gpu)->act;
    size_t mark = k3_cuda_arena_mark(act);
    float *a = drand_f32(n * m, 1.0f), *b = drand_f32(n * m, 1.0f), *y = dalloc(sizeof(float) * (size_t)(n * m));
    struct ew_ctx c = {{K3_EW_ADD, a, b, m, m, y, m, n, m}};
    double us = time_us(run_ew, &c);
    float *ah = host_copy(a, sizeof(float) * (size_t)m), *bh = host_copy(b, sizeof(float) * (size_t)m);
    float *got = host_copy(y, sizeof(float) * (size_t)m);
    long wrong = 0;
    for (int64_t i = 0; i < m; i++) wrong += got[i] != ah[i] + bh[i];
    char shape[64];
    snprintf(shape, sizeof shape, "add [%lldx%lld]", (long long)n, (long long)m);
    row("ew", shape, us, 12.0 * n * m, 0, wrong);
    free(ah); free(bh); free(got);
    k3_cuda_arena_reset(act, mark);
}

struct conv_ctx { struct k3_conv_params p; };
static void run_conv(void *p) { gpu.ops->conv(&gpu, &((struct conv_ctx *)p)->p); }

static void bench_conv(int64_t n, int64_t d)
{
    struct k3_cuda_arena *act = &k3_cuda_impl(&gpu)->act;
    size_t mark = k3_cuda_arena_mark(act);
    float *x = drand_f32(n * d, 1.0f), *w = drand_f32(d * 4, 1.0f), *y = dalloc(sizeof(float) * (size_t)(n * d));
    struct conv_ctx c = {{x, d, w, NULL, y, n, d, 4}};
    double us = time_us(run_conv, &c);
    int64_t nc = n < 8 ? n : 8;
    float *xh = host_copy(x, sizeof(float) * (size_t)(nc * d)), *wh = host_copy(w, sizeof(float) * (size_t)(d * 4));
    float *want = malloc(sizeof(float) * (size_t)(nc * d));
    cpu.ops->conv(&cpu, &(struct k3_conv_params){xh, d, wh, NULL, want, nc, d, 4});
    float *got = host_copy(y, sizeof(float) * (size_t)(nc * d));
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld d=%lld W=4", (long long)n, (long long)d);
    row("conv", shape, us, 8.0 * n * d, 0, n_wrong(got, want, NULL, nc * d, 1e-6, 1e-5));
    free(xh); free(wh); free(want); free(got);
    k3_cuda_arena_reset(act, mark);
}

struct sample_ctx { struct k3_sample_params p; };
static void run_sample(void *p) { k3_cuda_sample(&gpu, &((struct sample_ctx *)p)->p); }

/* Sampling rows of K3's vocabulary: greedy, and T = 0.7 with top-k 50 +
 * top-p 0.9 (the threshold searches make it ~70 passes over the row). The
 * check: greedy ids against a host argmax. */
static void bench_sample(int64_t n, int64_t V, int greedy)
{
    struct k3_cuda_arena *act = &k3_cuda_impl(&gpu)->act;
    size_t mark = k3_cuda_arena_mark(act);
    float *l = drand_f32(n * V, 6.0f);
    float *T = drand_f32(n, 0.0f), *P = drand_f32(n, 0.0f), *U = drand_f32(n, 0.0f);
    int32_t *K = dalloc(sizeof(int32_t) * (size_t)n), *out = dalloc(sizeof(int32_t) * (size_t)n);
    float *h = malloc(sizeof(float) * (size_t)n);
    int32_t *hk = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        h[i] = greedy ? 0.0f : 0.7f;
        hk[i] = 50;
    }
    K3_CHECK_CUDA(cudaMemcpy(T, h, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice));
    for (int64_t i = 0; i < n; i++) h[i] = 0.9f;
    K3_CHECK_CUDA(cudaMemcpy(P, h, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice));
    for (int64_t i = 0; i < n; i++) h[i] = 0.5f;
    K3_CHECK_CUDA(cudaMemcpy(U, h, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice));
    K3_CHECK_CUDA(cudaMemcpy(K, hk, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice));
    K3_CHECK_CUDA(cudaDeviceSynchronize());
    struct sample_ctx c = {{l, V, n, V, T, K, P, NULL, U, out}};
    double us = time_us(run_sample, &c);
    long wrong = 0;
    if (greedy) {
        int32_t *got = (int32_t *)host_copy(out, sizeof(int32_t) * (size_t)n);
        for (int64_t i = 0; i < n && i < 4; i++) {
            float *row = host_copy(l + i * V, sizeof(float) * (size_t)V);
            int64_t best = 0;
            for (int64_t j = 1; j < V; j++)
                if (row[j] > row[best]) best = j;
            wrong += got[i] != best;
            free(row);
        }
        free(got);
    }
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld V=%lld %s", (long long)n, (long long)V,
             greedy ? "greedy" : "T,k50,p0.9");
    row("sample", shape, us, 4.0 * n * V, 0, wrong);
    free(h); free(hk);
    k3_cuda_arena_reset(act, mark);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    }
    if (reps < 1) reps = 1;
    if (k3_cuda_device_count() == 0) {
        printf("skipped: no GPU\n");
        return 77;
    }
    struct k3_cuda_config cfg = {0, 0, 12ull << 30, 0, 512u << 20};
    K3_CHECK(k3_cuda_backend_init(&gpu, &cfg) == 0, "CUDA backend");
    K3_CHECK(k3_cpu_backend_init(&cpu, 0) == 0, "CPU backend");
    struct k3_cuda_backend *cb = k3_cuda_impl(&gpu);
    int drv = 0, rt = 0;
    K3_CHECK_CUDA(cudaDriverGetVersion(&drv));
    K3_CHECK_CUDA(cudaRuntimeGetVersion(&rt));
    time_t now = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));

    /* references */
    struct k3_cuda_arena *act = &cb->act;
    size_t mark = k3_cuda_arena_mark(act);
    struct copy_ctx cc = {dalloc(1u << 30), dalloc(1u << 30), 1u << 30};
    K3_CHECK_CUDA(cudaMemset(cc.src, 1, cc.bytes));
    K3_CHECK_CUDA(cudaDeviceSynchronize());
    copy_gbs = 2.0 * (double)cc.bytes / time_us(run_copy, &cc) * 1e-3;
    k3_cuda_arena_reset(act, mark);
    int64_t G = 8192;
    struct gemm_ctx gc = {drand_bf16(G * G, 1.0f), drand_bf16(G * G, 1.0f),
                          dalloc(sizeof(float) * (size_t)(G * G)), G, G, G};
    gemm_tflops = 2.0 * G * G * G / time_us(run_gemm, &gc) * 1e-6;
    k3_cuda_arena_reset(act, mark);

    if (!json) {
        printf("# k3 CUDA op benchmark, %s, %s (sm_%d%d, %d SMs), CUDA driver API %d, runtime %d\n",
               date, cb->dev.name, cb->dev.sm_major, cb->dev.sm_minor, cb->dev.n_sms, drv, rt);
        printf("# median of %d samples of %d back-to-back calls (CUDA events), after 3 warm-up; "
               "random data\n", reps, INNER);
        printf("# reference: copy bandwidth (D2D cudaMemcpy 1 GiB, read+write) %.1f GB/s; "
               "cuBLASLt bf16 GEMM 8192^3 (fp32 out) %.1f TFLOP/s\n", copy_gbs, gemm_tflops);
        printf("# %-12s %-30s %10s %9s %7s %9s %7s %6s\n", "op", "shape", "median_us", "GB/s",
               "%copy", "TFLOP/s", "%gemm", "#wrong");
    } else {
        printf("{\"date\": \"%s\", \"gpu\": \"%s\", \"driver_api\": %d, \"runtime\": %d, "
               "\"copy_GB_s\": %.1f, \"gemm_bf16_TFLOP_s\": %.1f}\n", date, cb->dev.name, drv, rt,
               copy_gbs, gemm_tflops);
    }
    bench_matmul(1, 7168, 7168);          /* decode: the GEMV kernel, weight-bandwidth bound */
    bench_matmul(4, 7168, 7168);
    bench_matmul(16, 7168, 7168);         /* past the GEMV's n <= 4: cuBLASLt */
    bench_matmul(1, 18432, 7168);         /* a wide decode projection */
    bench_matmul(4096, 7168, 7168);       /* prefill: compute bound (incl. fp32->bf16 of x) */
    bench_matmul(8192, 4096, 7168);
    bench_embed(16384, 65536, 7168);
    bench_rmsnorm(4096, 7168, 0);
    bench_rmsnorm(1, 7168, 0);
    bench_rmsnorm(4096 * 64, 128, 1);     /* per-head gated norm of KDA's output */
    bench_glu(4096, 6144, K3_GLU_SITU);
    bench_glu(4096, 6144, K3_GLU_SILU);
    bench_ew(4096, 7168);
    bench_router(4096, 896, 16);
    bench_router(1, 896, 16);
    bench_attn_res(4096, 7168, 9, 0);
    bench_attn_res(4096, 7168, 9, 1);
    bench_attn_res(1, 7168, 9, 1);
    bench_conv(4096, 8192);
    bench_sample(64, 163840, 1);
    bench_sample(64, 163840, 0);
    bench_sample(1, 163840, 0);
    k3_cpu_backend_free(&cpu);
    k3_cuda_backend_free(&gpu);
    return 0;
}
