/* matmul.cu - y = x·wᵀ (linear layer) or x·w (trans, MLA absorption) through
 * cuBLASLt, fp32 accumulation (ops.h, struct k3_matmul_params).
 *
 * Activations are fp32 in k3 and weights bf16 as stored; cuBLASLt has no
 * fp32 × bf16 GEMM, so x is first rounded to bf16 (round to nearest even)
 * into backend scratch, then a bf16 × bf16 → fp32 GEMM runs with fp32
 * accumulate and fp32 output (beta = 1 for accumulate). Rounding x is what a
 * bf16 model does anyway; the op test compares against the CPU twin on the
 * same bf16-rounded x (so only the summation order differs) and reports the
 * rounding's own effect separately. F16 weights: x rounded to f16 likewise;
 * F32 weights: plain fp32 GEMM (CUBLAS_COMPUTE_32F, no TF32).
 *
 * Row-major to cuBLASLt's column-major: a row-major [a, b] matrix with row
 * stride ld is a column-major [b, a] one with leading dimension ld. So W
 * [rows, cols] is A = col-major [cols, rows] (ld), transposed for a linear
 * layer (op(A) = [rows, cols]) and not for trans; x [n, K] is B = [K, n];
 * y [n, N] is D = [N, n] (ldy). Pointer alignment is part of the plan key:
 * cuBLASLt's heuristic assumes 256-byte operands unless told otherwise, and
 * a head or column slice of a buffer is often less aligned than that.
 *
 * Decode (n ≤ 4 tokens, bf16 linear layer, K a multiple of 8): a hand-written
 * GEMV instead of cuBLASLt, which reached only ~55% of the copy bandwidth on
 * 7168×7168 at n = 1 on the H200 (validation/results). One warp per output
 * row streams the weight row in 16-byte loads (cache-streaming: read once),
 * reads the bf16 copy of x (the same rounding as the GEMM path, so results
 * do not depend on the batch size beyond summation order) from L1/L2, and
 * reduces with shuffles. */
#include "kernels/cuda/matmul.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/common.cuh"

#define K3_CHECK_CUBLAS(call)                                                  \
    do {                                                                       \
        cublasStatus_t k3_st_ = (call);                                        \
        if (k3_st_ != CUBLAS_STATUS_SUCCESS)                                   \
            k3_fatal(__FILE__, __LINE__, #call, "cuBLASLt error %d (%s)", (int)k3_st_, \
                     cublasLtGetStatusString(k3_st_));                         \
    } while (0)

#define N_PLANS 64

struct plan_key {
    int type;          /* cudaDataType of A and B */
    int trans;
    int64_t m, n, k, lda, ldb, ldd;
    int align_a, align_b, align_d;
    int accumulate;
};

struct plan {
    struct plan_key key;
    int valid;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
};

struct k3_cuda_matmul_ctx {
    cublasLtHandle_t lt;
    void *ws, *xconv;
    size_t ws_bytes, xconv_bytes;
    struct plan plans[N_PLANS];
    int next;          /* round-robin victim when the cache is full */
};

static __global__ void to_16bit_kernel(const float *x, int64_t ldx, int64_t n, int64_t k,
                                       void *out, int64_t ldo, int bf16)
{
    int64_t total = n * k;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = idx / k, c = idx - i * k;
        float v = x[i * ldx + c];
        if (bf16) ((__nv_bfloat16 *)out)[i * ldo + c] = __float2bfloat16_rn(v);
        else ((__half *)out)[i * ldo + c] = __float2half_rn(v);
    }
}

#define GEMV_MAX_N 4
#define GEMV_WARPS 8

/* 8 bf16 in a uint4 -> 8 floats (bf16 is the top half of an fp32). */
static __device__ __forceinline__ void unpack8(uint4 v, float *f)
{
    f[0] = __uint_as_float(v.x << 16); f[1] = __uint_as_float(v.x & 0xffff0000u);
    f[2] = __uint_as_float(v.y << 16); f[3] = __uint_as_float(v.y & 0xffff0000u);
    f[4] = __uint_as_float(v.z << 16); f[5] = __uint_as_float(v.z & 0xffff0000u);
    f[6] = __uint_as_float(v.w << 16); f[7] = __uint_as_float(v.w & 0xffff0000u);
}

template <int N>
static __global__ void gemv_bf16_kernel(const uint16_t *__restrict__ w, int64_t ldw, int64_t rows,
                                        int64_t k, const uint16_t *__restrict__ xb, int64_t ldxb,
                                        float *__restrict__ y, int64_t ldy, int accumulate)
{
    int64_t row = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;   /* the whole warp leaves together */
    const uint4 *wr = (const uint4 *)(w + row * ldw);
    float acc[N];
#pragma unroll
    for (int i = 0; i < N; i++) acc[i] = 0.0f;
    int64_t k8 = k / 8;
#pragma unroll 4
    for (int64_t c = lane; c < k8; c += 32) {
        float wf[8];
        unpack8(__ldcs(wr + c), wf);
#pragma unroll
        for (int i = 0; i < N; i++) {
            float xf[8];
            unpack8(__ldg((const uint4 *)(xb + i * ldxb) + c), xf);
#pragma unroll
            for (int j = 0; j < 8; j++) acc[i] = fmaf(wf[j], xf[j], acc[i]);
        }
    }
#pragma unroll
    for (int i = 0; i < N; i++)
        for (int o = 16; o > 0; o >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < N; i++) {
            float *dst = y + i * ldy + row;
            *dst = accumulate ? *dst + acc[i] : acc[i];
        }
    }
}

static void gemv_bf16(const struct k3_matmul_params *p, const uint16_t *xb, int64_t ldxb,
                      cudaStream_t s)
{
    const struct k3_mat *w = p->w;
    dim3 grid((unsigned)((w->rows + GEMV_WARPS - 1) / GEMV_WARPS));
    const uint16_t *wd = (const uint16_t *)w->data;
    switch (p->n) {
    case 1: gemv_bf16_kernel<1><<<grid, 32 * GEMV_WARPS, 0, s>>>(wd, w->ld, w->rows, w->cols, xb, ldxb, p->y, p->ldy, p->accumulate); break;
    case 2: gemv_bf16_kernel<2><<<grid, 32 * GEMV_WARPS, 0, s>>>(wd, w->ld, w->rows, w->cols, xb, ldxb, p->y, p->ldy, p->accumulate); break;
    case 3: gemv_bf16_kernel<3><<<grid, 32 * GEMV_WARPS, 0, s>>>(wd, w->ld, w->rows, w->cols, xb, ldxb, p->y, p->ldy, p->accumulate); break;
    default: gemv_bf16_kernel<4><<<grid, 32 * GEMV_WARPS, 0, s>>>(wd, w->ld, w->rows, w->cols, xb, ldxb, p->y, p->ldy, p->accumulate); break;
    }
    K3_CHECK_LAUNCH();
}

static int align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && (a % (uintptr_t)al)) al >>= 1;
    return al;
}

extern "C" struct k3_cuda_matmul_ctx *k3_cuda_matmul_ctx_init(void *ws, size_t ws_bytes,
                                                              void *xconv, size_t xconv_bytes)
{
    struct k3_cuda_matmul_ctx *ctx =
        (struct k3_cuda_matmul_ctx *)calloc(1, sizeof(struct k3_cuda_matmul_ctx));
    K3_CHECK(ctx, "out of memory");
    K3_CHECK_CUBLAS(cublasLtCreate(&ctx->lt));
    ctx->ws = ws;
    ctx->ws_bytes = ws_bytes;
    ctx->xconv = xconv;
    ctx->xconv_bytes = xconv_bytes;
    return ctx;
}

static void plan_release(struct plan *pl)
{
    if (!pl->valid) return;
    cublasLtMatrixLayoutDestroy(pl->la);
    cublasLtMatrixLayoutDestroy(pl->lb);
    cublasLtMatrixLayoutDestroy(pl->ld);
    cublasLtMatmulDescDestroy(pl->desc);
    pl->valid = 0;
}

extern "C" void k3_cuda_matmul_ctx_free(struct k3_cuda_matmul_ctx *ctx)
{
    if (!ctx) return;
    for (int i = 0; i < N_PLANS; i++) plan_release(&ctx->plans[i]);
    cublasLtDestroy(ctx->lt);
    free(ctx);
}

static const char *type_name(int t)
{
    return t == CUDA_R_16BF ? "bf16" : t == CUDA_R_16F ? "f16" : "f32";
}

/* The cached plan for key, made on a miss. */
static struct plan *plan_get(struct k3_cuda_matmul_ctx *ctx, const struct plan_key *key)
{
    for (int i = 0; i < N_PLANS; i++)
        if (ctx->plans[i].valid && !memcmp(&ctx->plans[i].key, key, sizeof *key))
            return &ctx->plans[i];
    int slot = -1;
    for (int i = 0; i < N_PLANS && slot < 0; i++)
        if (!ctx->plans[i].valid) slot = i;
    if (slot < 0) {
        slot = ctx->next;
        ctx->next = (ctx->next + 1) % N_PLANS;
        plan_release(&ctx->plans[slot]);
    }
    struct plan *pl = &ctx->plans[slot];
    memset(pl, 0, sizeof *pl);
    pl->key = *key;
    cudaDataType_t ab = (cudaDataType_t)key->type;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  /* fp32 accumulate; no TF32 for f32 */
    K3_CHECK_CUBLAS(cublasLtMatmulDescCreate(&pl->desc, compute, CUDA_R_32F));
    cublasOperation_t ta = key->trans ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
    K3_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                   sizeof ta));
    K3_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                   sizeof tb));
    /* A as stored: col-major [cols_w, rows_w]; op(A) is [m, k]. */
    uint64_t a_rows = key->trans ? (uint64_t)key->m : (uint64_t)key->k;
    uint64_t a_cols = key->trans ? (uint64_t)key->k : (uint64_t)key->m;
    K3_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&pl->la, ab, a_rows, a_cols, key->lda));
    K3_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&pl->lb, ab, (uint64_t)key->k, (uint64_t)key->n,
                                               key->ldb));
    K3_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&pl->ld, CUDA_R_32F, (uint64_t)key->m,
                                               (uint64_t)key->n, key->ldd));
    cublasLtMatmulPreference_t pref;
    K3_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = ctx->ws_bytes;
    uint32_t al_a = (uint32_t)key->align_a, al_b = (uint32_t)key->align_b,
             al_d = (uint32_t)key->align_d;
    K3_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    K3_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    K3_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    K3_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
    K3_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
    cublasLtMatmulHeuristicResult_t res;
    int n_res = 0;
    K3_CHECK_CUBLAS(cublasLtMatmulAlgoGetHeuristic(ctx->lt, pl->desc, pl->la, pl->lb, pl->ld,
                                                   pl->ld, pref, 1, &res, &n_res));
    cublasLtMatmulPreferenceDestroy(pref);
    K3_CHECK(n_res > 0, "cuBLASLt has no algorithm for a %s GEMM m=%lld n=%lld k=%lld "
             "(lda %lld, ldb %lld, ldd %lld, alignment %d/%d/%d bytes)", type_name(key->type),
             (long long)key->m, (long long)key->n, (long long)key->k, (long long)key->lda,
             (long long)key->ldb, (long long)key->ldd, key->align_a, key->align_b, key->align_d);
    pl->algo = res.algo;
    pl->valid = 1;
    return pl;
}

static void gemm(struct k3_cuda_matmul_ctx *ctx, struct plan_key *key, const void *a,
                 const void *b, float *d, cudaStream_t s)
{
    key->align_a = align_of(a);
    key->align_b = align_of(b);
    key->align_d = align_of(d);
    struct plan *pl = plan_get(ctx, key);
    float alpha = 1.0f, beta = key->accumulate ? 1.0f : 0.0f;
    K3_CHECK_CUBLAS(cublasLtMatmul(ctx->lt, pl->desc, &alpha, a, pl->la, b, pl->lb, &beta, d,
                                   pl->ld, d, pl->ld, &pl->algo, ctx->ws, ctx->ws_bytes, s));
}

extern "C" void k3_cuda_matmul_launch(struct k3_cuda_matmul_ctx *ctx,
                                      const struct k3_matmul_params *p, cudaStream_t s)
{
    const struct k3_mat *w = p->w;
    if (p->n <= 0) return;
    int type;
    switch (w->fmt) {
    case K3_WFMT_BF16: type = CUDA_R_16BF; break;
    case K3_WFMT_F16: type = CUDA_R_16F; break;
    case K3_WFMT_F32: type = CUDA_R_32F; break;
    case K3_WFMT_F8_E4M3:
        K3_FATAL("matmul with FP8 weights is not on the CUDA backend yet; k3_cuda_op_supported "
                 "lists what is");
    default:
        K3_FATAL("matmul with MXFP4 weights (routed experts) is not on the CUDA backend yet; "
                 "it comes with the MoE kernels");
    }
    struct plan_key key;
    memset(&key, 0, sizeof key);   /* the key is compared with memcmp: no stray padding */
    key.type = type;
    key.trans = p->trans;
    key.k = p->trans ? w->rows : w->cols;
    key.m = p->trans ? w->cols : w->rows;
    key.lda = w->ld;
    key.ldd = p->ldy;
    key.accumulate = p->accumulate;
    if (type == CUDA_R_32F) {
        key.n = p->n;
        key.ldb = p->ldx;
        gemm(ctx, &key, w->data, p->x, p->y, s);
        return;
    }
    /* 16-bit copy of x, rows padded to 8 elements (16 B) for the tensor-core paths. */
    int64_t ldc = (key.k + 7) / 8 * 8;
    int64_t chunk = (int64_t)(ctx->xconv_bytes / (2 * (size_t)ldc));
    K3_CHECK(chunk >= 1, "matmul: one row of %lld inputs needs %lld bytes of scratch, the "
             "backend has %zu (raise scratch_bytes)", (long long)key.k, (long long)(2 * ldc),
             ctx->xconv_bytes);
    int gemv = type == CUDA_R_16BF && !p->trans && p->n <= GEMV_MAX_N && key.k % 8 == 0 &&
               w->ld % 8 == 0 && ((uintptr_t)w->data & 15) == 0 && chunk >= p->n;
    if (gemv) {
        to_16bit_kernel<<<k3_grid_1d(p->n * key.k, 256), 256, 0, s>>>(
            p->x, p->ldx, p->n, key.k, ctx->xconv, ldc, 1);
        K3_CHECK_LAUNCH();
        gemv_bf16(p, (const uint16_t *)ctx->xconv, ldc, s);
        return;
    }
    for (int64_t r0 = 0; r0 < p->n; r0 += chunk) {
        int64_t nc = p->n - r0 < chunk ? p->n - r0 : chunk;
        to_16bit_kernel<<<k3_grid_1d(nc * key.k, 256), 256, 0, s>>>(
            p->x + r0 * p->ldx, p->ldx, nc, key.k, ctx->xconv, ldc, type == CUDA_R_16BF);
        K3_CHECK_LAUNCH();
        key.n = nc;
        key.ldb = ldc;
        gemm(ctx, &key, w->data, ctx->xconv, p->y + r0 * p->ldy, s);
    }
}

extern "C" void k3_cuda_matmul(struct k3_backend *be, const struct k3_matmul_params *p)
{
    struct k3_cuda_backend *cb = k3_cuda_impl(be);
    k3_cuda_matmul_launch(cb->mm, p, cb->stream);
}

extern "C" void k3_cuda_gemm_bf16_raw(struct k3_cuda_matmul_ctx *ctx, const void *a,
                                      const void *b, float *d, int64_t m, int64_t n, int64_t k,
                                      cudaStream_t s)
{
    struct plan_key key;
    memset(&key, 0, sizeof key);
    key.type = CUDA_R_16BF;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = k;
    key.ldb = k;
    key.ldd = m;
    gemm(ctx, &key, a, b, d, s);
}
