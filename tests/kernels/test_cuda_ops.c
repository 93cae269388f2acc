/* test_cuda_ops.c - every CUDA op against its CPU twin, in the manner of
 * ggml's test-backend-ops: random inputs, several shapes including odd sizes
 * and strided rows, a per-op tolerance (the comment at each case says why),
 * NaN/Inf checks, guard regions around every device buffer and in the gaps
 * between strided rows, and a report line with the worst element's
 * coordinates and the fraction of the tolerance used.
 *
 *   test_cuda_ops              all cases, then 1,000 repeated dense steps with
 *                              device memory checked flat
 *   test_cuda_ops ops          the op cases only (for compute-sanitizer)
 *   test_cuda_ops die-embed    a bad token id: must end in a fatal error
 *   test_cuda_ops die-kda      an op not on the GPU yet: must end in a fatal error
 *
 * Without a GPU it prints "skipped: no GPU" and exits 77 (CTest's skip). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dtype.h"
#include "core/log.h"
#include "k3_test.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cuda/attn_res.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sample.h"

static struct k3_backend cpu, gpu;

/* ---- random numbers ---------------------------------------------------- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void)  /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float *host_rand(int64_t n, float scale)
{
    float *b = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) b[i] = frand() * scale;
    return b;
}
static float bf16_round(float v) { return k3_bf16_to_f32(k3_f32_to_bf16(v)); }

/* ---- device buffers with guard regions ---------------------------------- */

#define GUARD_BYTES 4096
#define SENTINEL_BYTE 0xA5   /* 0xA5A5A5A5 as a float is -2.87e-16: never a result here */

struct dalloc {
    char *base;           /* [GUARD | user | GUARD] */
    size_t user_bytes;
    const char *what;
};
static struct dalloc allocs[64];
static int n_allocs;

static void *dev_alloc(size_t bytes, const char *what)
{
    K3_CHECK(n_allocs < 64, "too many test buffers");
    char *base;
    size_t total = bytes + 2 * GUARD_BYTES;
    K3_CHECK_CUDA(cudaMalloc((void **)&base, total));
    K3_CHECK_CUDA(cudaMemset(base, SENTINEL_BYTE, total));
    /* the backend's stream does not wait for the legacy stream (backend_cuda.h) */
    K3_CHECK_CUDA(cudaDeviceSynchronize());
    allocs[n_allocs++] = (struct dalloc){base, bytes, what};
    return base + GUARD_BYTES;
}
static void *dev_from(const void *host, size_t bytes, const char *what)
{
    void *d = dev_alloc(bytes, what);
    K3_CHECK_CUDA(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    K3_CHECK_CUDA(cudaDeviceSynchronize());
    return d;
}
static void to_host(void *host, const void *dev, size_t bytes)
{
    K3_CHECK_CUDA(cudaDeviceSynchronize());
    K3_CHECK_CUDA(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

static int is_sentinel(const void *p, size_t bytes)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < bytes; i++)
        if (b[i] != SENTINEL_BYTE) return 0;
    return 1;
}

/* End of a case: sync (device-side errors are fatal), every guard intact,
 * everything freed. */
static void case_end(const char *name)
{
    k3_cuda_backend_sync(&gpu);
    static unsigned char g[GUARD_BYTES];
    for (int i = 0; i < n_allocs; i++) {
        struct dalloc *a = &allocs[i];
        to_host(g, a->base, GUARD_BYTES);
        int before = is_sentinel(g, GUARD_BYTES);
        to_host(g, a->base + GUARD_BYTES + a->user_bytes, GUARD_BYTES);
        int after = is_sentinel(g, GUARD_BYTES);
        CHECK_MSG(before && after, "%s: write outside buffer '%s' (%s guard)", name, a->what,
                  before ? "after" : "before");
        K3_CHECK_CUDA(cudaFree(a->base));
    }
    n_allocs = 0;
}

/* An output of n rows of m floats at stride ld, every byte a sentinel. */
static float *dev_out(int64_t n, int64_t ld, const char *what)
{
    return dev_alloc(sizeof(float) * (size_t)(n * ld), what);
}

/* ---- comparison ---------------------------------------------------------- */

/* got (device, [n, m] at stride ld_got) against want (host, [n, m] at stride
 * m): worst |got - want| / (atol + rtol·s) with s = scale[i, c] if given,
 * else |want|. Non-finite values where want is finite fail. Elements in the
 * row gaps (ld_got > m) must still be sentinels. Prints one report line. */
static void compare(const char *op, const char *shape, const float *got_dev, int64_t ld_got,
                    const float *want, const float *scale, int64_t n, int64_t m, double atol,
                    double rtol)
{
    size_t total = (size_t)(n * ld_got);
    float *got = malloc(sizeof(float) * (total ? total : 1));
    to_host(got, got_dev, sizeof(float) * total);
    double worst = 0;
    int64_t wi = 0, wc = 0, n_bad = 0, n_gap = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t c = 0; c < m; c++) {
            double g = got[i * ld_got + c], w = want[i * m + c];
            double s = scale ? scale[i * m + c] : fabs(w);
            double r;
            if (!isfinite(g) || !isfinite(w)) {
                r = (isfinite(g) != isfinite(w) || (isnan(g) != isnan(w))) ? INFINITY : 0;
                if (isfinite(w) && !isfinite(g)) n_bad++;
            } else {
                r = fabs(g - w) / (atol + rtol * s);
            }
            if (r > worst || (isinf(r) && !isinf(worst))) {
                worst = r;
                wi = i;
                wc = c;
            }
        }
        for (int64_t c = m; c < ld_got; c++) n_gap += !is_sentinel(&got[i * ld_got + c], 4);
    }
    double g = (n > 0 && m > 0) ? got[wi * ld_got + wc] : 0;
    double w = (n > 0 && m > 0) ? want[wi * m + wc] : 0;
    printf("  %-10s %-34s worst (%lld, %lld) %.9g vs %.9g  %6.2f%% of tol (atol %.0e rtol %.0e)%s\n",
           op, shape, (long long)wi, (long long)wc, g, w, 100 * worst, atol, rtol,
           n_bad ? "  NON-FINITE" : "");
    CHECK_MSG(worst <= 1.0, "%s %s: error %.3g× the tolerance at (%lld, %lld)", op, shape, worst,
              (long long)wi, (long long)wc);
    CHECK_MSG(n_bad == 0, "%s %s: %lld non-finite outputs", op, shape, (long long)n_bad);
    CHECK_MSG(n_gap == 0, "%s %s: %lld writes into the gaps between rows", op, shape,
              (long long)n_gap);
    free(got);
}

/* ---- matmul ------------------------------------------------------------- */

/* The GPU rounds x to bf16 (cuBLASLt has no fp32 × bf16 GEMM), so the CPU
 * twin gets the same rounded x: what remains is the fp32 summation order
 * (8 strided partials on the CPU, MMA k-steps and maybe split-K on the GPU),
 * bounded in practice by a few ulp of S = Σ|x||w|. Tolerance 2e-5·S (≈ 170
 * ulp of S: far above the ~1-10 ulp observed, far below a wrong element,
 * which is O(S)). The effect of the rounding itself (vs fp32 x) is printed
 * separately as information: it is ~2^-9·S by construction. */
static void test_matmul_case(int64_t n, int64_t rows, int64_t cols, int trans, enum k3_wfmt fmt,
                             int64_t x_pad, int64_t y_pad, int64_t w_pad, int accumulate)
{
    int64_t k = trans ? rows : cols, m = trans ? cols : rows;
    int64_t ldx = k + x_pad, ldy = m + y_pad, ldw = cols + w_pad;
    char shape[96];
    snprintf(shape, sizeof shape, "n=%lld %s[%lldx%lld]%s%s%s", (long long)n,
             fmt == K3_WFMT_BF16 ? "bf16" : "f32", (long long)rows, (long long)cols,
             trans ? " trans" : "", accumulate ? " acc" : "", x_pad || y_pad ? " strided" : "");
    float *x = host_rand(n * ldx, 1.0f);
    float *wf = host_rand(rows * ldw, 0.05f);
    uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)(rows * ldw));
    for (int64_t i = 0; i < rows * ldw; i++) {
        wb[i] = k3_f32_to_bf16(wf[i]);
        if (fmt == K3_WFMT_BF16) wf[i] = k3_bf16_to_f32(wb[i]);
    }
    /* the CPU's inputs: x rounded like the GPU does, contiguous */
    float *xr = malloc(sizeof(float) * (size_t)(n * k)), *xa = malloc(sizeof(float) * (size_t)(n * k));
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < k; c++) {
            float v = x[i * ldx + c];
            xr[i * k + c] = fmt == K3_WFMT_BF16 ? bf16_round(v) : v;
            xa[i * k + c] = fabsf(xr[i * k + c]);
        }
    float *y0 = host_rand(n * m, 1.0f);   /* the accumulate case adds to this */
    float *want = malloc(sizeof(float) * (size_t)(n * m)), *scale = malloc(sizeof(float) * (size_t)(n * m));
    float *wabs = malloc(sizeof(float) * (size_t)(rows * ldw));
    for (int64_t i = 0; i < rows * ldw; i++) wabs[i] = fabsf(wf[i]);
    struct k3_mat wc = {K3_WFMT_F32, wf, NULL, rows, cols, ldw};
    struct k3_mat wac = {K3_WFMT_F32, wabs, NULL, rows, cols, ldw};
    memcpy(want, y0, sizeof(float) * (size_t)(n * m));
    cpu.ops->matmul(&cpu, &(struct k3_matmul_params){xr, k, &wc, want, m, n, trans, accumulate});
    cpu.ops->matmul(&cpu, &(struct k3_matmul_params){xa, k, &wac, scale, m, n, trans, 0});
    if (accumulate)
        for (int64_t i = 0; i < n * m; i++) scale[i] += fabsf(y0[i]);
    /* GPU: weights through the upload path (re-strided), x and y strided */
    struct k3_mat wh = {fmt, fmt == K3_WFMT_BF16 ? (void *)wb : (void *)wf, NULL, rows, cols, ldw};
    struct k3_mat wd;
    size_t wmark = k3_cuda_arena_mark(&k3_cuda_impl(&gpu)->weights);
    k3_cuda_upload_mat(&gpu, &wh, &wd, "test weight");
    float *dx = dev_from(x, sizeof(float) * (size_t)(n * ldx), "x");
    float *dy = dev_out(n, ldy, "y");
    if (accumulate)
        K3_CHECK_CUDA(cudaMemcpy2D(dy, sizeof(float) * (size_t)ldy, y0, sizeof(float) * (size_t)m,
                                   sizeof(float) * (size_t)m, (size_t)n, cudaMemcpyHostToDevice));
    K3_CHECK_CUDA(cudaDeviceSynchronize());
    gpu.ops->matmul(&gpu, &(struct k3_matmul_params){dx, ldx, &wd, dy, ldy, n, trans, accumulate});
    compare("matmul", shape, dy, ldy, want, scale, n, m, 1e-30, 2e-5);
    if (fmt == K3_WFMT_BF16 && !accumulate) {
        /* information: the GPU against fp32 x, in units of 2^-8·S */
        float *yf = malloc(sizeof(float) * (size_t)(n * m));
        float *xf = malloc(sizeof(float) * (size_t)(n * k));
        for (int64_t i = 0; i < n; i++) memcpy(xf + i * k, x + i * ldx, sizeof(float) * (size_t)k);
        cpu.ops->matmul(&cpu, &(struct k3_matmul_params){xf, k, &wc, yf, m, n, trans, 0});
        float *got = malloc(sizeof(float) * (size_t)(n * ldy));
        to_host(got, dy, sizeof(float) * (size_t)(n * ldy));
        double worst = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < m; c++) {
                double r = fabs(got[i * ldy + c] - yf[i * m + c]) / (scale[i * m + c] / 256.0);
                if (r > worst) worst = r;
            }
        printf("  %-10s %-34s (info) vs fp32 x: worst %.3f × 2^-8·Σ|x||w| (bf16 rounding of x)\n",
               "", shape, worst);
        free(yf);
        free(xf);
        free(got);
    }
    case_end(shape);
    k3_cuda_arena_reset(&k3_cuda_impl(&gpu)->weights, wmark);
    free(x); free(wf); free(wb); free(xr); free(xa); free(y0); free(want); free(scale); free(wabs);
}

static void test_matmul(void)
{
    printf("# matmul (cuBLASLt)\n");
    test_matmul_case(1, 4096, 7168, 0, K3_WFMT_BF16, 0, 0, 0, 0);     /* decode: the GEMV kernel */
    test_matmul_case(3, 1000, 512, 0, K3_WFMT_BF16, 5, 3, 0, 0);      /* GEMV, strided x and y */
    test_matmul_case(4, 333, 264, 0, K3_WFMT_BF16, 0, 1, 8, 1);       /* GEMV, accumulate */
    test_matmul_case(2, 77, 257, 0, K3_WFMT_BF16, 0, 0, 0, 0);        /* K % 8 != 0: cuBLASLt */
    test_matmul_case(64, 2048, 1536, 0, K3_WFMT_BF16, 0, 0, 0, 0);
    test_matmul_case(7, 1001, 257, 0, K3_WFMT_BF16, 5, 3, 3, 0);      /* odd everything */
    test_matmul_case(300, 384, 4096, 0, K3_WFMT_BF16, 0, 0, 0, 0);    /* > scratch: chunked */
    test_matmul_case(9, 512, 576, 1, K3_WFMT_BF16, 0, 0, 0, 0);       /* MLA absorption form */
    test_matmul_case(5, 129, 67, 1, K3_WFMT_BF16, 1, 2, 0, 0);
    test_matmul_case(17, 640, 320, 0, K3_WFMT_BF16, 0, 4, 0, 1);      /* accumulate */
    test_matmul_case(33, 515, 129, 0, K3_WFMT_F32, 2, 1, 0, 0);
    test_matmul_case(3, 256, 96, 1, K3_WFMT_F32, 0, 0, 0, 1);
}

/* ---- embed --------------------------------------------------------------- */

/* bf16 -> fp32 is exact: tolerance 0. */
static void test_embed(void)
{
    printf("# embed\n");
    const int64_t shapes[][2] = {{1000, 777}, {50, 7168}, {3, 1}};
    for (int s = 0; s < 3; s++) {
        int64_t vocab = shapes[s][0], d = shapes[s][1], n = 13;
        for (int f = 0; f < 2; f++) {
            enum k3_wfmt fmt = f ? K3_WFMT_F32 : K3_WFMT_BF16;
            float *tf = host_rand(vocab * d, 1.0f);
            uint16_t *tb = malloc(sizeof(uint16_t) * (size_t)(vocab * d));
            for (int64_t i = 0; i < vocab * d; i++) tb[i] = k3_f32_to_bf16(tf[i]);
            int32_t ids[13];
            for (int i = 0; i < n; i++) ids[i] = (int32_t)((frand() * 0.5f + 0.5f) * (float)vocab) % (int32_t)vocab;
            ids[0] = (int32_t)vocab - 1;
            struct k3_mat th = {fmt, f ? (void *)tf : (void *)tb, NULL, vocab, d, d};
            float *want = malloc(sizeof(float) * (size_t)(n * d));
            cpu.ops->embed(&cpu, &(struct k3_embed_params){&th, ids, n, want});
            struct k3_mat td = th;
            td.data = dev_from(th.data, (f ? 4 : 2) * (size_t)(vocab * d), "table");
            int32_t *dids = dev_from(ids, sizeof ids, "ids");
            float *dout = dev_out(n, d, "out");
            gpu.ops->embed(&gpu, &(struct k3_embed_params){&td, dids, n, dout});
            char shape[64];
            snprintf(shape, sizeof shape, "%s[%lldx%lld] n=%lld", f ? "f32" : "bf16",
                     (long long)vocab, (long long)d, (long long)n);
            compare("embed", shape, dout, d, want, NULL, n, d, 0, 0);
            case_end(shape);
            free(tf); free(tb); free(want);
        }
    }
}

/* ---- norms --------------------------------------------------------------- */

/* RMSNorm: the GPU sums squares in fp32 (tree), the CPU in fp64: the scale
 * factor differs by ~1e-7 relative, the product by a few ulp more. rtol 1e-5
 * (≈ 80 ulp) of |ref|, atol 1e-7 for outputs near zero. */
static void rmsnorm_case(int64_t n, int64_t d, int64_t pad_x, int64_t pad_y, int weight,
                         int gated, int in_place)
{
    int64_t ldx = d + pad_x, ldy = in_place ? ldx : d + pad_y, ldg = d + 1;
    char shape[96];
    snprintf(shape, sizeof shape, "[%lldx%lld]%s%s%s%s", (long long)n, (long long)d,
             weight ? " w" : "", gated ? " gated" : "", pad_x || pad_y ? " strided" : "",
             in_place ? " in-place" : "");
    float *x = host_rand(n * ldx, 3.0f), *w = host_rand(d, 1.5f), *g = host_rand(n * ldg, 4.0f);
    float *xc = malloc(sizeof(float) * (size_t)(n * d)), *gc = malloc(sizeof(float) * (size_t)(n * d));
    for (int64_t i = 0; i < n; i++) {
        memcpy(xc + i * d, x + i * ldx, sizeof(float) * (size_t)d);
        memcpy(gc + i * d, g + i * ldg, sizeof(float) * (size_t)d);
    }
    float *want = malloc(sizeof(float) * (size_t)(n * d));
    cpu.ops->rmsnorm(&cpu, &(struct k3_rmsnorm_params){xc, d, weight ? w : NULL, gated ? gc : NULL,
                                                       d, want, d, n, d, 1e-6});
    float *dx = dev_from(x, sizeof(float) * (size_t)(n * ldx), "x");
    float *dw = dev_from(w, sizeof(float) * (size_t)d, "w");
    float *dg = dev_from(g, sizeof(float) * (size_t)(n * ldg), "gate");
    float *dy = in_place ? dx : dev_out(n, ldy, "y");
    gpu.ops->rmsnorm(&gpu, &(struct k3_rmsnorm_params){dx, ldx, weight ? dw : NULL,
                                                       gated ? dg : NULL, ldg, dy, ldy, n, d, 1e-6});
    if (in_place) {
        /* the gaps of an in-place x hold x's own values, not sentinels */
        float *got = malloc(sizeof(float) * (size_t)(n * ldx)), *gd = dev_out(n, d, "y copy");
        to_host(got, dx, sizeof(float) * (size_t)(n * ldx));
        for (int64_t i = 0; i < n; i++)
            K3_CHECK_CUDA(cudaMemcpy(gd + i * d, got + i * ldx, sizeof(float) * (size_t)d,
                                     cudaMemcpyHostToDevice));
        K3_CHECK_CUDA(cudaDeviceSynchronize());
        compare("rmsnorm", shape, gd, d, want, NULL, n, d, 1e-7, 1e-5);
        free(got);
    } else {
        compare("rmsnorm", shape, dy, ldy, want, NULL, n, d, 1e-7, 1e-5);
    }
    case_end(shape);
    free(x); free(w); free(g); free(xc); free(gc); free(want);
}

static void test_norms(void)
{
    printf("# rmsnorm, l2norm\n");
    rmsnorm_case(1, 7168, 0, 0, 1, 0, 0);        /* decode, K3 width */
    rmsnorm_case(33, 2304, 0, 0, 1, 0, 0);       /* Kimi Linear width */
    rmsnorm_case(7, 4099, 0, 0, 1, 0, 0);        /* odd: scalar path */
    rmsnorm_case(64 * 5, 128, 0, 0, 1, 1, 0);    /* per-head gated (KDA output) */
    rmsnorm_case(5, 512, 3, 1, 1, 1, 0);         /* strided */
    rmsnorm_case(9, 100, 0, 0, 0, 0, 0);         /* no weight */
    rmsnorm_case(4, 1536, 4, 0, 1, 0, 1);        /* in place, strided */
    rmsnorm_case(2, 10000, 0, 0, 1, 0, 0);       /* wider than the register cache */
    /* L2 norm: same precision argument as RMSNorm. */
    const int64_t shapes[][2] = {{6 * 32, 128}, {3, 127}, {1, 7168}};
    for (int s = 0; s < 3; s++) {
        int64_t n = shapes[s][0], d = shapes[s][1];
        float *x = host_rand(n * d, 2.0f), *want = malloc(sizeof(float) * (size_t)(n * d));
        cpu.ops->l2norm(&cpu, &(struct k3_l2norm_params){x, want, n, d, 1e-6, 0.0883883});
        float *dx = dev_from(x, sizeof(float) * (size_t)(n * d), "x"), *dy = dev_out(n, d, "y");
        gpu.ops->l2norm(&gpu, &(struct k3_l2norm_params){dx, dy, n, d, 1e-6, 0.0883883});
        char shape[64];
        snprintf(shape, sizeof shape, "[%lldx%lld] scale", (long long)n, (long long)d);
        compare("l2norm", shape, dy, d, want, NULL, n, d, 1e-7, 1e-5);
        case_end(shape);
        free(x); free(want);
    }
}

/* ---- elementwise: glu, ew, kda_gate ------------------------------------ */

/* GLU: the CPU evaluates in fp64 and rounds once; the GPU in fp32 with
 * expf/tanhf (≤ 2 ulp each) over ~6 operations: ≤ ~16 ulp. rtol 1e-5 (~80
 * ulp) of |ref|, atol 1e-6 where the gate's tanh or sigmoid cancels. */
static void test_glu(void)
{
    printf("# glu\n");
    const int64_t shapes[][2] = {{1, 18432}, {7, 1001}, {64, 3072}};
    for (int act = 0; act < 2; act++) {
        for (int s = 0; s < 3; s++) {
            int64_t n = shapes[s][0], m = shapes[s][1], ld = s == 1 ? m + 3 : m;
            float *g = host_rand(n * ld, 8.0f), *u = host_rand(n * ld, 8.0f);
            float *want = malloc(sizeof(float) * (size_t)(n * m));
            struct k3_glu_params pc = {g, u, ld, ld, want, m, n, m, (enum k3_glu_act)act, 3.0, 5.0};
            cpu.ops->glu(&cpu, &pc);
            float *dg = dev_from(g, sizeof(float) * (size_t)(n * ld), "gate");
            float *du = dev_from(u, sizeof(float) * (size_t)(n * ld), "up");
            float *dy = dev_out(n, ld, "y");
            struct k3_glu_params pg = {dg, du, ld, ld, dy, ld, n, m, (enum k3_glu_act)act, 3.0, 5.0};
            gpu.ops->glu(&gpu, &pg);
            char shape[64];
            snprintf(shape, sizeof shape, "%s [%lldx%lld]%s", act ? "situ" : "silu", (long long)n,
                     (long long)m, ld != m ? " strided" : "");
            compare("glu", shape, dy, ld, want, NULL, n, m, 1e-6, 1e-5);
            case_end(shape);
            free(g); free(u); free(want);
        }
    }
}

/* ew: the same fp32 formulas; expf differs by ≤ 2 ulp between glibc and CUDA:
 * rtol 1e-6 (~8 ulp). */
static void test_ew(void)
{
    printf("# ew\n");
    const char *names[] = {"add", "sigmoid", "mul_sigmoid"};
    for (int op = 0; op < 3; op++) {
        int64_t n = 9, m = 1003, ld = m + 2;
        float *a = host_rand(n * ld, 10.0f), *b = host_rand(n * ld, 10.0f);
        float *want = malloc(sizeof(float) * (size_t)(n * m));
        cpu.ops->ew(&cpu, &(struct k3_ew_params){(enum k3_ew_op)op, a, b, ld, ld, want, m, n, m});
        float *da = dev_from(a, sizeof(float) * (size_t)(n * ld), "a");
        float *db = dev_from(b, sizeof(float) * (size_t)(n * ld), "b");
        float *dy = dev_out(n, ld, "y");
        gpu.ops->ew(&gpu, &(struct k3_ew_params){(enum k3_ew_op)op, da, db, ld, ld, dy, ld, n, m});
        char shape[64];
        snprintf(shape, sizeof shape, "%s [%lldx%lld] strided", names[op], (long long)n, (long long)m);
        compare("ew", shape, dy, ld, want, NULL, n, m, 1e-7, 1e-6);
        case_end(shape);
        free(a); free(b); free(want);
    }
}

/* KDA gate: fp64 on both sides, one rounding to fp32: rtol 1e-6. */
static void test_kda_gate(void)
{
    printf("# kda_gate\n");
    for (int form = 0; form < 2; form++) {
        int64_t n = 7, H = 5, K = 128, ldf = H * K + 3;
        float *f = host_rand(n * ldf, 6.0f), *dt = host_rand(H * K, 2.0f), *al = host_rand(H, 1.0f);
        float *want = malloc(sizeof(float) * (size_t)(n * H * K));
        struct k3_kda_gate_params pc = {f, ldf, dt, al, want, n, (int)H, (int)K,
                                        (enum k3_kda_gate_form)form, -5.0};
        cpu.ops->kda_gate(&cpu, &pc);
        struct k3_kda_gate_params pg = pc;
        pg.f = dev_from(f, sizeof(float) * (size_t)(n * ldf), "f");
        pg.dt_bias = dev_from(dt, sizeof(float) * (size_t)(H * K), "dt_bias");
        pg.a_log = dev_from(al, sizeof(float) * (size_t)H, "a_log");
        pg.g = dev_out(n, H * K, "g");
        gpu.ops->kda_gate(&gpu, &pg);
        char shape[64];
        snprintf(shape, sizeof shape, "%s n=%lld H=%lld K=%lld", form ? "lower_bound" : "softplus",
                 (long long)n, (long long)H, (long long)K);
        compare("kda_gate", shape, pg.g, H * K, want, NULL, n, H * K, 1e-30, 1e-6);
        case_end(shape);
        free(f); free(dt); free(al); free(want);
    }
}

/* ---- conv ---------------------------------------------------------------- */

/* Four fp32 taps in the same order; the GPU may fuse multiply-adds: a few
 * ulp of Σ|w·x|. atol 1e-6, rtol 1e-5 of |ref|. The new tail is a copy:
 * exact. */
static void conv_case(int64_t n, int64_t d, int width, int with_tail, int64_t pad_x)
{
    int64_t ldx = d + pad_x;
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld d=%lld W=%d%s%s", (long long)n, (long long)d, width,
             with_tail ? " tail" : "", pad_x ? " strided" : "");
    float *x = host_rand(n * ldx, 2.0f), *w = host_rand(d * width, 1.0f);
    float *tail = host_rand((width - 1) * d, 2.0f), *tail_c = malloc(sizeof(float) * (size_t)((width - 1) * d + 1));
    memcpy(tail_c, tail, sizeof(float) * (size_t)((width - 1) * d));
    float *want = malloc(sizeof(float) * (size_t)(n * d));
    cpu.ops->conv(&cpu, &(struct k3_conv_params){x, ldx, w, with_tail ? tail_c : NULL, want, n, d, width});
    struct k3_conv_params pg = {dev_from(x, sizeof(float) * (size_t)(n * ldx), "x"), ldx,
                                dev_from(w, sizeof(float) * (size_t)(d * width), "w"),
                                with_tail ? dev_from(tail, sizeof(float) * (size_t)((width - 1) * d), "tail") : NULL,
                                dev_out(n, d, "y"), n, d, width};
    gpu.ops->conv(&gpu, &pg);
    compare("conv", shape, pg.y, d, want, NULL, n, d, 1e-6, 1e-5);
    if (with_tail) {
        char s2[80];
        snprintf(s2, sizeof s2, "%s (new tail)", shape);
        compare("conv", s2, pg.tail, d, tail_c, NULL, width - 1, d, 0, 0);
    }
    case_end(shape);
    free(x); free(w); free(tail); free(tail_c); free(want);
}

static void test_conv(void)
{
    printf("# conv\n");
    conv_case(37, 1001, 4, 1, 3);   /* prefill continuing a sequence */
    conv_case(1, 4096, 4, 1, 0);    /* decode */
    conv_case(2, 300, 4, 1, 0);     /* n < W-1: the tail shifts in place */
    conv_case(64, 512, 4, 0, 0);    /* fresh sequence, no tail kept */
    conv_case(40, 130, 3, 1, 2);    /* width 3: the general kernel */
}

/* ---- router -------------------------------------------------------------- */

/* Both sides score in fp64 with ties to the lower index: the chosen experts
 * must be identical; the weights are fp64 rounded once: rtol 1e-6. */
static void router_case(int64_t n, int E, int k, int bias, int renorm, double scale)
{
    char shape[80];
    snprintf(shape, sizeof shape, "n=%lld E=%d k=%d%s%s", (long long)n, E, k, bias ? " bias" : "",
             renorm ? " renorm" : "");
    float *l = host_rand(n * E, 4.0f), *b = host_rand(E, 0.3f);
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)(n * k)), *gidx = malloc(sizeof(int32_t) * (size_t)(n * k));
    float *w = malloc(sizeof(float) * (size_t)(n * k));
    cpu.ops->router(&cpu, &(struct k3_router_params){l, bias ? b : NULL, idx, w, n, E, k, renorm, scale});
    struct k3_router_params pg = {dev_from(l, sizeof(float) * (size_t)(n * E), "logits"),
                                  bias ? dev_from(b, sizeof(float) * (size_t)E, "bias") : NULL,
                                  dev_alloc(sizeof(int32_t) * (size_t)(n * k), "idx"),
                                  dev_out(n, k, "w"), n, E, k, renorm, scale};
    gpu.ops->router(&gpu, &pg);
    k3_cuda_backend_sync(&gpu);
    to_host(gidx, pg.idx, sizeof(int32_t) * (size_t)(n * k));
    int64_t n_diff = 0, first = -1;
    for (int64_t i = 0; i < n * k; i++)
        if (gidx[i] != idx[i] && n_diff++ == 0) first = i;
    printf("  %-10s %-34s experts: %lld of %lld differ%s\n", "router", shape, (long long)n_diff,
           (long long)(n * k), n_diff ? " (first at token/slot shown below)" : "");
    CHECK_MSG(n_diff == 0, "router %s: expert (%lld, %lld) is %d on the GPU, %d on the CPU", shape,
              (long long)(first / k), (long long)(first % k), gidx[first >= 0 ? first : 0],
              idx[first >= 0 ? first : 0]);
    compare("router", shape, pg.w, k, w, NULL, n, k, 1e-30, 1e-6);
    case_end(shape);
    free(l); free(b); free(idx); free(gidx); free(w);
}

static void test_router(void)
{
    printf("# router\n");
    router_case(37, 896, 16, 1, 1, 2.5);  /* K3 */
    router_case(5, 256, 8, 1, 1, 2.446);  /* Kimi Linear */
    router_case(3, 384, 1, 0, 0, 1.0);
    router_case(1, 3000, 7, 1, 1, 1.0);   /* odd and large */
}

/* ---- attn_res (and the fused norm) -------------------------------------- */

/* Scores are fp32 dot products over d (tree-summed) against the reference's
 * fp64: with q ~ 1/sqrt(d) the scores are O(1) and their error ~1e-6, which
 * moves the softmax weights by ~1e-6 relative. Tolerance 1e-4 of
 * max_j |V_j[c]| (the scale any output element lives on); the fused norm
 * divides by an fp32 rms on top: 2e-4 of |ref|·... likewise. */
/* n ≤ 32 with float4-able rows takes the split path (many blocks per token). */
static void attn_res_case(int64_t n, int64_t d, int n_cand, int fused)
{
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld d=%lld cand=%d%s", (long long)n, (long long)d, n_cand,
             fused ? " +rmsnorm" : "");
    float *cand[24];
    const float *dcand[24];
    float *scale = malloc(sizeof(float) * (size_t)(n * d));
    for (int64_t i = 0; i < n * d; i++) scale[i] = 0;
    for (int j = 0; j < n_cand; j++) {
        cand[j] = host_rand(n * d, (float)(1 + j));
        for (int64_t i = 0; i < n * d; i++) scale[i] = fmaxf(scale[i], fabsf(cand[j][i]));
        dcand[j] = dev_from(cand[j], sizeof(float) * (size_t)(n * d), "cand");
    }
    float *q = host_rand(d, 3.0f / sqrtf((float)d)), *nw = host_rand(d, 1.0f);
    float *want = malloc(sizeof(float) * (size_t)(n * d)), *wantn = malloc(sizeof(float) * (size_t)(n * d));
    cpu.ops->attn_res(&cpu, &(struct k3_attn_res_params){(const float *const *)cand, n_cand, q,
                                                         want, n, d, 1e-6});
    cpu.ops->rmsnorm(&cpu, &(struct k3_rmsnorm_params){want, d, nw, NULL, 0, wantn, d, n, d, 1e-6});
    struct k3_attn_res_params pg = {dcand, n_cand, dev_from(q, sizeof(float) * (size_t)d, "q"),
                                    dev_out(n, d, "out"), n, d, 1e-6};
    if (fused) {
        struct k3_attn_res_norm_params pn = {pg, dev_from(nw, sizeof(float) * (size_t)d, "norm_w"),
                                             dev_out(n, d, "normed"), 1e-6};
        k3_cuda_attn_res_norm(&gpu, &pn);
        compare("attn_res", shape, pg.out, d, want, scale, n, d, 1e-30, 1e-4);
        compare("attn_res", shape, pn.normed, d, wantn, NULL, n, d, 1e-6, 2e-4);
    } else {
        gpu.ops->attn_res(&gpu, &pg);
        compare("attn_res", shape, pg.out, d, want, scale, n, d, 1e-30, 1e-4);
    }
    case_end(shape);
    for (int j = 0; j < n_cand; j++) free(cand[j]);
    free(scale); free(q); free(nw); free(want); free(wantn);
}

static void test_attn_res(void)
{
    printf("# attn_res\n");
    attn_res_case(5, 7168, 9, 0);
    attn_res_case(11, 1001, 3, 0);
    attn_res_case(2, 2304, 1, 0);
    attn_res_case(5, 7168, 9, 1);
    attn_res_case(16, 333, 5, 1);
    attn_res_case(3, 512, 20, 1);    /* more than 16 candidates: the general kernel */
    attn_res_case(40, 1024, 9, 1);   /* > 32 tokens: one block per token, single sweep */
    attn_res_case(1, 7000, 9, 1);    /* decode, d not a multiple of 512: split path tail */
}

/* ---- sampling -------------------------------------------------------------- */

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* The reference of sample.h's contract, in fp64 with a sort. */
static int32_t sample_ref(const float *l, int64_t V, float T, int k, float top_p, float min_p,
                          float u, double *margin)
{
    *margin = 1.0;
    if (!(T > 0)) {
        int64_t best = 0;
        for (int64_t c = 1; c < V; c++)
            if (l[c] > l[best]) best = c;
        return (int32_t)best;
    }
    float *sorted = malloc(sizeof(float) * (size_t)V);
    memcpy(sorted, l, sizeof(float) * (size_t)V);
    qsort(sorted, (size_t)V, sizeof(float), cmp_desc);
    float mx = sorted[0], thr = -INFINITY;
    if (k > 0 && k < V) thr = sorted[k - 1];
    if (top_p < 1) {
        double zk = 0, run = 0;
        for (int64_t i = 0; i < V && sorted[i] >= thr; i++) zk += exp(((double)sorted[i] - mx) / T);
        for (int64_t i = 0; i < V && sorted[i] >= thr; i++) {
            run += exp(((double)sorted[i] - mx) / T);
            if (run >= (double)top_p * zk) {
                thr = sorted[i];
                break;
            }
        }
    }
    if (min_p > 0) {
        float tm = mx + T * logf(min_p);
        if (tm > thr) thr = tm;
    }
    double total = 0, run = 0;
    for (int64_t c = 0; c < V; c++)
        if (l[c] >= thr) total += exp(((double)l[c] - mx) / T);
    double target = (double)u * total;
    int32_t pick = -1;
    for (int64_t c = 0; c < V && pick < 0; c++) {
        if (l[c] < thr) continue;
        double before = run;
        run += exp(((double)l[c] - mx) / T);
        if (run > target) {
            pick = (int32_t)c;
            *margin = fmin(target - before, run - target) / total;  /* distance to a boundary */
        }
    }
    if (pick < 0) *margin = 0;
    if (pick < 0)
        for (int64_t c = V - 1; c >= 0 && pick < 0; c--)
            if (l[c] >= thr) pick = (int32_t)c;
    free(sorted);
    return pick;
}

/* Token ids must match the reference exactly, except for a draw that lands
 * within 1e-5 (relative to the total mass) of a boundary between two ids:
 * the GPU sums 163840 terms in fp32 (relative error ~1e-6), the reference in
 * fp64, so either id is right there. Such rows are printed and counted
 * apart; the u = 0.9999999 row is one by design (the "past the total"
 * fallback). */
static void test_sample(void)
{
    printf("# sample\n");
    const int64_t vocabs[] = {163840, 1001};
    for (int vi = 0; vi < 2; vi++) {
        int64_t V = vocabs[vi], n = 12, ld = V + (vi ? 3 : 0);
        float *l = host_rand(n * ld, 6.0f);
        float T[12] = {0, 0, 0.7f, 1.0f, 1.3f, 0.8f, 1.0f, 0.5f, 2.0f, 1.0f, 0.9f, 1.0f};
        int32_t K[12] = {0, 5, 50, 0, 0, 20, 1, 40, 0, 1000, 7, 0};
        float P[12] = {1, 1, 1, 0.9f, 1, 0.5f, 1, 0.95f, 0.3f, 0.8f, 1, 1};
        float M[12] = {0, 0, 0, 0, 0, 0.05f, 0, 0, 0, 0.01f, 0.2f, 0};
        float U[12];
        for (int i = 0; i < 12; i++) U[i] = frand() * 0.5f + 0.5f;
        U[11] = 0.9999999f;
        l[1 * ld + 17] = l[1 * ld + 99] = 100.0f;   /* a tie at the top: greedy takes id 17 */
        struct k3_sample_params pg = {dev_from(l, sizeof(float) * (size_t)(n * ld), "logits"), ld, n, V,
                                      dev_from(T, sizeof T, "T"), dev_from(K, sizeof K, "k"),
                                      dev_from(P, sizeof P, "p"), dev_from(M, sizeof M, "min_p"),
                                      dev_from(U, sizeof U, "u"), dev_alloc(sizeof(int32_t) * 12, "out")};
        k3_cuda_sample(&gpu, &pg);
        int32_t got[12];
        to_host(got, pg.out, sizeof got);
        int n_diff = 0, n_edge = 0;
        for (int i = 0; i < n; i++) {
            double margin;
            int32_t want = sample_ref(l + i * ld, V, T[i], K[i], P[i], M[i], U[i], &margin);
            if (got[i] != want) {
                int edge = margin < 1e-5;
                n_diff += !edge;
                n_edge += edge;
                printf("  sample     row %d (T %.2f k %d p %.2f min_p %.2f u %.7f): gpu %d, reference "
                       "%d, draw %.1e from a boundary%s\n", i, T[i], K[i], P[i], M[i], U[i], got[i],
                       want, margin, edge ? " (accepted)" : "");
            }
        }
        printf("  %-10s vocab=%-7lld %lld rows (greedy, tie, T, top-k, top-p, min-p, u≈1): %d differ, "
               "%d boundary draws\n", "sample", (long long)V, (long long)n, n_diff, n_edge);
        CHECK_MSG(n_diff == 0, "sampling differs from the reference on %d rows (vocab %lld)", n_diff,
                  (long long)V);
        CHECK(got[1] == 17);
        char shape[32];
        snprintf(shape, sizeof shape, "sample vocab=%lld", (long long)V);
        case_end(shape);
        free(l);
    }
}

/* ---- backend: support table, uploads ------------------------------------ */

static void test_backend(void)
{
    printf("# backend\n");
    const char *yes[] = {"matmul", "embed", "rmsnorm", "l2norm", "conv", "kda_gate", "glu",
                         "router", "attn_res", "ew"};
    for (int i = 0; i < 10; i++) CHECK(k3_cuda_op_supported(yes[i]));
    CHECK(!k3_cuda_op_supported("kda") && !k3_cuda_op_supported("attn") &&
          !k3_cuda_op_supported("moe"));
    CHECK(gpu.ops->kda && gpu.ops->attn && gpu.ops->moe); /* present, and fatal (die-kda) */
    /* MXFP4 stays packed: bytes and scales round-trip, rows re-strided */
    struct k3_cuda_backend *cb = k3_cuda_impl(&gpu);
    size_t mark = k3_cuda_arena_mark(&cb->weights);
    int64_t rows = 5, cols = 64, ld = 96;
    uint8_t *packed = malloc((size_t)(rows * ld / 2)), *scale = malloc((size_t)(rows * ld / 32));
    for (int64_t i = 0; i < rows * ld / 2; i++) packed[i] = (uint8_t)(i * 37 + 11);
    for (int64_t i = 0; i < rows * ld / 32; i++) scale[i] = (uint8_t)(120 + i);
    struct k3_mat h = {K3_WFMT_MXFP4, packed, scale, rows, cols, ld}, d;
    k3_cuda_upload_mat(&gpu, &h, &d, "mxfp4 test");
    CHECK(d.fmt == K3_WFMT_MXFP4 && d.ld == 64 && ((uintptr_t)d.data % K3_CUDA_ALIGN) == 0);
    uint8_t back[5 * 32], sback[5 * 2];
    to_host(back, d.data, sizeof back);
    to_host(sback, d.scale, sizeof sback);
    int same = 1;
    for (int64_t r = 0; r < rows; r++) {
        same &= !memcmp(back + r * 32, packed + r * ld / 2, 32);
        same &= !memcmp(sback + r * 2, scale + r * ld / 32, 2);
    }
    CHECK_MSG(same, "MXFP4 upload changed the packed bytes or the scales");
    k3_cuda_arena_reset(&cb->weights, mark);
    free(packed);
    free(scale);
    /* arena: aligned, peak recorded, reset reuses */
    size_t m0 = k3_cuda_arena_mark(&cb->act);
    char *a = k3_cuda_arena_alloc(&cb->act, 3, "a"), *b = k3_cuda_arena_alloc(&cb->act, 5, "b");
    CHECK(b - a == K3_CUDA_ALIGN && ((uintptr_t)a % K3_CUDA_ALIGN) == 0);
    k3_cuda_arena_reset(&cb->act, m0);
    CHECK(k3_cuda_arena_alloc(&cb->act, 3, "a again") == a);
    k3_cuda_arena_reset(&cb->act, m0);
    printf("  backend    support table, MXFP4 upload, arena: checked\n");
}

/* ---- 1,000 repeated dense steps: device memory stays flat ---------------- */

/* One "step" of the dense part of a layer with activations from the arena:
 * embed -> AttnRes mix + RMSNorm -> w1, w3 -> SiTU-GLU -> w2 -> router
 * logits -> top-k. The arena is reset after each step; cudaMemGetInfo must
 * not move between step 10 (after the plan cache and cuBLASLt warm up) and
 * step 1000, and the results of the last step must equal the first's. */
static void test_steps(void)
{
    printf("# 1,000 repeated steps\n");
    struct k3_cuda_backend *cb = k3_cuda_impl(&gpu);
    int64_t n = 8, d = 1024, f = 512, vocab = 4096, E = 64, k = 6;
    size_t wmark = k3_cuda_arena_mark(&cb->weights);
    uint16_t *hb = malloc(sizeof(uint16_t) * (size_t)(vocab * d));
    for (int64_t i = 0; i < vocab * d; i++) hb[i] = k3_f32_to_bf16(frand() * 0.05f);
    struct k3_mat emb_h = {K3_WFMT_BF16, hb, NULL, vocab, d, d}, emb, w1, w3, w2, wr;
    k3_cuda_upload_mat(&gpu, &emb_h, &emb, "embed");
    struct k3_mat w1h = {K3_WFMT_BF16, hb, NULL, f, d, d}, w2h = {K3_WFMT_BF16, hb, NULL, d, f, f},
                  wrh = {K3_WFMT_BF16, hb, NULL, E, d, d};
    k3_cuda_upload_mat(&gpu, &w1h, &w1, "w1");
    k3_cuda_upload_mat(&gpu, &w1h, &w3, "w3");
    k3_cuda_upload_mat(&gpu, &w2h, &w2, "w2");
    k3_cuda_upload_mat(&gpu, &wrh, &wr, "router");
    float *hq = host_rand(d, 0.03f);
    float *q = k3_cuda_upload(&gpu, hq, sizeof(float) * (size_t)d, "q");
    float *nw = k3_cuda_upload(&gpu, hq, sizeof(float) * (size_t)d, "norm");
    int32_t ids[8] = {1, 5, 77, 4095, 0, 123, 999, 2048};
    int32_t *dids = k3_cuda_upload(&gpu, ids, sizeof ids, "ids");
    float first[8 * 6], last[8 * 6];
    size_t free0 = 0, free1 = 0, total = 0;
    for (int step = 0; step < 1000; step++) {
        size_t mark = k3_cuda_arena_mark(&cb->act);
        float *h = k3_cuda_arena_alloc(&cb->act, sizeof(float) * (size_t)(n * d), "h");
        float *hn = k3_cuda_arena_alloc(&cb->act, sizeof(float) * (size_t)(n * d), "hn");
        float *mix = k3_cuda_arena_alloc(&cb->act, sizeof(float) * (size_t)(n * d), "mix");
        float *a = k3_cuda_arena_alloc(&cb->act, sizeof(float) * (size_t)(n * f), "a");
        float *b = k3_cuda_arena_alloc(&cb->act, sizeof(float) * (size_t)(n * f), "b");
        float *lg = k3_cuda_arena_alloc(&cb->act, sizeof(float) * (size_t)(n * E), "logits");
        int32_t *ti = k3_cuda_arena_alloc(&cb->act, sizeof(int32_t) * (size_t)(n * k), "idx");
        float *tw = k3_cuda_arena_alloc(&cb->act, sizeof(float) * (size_t)(n * k), "w");
        gpu.ops->embed(&gpu, &(struct k3_embed_params){&emb, dids, n, h});
        const float *cand[2] = {h, h};
        struct k3_attn_res_norm_params pn = {{cand, 2, q, mix, n, d, 1e-6}, nw, hn, 1e-6};
        k3_cuda_attn_res_norm(&gpu, &pn);
        gpu.ops->matmul(&gpu, &(struct k3_matmul_params){hn, d, &w1, a, f, n, 0, 0});
        gpu.ops->matmul(&gpu, &(struct k3_matmul_params){hn, d, &w3, b, f, n, 0, 0});
        gpu.ops->glu(&gpu, &(struct k3_glu_params){a, b, f, f, a, f, n, f, K3_GLU_SITU, 3.0, 5.0});
        gpu.ops->matmul(&gpu, &(struct k3_matmul_params){a, f, &w2, h, d, n, 0, 1});
        gpu.ops->rmsnorm(&gpu, &(struct k3_rmsnorm_params){h, d, nw, NULL, 0, hn, d, n, d, 1e-6});
        gpu.ops->matmul(&gpu, &(struct k3_matmul_params){hn, d, &wr, lg, E, n, 0, 0});
        gpu.ops->router(&gpu, &(struct k3_router_params){lg, NULL, ti, tw, n, (int)E, (int)k, 1, 2.5});
        k3_cuda_backend_sync(&gpu);
        if (step == 0) to_host(first, tw, sizeof first);
        if (step == 999) to_host(last, tw, sizeof last);
        if (step == 9) K3_CHECK_CUDA(cudaMemGetInfo(&free0, &total));
        k3_cuda_arena_reset(&cb->act, mark);
    }
    K3_CHECK_CUDA(cudaMemGetInfo(&free1, &total));
    printf("  steps      free device memory at step 10: %zu B, at step 1000: %zu B (delta %lld B); "
           "activation arena peak %zu B\n", free0, free1, (long long)free0 - (long long)free1,
           cb->act.peak_bytes);
    CHECK_MSG(free0 == free1, "device memory moved by %lld bytes over 990 steps",
              (long long)free0 - (long long)free1);
    CHECK_MSG(!memcmp(first, last, sizeof first), "step 1000 differs from step 1 (nondeterminism)");
    k3_cuda_arena_reset(&cb->weights, wmark);
    free(hb);
    free(hq);
}

/* ---- fatal paths (run as separate processes by CTest) -------------------- */

/* k3_fatal's last hook: exit with a plain status instead of abort()'s
 * signal, so that CTest can match the message (a signal is an "exception"). */
static void exit_hook(void *ctx)
{
    (void)ctx;
    fflush(NULL);
    _exit(3);
}

static int die(const char *what)
{
    k3_log_add_abort_hook(exit_hook, NULL);
    if (!strcmp(what, "die-embed")) {
        /* a token id past the vocabulary: fatal at the next sync, naming the id */
        uint16_t t[4 * 8] = {0};
        struct k3_mat th = {K3_WFMT_BF16, t, NULL, 4, 8, 8}, td;
        k3_cuda_upload_mat(&gpu, &th, &td, "table");
        int32_t ids[2] = {1, 4};
        int32_t *d = k3_cuda_upload(&gpu, ids, sizeof ids, "ids");
        float *out = k3_cuda_arena_alloc(&k3_cuda_impl(&gpu)->act, 64 * sizeof(float), "out");
        gpu.ops->embed(&gpu, &(struct k3_embed_params){&td, d, 2, out});
        k3_cuda_backend_sync(&gpu);
    } else if (!strcmp(what, "die-kda")) {
        struct k3_kda_params p;
        memset(&p, 0, sizeof p);
        gpu.ops->kda(&gpu, &p);
    }
    printf("still alive after %s\n", what);
    return 0;
}

int main(int argc, char **argv)
{
    if (k3_cuda_device_count() == 0) {
        printf("skipped: no GPU (test_cuda_ops needs a CUDA device; it runs on the GPU machine "
               "with ctest -L gpu)\n");
        return 77;
    }
    struct k3_cuda_config cfg = {0, 256u << 20, 256u << 20, 0, 1u << 20};
    K3_CHECK(k3_cuda_backend_init(&gpu, &cfg) == 0, "CUDA backend init");
    int ops_only = argc > 1 && !strcmp(argv[1], "ops");   /* for compute-sanitizer runs */
    if (argc > 1 && !ops_only) return die(argv[1]);
    K3_CHECK(k3_cpu_backend_init(&cpu, 0) == 0, "CPU backend init");
    struct k3_cuda_backend *cb = k3_cuda_impl(&gpu);
    printf("# CUDA ops vs CPU twins on %s (sm_%d%d); tolerance used = worst |gpu-cpu| / "
           "(atol + rtol·scale)\n", cb->dev.name, cb->dev.sm_major, cb->dev.sm_minor);
    test_backend();
    test_matmul();
    test_embed();
    test_norms();
    test_glu();
    test_ew();
    test_kda_gate();
    test_conv();
    test_router();
    test_attn_res();
    test_sample();
    if (!ops_only) test_steps();
    k3_cpu_backend_free(&cpu);
    k3_cuda_backend_free(&gpu);
    return k3_test_summary();
}
